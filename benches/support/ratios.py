#!/usr/bin/env python3
"""Print the medians and ratios of the last `cargo bench --bench store` run as Markdown.

Usage:  python3 benches/support/ratios.py [CRITERION_DIR]

CRITERION_DIR defaults to $CRITERION_HOME, else $CARGO_TARGET_DIR/criterion, else
target/criterion. Each figure is criterion's median (`new/estimates.json`); each ratio is
agent-session's median over its baseline's median from the same run. The "measured
between" line gives the oldest and newest result used: a group re-run on its own later
replaces only that group's results, so a wide span means the table mixes runs.

With results of the `postgres_*` groups (`scripts/bench-postgres postgres`), a second
table puts PostgresSessionStore beside FileSessionStore and beside the database's floor,
all measured in those groups, with its own "measured between" line.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
from pathlib import Path

# Limits of issues 5 and 14 ("Targets"), checked against the current run.
SAVE_LIMIT = 1.5  # full save of 1,000 messages / temp + fsync + rename + dir fsync
LOAD_LIMIT = 0.6  # issue 14: load of 10,000 messages / read + typed parse (issue 5: 1.2)
TURN_GROWTH_LIMIT = 1.2  # one more turn onto 10,000 / onto 10 messages
TURN_APPEND_LIMIT = 2.0  # one more turn onto 10,000 / append + fdatasync
LIST_LIMIT = 3.0  # list / readdir + stat
REWIND_GROWTH_LIMIT = 1.5  # rewind and restore onto 10,000 / onto 10 messages
COMPACTED_LIMIT = 0.10  # load of 10,000 messages compacted to 200 / the full load
POSTGRES_TURN_GROWTH_LIMIT = 2.0  # PostgreSQL one more turn onto 10,000 / onto 10
ASYNC_LIMIT = 1.1  # issue 16: async save/load through the file store / (sync + one hop)


def criterion_dir() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    if os.environ.get("CRITERION_HOME"):
        return Path(os.environ["CRITERION_HOME"])
    if os.environ.get("CARGO_TARGET_DIR"):
        return Path(os.environ["CARGO_TARGET_DIR"]) / "criterion"
    return Path("target/criterion")


class Result:
    def __init__(self, new: Path):
        meta = json.loads((new / "benchmark.json").read_text())
        estimates = json.loads((new / "estimates.json").read_text())
        self.median = estimates["median"]["point_estimate"]  # nanoseconds
        throughput = meta.get("throughput") or {}
        self.bytes = throughput.get("Bytes")
        self.mtime = (new / "estimates.json").stat().st_mtime


def load_results(root: Path) -> dict[str, Result]:
    results = {}
    for meta in root.glob("**/new/benchmark.json"):
        full_id = json.loads(meta.read_text())["full_id"]
        results[full_id] = Result(meta.parent)
    return results


def fmt_time(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return ""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def fmt_ratio(r: float) -> str:
    return f"{r:.2f} ×" if r < 10 else f"{r:.0f} ×"


def params(results: dict[str, Result], group: str, function: str) -> list[str]:
    prefix = f"{group}/{function}/"
    found = [k[len(prefix):] for k in results if k.startswith(prefix)]

    def key(p: str):
        return [int(x) for x in re.findall(r"\d+", p)][::-1]

    return sorted(found, key=key)


def span(root: Path, used: list[Result]) -> None:
    first = dt.datetime.fromtimestamp(min(r.mtime for r in used))
    last = dt.datetime.fromtimestamp(max(r.mtime for r in used))
    print()
    print(f"Medians from {root}, measured between {first:%Y-%m-%d %H:%M} and "
          f"{last:%Y-%m-%d %H:%M}.")
    if (last - first).total_seconds() > 30 * 60:
        print("Warning: the results span more than 30 minutes; they may mix runs.")


def postgres_table(root: Path, results: dict[str, Result]) -> None:
    """PostgresSessionStore beside FileSessionStore and the floor (support/postgres.rs)."""
    rows = []
    used: list[Result] = []

    def row(work: str, size: str, group: str, param: str, file_fn: str = "file_store") -> None:
        file = results.get(f"{group}/{file_fn}/{param}")
        pg = results.get(f"{group}/postgres_store/{param}")
        floor = results.get(f"{group}/postgres_floor/{param}")
        if pg is None:
            return
        used.extend(r for r in (file, pg, floor) if r is not None)
        rows.append((work, size,
                     fmt_time(file.median) if file else "",
                     fmt_time(pg.median),
                     fmt_ratio(pg.median / file.median) if file else "",
                     fmt_time(floor.median) if floor else "",
                     fmt_ratio(pg.median / floor.median) if floor else ""))

    for group, work in (("postgres_save", "save"), ("postgres_load", "load"),
                        ("postgres_turn", "one more turn")):
        for n in params(results, group, "postgres_store"):
            size = f"onto {int(n):,} messages" if group == "postgres_turn" \
                else f"{int(n):,} messages"
            row(work, size, group, n)
    for label in params(results, "postgres_list", "postgres_store"):
        sessions, messages = (int(x) for x in label.split("x"))
        size = f"{sessions:,} sessions of {messages:,} messages"
        row("list", size, "postgres_list", label)
        row("list (file store just opened)", size, "postgres_list", label, "file_store_fresh")
    for label in params(results, "postgres_list_page", "postgres_store"):
        sessions, messages = (int(x) for x in label.split("x"))
        row("list_page(50), first page", f"{sessions:,} sessions of {messages:,} messages",
            "postgres_list_page", label)
    if not rows:
        return
    print()
    print("| operation | size | file store | PostgreSQL | PostgreSQL / file "
          "| PostgreSQL floor | PostgreSQL / floor |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    print("PostgreSQL floor: the store's own statement, prepared, on one tokio-postgres "
          "connection, with the bytes encoded beforehand (load: + typed serde_json parse).")
    small = results.get("postgres_turn/postgres_store/10")
    large = results.get("postgres_turn/postgres_store/10000")
    if small and large:
        value = large.median / small.median
        met = "yes" if value <= POSTGRES_TURN_GROWTH_LIMIT else "**no**"
        print()
        print("| target | measured | limit | met |")
        print("|---|---|---|---|")
        print(f"| PostgreSQL one more turn: onto 10,000 / onto 10 messages | "
              f"{fmt_ratio(value)} | ≤ {POSTGRES_TURN_GROWTH_LIMIT} × | {met} |")
    span(root, used)


def main() -> int:
    root = criterion_dir()
    results = load_results(root)
    if not results:
        print(f"no criterion results under {root}; run `cargo bench --bench store` first",
              file=sys.stderr)
        return 1
    used: list[Result] = []
    rows: list[tuple[str, str, str, str, str, str]] = []
    ratio: dict[str, float] = {}

    def pair(work: str, size: str, mine: str, base: str, base_label: str, key: str) -> None:
        if mine not in results or base not in results:
            return
        a, b = results[mine], results[base]
        used.extend((a, b))
        r = a.median / b.median
        ratio[key] = r
        rows.append((work, size, fmt_bytes(a.bytes), fmt_time(a.median),
                     f"{fmt_time(b.median)} ({base_label})", fmt_ratio(r)))

    for n in params(results, "save", "file_store"):
        pair("save (new session)", f"{int(n):,} messages", f"save/file_store/{n}",
             f"save/baseline_atomic_write/{n}",
             "temp + write + fsync + rename + dir fsync", f"save/{n}")
    for n in params(results, "save", "file_store_edit"):
        pair("save (built snapshot over the stored one)", f"{int(n):,} messages",
             f"save/file_store_edit/{n}", f"save/baseline_atomic_write/{n}",
             "temp + write + fsync + rename + dir fsync", f"save_edit/{n}")
    for n in params(results, "load", "file_store"):
        pair("load (saved once)", f"{int(n):,} messages", f"load/file_store/{n}",
             f"load/baseline_read_typed/{n}", "read + typed serde_json parse", f"load/{n}")
    for n in params(results, "load", "file_store_appended"):
        pair("load (saved turn by turn)", f"{int(n):,} messages",
             f"load/file_store_appended/{n}", f"load/baseline_read_typed/{n}",
             "read + typed serde_json parse of the whole snapshot", f"load_appended/{n}")
    for n in params(results, "append_turn", "file_store"):
        pair("one more turn", f"onto {int(n):,} messages", f"append_turn/file_store/{n}",
             "append_turn/baseline_append_fdatasync",
             "append + fdatasync of the turn", f"turn/{n}")
    for n in params(results, "rewind", "file_store"):
        pair("rewind one turn", f"onto {int(n):,} messages", f"rewind/file_store/{n}",
             "rewind/baseline_append_fdatasync",
             "append + fdatasync of the entry's size", f"rewind/{n}")
    for function, work in (("file_store", "restore (store)"),
                           ("file_store_restore_from", "restore (restore_from + save)")):
        for n in params(results, "restore", function):
            pair(work, f"{int(n):,} messages", f"restore/{function}/{n}",
                 "restore/baseline_append_fdatasync",
                 "append + fdatasync of the entry's size", f"restore_{function}/{n}")
    for n in params(results, "compacted_load", "file_store"):
        for function, work in (("file_store", "load, compacted to 200 (saved once)"),
                               ("file_store_appended",
                                "load, compacted to 200 (saved turn by turn)"),
                               ("file_store_history", "history, compacted (saved once)")):
            pair(work, f"{int(n):,} messages", f"compacted_load/{function}/{n}",
                 f"compacted_load/file_store_full/{n}",
                 "load of the same messages, not compacted", f"compacted_{function}/{n}")
    for label in params(results, "list", "file_store"):
        sessions, messages = (int(x) for x in label.split("x"))
        pair("list", f"{sessions:,} sessions of {messages:,} messages",
             f"list/file_store/{label}", f"list/baseline_readdir_stat/{label}",
             "readdir + stat", f"list/{label}")
        pair("list, store just opened", f"{sessions:,} sessions of {messages:,} messages",
             f"list/file_store_fresh/{label}", f"list/baseline_readdir_stat/{label}",
             "readdir + stat", f"list_fresh/{label}")

    print("| work | size | bytes | agent-session | baseline | ratio |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    print("bytes: the snapshot file (save, load), the base and journal (load saved turn by "
          "turn, compacted loads), or the turn's encoded messages (one more turn).")

    # The two load baselines side by side, as throughput.
    load_ns = params(results, "load", "baseline_read_typed")
    if load_ns:
        print()
        print("| load baselines | " + " | ".join(f"{int(n):,}" for n in load_ns) + " |")
        print("|---|" + "---|" * len(load_ns))
        for function, label in (("file_store", "agent-session load"),
                                ("baseline_read_typed", "read + typed parse"),
                                ("baseline_read_value", "read + `serde_json::Value` parse")):
            cells = []
            for n in load_ns:
                r = results.get(f"load/{function}/{n}")
                if r is None or not r.bytes:
                    cells.append("")
                    continue
                used.append(r)
                cells.append(f"{r.bytes / r.median * 1e3:.0f} MB/s")
            print(f"| {label} | " + " | ".join(cells) + " |")

    # The memory store beside the file store: what is left without the disk.
    memory = [(group, n) for group in ("append_turn", "restore")
              for n in params(results, group, "memory_store")]
    if memory:
        print()
        print("| MemorySessionStore | size | memory store | file store |")
        print("|---|---|---|---|")
        for group, n in memory:
            mem = results[f"{group}/memory_store/{n}"]
            file = results.get(f"{group}/file_store/{n}")
            used.extend(r for r in (mem, file) if r is not None)
            work = "one more turn" if group == "append_turn" else "restore"
            size = f"onto {int(n):,} messages" if group == "append_turn" \
                else f"{int(n):,} messages"
            print(f"| {work} | {size} | {fmt_time(mem.median)} | "
                  f"{fmt_time(file.median) if file else ''} |")

    # Durability levels: what skipping fsync saves.
    levels = [(work, f"durability/{work}/sync/1000", f"durability/{work}/buffered/1000")
              for work in ("save", "append_turn")]
    if any(a in results and b in results for _, a, b in levels):
        print()
        print("| 1,000 messages | `Durability::Sync` | `Durability::Buffered` | buffered / sync |")
        print("|---|---|---|---|")
        for work, sync_key, buffered_key in levels:
            if sync_key not in results or buffered_key not in results:
                continue
            a, b = results[sync_key], results[buffered_key]
            used.extend((a, b))
            label = "full save" if work == "save" else "one more turn"
            print(f"| {label} | {fmt_time(a.median)} | {fmt_time(b.median)} | "
                  f"{fmt_ratio(b.median / a.median)} |")

    # The async API (issue 16): through the blocking pool, against the synchronous call
    # plus one hop of the pool.
    hop = results.get("async_api/blocking_pool_hop")
    async_ratio: dict[str, float] = {}
    if hop is not None:
        rows = []
        for work in ("save", "load"):
            for n in params(results, "async_api", f"{work}_async"):
                sync = results.get(f"async_api/{work}_sync/{n}")
                asyn = results.get(f"async_api/{work}_async/{n}")
                if sync is None or asyn is None:
                    continue
                used.extend((sync, asyn, hop))
                r = asyn.median / (sync.median + hop.median)
                async_ratio[f"{work}/{n}"] = r
                label = "full save (new session)" if work == "save" else "load (saved once)"
                dropped = results.get(f"async_api/{work}_async_dropped/{n}")
                if dropped is not None:
                    used.append(dropped)
                rows.append(f"| {label} | {int(n):,} messages | {fmt_time(sync.median)} | "
                            f"{fmt_time(hop.median)} | {fmt_time(asyn.median)} | "
                            f"{fmt_ratio(r)} | "
                            f"{fmt_time(dropped.median) if dropped else '—'} |")
        if rows:
            print()
            print("| file store | size | synchronous | one blocking-pool hop | async "
                  "(`into_async`) | async / (sync + hop) | async, the snapshot dropped "
                  "by the caller |")
            print("|---|---|---|---|---|---|---|")
            print("\n".join(rows))

    # The targets of issues 5, 14 and 16.
    checks = []

    def check(name: str, value: float | None, limit: float) -> None:
        if value is None:
            checks.append((name, "not measured", f"≤ {limit} ×", ""))
        else:
            checks.append((name, fmt_ratio(value), f"≤ {limit} ×",
                           "yes" if value <= limit else "**no**"))

    def growth(key: str) -> float | None:
        small = results.get(f"{key}/10")
        large = results.get(f"{key}/10000")
        return large.median / small.median if small and large else None

    check("full save, 1,000 messages / atomic write", ratio.get("save/1000"), SAVE_LIMIT)
    check("load, 10,000 messages saved once / read + typed parse", ratio.get("load/10000"),
          LOAD_LIMIT)
    check("load, 10,000 messages saved turn by turn / read + typed parse",
          ratio.get("load_appended/10000"), LOAD_LIMIT)
    check("one more turn: onto 10,000 / onto 10 messages", growth("append_turn/file_store"),
          TURN_GROWTH_LIMIT)
    check("one more turn onto 10,000 / append + fdatasync", ratio.get("turn/10000"),
          TURN_APPEND_LIMIT)
    check("rewind one turn: onto 10,000 / onto 10 messages", growth("rewind/file_store"),
          REWIND_GROWTH_LIMIT)
    check("restore (store): 10,000 / 10 messages", growth("restore/file_store"),
          REWIND_GROWTH_LIMIT)
    check("restore (restore_from + save): 10,000 / 10 messages",
          growth("restore/file_store_restore_from"), REWIND_GROWTH_LIMIT)
    check("restore (memory store): 10,000 / 10 messages", growth("restore/memory_store"),
          REWIND_GROWTH_LIMIT)
    check("load of 10,000 compacted to 200 (saved once) / full load",
          ratio.get("compacted_file_store/10000"), COMPACTED_LIMIT)
    check("load of 10,000 compacted to 200 (saved turn by turn) / full load",
          ratio.get("compacted_file_store_appended/10000"), COMPACTED_LIMIT)
    for key, r in async_ratio.items():
        work, n = key.split("/")
        check(f"async {work}, {int(n):,} messages / (sync + one blocking-pool hop)", r,
              ASYNC_LIMIT)
    for label in params(results, "list", "file_store"):
        sessions, messages = label.split("x")
        check(f"list {int(sessions):,} sessions of {int(messages):,} messages / readdir + stat",
              ratio.get(f"list/{label}"), LIST_LIMIT)
    print()
    print("| target | measured | limit | met |")
    print("|---|---|---|---|")
    for c in checks:
        print("| " + " | ".join(c) + " |")

    if used:
        span(root, used)
    postgres_table(root, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
