"""Rows upsert at scale: N extract rows x 10 columns, 5% of cells changed, 2% new rows.

Run: ``.venv/bin/python benchmarks/rows_upsert.py [--rows N] [--naive] [--append-results]``

The List holds 98% of N rows (49,000 of the default 50,000) of 10 columns (a domain key, text,
numbers, an enum, a JSON object, dates), loaded straight into an emulator's state. The extract
holds the same rows with 5% of their non-key cells changed (22,050 cells at 50,000, spread at
random over rows and columns) plus 2% new rows. Runs, each against a fresh emulator in a child
process:

- phases: ``prepare_rows``, ``read_list_rows`` and ``plan_rows_upsert`` timed one by one in a
  fresh process that reads the extract as a sync does, from a Parquet file through
  ``read_extract`` in chunks, with that process's peak RSS (``VmHWM``) and what the phases added
  to it;
- ours: ``upsert_rows`` (prepare, read the List by key, canonical diff, chunked writes of the
  changed cells and new rows only);
- naive: the same preparation and List read, then every cell of every existing row rewritten
  (PATCH cells in chunks of 1,000) and the new rows added (POST rows in chunks of 500).

Both are timed end to end and their write requests counted by the emulator. Ours is compared
with the minimum the chunk sizes allow (ceil(cells / 1000) + ceil(new rows / 500)); a second
upsert over the same extract must send no write. With ``--naive`` (the default up to 50,000
rows) the naive run too. Aims: issue 7 (50,000 rows): requests = minimum, >= 10x fewer than naive;
issue 15 (500,000 rows): prepare + plan <= 10 s and <= 1 GB.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pandas as pd
from child_emulator import SERVE_FLAG, ChildEmulator, requests_by_kind, serve_until_stdin_closes
from rss import peak_rss_mib

RESULTS = Path(__file__).with_name("RESULTS.md")
TABLE = "tbl_rows_bench"
API_KEY = "sk_bench_rows"
CHANGED_FRACTION = 0.05
COLUMNS = (
    "domain",
    "name",
    "arr",
    "plan",
    "owner",
    "health_score",
    "employees",
    "metadata",
    "renewal_date",
    "last_seen",
)
COLUMN_TYPES = {
    "arr": "number",
    "plan": "enum",
    "health_score": "number",
    "employees": "number",
    "metadata": "json",
    "renewal_date": "date",
    "last_seen": "date",
}
PLANS = ("free", "team", "enterprise")
ENDPOINTS = {
    "add_rows": "POST /v1/lists/{tableId}/rows",
    "update_cells": "PATCH /v1/lists/{tableId}/cells",
    "delete_rows": "DELETE /v1/lists/{tableId}/rows",
}


def account(number: int) -> dict[str, Any]:
    """Row ``number`` of the List as the service stores it (JSON values)."""
    return {
        "domain": f"acct{number:07d}.example",
        "name": f"Account {number}",
        "arr": number * 10.5,
        "plan": PLANS[number % 3],
        "owner": f"owner{number % 50}",
        "health_score": (number % 100) / 100,
        "employees": number % 1000,
        "metadata": {"tier": number % 3, "tags": ["x", str(number % 7)]},
        "renewal_date": (date(2026, 1, 1) + timedelta(days=number % 365)).isoformat(),
        "last_seen": (date(2025, 1, 1) + timedelta(days=number % 300)).isoformat(),
    }


def changed(column: str, value: Any) -> Any:
    """A different value of the same type."""
    if column == "plan":
        return PLANS[(PLANS.index(value) + 1) % 3]
    if column == "metadata":
        return {**value, "tier": value["tier"] + 10}
    if column in ("renewal_date", "last_seen"):
        return (date.fromisoformat(value) + timedelta(days=1)).isoformat()
    if isinstance(value, str):
        return value + " (new)"
    return value + 1


def split(rows: int) -> tuple[int, int]:
    """The rows the List holds and the extract's new rows (2%) of an extract of ``rows``."""
    new = rows // 50
    return rows - new, new


def extract_frame(existing: int, new: int) -> tuple[pd.DataFrame, int]:
    """The extract and the number of cells it changes. Numbers stay numbers, dates come as
    ``date`` objects and JSON as dicts, as a typed warehouse query gives them."""
    # Built column by column, as a warehouse read gives them: a dict per row would make the
    # extract's own peak the larger part of the process's.
    columns: dict[str, list[Any]] = {column: [] for column in COLUMNS}
    for number in range(existing + new):
        for column, value in account(number).items():
            columns[column].append(value)
    rng = random.Random(7)
    cells = len(COLUMNS) - 1
    # Cell (number, column) as number * cells + column position, so millions are sampled cheaply.
    picked = [
        divmod(index, cells)
        for index in rng.sample(range(existing * cells), round(existing * cells * CHANGED_FRACTION))
    ]
    for number, position in picked:
        values = columns[COLUMNS[1 + position]]
        values[number] = changed(COLUMNS[1 + position], values[number])
    for column in ("renewal_date", "last_seen"):
        columns[column] = [date.fromisoformat(value) for value in columns[column]]
    return pd.DataFrame(columns, dtype=object), len(picked)


# -- the emulator, in a child process -----------------------------------------------------------


def serve_emulator(existing: int) -> None:
    """Child process: load the List into an emulator, print its URL, serve until stdin closes."""
    from listsync.emulator import EmulatorConfig, ListConfig, create_app
    from listsync.emulator.store import Row

    columns = [
        {"id": column, "type": COLUMN_TYPES.get(column, "text")}
        | ({"options": [{"key": p, "label": p.title()} for p in PLANS]} if column == "plan" else {})
        for column in COLUMNS
    ]
    config = EmulatorConfig(
        secret_keys=[API_KEY],
        # No unique-domain enforcement: its per-request scan of the List would dominate the
        # emulator's time for the naive run, which is not what this measures.
        lists=[ListConfig.model_validate({"id": TABLE, "account_column": "domain", "columns": columns})],
    )
    app = create_app(config)
    state = app.state.emulator.state
    lst = state.lists[TABLE]
    for number in range(existing):
        row_id = state.new_row_id()
        lst.rows[row_id] = Row(row_id, account(number), "2026-01-01T00:00:00.000Z")
    lst.changed()
    serve_until_stdin_closes(app)


# -- the runs -----------------------------------------------------------------------------------


MEASURE_FLAG = "--measure-phases"


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """The extract as a typed Parquet file (numbers, dates, the JSON column as a struct)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)


def phases(url: str, extract: Path) -> dict[str, float]:
    """In a fresh process: seconds of prepare (the Parquet extract read in chunks), read List and
    plan; this process's peak RSS through them, and what they added to it."""
    from listsync.client import ListSyncClient
    from listsync.extract.rejects import Rejects
    from listsync.extract.sources import read_extract
    from listsync.sync.memory import give_back_freed_memory, use_returning_allocator
    from listsync.sync.rows import plan_rows_upsert, read_list_rows
    from listsync.sync.rows.prepare import prepare_rows

    use_returning_allocator()  # as a sync does (ListSyncJob.run)
    before = peak_rss_mib()
    figures: dict[str, float] = {}
    column_map = {column: column for column in COLUMNS}
    with ListSyncClient(url, API_KEY, timeout=120.0) as client:
        started = time.perf_counter()
        prepared = prepare_rows(read_extract(extract), column_map, "domain", rejects=Rejects())
        figures["prepare"] = time.perf_counter() - started
        give_back_freed_memory()  # as a sync does between its steps
        started = time.perf_counter()
        current, _ = read_list_rows(client, TABLE, "domain", prepared.frame.columns, key_kind="domain")
        figures["read List"] = time.perf_counter() - started
        give_back_freed_memory()
        started = time.perf_counter()
        plan = plan_rows_upsert(prepared.frame, current, key_column="domain")
        figures["plan"] = time.perf_counter() - started
    figures["peak MiB"] = peak_rss_mib()
    figures["cells planned"] = len(plan.changes)
    figures["rows planned"] = len(plan.additions)
    figures["added peak MiB"] = figures["peak MiB"] - before
    return figures


def measured_phases(url: str, extract: Path) -> dict[str, float]:
    """:func:`phases` in a fresh process, whose peak is the sync's alone (not this one's frame)."""
    command = [sys.executable, __file__, MEASURE_FLAG, str(extract), "--url", url]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the phases failed:\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def ours(url: str, frame: pd.DataFrame) -> tuple[dict[str, Any], float, dict[str, Any], float]:
    """(summary, seconds, summary of a second run over the same extract, seconds one read of
    the List over HTTP takes, a share of every run)."""
    from listsync.client import ListSyncClient
    from listsync.sync.rows import read_list_rows, upsert_rows

    column_map = {column: column for column in COLUMNS}
    with ListSyncClient(url, API_KEY, timeout=120.0) as client:
        started = time.perf_counter()
        read_list_rows(client, TABLE, "domain", COLUMNS, key_kind="domain")
        read_seconds = time.perf_counter() - started
        started = time.perf_counter()
        summary = upsert_rows(client, TABLE, [frame], key_column="domain", column_map=column_map)
        seconds = time.perf_counter() - started
        again = upsert_rows(client, TABLE, [frame], key_column="domain", column_map=column_map)
    return summary, seconds, again, read_seconds


def naive(url: str, frame: pd.DataFrame) -> tuple[int, float]:
    """Rewrite every non-key cell of every existing row, add the new rows; (failed, seconds)."""
    from listsync.client import ListSyncClient
    from listsync.client.models import CellUpdate, RowAdd
    from listsync.client.write_items import Keyed
    from listsync.client.writers import write_cell_updates, write_row_adds
    from listsync.extract.rejects import Rejects
    from listsync.sync.rows import read_current_rows
    from listsync.sync.rows.prepare import prepare_rows

    column_map = {column: column for column in COLUMNS}
    with ListSyncClient(url, API_KEY, timeout=120.0) as client:
        started = time.perf_counter()
        prepared = prepare_rows([frame], column_map, "domain", rejects=Rejects())
        current, _ = read_current_rows(client, TABLE, "domain")
        row_ids = {row.cells["domain"]: row.row_id for row in current}
        updates: list[Keyed[CellUpdate]] = []
        adds: list[Keyed[RowAdd]] = []
        for key, cells in prepared.rows.items():
            row_id = row_ids.get(key)
            if row_id is None:
                adds.append(Keyed(key, RowAdd(cells=cells)))
                continue
            updates.extend(
                Keyed(f"{key} {column}", CellUpdate(rowId=row_id, columnId=column, value=value))
                for column, value in cells.items()
                if column != "domain"
            )
        added = write_row_adds(client, TABLE, adds)
        patched = write_cell_updates(client, TABLE, updates)
        seconds = time.perf_counter() - started
    return len(added.failed) + len(patched.failed), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="extract rows (default 50,000)")
    parser.add_argument(
        "--naive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run the naive rewrite of every cell (default: up to 50,000 rows)",
    )
    parser.add_argument("--append-results", action="store_true", help="append a section to RESULTS.md")
    parser.add_argument(
        "--phases-only", action="store_true", help="time the phases only, not the upserts end to end"
    )
    parser.add_argument(SERVE_FLAG, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(MEASURE_FLAG, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    existing, new = split(args.rows)
    if args.measure_phases:
        print(json.dumps(phases(args.url, args.measure_phases)))
        return
    if args.serve_emulator:
        serve_emulator(existing)
        return
    with_naive = args.naive if args.naive is not None else args.rows <= 50_000

    frame, changed_cells = extract_frame(existing, new)
    child = (__file__, "--rows", str(args.rows))
    with tempfile.TemporaryDirectory() as folder, ChildEmulator(*child) as url:
        extract = Path(folder) / "extract.parquet"
        write_parquet(frame, extract)
        measured = measured_phases(url, extract)
    lines = [
        f"List: {existing:,} rows x {len(COLUMNS)} columns; extract: {len(frame):,} rows "
        f"({changed_cells:,} cells changed = {CHANGED_FRACTION:.0%} of non-key cells, {new:,} new rows)",
        f"phases: prepare {measured['prepare']:.2f} s, read List {measured['read List']:.2f} s, "
        f"plan {measured['plan']:.2f} s; prepare + plan {measured['prepare'] + measured['plan']:.2f} s; "
        f"peak RSS of the syncing process (reading the extract from Parquet) through the phases "
        f"{measured['peak MiB']:,.0f} MiB, of which the phases added {measured['added peak MiB']:,.0f} MiB "
        "to the process as started",
        f"planned: {measured['cells planned']:,} cell updates (of {changed_cells:,} changed), "
        f"{measured['rows planned']:,} rows to add (of {new:,} new)",
    ]
    if args.phases_only:
        report(lines, args)
        return
    with ChildEmulator(*child) as url:
        summary, ours_seconds, again, read_seconds = ours(url, frame)
        ours_sent = requests_by_kind(url, ENDPOINTS)
        ours_sent["total"] = sum(ours_sent.values())
        # The second run's writes would show in the counters; prove there were none.
        assert ours_sent == {**summary["requests"]}, (ours_sent, summary["requests"])
    minimum = math.ceil(changed_cells / 1000) + math.ceil(new / 500)
    lines += [
        f"ours: {ours_seconds:.2f} s end to end (prepare, read List, plan, write); "
        f"{summary['cells_updated']:,} cells updated on {summary['rows_updated']:,} rows, "
        f"{summary['rows_added']:,} rows added, {summary['unchanged']:,} unchanged, "
        f"{summary['failed']} failed",
        f"of which reading the List over HTTP ({math.ceil(existing / 1000)} GET pages of 1,000, "
        f"both runs pay it): {read_seconds:.2f} s",
        f"ours write requests: {ours_sent['add_rows']} POST rows + {ours_sent['update_cells']} PATCH cells "
        f"= {ours_sent['total']}; minimum the chunk sizes allow: {minimum}",
        f"second run over the same extract: {again['requests']['total']} write requests, "
        f"{again['unchanged']:,} rows unchanged",
        f"peak RSS of the process at the end: {peak_rss_mib():,.0f} MiB",
    ]
    if with_naive:
        with ChildEmulator(*child) as url:
            naive_failed, naive_seconds = naive(url, frame)
            naive_sent = requests_by_kind(url, ENDPOINTS)
        naive_total = sum(naive_sent.values())
        lines += [
            f"naive (rewrite every cell): {naive_seconds:.2f} s; write requests "
            f"{naive_sent['add_rows']} POST rows + {naive_sent['update_cells']} PATCH cells = {naive_total} "
            f"({naive_failed} failed)",
            f"ratio: {naive_total / ours_sent['total']:.1f}x fewer write requests, "
            f"{naive_seconds / ours_seconds:.1f}x faster end to end",
        ]
    report(lines, args)


def report(lines: list[str], args: argparse.Namespace) -> None:
    """Print the figures, and append them to RESULTS.md when asked."""
    for line in lines:
        print(line)
    if args.append_results:
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write(
                f"\n## Rows upsert, {args.rows:,} rows (benchmarks/rows_upsert.py), "
                f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n\n"
                f"Machine: 2 cores / 24 GiB, python-svc (Python {platform.python_version()}); "
                f"emulator in a child process, a fresh one per run; load average at the end "
                f"{os.getloadavg()[0]:.1f} (the machine is shared with other engineers' test runs).\n\n"
                + "".join(f"- {line}\n" for line in lines)
            )


if __name__ == "__main__":
    main()
