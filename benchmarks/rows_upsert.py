"""Rows upsert at scale: N extract rows x 10 columns, 5% of cells changed, 2% new rows.

Run: ``.venv/bin/python benchmarks/rows_upsert.py [--rows N] [--naive] [--append-results]``, or
``.venv/bin/python benchmarks/rows_upsert.py --job [--rows N] [--latency SECONDS] [--in-flight 1,4]
[--append-results]`` for the whole job at network distance (below).

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

The whole job at network distance (``--job``), three nights, on accounts as a warehouse holds
them: N rows (100,000 by default) of 10 columns, exported as CSV, made deterministic (a seeded
``random.Random``): the key is the account's website in every spelling a warehouse collects
(``https://www.acme.com/``, ``http://Acme.com``, ``" acme.com "``, ``https://acme.com/about``...),
normalised as a domain into the List's ``domain`` column; then the name and the owner's e-mail
(text), the ARR, the head count and a health score (numbers, the score empty on 10% of the rows),
the plan (an enum), attributes (a JSON object), a renewal date (empty on 5%) and the time of the
last activity. The numbers and the JSON object are parsed from the CSV's text (``json_columns``).
About 1% of the rows are bad (an empty website, a website that is no domain, attributes cut short,
a head count written ``1,200``), which the upsert rejects. The emulator (the ``reference`` profile)
runs in a child process with an empty rows List of those columns. Each run is three nights against
a fresh emulator, each night the whole job (``upsert_rows`` with ``delete_missing=True``,
``max_delete_fraction=0.2``, a plan file, ``fail_on_error=False``, a sync state kept across the
three nights, ``max_memory`` at its default) in a child process of its own:

- night 1 fills the empty List from the extract;
- night 2 a week of changes: 5% of the rows removed, 5% with one to three cells changed, 10% new;
- night 3 the same extract as night 2: nothing to write.

Measured per night: wall time (in the night's process, client made to summary returned), the peak
RSS of that process beside the memory guard's estimate of it, the write requests the summary
counts against the minimum the chunk sizes allow (ceil(rows added / 500) + ceil(cells / 1000) +
ceil(rows deleted / 1000), from the data made), every ``/v1`` request the emulator received during
the night, the summary's counts (checked against those the data made), and the job's steps (read +
prepare, read List, plan, apply, read back; the rest, plan file and state, is "other"), timed by
wrapping in the night's process the functions the upsert calls. The matrix: every ``--in-flight``
value (the client's ``max_in_flight``; 1 sends one request at a time) at 0 s and at ``--latency``
seconds added by the emulator to every request (a fault rule of kind ``latency``). Aims (100,000
rows, 50 ms a request, 4 requests in flight): the wall time of nights 1 and 2 <= 2x the same
night's at 0 ms; night 3 sends no write; no row failed, no drift.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import random
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from child_emulator import (
    SERVE_FLAG,
    ChildEmulator,
    night_figures,
    requests_by_kind,
    serve_until_stdin_closes,
)
from rss import peak_rss_mib

if TYPE_CHECKING:
    from people_job import Night

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


# -- the whole job at network distance (--job) ---------------------------------------------------

JOB_SEED = 20261128
#: The warehouse's columns -> the List's column ids (``COLUMNS``); the first is the key.
JOB_COLUMN_MAP = {
    "website": "domain",
    "account_name": "name",
    "arr_usd": "arr",
    "plan_tier": "plan",
    "owner_email": "owner",
    "health_score": "health_score",
    "employee_count": "employees",
    "attributes": "metadata",
    "renewal_date": "renewal_date",
    "last_activity_at": "last_seen",
}
#: The CSV columns whose text is JSON: the numbers and the object.
JOB_JSON_COLUMNS = ("arr_usd", "employee_count", "health_score", "attributes")
#: The functions ``listsync.sync.rows.upsert`` calls, one a step (see ``night_figures``).
JOB_STEPS = {
    "prepare_rows": "read + prepare",
    "read_list_rows": "read List",
    "plan_rows_upsert": "plan",
    "apply_rows_plan": "apply",
    "verify_rows": "read back",
}
REGIONS = ("amer", "emea", "apac", "latam")
SEGMENTS = ("smb", "mid-market", "enterprise", "strategic")
LEGAL = ("", " Inc.", " GmbH", " Ltd", " LLC", " SAS")
LAST_DAY = datetime(2026, 11, 27, 23, 0, tzinfo=timezone.utc)


@dataclass(slots=True)
class Account:
    """One warehouse row: its domain, the website as spelled, the other columns' CSV text, whether
    it is bad."""

    number: int
    domain: str
    website: str
    cells: dict[str, str]
    bad: bool


@dataclass
class Accounts:
    """The rows of the three nights' extracts, and what night 2 changed."""

    first_night: list[Account]
    second_night: list[Account]
    removed: list[Account]
    changed: list[Account]
    changed_cells: int
    new: list[Account]

    @staticmethod
    def make(rows: int, seed: int = JOB_SEED) -> Accounts:
        from people_job import FIRST, LAST, SUFFIXES, TLDS, WORDS, _website

        rng = random.Random(seed)
        owners = [f"{rng.choice(FIRST)}.{rng.choice(LAST)}@ourcompany.com".lower() for _ in range(40)]

        def cell(column: str, word: str, suffix: str) -> str:
            if column == "account_name":
                return f"{word.title()}{f' {suffix.title()}' if suffix else ''}{rng.choice(LEGAL)}"
            if column == "arr_usd":
                return f"{rng.randrange(0, 250_000_000) / 100:.2f}"
            if column == "plan_tier":
                return rng.choice(PLANS)
            if column == "owner_email":
                return rng.choice(owners)
            if column == "health_score":
                return "" if rng.random() < 0.1 else f"{rng.random():.2f}"
            if column == "employee_count":
                return str(min(200_000, int(rng.paretovariate(0.8))))
            if column == "attributes":
                tags = rng.sample(("priority", "at-risk", "expansion", "partner", "beta", "churned"), 2)
                attributes = {"region": rng.choice(REGIONS), "segment": rng.choice(SEGMENTS), "tags": tags}
                return json.dumps({**attributes, "crm_id": f"001{rng.randrange(10**12):012d}"})
            if column == "renewal_date":
                day = date(2026, 12, 1) + timedelta(days=rng.randrange(365))
                return "" if rng.random() < 0.05 else day.isoformat()
            seen = LAST_DAY - timedelta(seconds=rng.randrange(90 * 86_400))
            return seen.isoformat().replace("+00:00", "Z")

        def new_account(number: int) -> Account:
            word, suffix = rng.choice(WORDS), rng.choice(SUFFIXES)
            domain = f"{word}{suffix}{number}.{rng.choice(TLDS)}"
            cells = {column: cell(column, word, suffix) for column in list(JOB_COLUMN_MAP)[1:]}
            website, bad = _website(rng, domain), rng.random() < 0.01
            if bad:
                flaw = rng.randrange(4)
                if flaw == 0:
                    website = ""
                elif flaw == 1:
                    website = rng.choice(("N/A", "localhost", "-"))
                elif flaw == 2:
                    cells["attributes"] = cells["attributes"][: rng.randrange(5, 30)]
                else:
                    cells["employee_count"] = f"{rng.randrange(1, 99)},{rng.randrange(1000):03d}"
            return Account(number, domain, website, cells, bad)

        first_night = [new_account(number) for number in range(rows)]
        removed = set(rng.sample(range(rows), rows // 20))
        kept = [index for index in range(rows) if index not in removed]
        changing = set(rng.sample([index for index in kept if not first_night[index].bad], rows // 20))
        second_night, changed, changed_cells = [], [], 0
        for index in kept:
            account = first_night[index]
            if index in changing:
                cells = dict(account.cells)
                for column in rng.sample(list(cells), rng.randint(1, 3)):
                    while cells[column] in ("", account.cells[column]):
                        cells[column] = cell(column, rng.choice(WORDS), rng.choice(SUFFIXES))
                    changed_cells += 1
                account = Account(account.number, account.domain, account.website, cells, False)
                changed.append(account)
            second_night.append(account)
        new = [new_account(number) for number in range(rows, rows + rows // 10)]
        second_night.extend(new)
        gone = [first_night[index] for index in sorted(removed)]
        return Accounts(first_night, second_night, gone, changed, changed_cells, new)

    def expected(self) -> list[dict[str, int]]:
        """The summary's counts each night should show."""
        good = [sum(not a.bad for a in night) for night in (self.first_night, self.second_night)]
        added = sum(not a.bad for a in self.new)
        second = {
            "added": added,
            "updated": len(self.changed),
            "cells_updated": self.changed_cells,
            "deleted": sum(not a.bad for a in self.removed),
            "unchanged": good[1] - added - len(self.changed),
        }
        nothing = {"added": 0, "updated": 0, "cells_updated": 0, "deleted": 0}
        return [{**nothing, "added": good[0], "unchanged": 0}, second, {**nothing, "unchanged": good[1]}]

    def minimum_writes(self) -> list[int]:
        """The fewest write requests each night's writes fit in (500 rows added, 1,000 cells
        updated, 1,000 rows deleted a request)."""
        caps = {"added": 500, "cells_updated": 1000, "deleted": 1000}
        return [
            sum(math.ceil(counts[kind] / cap) for kind, cap in caps.items()) for counts in self.expected()
        ]

    def bad_rows(self) -> list[int]:
        bad = [sum(a.bad for a in night) for night in (self.first_night, self.second_night)]
        return [bad[0], bad[1], bad[1]]

    def describe(self) -> str:
        rows = len(self.first_night)
        spelled = sum(a.website != a.domain for a in self.first_night if not a.bad)
        expected, bad = self.expected()[1], self.bad_rows()
        return (
            f"accounts as a warehouse holds them (seed {JOB_SEED}): {rows:,} rows x {len(JOB_COLUMN_MAP)} "
            f"columns on night 1, CSV ({', '.join(JOB_COLUMN_MAP)}; JSON text: "
            f"{', '.join(JOB_JSON_COLUMNS)}); {spelled / (rows - bad[0]):.0%} of the good websites "
            f"other than the bare domain (a scheme, www., a path, capitals, spaces); {bad[0]:,} bad rows "
            "on night 1, "
            f"{bad[1]:,} on nights 2 and 3; night 2: {len(self.second_night):,} rows "
            f"({len(self.removed):,} removed, {expected['deleted']:,} of them in the List; "
            f"{len(self.changed):,} with {self.changed_cells:,} cells changed; {len(self.new):,} new, "
            f"{expected['added']:,} of them good)"
        )


def write_accounts(accounts: list[Account], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(JOB_COLUMN_MAP)
        for account in accounts:
            writer.writerow((account.website, *account.cells.values()))


def job_night(url: str, extract: Path, state: str, plan: str, in_flight: int) -> None:
    """Child process: one whole ``upsert_rows`` of ``extract``; print its figures as JSON."""
    import listsync.sync.rows.upsert as module
    from listsync.client import ListSyncClient
    from listsync.extract.sources import read_extract
    from listsync.sync import SyncSettings
    from listsync.sync.rows import upsert_rows

    def job() -> dict[str, Any]:
        with ListSyncClient(url, API_KEY, timeout=120.0, max_in_flight=in_flight) as client:
            return upsert_rows(
                client,
                TABLE,
                read_extract(extract),
                key_column="domain",
                column_map=JOB_COLUMN_MAP,
                json_columns=JOB_JSON_COLUMNS,
                delete_missing=True,
                settings=SyncSettings(
                    max_delete_fraction=0.2, plan_path=plan, fail_on_error=False, state_path=state
                ),
            )

    print(json.dumps(night_figures(job, module, JOB_STEPS)))


JOB_HEADER = (
    "| latency | in-flight | night | wall s | peak RSS MiB | guard's estimate MiB (÷ peak) "
    "| write requests (min) | all requests | added / updated (cells) / deleted / unchanged "
    "| rejected | failed | drift | unconfirmed | steps s |"
)
JOB_RULE = "|" + "---|" * (JOB_HEADER.count(" | ") + 1)


def job_row(night: Night, minimum: list[int]) -> str:
    s, figures = night.summary, night.figures
    timed = ", ".join(f"{name} {value:.1f}" for name, value in figures["steps"].items())
    return (
        f"| {night.latency * 1000:g} ms | {night.in_flight} | {night.night} | {night.seconds:.1f} "
        f"| {figures['rss']:,.0f} | {figures['estimate']:,.0f} ({figures['estimate'] / figures['rss']:.2f}) "
        f"| {s['requests']['total']:,} ({minimum[night.night - 1]:,}) | {figures['all_requests']:,} "
        f"| {s['added']:,} / {s['updated']:,} ({s['cells_updated']:,}) / {s['deleted']:,} / "
        f"{s['unchanged']:,} | {s['rejected']:,} | {s['failed']:,} | {s['drift']:,} "
        f"| {s.get('unconfirmed', 0):,} | {timed} |"
    )


def job_report(accounts: Accounts, nights: list[Night], latency: float) -> list[str]:
    """The lines after the table: the latency ratios, the aims, and what looks wrong."""
    from people_job import latency_ratios

    lines = latency_ratios(nights, latency)
    expected, minimum, bad = accounts.expected(), accounts.minimum_writes(), accounts.bad_rows()
    for n in nights:
        s, odd = n.summary, []
        if s["rejected"] != bad[n.night - 1]:
            odd.append(f"rejected {s['rejected']} against {bad[n.night - 1]} bad rows")
        differ = {k: (s[k], v) for k, v in expected[n.night - 1].items() if s[k] != v}
        if differ:
            odd.append(f"counts (got, made): {differ}")
        for count in (
            "failed",
            "drift",
            "unconfirmed",
            "duplicates",
            "duplicate_keys_in_list",
            "resent",
        ):
            if s.get(count):
                odd.append(f"{count} {s[count]}")
        if n.night == 3 and s["requests"]["total"]:
            odd.append(f"night 3 sent {s['requests']['total']} write requests")
        if s["requests"]["total"] > minimum[n.night - 1]:
            odd.append(
                f"write requests {s['requests']} against a minimum of {minimum[n.night - 1]} "
                f"(planned {s.get('planned')})"
            )
        share = n.figures["estimate"] / n.figures["rss"]
        if share < 0.8:  # the guard would let through a run that needs more than its limit
            peaks = ", ".join(f"{step} {mib:,.0f}" for step, mib in n.figures["peaks"].items())
            odd.append(
                f"the memory guard's estimate is {share:.2f} of the peak RSS; the peak (MiB) at the end "
                f"of each step: {peaks}"
            )
        if odd:
            reasons = s.get("failure_reasons", {})
            lines.append(
                f"odd: {n.latency * 1000:g} ms, in-flight {n.in_flight}, night {n.night}: {'; '.join(odd)}"
                + (f"; failure reasons {reasons}" if reasons else "")
                + (f"; drift {s['drift_reasons'][:3]}" if s.get("drift_reasons") else "")
                + (f"; warnings {n.figures['warnings'][:3]}" if n.figures["warnings"] else "")
            )
    return lines


def run_job(args: argparse.Namespace) -> None:
    """``--job``: the matrix of (latency, in-flight), three nights each; the table and the ratios."""
    from people_job import machine, run_nights, utc_now

    command = shlex.join([".venv/bin/python", "benchmarks/rows_upsert.py", *sys.argv[1:]])
    in_flights = [int(value) for value in args.in_flight.split(",")]
    latencies = sorted({0.0, args.latency})
    started = time.perf_counter()
    accounts = Accounts.make(args.rows)
    minimum = accounts.minimum_writes()
    print(accounts.describe(), f"(made in {time.perf_counter() - started:.1f} s)", flush=True)
    print(JOB_HEADER)
    print(JOB_RULE)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        extracts = [folder / "night1.csv", folder / "night2.csv"]
        write_accounts(accounts.first_night, extracts[0])
        write_accounts(accounts.second_night, extracts[1])
        nights = run_nights(
            __file__,
            ("--job",),
            [extracts[0], extracts[1], extracts[1]],
            latencies,
            in_flights,
            folder,
            lambda night: job_row(night, minimum),
        )
    lines = job_report(accounts, nights, args.latency)
    for line in lines:
        print(line)
    if args.append_results:
        table = [JOB_HEADER, JOB_RULE, *(job_row(n, minimum) for n in nights)]
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write(
                f"\n## Rows job at network distance, {args.rows:,} warehouse account rows "
                f"(benchmarks/rows_upsert.py --job), {utc_now()}\n\n"
                f"Machine: {machine()}. Command: `{command}`.\n\n"
                f"- {accounts.describe()}\n"
                "- each night: the whole `upsert_rows` (key_column domain as a domain, delete_missing, "
                "max_delete_fraction 0.2, plan file, state kept across the nights, max_memory auto); "
                "write requests (the minimum the chunk sizes allow), every /v1 request the emulator "
                "received; steps timed in the night's process\n\n"
                + "\n".join(table)
                + "\n\n"
                + "".join(f"- {line}\n" for line in lines)
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, help="extract rows (default 50,000; with --job, rows on night 1, default 100,000)"
    )
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
    parser.add_argument(
        "--job", action="store_true", help="the whole job at network distance, three nights (see above)"
    )
    parser.add_argument(
        "--latency",
        type=float,
        default=0.05,
        help="--job: seconds added to each request (default 0.05; 0 runs too)",
    )
    parser.add_argument(
        "--in-flight",
        default="1,4",
        help="--job: the client's max_in_flight values, comma-separated (default 1,4)",
    )
    parser.add_argument(SERVE_FLAG, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(MEASURE_FLAG, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--night", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    parser.add_argument("--night-in-flight", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.night:
        job_night(args.url, args.night, args.state, args.plan, args.night_in_flight)
        return
    if args.rows is None:
        args.rows = 100_000 if args.job else 50_000
    existing, new = split(args.rows)
    if args.measure_phases:
        print(json.dumps(phases(args.url, args.measure_phases)))
        return
    if args.serve_emulator:
        serve_emulator(0 if args.job else existing)  # the job's List starts empty
        return
    if args.job:
        run_job(args)
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
        f"{summary['cells_updated']:,} cells updated on {summary['updated']:,} rows, "
        f"{summary['added']:,} rows added, {summary['unchanged']:,} unchanged, "
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
