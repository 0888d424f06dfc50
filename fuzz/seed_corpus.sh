#!/bin/sh
# Writes small seed corpora into fuzz/corpus/<target>/ (git-ignored) from the golden
# fixtures in tests/fixtures/v*/ (every schema version) and, when present, the recorded
# provider messages in ../shared/fidelity/ (which are not part of this repository and are never committed).
# Needs jq. Run from anywhere; safe to run again.
set -eu
fuzz_dir=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$fuzz_dir")
corpus="$fuzz_dir/corpus"
mkdir -p "$corpus/decode_snapshot" "$corpus/parse_id" "$corpus/provider_messages" \
    "$corpus/journal_reader" "$corpus/log_entry"

# decode_snapshot: every golden snapshot, compact (short inputs mutate faster).
for fixture in "$repo"/tests/fixtures/v*/*.json; do
    version=$(basename "$(dirname "$fixture")")
    name=$(basename "$fixture" .json)
    jq -c . "$fixture" | tr -d '\n' > "$corpus/decode_snapshot/$version-$name"
done

# parse_id: the golden ids and a few near-misses.
for fixture in "$repo"/tests/fixtures/v*/*.json; do
    version=$(basename "$(dirname "$fixture")")
    name=$(basename "$fixture" .json)
    jq -j .id "$fixture" > "$corpus/parse_id/golden-$version-$name"
done
i=0
for id in a 0 session-1 a_b-c 019a2b3c-4d5e-7f00-8a9b-0c1d2e3f4a5b ../x Caps con lpt1 con1 \
          -lead _lead .hidden a.json 'a b' '%2e%2e%2f'; do
    i=$((i + 1))
    printf '%s' "$id" > "$corpus/parse_id/sample-$i"
done
printf '%0128d' 0 > "$corpus/parse_id/longest"
printf '%0129d' 0 > "$corpus/parse_id/too-long"
printf 'caf\303\251' > "$corpus/parse_id/accent"
printf 'a\342\210\225b' > "$corpus/parse_id/division-slash"

# provider_messages: a few hand-written messages of each provider...
printf '%s' '{"role":"user","content":"hi","name":"ada"}' > "$corpus/provider_messages/openai-user"
printf '%s' '{"role":"developer","content":[{"type":"text","text":"Be brief."}]}' > "$corpus/provider_messages/openai-developer"
printf '%s' '{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]}' > "$corpus/provider_messages/openai-tool-call"
printf '%s' '{"role":"tool","tool_call_id":"c1","content":"42"}' > "$corpus/provider_messages/openai-tool-result"
printf '%s' '{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"EqQB"},{"type":"text","text":"Sure","citations":null},{"type":"tool_use","id":"t1","name":"get","input":{"n":1.0},"caller":{"type":"direct"}}]}' > "$corpus/provider_messages/anthropic-tool-use"
printf '%s' '{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"x"}],"is_error":false},{"type":"tool_result","tool_use_id":"t2"}]}' > "$corpus/provider_messages/anthropic-tool-result"

# ...and every recorded message, one per file, plus each recording's whole list.
fidelity="$repo/../shared/fidelity"
if [ -d "$fidelity" ]; then
    for recording in "$fidelity"/*.json; do
        name=$(basename "$recording" .json)
        jq -c '.messages' "$recording" > "$corpus/provider_messages/$name-all"
        count=$(jq '.messages | length' "$recording")
        n=0
        while [ "$n" -lt "$count" ]; do
            jq -c ".messages[$n]" "$recording" | tr -d '\n' > "$corpus/provider_messages/$name-$n"
            n=$((n + 1))
        done
    done
else
    echo "note: $fidelity is absent; provider seeds are the hand-written ones only" >&2
fi

# journal_reader: the hand-written inputs (a real journal cut, torn, spliced and
# duplicated, of turns and of every kind of entry; real header and entries framed afresh,
# some made to contradict the log), and a few short ones. The layout is documented at
# `journal_reader` in src/lib.rs: byte 0 the mode (0 history, 2 raw, 3 framed), then for a
# history: saves, cut (2 bytes, little-endian), tail kind, length of the save contents,
# the contents (per save: flags, whose bits 4-6 pick turn/rewind/compaction/restore/edit,
# then text), the tail's bytes. The framed mode splits at 0x1e (\036), not at newlines.
cp "$repo"/tests/fuzz_regressions/journal_reader/* "$corpus/journal_reader/"
j="$corpus/journal_reader"
printf '\000\010\377\377\000\000' > "$j/history-8-empty-turns-cut-65535"
printf '\000\001\100\000\001\006\001hello\020' > "$j/history-1-turn-cut-64-zeros"
printf '\000\004\000\002\002\010\001ab\003cd\010e\004f\001' > "$j/history-4-turns-byte-deleted"
printf '\000\002\000\000\003\004\001a\011b\001' > "$j/history-2-turns-first-record-as-header"
printf '\000\000\000\000\000\000@00000000 00000000\n\n' > "$j/history-no-journal-empty-frame"
printf '\002' > "$j/raw-empty"
printf '\002@00000002 00000000\n{}\n' > "$j/raw-bad-checksum"
printf '\002garbage\n@00000000 00000000\n\n' > "$j/raw-garbage-then-empty-frame"
printf '\003{}\036{}' > "$j/framed-empty-objects"
printf '\003{}\036{}\n{}' > "$j/framed-empty-header-then-entry"
printf '\000\004\377\377\000\010\001a\020b\040c\060d' > "$j/history-turn-rewind-compaction-restore"
printf '\000\002\377\377\000\004\100a\010b' > "$j/history-edit-then-reloaded-turn"
printf '\003{"journal":2,"id":"fuzz"}' > "$j/framed-journal-version-2"

# log_entry: the hand-written inputs (entries the crate wrote, of every kind; logs of them,
# some made to contradict the checkpoint or each other). Byte 0: 0 an entry's frame
# payload (head, newline, body), 1 its stored form, 2 a log of payloads split at 0x1e.
cp "$repo"/tests/fuzz_regressions/log_entry/* "$corpus/log_entry/"
e="$corpus/log_entry"
printf '\000{}\n{}' > "$e/entry-empty-objects"
printf '\000{"revision":2,"updated_at":"2025-01-01T00:01:00Z","kind":"rewind","keep":[0,2],"messages":0,"usage":[],"state":{"messages":2,"tool_calls":0,"usage":2}}\n{"messages":[],"tool_calls":[]}' > "$e/entry-rewind"
printf '\002{"revision":2,"updated_at":"2025-01-01T00:01:00Z","kind":"rewind","keep":[0,2],"messages":0,"usage":[],"state":{"messages":2,"tool_calls":0,"usage":2}}\n{"messages":[],"tool_calls":[]}\036{"revision":3,"updated_at":"2025-01-01T00:02:00Z","kind":"restore","base":1,"messages":0,"usage":[],"state":{"messages":6,"tool_calls":1,"usage":2}}\n{"messages":[],"tool_calls":[]}' > "$e/log-rewind-then-restore"

for target in decode_snapshot parse_id provider_messages journal_reader log_entry; do
    echo "$target: $(ls "$corpus/$target" | wc -l) seeds, $(cat "$corpus/$target"/* | wc -c) bytes"
done
