#!/usr/bin/env python3
"""Validate exported messages against the official provider SDKs' request types.

Usage:  provider_sdk_check.py MESSAGES.jsonl

Each line of MESSAGES.jsonl is {"api": API, "label": TEXT, "message": {...}}, where API is
"openai-chat" (openai.types.chat.ChatCompletionMessageParam), "openai-responses"
(openai.types.responses.ResponseInputItemParam; a list is a group of items, each checked),
"anthropic" (anthropic.types.MessageParam) or "gemini" (google.genai.types.Content, a
pydantic model that accepts both key spellings). Every message is validated with pydantic
against that type, with fields the type does not declare refused; the SDKs declare lists
as `Iterable`, which pydantic checks lazily, so the result is walked whole to force every
item's check.

Prints one JSON line per message that does not validate ({"label", "api", "error"}) and a
last line {"checked": N, "invalid": M, "versions": {...}}; exits 1 if any is invalid, 2 on
bad input. Run by tests/provider_sdks.rs with the Python of scripts/provider-sdks.sh.
"""
from __future__ import annotations

import json
import sys

import anthropic
import openai
import pydantic
from anthropic.types import MessageParam
from google import genai
from google.genai import types as genai_types
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam

# Fields the SDK types do not declare are refused, not ignored (pydantic's default for a
# TypedDict): a field of the other provider in a message is what the check is for.
STRICT = pydantic.ConfigDict(extra="forbid")
ADAPTERS = {
    "openai-chat": pydantic.TypeAdapter(ChatCompletionMessageParam, config=STRICT),
    "openai-responses": pydantic.TypeAdapter(ResponseInputItemParam, config=STRICT),
    "anthropic": pydantic.TypeAdapter(MessageParam, config=STRICT),
    # A model class whose config already refuses undeclared fields (extra="forbid").
    "gemini": pydantic.TypeAdapter(genai_types.Content),
}


def walk(value):
    """Consumes every lazily validated iterable in `value`, so its items are checked."""
    if isinstance(value, dict):
        return {key: walk(item) for key, item in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__iter__"):
        return [walk(item) for item in value]
    return value


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    checked = invalid = 0
    with open(sys.argv[1], encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            try:
                case = json.loads(line)
                adapter = ADAPTERS[case["api"]]
            except (ValueError, KeyError) as e:
                print(f"line {number}: not a case ({e!r})", file=sys.stderr)
                return 2
            checked += 1
            message = case["message"]
            # A Responses group (a response's output) is a list of input items.
            items = message if case["api"] == "openai-responses" and isinstance(message, list) else [message]
            try:
                for item in items:
                    walk(adapter.validate_python(item))
            except pydantic.ValidationError as e:
                invalid += 1
                first = e.errors()[:3]
                print(json.dumps({
                    "label": case.get("label"),
                    "api": case["api"],
                    "error": f"{e.error_count()} errors, first: {first}",
                }, default=str))
    print(json.dumps({
        "checked": checked,
        "invalid": invalid,
        "versions": {
            "openai": openai.__version__,
            "anthropic": anthropic.__version__,
            "google-genai": genai.__version__,
            "pydantic": pydantic.VERSION,
        },
    }))
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
