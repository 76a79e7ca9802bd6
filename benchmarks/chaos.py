"""Chaos: the three jobs under the emulator's seeded faults, measured for lost and duplicated data.

For each job and each cell of a matrix of faults (kind x probability) on that job's write
endpoints, a fresh emulator state (``POST /_emulator/reset``: empty Lists, no events, the fault
generator back to the seed's first draw) gets the job's starting point, then the faults are armed
and one run of the job goes through them (the *faulty run*). The faults are then cleared and the
job runs again, fault free, until a run writes nothing (at most ``--max-runs`` runs in all). The
emulator's own state (``GET /_emulator/state``) is then compared with the extract.

Faults, each as one rule on every write endpoint of the job, firing with probability ``p`` on each
request (``--probabilities``, 0.1 and 0.3 by default) from the generator seeded by ``--seed``:

- ``error 500`` and ``error 503``: answered without being applied. The client treats them apart:
  a write is retried on 502/503/504 only, so a 500 to a write is an outcome left unknown;
- ``drop_before``: the connection closes before the request is applied;
- ``drop_after``: the request is applied, then the connection closes without an answer;
- ``latency``: the request waits 0.8 s in the emulator, then is applied and answered; the client's
  timeout is 0.5 s, so the client has given up on it by then and it lands late;
- ``429 storm``: 429 ``Rate limit exceeded`` with ``Retry-After: 1``;
- ``drop_after then 500`` (beyond the single faults): ``drop_after`` at ``p``, and a 500 to the
  11th write request of the faulty run (a rule with ``times: 1`` armed just before it is sent), so
  that one run meets lost answers and then a failure it may not ride out.

Jobs, each through a ``ListSyncClient`` with a 0.5 s timeout, real sleeps and ``--max-in-flight``
requests at once (default 4, the client's: List pages asked for ahead, write chunks of one kind
sent together):

- **people**: ``sync_people`` in mirror mode, 2,000 people over 100 accounts whose rows are added
  first (``add_rows``); 400 of them (20%) have no e-mail and no profile URL, 200 known by phone and
  200 by first + last name, all on accounts 0-39 (half of each of those accounts), so that requests
  of accounts 0-39 are never re-sent blindly and those of accounts 40-99 are (the service merges
  people by e-mail). Chunks of 100 people (5 accounts), not the 500 default, so that a faulty run
  sends 20 adds. Faults on POST, PATCH and DELETE targetable-people. **lost**: extract people
  (account + identity: e-mail, else profile URL, else phone, else first + last name) not in the
  List; **duplicated**: extra copies of an account + identity;
- **rows**: ``upsert_rows`` of 3,000 rows keyed by a domain onto an empty List without unique
  domains (``unique_domains: false``), chunks of 100 rows. Faults on POST rows, PATCH cells and
  DELETE rows. **lost**: extract keys in no row; **duplicated**: keys held by more than one row;
- **events**: ``ingest_events`` of 3,000 events with references (``page_visit`` Event 600,
  ``seats_used`` Metric 2,250, ``deal_stage`` State 150) with the emulator's windows at 1 s, the
  checkpoint in a ``CheckpointStore`` over a dict. After the faulty run (which may raise: a 500 is
  not retried), the same ingestion is run again with the same store until a run ends with nothing
  pending. Faults on POST /v1/events and /v1/events/batch. **lost**: references never stored;
  **duplicated**: references stored more than once, against the ``possibly_duplicated`` of the
  last summary (it adds up over the runs through the checkpoint). Target: 0 lost and
  actual <= reported <= 2 x actual.

For people and rows, the duplicates the faulty run left (measured before any other run) must show
in that run's summary: ``drift``, ``failed``, or a count of the repair (``resent``,
``copies_removed``, ``resent``).

The emulator runs in a child process (``child_emulator.py``), one for the whole benchmark, reset
before each cell. Run: ``.venv/bin/python benchmarks/chaos.py [--jobs people,rows,events]
[--probabilities 0.1,0.3] [--faults "error 500,drop_after"] [--seed 7] [--max-runs 5] [--record]``;
``--record`` appends the tables to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pandas as pd
from backfill import MAPPING, PAYLOADS
from child_emulator import SERVE_FLAG, ChildEmulator, serve_until_stdin_closes
from results import publish

from listsync.client import ListSyncClient, ListSyncError
from listsync.client.in_flight import MAX_IN_FLIGHT
from listsync.emulator.app import endpoint_name
from listsync.extract.rejects import Rejects
from listsync.signals.checkpoints import CheckpointStore
from listsync.signals.ingest import ingest_events
from listsync.sync.people import sync_people
from listsync.sync.rows import upsert_rows
from listsync.sync.settings import SyncSettings

API_KEY = "sk_bench_chaos"
SEED_VARIABLE = "LISTSYNC_CHAOS_SEED"
#: The List jobs' ``max_in_flight`` (``--max-in-flight``).
IN_FLIGHT_VARIABLE = "LISTSYNC_CHAOS_IN_FLIGHT"
PEOPLE_TABLE = "tbl_chaos_people"
ROWS_TABLE = "tbl_chaos_rows"
TIMEOUT = 0.5
LATENCY = 0.8
WINDOW = 1.0
CHUNK = 100
ACCOUNTS = 100
PEOPLE_PER_ACCOUNT = 20
ROWS = 3_000
SIGNALS = {"page_visit": "Event", "seats_used": "Metric", "deal_stage": "State"}
SIGNAL_IDS = {"page_visit": "sig_chaos_pv", "seats_used": "sig_chaos_su", "deal_stage": "sig_chaos_ds"}
EVENTS = {"page_visit": 600, "seats_used": 2_250, "deal_stage": 150}
PEOPLE_COLUMNS = {
    "domain": "account_domain",
    "email": "email",
    "first": "first_name",
    "last": "last_name",
    "phone": "phone_number",
    "title": "title",
}
ROWS_COLUMNS = {"domain": "domain", "name": "name", "arr": "arr"}

#: The faults of the matrix: a name and the fields of its FaultRules (without endpoint, probability).
FAULTS: dict[str, list[dict[str, Any]]] = {
    "error 500": [{"kind": "error", "status": 500}],
    "error 503": [{"kind": "error", "status": 503}],
    "drop_before": [{"kind": "drop_before"}],
    "drop_after": [{"kind": "drop_after"}],
    f"latency {LATENCY:g} s": [{"kind": "latency", "latency_seconds": LATENCY}],
    "429 storm": [{"kind": "rate_limit", "retry_after_seconds": 1}],
    # Beyond the single faults: lost answers, then one 500 (the write request THEN_500 sends).
    "drop_after then 500": [{"kind": "drop_after"}],
}
#: The write request (retries included) of the faulty run that the "then 500" fault answers 500.
THEN_500 = 11
WRITE_ENDPOINTS = {
    "people": [
        "POST /v1/lists/{tableId}/targetable-people",
        "PATCH /v1/lists/{tableId}/targetable-people",
        "DELETE /v1/lists/{tableId}/targetable-people",
    ],
    "rows": [
        "POST /v1/lists/{tableId}/rows",
        "PATCH /v1/lists/{tableId}/cells",
        "DELETE /v1/lists/{tableId}/rows",
    ],
    "events": ["POST /v1/events", "POST /v1/events/batch"],
}
#: Why a client reports events possibly duplicated that were stored once (one line per fault kind).
UNTELLABLE = {
    "error": "a 5xx says nothing of whether the batch was applied, so its events are sent again "
    "and counted possibly duplicated; this emulator applies nothing it answers with a 5xx",
    "drop_before": "a connection closed before the answer looks the same to a client whether "
    "the service applied the batch (drop_after) or not (drop_before), so the batch is sent again "
    "and counted",
}


# -- the emulator, in a child process -----------------------------------------------------------


def serve_emulator() -> None:
    """Child process: the benchmark's tenant, faults seeded from the parent's ``--seed``."""
    from listsync.emulator import EmulatorConfig, ListConfig, SignalConfig, create_app

    config = EmulatorConfig(
        secret_keys=[API_KEY],
        window_seconds=WINDOW,
        seed=int(os.environ[SEED_VARIABLE]),
        signals=[
            SignalConfig.model_validate({"slug": slug, "id": SIGNAL_IDS[slug], "type": kind})
            for slug, kind in SIGNALS.items()
        ],
        lists=[
            ListConfig.model_validate(
                {"id": PEOPLE_TABLE, "account_column": "domain", "columns": [{"id": "domain"}]}
            ),
            ListConfig.model_validate(
                {
                    "id": ROWS_TABLE,
                    "account_column": "domain",
                    "unique_domains": False,
                    "columns": [{"id": "domain"}, {"id": "name"}, {"id": "arr", "type": "number"}],
                }
            ),
        ],
    )
    serve_until_stdin_closes(create_app(config))


class Control:
    """The emulator's inspection and fault endpoints (no key needed)."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=120)

    def reset(self) -> None:
        self.http.post("/_emulator/reset").raise_for_status()

    def arm(self, job: str, fault: str, probability: float) -> None:
        rules = [
            {"endpoint": endpoint, "probability": probability, **rule}
            for rule in FAULTS[fault]
            for endpoint in WRITE_ENDPOINTS[job]
        ]
        self.http.post("/_emulator/faults", json={"rules": rules}).raise_for_status()

    def arm_one_500(self, endpoint: str) -> None:
        """The next request to ``endpoint`` (``"POST /v1/events/batch"``) gets a 500."""
        rule = {"endpoint": endpoint, "kind": "error", "status": 500, "times": 1}
        self.http.post("/_emulator/faults", json={"rules": [rule]}).raise_for_status()

    def disarm(self) -> None:
        self.http.delete("/_emulator/faults").raise_for_status()

    def state(self, cell: Cell) -> dict[str, Any]:
        """The emulator's state once every write the cell sent has landed.

        A request delayed by a ``latency`` fault lands up to its delay after the client gave up on
        it, possibly after the run ended: read before it, it would be missed here and counted in
        the next cell, after the reset.
        """
        if any(rule["kind"] == "latency" for rule in FAULTS[cell.fault]):
            time.sleep(LATENCY + 1.0)
        response = self.http.get("/_emulator/state")
        response.raise_for_status()
        return dict(response.json())


class Counting(httpx.HTTPTransport):
    """Counts write attempts and those that met a fault (a non-2xx answer or no answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.counting = threading.Lock()  # the client sends several requests at once
        self.writes = 0
        self.faulted = 0
        self.longest_wait = 0.0  # the client's longest sleep
        #: Called with the endpoint name just before the write request numbered
        #: ``before_write[0]`` is sent.
        self.before_write: tuple[int, Callable[[str], None]] | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        write = request.method != "GET"
        with self.counting:
            self.writes += write
            number = self.writes
        if write and self.before_write is not None and number == self.before_write[0]:
            self.before_write[1](endpoint_name(request.method, request.url.path) or "")
        try:
            response = super().handle_request(request)
        except httpx.TransportError:
            with self.counting:
                self.faulted += write
            raise
        with self.counting:
            self.faulted += write and not 200 <= response.status_code < 300
        return response


# -- the data -----------------------------------------------------------------------------------


def account_domain(account: int) -> str:
    return f"acct{account:03d}.chaos.example"


def people_extract() -> pd.DataFrame:
    """2,000 people; on accounts 0-39, people 0-4 known by phone only, 5-9 by name only."""
    rows = []
    for account in range(ACCOUNTS):
        domain = account_domain(account)
        for number in range(PEOPLE_PER_ACCOUNT):
            n = account * PEOPLE_PER_ACCOUNT + number
            kind = "email"
            if account < 40 and number < 10:
                kind = "phone" if number < 5 else "name"
            rows.append(
                {
                    "domain": domain,
                    "email": f"p{n:05d}@{domain}" if kind == "email" else None,
                    "first": f"First{n}",
                    "last": f"Last{n}",
                    "phone": f"+1415555{n:04d}" if kind == "phone" else None,
                    "title": ("Engineer", "Buyer", "Director")[n % 3],
                }
            )
    return pd.DataFrame(rows, dtype=object)


def person_identity(person: Mapping[str, Any]) -> str | None:
    """E-mail (any case), else profile URL, else phone, else first + last name (§4.6)."""
    email = (person.get("email") or "").strip().lower()
    if email:
        return f"email:{email}"
    for name in ("network_profile_url", "phone_number"):
        value = (person.get(name) or "").strip()
        if value:
            return f"{name}:{value}"
    first, last = (person.get("first_name") or "").strip(), (person.get("last_name") or "").strip()
    return f"name:{first} {last}" if first and last else None


def extract_people_keys(frame: pd.DataFrame) -> set[tuple[str, str]]:
    keys = set()
    for record in frame.to_dict("records"):
        fields = {target: record[column] for column, target in PEOPLE_COLUMNS.items()}
        identity = person_identity(fields)
        assert identity is not None
        keys.add((record["domain"], identity))
    return keys


def rows_extract() -> pd.DataFrame:
    return pd.DataFrame(
        [{"domain": f"r{n:05d}.chaos.example", "name": f"Account {n}", "arr": n * 10} for n in range(ROWS)],
        dtype=object,
    )


def events_extract() -> pd.DataFrame:
    """3,000 events of three signals over one month, interleaved in timestamp order."""
    start = datetime(2026, 10, 1, tzinfo=timezone.utc)
    rows = []
    for slug, count in EVENTS.items():
        for i in range(count):
            rows.append(
                {
                    "event_id": f"{slug}-{i:05d}",
                    "signal": slug,
                    "account_id": f"acct-{i % 97:03d}",
                    "payload": PAYLOADS[slug](i),
                    "occurred_at": (start + timedelta(days=30) * i / count).isoformat(),
                }
            )
    return pd.DataFrame(rows)


# -- one cell -----------------------------------------------------------------------------------


@dataclass
class Cell:
    """The outcome of one job under one fault at one probability."""

    job: str
    fault: str
    probability: float
    writes: int = 0  # write attempts of the faulty run
    faulted: int = 0  # of those, the ones that met a fault
    claimed: str = ""  # the faulty run's summary, its non-zero counts
    later: str = ""  # what the fault-free runs wrote
    runs: int = 0  # runs until the List stopped changing (events: until nothing was pending)
    converged: bool = True
    lost: int = 0
    duplicated: int = 0
    # people and rows: duplicates right after the faulty run, and whether its summary showed them
    dup_after_faulty: int = 0
    reported: bool = True
    # events: extra stored copies, and the possibly_duplicated of the summaries
    copies: int = 0
    possibly_duplicated: int = 0
    raised: list[str] = field(default_factory=list)
    # An exception no job raises on purpose (the benchmark's own, or a bug): the cell fails.
    broken: str = ""
    seconds: float = 0.0
    longest_wait: float = 0.0  # the client's longest sleep, over every run

    @property
    def meets_target(self) -> bool:
        if self.broken:
            return False
        if self.job != "events":
            return self.lost == 0 and self.duplicated == 0 and (self.dup_after_faulty == 0 or self.reported)
        actual, reported = self.duplicated, self.possibly_duplicated
        return self.lost == 0 and self.converged and actual <= reported <= 2 * actual


def claimed(summary: Mapping[str, Any] | None, names: Iterable[str], cell: Cell) -> str:
    if summary is None:
        return f"broke: {cell.broken}" if cell.broken else f"raised {cell.raised[-1]}"
    parts = [f"{name} {summary[name]}" for name in names if summary.get(name)]
    return ", ".join(parts) or "nothing"


def run_job(run: Callable[[], dict[str, Any]], cell: Cell) -> dict[str, Any] | None:
    try:
        return run()
    except ListSyncError as exc:  # a job that fails as a job can is a run too; the next one picks up
        cell.raised.append(type(exc).__name__)
        return None
    except Exception as exc:  # anything else is a bug (the benchmark's or the job's): the cell fails
        cell.broken = cell.broken or f"{type(exc).__name__}: {exc}"
        return None


def arm(control: Control, transport: Counting, job: str, cell: Cell) -> None:
    """Arm the cell's faults for the faulty run, which starts now."""
    control.arm(job, cell.fault, cell.probability)
    transport.writes = transport.faulted = 0
    if cell.fault == "drop_after then 500":
        transport.before_write = (THEN_500, control.arm_one_500)


def make_client(url: str, seed: int) -> tuple[ListSyncClient, Counting]:
    transport = Counting()

    def sleep(seconds: float) -> None:
        transport.longest_wait = max(transport.longest_wait, seconds)
        time.sleep(seconds)

    client = ListSyncClient(
        url,
        API_KEY,
        transport=transport,
        timeout=TIMEOUT,
        sleep=sleep,
        rand=random.Random(seed).random,
        max_in_flight=int(os.environ.get(IN_FLIGHT_VARIABLE, MAX_IN_FLIGHT)),
    )
    return client, transport


PEOPLE_CLAIMS = (
    "added",
    "updated",
    "deleted",
    "failed",
    "verified",
    "drift",
    "resent",
    "replaced",
    "copies_removed",
)
ROWS_CLAIMS = ("added", "resent", "copies_removed", "verified", "drift", "failed")


def converge(
    cell: Cell,
    control: Control,
    run: Callable[[], dict[str, Any]],
    measure: Callable[[dict[str, Any]], tuple[int, int]],
    names: tuple[str, ...],
    max_runs: int,
    transport: Counting,
) -> None:
    """The faulty run, then fault-free runs until one writes nothing (people and rows)."""
    summary = run_job(run, cell)
    cell.writes, cell.faulted = transport.writes, transport.faulted
    control.disarm()
    transport.before_write = None
    cell.claimed = claimed(summary, names, cell)
    _, cell.dup_after_faulty = measure(control.state(cell))
    cell.reported = summary is None or any(
        summary.get(name) for name in ("failed", "drift", "resent", "copies_removed")
    )
    cell.runs, later = 1, []
    for number in range(2, max_runs + 1):
        summary = run_job(run, cell)
        if summary is not None and summary["requests"]["total"] == 0:
            break
        cell.runs = number
        later.append(f"run {number}: {claimed(summary, names, cell)}")
    else:
        cell.converged = False
    cell.later = "; ".join(later) or "nothing"
    cell.lost, cell.duplicated = measure(control.state(cell))
    cell.longest_wait = transport.longest_wait


def people_cell(url: str, control: Control, cell: Cell, seed: int, max_runs: int) -> None:
    frame = people_extract()
    wanted = extract_people_keys(frame)
    client, transport = make_client(url, seed)
    with client:
        client.add_rows(PEOPLE_TABLE, [{"cells": {"domain": account_domain(a)}} for a in range(ACCOUNTS)])
        arm(control, transport, "people", cell)

        def run() -> dict[str, Any]:
            return sync_people(
                client,
                PEOPLE_TABLE,
                [frame.copy()],
                PEOPLE_COLUMNS,
                mode="mirror",
                chunk_size=CHUNK,
                settings=SyncSettings(fail_on_error=False),
            )

        def measure(state: dict[str, Any]) -> tuple[int, int]:
            held: Counter[tuple[str, str | None]] = Counter()
            for row in state["lists"][PEOPLE_TABLE]["rows"]:
                for person in row["people"]:
                    held[(row["accountDomain"], person_identity(person))] += 1
            lost = sum(1 for key in wanted if key not in held)
            return lost, sum(count - 1 for count in held.values())

        converge(cell, control, run, measure, PEOPLE_CLAIMS, max_runs, transport)


def rows_cell(url: str, control: Control, cell: Cell, seed: int, max_runs: int) -> None:
    frame = rows_extract()
    wanted = set(frame["domain"])
    client, transport = make_client(url, seed)
    with client:
        arm(control, transport, "rows", cell)

        def run() -> dict[str, Any]:
            return upsert_rows(
                client,
                ROWS_TABLE,
                [frame.copy()],
                key_column="domain",
                column_map=ROWS_COLUMNS,
                chunk_size=CHUNK,
                settings=SyncSettings(fail_on_error=False),
            )

        def measure(state: dict[str, Any]) -> tuple[int, int]:
            held = Counter(row["cells"].get("domain") for row in state["lists"][ROWS_TABLE]["rows"])
            lost = sum(1 for key in wanted if key not in held)
            return lost, sum(1 for count in held.values() if count > 1)

        converge(cell, control, run, measure, ROWS_CLAIMS, max_runs, transport)


class DictBackend(dict[str, Any]):
    """A task state store kept in a dict: ``get`` (from dict) and ``set``."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value


def events_cell(url: str, control: Control, cell: Cell, seed: int, max_runs: int) -> None:
    frame = events_extract()
    wanted = set(frame["event_id"])
    store = CheckpointStore(backend=DictBackend())
    client, transport = make_client(url, seed)
    with client:
        # Start just after a window boundary, as a fresh window would find the first batch.
        now = time.time()
        time.sleep(-now % WINDOW + 0.01)
        arm(control, transport, "events", cell)

        def run() -> dict[str, Any]:
            return ingest_events(
                client,
                [frame.copy()],
                MAPPING,
                rejects=Rejects(),
                signal_types=SIGNALS,
                checkpoints=store,
            )

        summary = run_job(run, cell)
        cell.writes, cell.faulted = transport.writes, transport.faulted
        control.disarm()
        transport.before_write = None
        names = ("acknowledged", "pending", "possibly_duplicated", "rate_limited_responses", "requests")
        cell.claimed = claimed(summary, names, cell)
        cell.runs, later = 1, []
        while summary is None or summary["pending"]:
            if cell.runs == max_runs:
                cell.converged = False
                break
            cell.runs += 1
            summary = run_job(run, cell)
            later.append(f"run {cell.runs}: {claimed(summary, names, cell)}")
        cell.later = "; ".join(later) or "nothing"
        if summary is not None:
            cell.possibly_duplicated = summary["possibly_duplicated"]
        stored = Counter(event.get("reference") for event in control.state(cell)["events"])
        cell.lost = sum(1 for reference in wanted if reference not in stored)
        cell.duplicated = sum(1 for count in stored.values() if count > 1)
        cell.copies = sum(count - 1 for count in stored.values())
        cell.longest_wait = transport.longest_wait


JOBS: dict[str, Callable[[str, Control, Cell, int, int], None]] = {
    "people": people_cell,
    "rows": rows_cell,
    "events": events_cell,
}


# -- tables -------------------------------------------------------------------------------------


def table(job: str, cells: list[Cell]) -> list[str]:
    if job == "events":
        lines = [
            "| fault | p | faulted / write attempts | faulty run's summary | later runs | runs "
            "| lost | duplicated (extra copies) | reported possibly_duplicated | target | seconds "
            "| longest wait |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in cells:
            lines.append(
                f"| {c.fault} | {c.probability:g} | {c.faulted} / {c.writes} | {c.claimed} "
                f"| {c.later} | {c.runs}{'' if c.converged else '+'} | {c.lost} "
                f"| {c.duplicated} ({c.copies}) | {c.possibly_duplicated} | {target_text(c)} "
                f"| {c.seconds:.1f} | {c.longest_wait:.1f} |"
            )
        return lines
    lines = [
        "| fault | p | faulted / write attempts | faulty run's summary | dup. after it | reported "
        "| later runs | runs | lost | duplicated | target | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        reported = ("yes" if c.reported else "**no**") if c.dup_after_faulty else "-"
        lines.append(
            f"| {c.fault} | {c.probability:g} | {c.faulted} / {c.writes} | {c.claimed} "
            f"| {c.dup_after_faulty} | {reported} | {c.later} | {c.runs}{'' if c.converged else '+'} "
            f"| {c.lost} | {c.duplicated} | {'met' if c.meets_target else '**not met**'} | {c.seconds:.1f} |"
        )
    return lines


def target_text(cell: Cell) -> str:
    if cell.meets_target:
        return "met"
    actual, reported = cell.duplicated, cell.possibly_duplicated
    if cell.lost or not cell.converged:
        return "**not met** (lost)"
    if reported < actual:
        return "**not met** (unreported duplicates)"
    if actual == 0:
        return "not met: 0 actual, reported > 0"
    return "not met: reported > 2 x actual"


def where(cells: list[Cell]) -> str:
    return ", ".join(f"{c.fault} at {c.probability:g}" for c in cells)


def findings(results: dict[str, list[Cell]]) -> list[str]:
    """What the figures say, one paragraph per job, from the figures alone."""
    paragraphs = []
    for job, cells in results.items():
        lost = sum(c.lost for c in cells)
        duplicated = sum(c.duplicated for c in cells)
        unconverged = [c for c in cells if not c.converged]
        text = f"{job}: {lost} lost and {duplicated} duplicated after the last run, over {len(cells)} cells."
        if unconverged:
            text += f" Still writing at the last run allowed: {where(unconverged)}."
        for cell in (c for c in cells if c.broken):
            text += f" {where([cell])} BROKE, not a measurement: {cell.broken}."
        if job == "events":
            text += events_findings(cells)
        else:
            text += list_findings(cells)
        paragraphs.append(text)
    return paragraphs


def list_findings(cells: list[Cell]) -> str:
    text = ""
    left = [c for c in cells if c.dup_after_faulty]
    silent = [c for c in left if not c.reported]
    if not left:
        text += " No faulty run left a duplicate."
    elif silent:
        text += (
            f" The faulty run left duplicates in {where(left)}; its summary did not show them in "
            f"{where(silent)}."
        )
    else:
        text += f" The faulty run left duplicates in {where(left)}; its summary showed them each time."
    second = [c for c in cells if c.runs > 1]
    if second:
        text += (
            f" More than one run in {where(second)}: the faulty run gave up on some writes "
            "(reported failed or raised) and the next run wrote them."
        )
    return text


def events_findings(cells: list[Cell]) -> str:
    met = [c for c in cells if c.meets_target]
    text = f" Target (0 lost, actual <= reported <= 2 x actual) met in {len(met)} of {len(cells)}."
    lost = [c for c in cells if c.lost or not c.converged]
    unreported = [c for c in cells if c not in lost and c.possibly_duplicated < c.duplicated]
    untold = [c for c in cells if c not in lost and c.duplicated == 0 and c.possibly_duplicated]
    over = [c for c in cells if c not in lost and c.duplicated and c.possibly_duplicated > 2 * c.duplicated]
    if lost:
        text += f" Events lost in {where(lost)}."
    for c in unreported:
        text += (
            f" {c.fault} at {c.probability:g}: {c.duplicated} events stored more than once, "
            f"{c.possibly_duplicated} reported"
        )
        if c.raised:
            text += (
                f"; the faulty run raised ({c.raised[0]}) after batches whose answers were lost had "
                "been sent again, and a run that raises keeps only its acknowledged events (in the "
                "checkpoint), not its counters, so those duplicates are in no summary"
            )
        text += "."
    for kind, why in UNTELLABLE.items():
        group = [c for c in untold if FAULTS[c.fault][0]["kind"] == kind]
        if group:
            text += f" {where(group)}: reported > 0 with 0 stored twice: {why}."
    others = [c for c in untold if FAULTS[c.fault][0]["kind"] not in UNTELLABLE]
    if others:
        text += f" {where(others)}: reported > 0 with 0 stored twice."
    slept = [c for c in cells if c.longest_wait > 10 * WINDOW]
    if slept:
        text += (
            f" In {where(slept)} the client slept "
            f"{', '.join(f'{c.longest_wait:.0f}' for c in slept)} s at once, waiting for a window "
            "no answer had described: the client then takes the window to end one window after the "
            f"first event sent in it, and counts the spec's 60 s where this emulator's is {WINDOW:g} s "
            "(a wait, not a loss)."
        )
    if over:
        text += (
            f" Reported more than twice the actual in {where(over)}: batches refused with a 5xx or "
            "dropped before being applied are counted as well as those applied twice."
        )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="people,rows,events", help="comma-separated: people,rows,events")
    parser.add_argument("--probabilities", default="0.1,0.3", help="fault probabilities, comma-separated")
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help=f"faults, comma-separated: {', '.join(FAULTS)}"
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the emulator's fault decisions")
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=MAX_IN_FLIGHT,
        help=f"the List jobs' requests at once (default {MAX_IN_FLIGHT}, the client's)",
    )
    parser.add_argument("--max-runs", type=int, default=5, help="runs per cell, the faulty one included")
    parser.add_argument("--record", action="store_true", help="append the tables to benchmarks/RESULTS.md")
    parser.add_argument(SERVE_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_emulator:
        serve_emulator()
        return
    jobs = [job.strip() for job in args.jobs.split(",") if job.strip()]
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown:
        parser.error(f"unknown jobs: {', '.join(unknown)}")
    probabilities = [float(p) for p in args.probabilities.split(",") if p.strip()]
    faults = [fault.strip() for fault in args.faults.split(",") if fault.strip()]
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        parser.error(f"unknown faults: {', '.join(unknown)}")
    # The jobs log every retry; the tables say what happened.
    logging.getLogger("listsync").setLevel(logging.CRITICAL)

    os.environ[SEED_VARIABLE] = str(args.seed)
    os.environ[IN_FLIGHT_VARIABLE] = str(args.max_in_flight)
    started = time.perf_counter()
    results: dict[str, list[Cell]] = {}
    with ChildEmulator(__file__) as url:
        control = Control(url)
        for job in jobs:
            results[job] = []
            for fault in faults:
                for probability in probabilities:
                    cell = Cell(job, fault, probability)
                    control.reset()
                    began = time.perf_counter()
                    JOBS[job](url, control, cell, args.seed, args.max_runs)
                    cell.seconds = time.perf_counter() - began
                    results[job].append(cell)
                    print(
                        f"{job:6} {fault:12} p={probability:g}: lost {cell.lost}, duplicated "
                        f"{cell.duplicated}, runs {cell.runs}, target "
                        f"{'met' if cell.meets_target else 'not met'} ({cell.seconds:.1f} s)",
                        flush=True,
                    )
    seconds = time.perf_counter() - started

    all_cells = [cell for cells in results.values() for cell in cells]
    lines = [
        f"\n## Chaos: the jobs under seeded faults (benchmarks/chaos.py), "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n",
        f"Machine: 2 cores / 24 GiB, python-svc (Python {platform.python_version()}); emulator in a child "
        f"process, reset before each cell; load average at the end {os.getloadavg()[0]:.1f}. "
        f"`benchmarks/chaos.py --jobs {','.join(jobs)} --probabilities {args.probabilities} "
        + (f'--faults "{args.faults}" ' if faults != list(FAULTS) else "")
        + f"--seed {args.seed} --max-runs {args.max_runs} --max-in-flight {args.max_in_flight}`: "
        f"{len(all_cells)} cells in {seconds:.0f} s. "
        f"Client timeout {TIMEOUT:g} s, real sleeps. Each fault is one rule on each write endpoint "
        f"of the job, firing with probability p from the seeded generator: error 500 and 503 apart "
        f"(writes are retried on 503, not on 500); latency {LATENCY:g} s, past the timeout (the "
        "emulator is served behind a wrapper that reads each request before the faults act, so a "
        "request the client gave up on is applied late; without it the emulator reads the request "
        "after the delay, finds the client gone and applies nothing); 429 storm with "
        f"`Retry-After: 1`; drop_after then 500: drop_after at p and one 500 to the {THEN_500}th write "
        "request of the faulty run. Runs: the faulty run, then fault-free runs until one writes "
        f"nothing (events: until nothing is pending), at most {args.max_runs}; `+` marks a cell that "
        "did not get there. Faulted / write attempts: write requests of the faulty run, retries "
        "included, and those that met a fault (as the client saw them).\n",
    ]
    descriptions = {
        "people": "sync_people, mirror mode: 2,000 people on 100 existing account rows, 400 without "
        "e-mail or profile URL (200 by phone, 200 by name, on accounts 0-39), chunks of 100. "
        "Duplicated = extra copies of an account + identity; dup. after it = those the faulty run "
        "left; reported = its summary showed failed, drift, resent or copies_removed.",
        "rows": "upsert_rows: 3,000 rows keyed by domain onto an empty List without unique domains, "
        "chunks of 100. Duplicated = keys held by more than one row; reported = the faulty run's "
        "summary showed failed, drift, resent or copies_removed.",
        "events": "ingest_events: 3,000 events with references (page_visit 600, seats_used 2,250, "
        f"deal_stage 150), windows of {WINDOW:g} s, checkpoint in a dict-backed CheckpointStore. "
        "Duplicated = references stored more than once (extra copies in brackets); reported = "
        "possibly_duplicated of the last run's summary, summed over the runs by the checkpoint. "
        "Target: 0 lost, actual <= reported <= 2 x actual.",
    }
    for job, cells in results.items():
        lines += [f"\n### {job}\n", descriptions[job] + "\n", *table(job, cells)]
    met = sum(cell.meets_target for cell in all_cells)
    lines.append(
        f"\nTotals: {sum(c.lost for c in all_cells)} lost, {sum(c.duplicated for c in all_cells)} "
        f"duplicated after the last run over {len(all_cells)} cells; target met in {met} of "
        f"{len(all_cells)}; {seconds:.0f} s in all.\n"
    )
    lines += [paragraph + "\n" for paragraph in findings(results)]
    text = "\n".join(lines)
    publish(text, args.record)


if __name__ == "__main__":
    main()
