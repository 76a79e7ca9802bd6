"""People sync at scale: a List of N people over N/5 accounts against a changed extract.

Run: ``.venv/bin/python benchmarks/people_sync.py [--people N] [--naive] [--append-results]``

The List holds N people (100,000 by default), 5 on each of N/5 account rows, loaded straight into
the emulator's state. The extract, a CSV file, keeps 95% of them (5% removed), changes the title
of 5% and adds 10% new people. The sync runs in mirror mode (accounts in source), so at 100,000
the plan is 10,000 adds, 5,000 patches and 5,000 deletes.

Measured, in the same run, phase by phase as a sync runs them, with the peak RSS of this process
(the emulator runs in a child process so that the figure is the sync's alone):

- read + prepare: ``read_extract`` of the CSV in chunks and ``prepare_people`` (vectorised
  normalisation, validation, dedup);
- read List: every page of the List over HTTP; split into the time the server takes to answer
  (the raw pages, fetched again without decoding) and the rest, decoding into people;
- plan: ``plan_people_sync``; apply: the plan through the client, with the write requests counted
  by the emulator and compared with the minimum the caps allow (per kind: the larger of
  people / 500 and accounts / 100, rounded up); then a second plan, which must hold no write.

With ``--naive`` (the default up to 100,000 people), the baselines of the first measurement:

- naive planner: a per-person loop over the same prepared people that finds each one by scanning
  the List and patches every person it finds with all their fields (quadratic: timed on a sample,
  extrapolated);
- naive end to end: a per-row loop over the extract (``DataFrame.iterrows``), normalising with
  the same scalar rules, validating each person with the client's model, finding them among
  their account's List people (indexed by account, a generous naive), and patching every
  person it finds, one request per person (counted, not sent).

Aims: issue 5 (100,000 people): plan < 5 s, >= 10x faster than naive, requests = minimum, peak RSS
< 1 GB. Issue 15 (1,000,000 people): read + prepare + plan <= 10 s, peak RSS <= 1 GB, <= 0.5 GB more
per extra million.

With ``--state-cost``, the whole job instead (``sync_people`` as the operators call it: plan file
aside, memory guard, read back and all), each night in a process of its own, for the cost of the
sync's state: night 1 (the extract as the List holds it) keeps a state, night 2 (the changed
extract) runs against it; and night 2 again, on a fresh copy of the List, without a state. The
state's cost is the difference between the two night 2 runs, in wall time and in peak RSS, and its
size on disk. Aim (issue 25, 1,000,000 people): <= 64 MB and <= 10% of night 2's wall time.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
from child_emulator import SERVE_FLAG, ChildEmulator, requests_by_kind, serve_until_stdin_closes
from rss import peak_rss_mib

from listsync.client import ListedPerson, ListSyncClient
from listsync.client.models import validate_person
from listsync.extract.contact_rules import normalize_domain, normalize_email, normalize_phone
from listsync.extract.rejects import Rejects
from listsync.extract.sources import read_extract
from listsync.sync.people import apply_people_plan, plan_people_sync
from listsync.sync.people.prepare import prepare_people

RESULTS = Path(__file__).with_name("RESULTS.md")
TABLE = "tbl_people"
API_KEY = "sk_bench_people"
PAGE_SIZE = 1000
NAIVE_SAMPLE = 500
COLUMN_MAP = {
    "domain": "account_domain",
    "email": "email",
    "first": "first_name",
    "last": "last_name",
    "title": "title",
    "phone": "phone_number",
}
ENDPOINTS = {
    "add": "POST /v1/lists/{tableId}/targetable-people",
    "patch": "PATCH /v1/lists/{tableId}/targetable-people",
    "delete": "DELETE /v1/lists/{tableId}/targetable-people",
}


@dataclass(frozen=True)
class Scale:
    """The List's people (5 per account) and the extract's new people (10% of the List)."""

    people: int

    @property
    def accounts(self) -> int:
        return self.people // 5

    @property
    def new(self) -> int:
        return self.people // 10


def domain(account: int) -> str:
    return f"acct{account:07d}.example"


def person(number: int, account: int, title: str) -> dict[str, str]:
    return {
        "first_name": f"First{number}",
        "last_name": f"Last{number}",
        "email": f"p{number:08d}@{domain(account)}",
        "title": title,
        "phone_number": f"+1415{number % 10_000_000:07d}",
    }


def list_people(scale: Scale) -> Iterator[tuple[int, int, dict[str, str]]]:
    """(number, account, person) of the List: 5 per account."""
    return ((n, n // 5, person(n, n // 5, "Engineer")) for n in range(scale.people))


def extract_rows(scale: Scale) -> Iterator[tuple[str, ...]]:
    """The extract: 5% removed (n % 20 == 0), 5% retitled (n % 20 == 1), 10% new, messy case."""
    for number, account, fields in list_people(scale):
        if number % 20 == 0:
            continue
        title = "Staff Engineer" if number % 20 == 1 else fields["title"]
        yield (domain(account).upper(), fields["email"].upper(), *_rest(fields, title))
    for number in range(scale.people, scale.people + scale.new):
        fields = person(number, number % scale.accounts, "Engineer")
        yield (domain(number % scale.accounts), fields["email"], *_rest(fields, fields["title"]))


def _rest(fields: dict[str, str], title: str) -> tuple[str, ...]:
    return fields["first_name"], fields["last_name"], title, fields["phone_number"]


def write_extract(scale: Scale, path: Path) -> int:
    """Write the extract as CSV, row by row (never whole in memory); return its rows."""
    rows = 0
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMN_MAP)
        for row in extract_rows(scale):
            writer.writerow(row)
            rows += 1
    return rows


# -- the emulator, in a child process -----------------------------------------------------------


def serve_emulator(scale: Scale) -> None:
    """Child process: load the List into an emulator, print its URL, serve until stdin closes."""
    from listsync.emulator import EmulatorConfig, ListConfig, create_app
    from listsync.emulator.config import ColumnConfig

    config = EmulatorConfig(
        secret_keys=[API_KEY],
        lists=[ListConfig(id=TABLE, account_column="domain", columns=[ColumnConfig(id="domain")])],
    )
    app = create_app(config)
    load_list(app, TABLE, scale)
    serve_until_stdin_closes(app)


def load_list(app: Any, table_id: str, scale: Scale) -> None:
    """Put the List's accounts (one row each, its domain in ``domain``) and people straight into
    the state of the emulator ``app``'s List ``table_id``."""
    from listsync.emulator.store import Row

    state = app.state.emulator.state
    lst = state.lists[table_id]
    rows = {}
    for account in range(scale.accounts):
        row_id = state.new_row_id()
        rows[account] = lst.rows[row_id] = Row(
            row_id, {"domain": domain(account)}, "2026-01-01T00:00:00.000Z"
        )
    for _number, account, fields in list_people(scale):
        rows[account].people.append({**fields, "target": True})
    lst.changed()


# -- ours, phase by phase -----------------------------------------------------------------------


def prepare(path: Path) -> Any:
    """The extract's people as the planner takes them: columns (or, with ``--code`` of a revision
    before the columnar pipeline, its dict of models)."""
    prepared = prepare_people(read_extract(path, arrow_text=True), COLUMN_MAP, rejects=Rejects())
    return prepared.frame if hasattr(prepared, "frame") else prepared.people


def read_list(client: ListSyncClient) -> Any:
    """The List's people as the planner takes them: columns, read page by page (or the models)."""
    if hasattr(client, "iter_targetable_people_records"):
        from listsync.sync.people.frames import list_frame

        return list_frame(client.iter_targetable_people_records(TABLE, page_size=PAGE_SIZE))
    return list(client.iter_targetable_people(TABLE, page_size=PAGE_SIZE))


def baseline(revision: str, people: int) -> dict[str, float]:
    """This benchmark's phases and peak RSS with the code of ``revision`` (a git worktree, first on
    PYTHONPATH), in a child process: the comparison of one run."""
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "tree"
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), revision],
            check=True,
            capture_output=True,
        )
        try:
            env = {**os.environ, "PYTHONPATH": str(tree / "src")}
            command = [sys.executable, __file__, "--people", str(people), "--no-naive", "--figures-json"]
            output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=True)
    return json.loads(output.strip().splitlines()[-1])


def server_seconds(url: str, people: int) -> float:
    """Seconds the server takes to answer every page of the List, raw (nothing decoded)."""
    started = time.perf_counter()
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120) as http:
        for offset in range(0, people, PAGE_SIZE):
            http.get(
                f"/v1/lists/{TABLE}/targetable-people", params={"limit": PAGE_SIZE, "offset": offset}
            ).raise_for_status()
    return time.perf_counter() - started


# -- the naive baselines ------------------------------------------------------------------------


def naive_planner(people: dict, current: list[ListedPerson]) -> float:
    """Seconds a nested-loop planner takes for every person, extrapolated from a random sample.

    For each prepared person it scans the List for the same account and e-mail and patches
    every person it finds with all their fields; the scan makes it quadratic, so the whole
    run is estimated from NAIVE_SAMPLE people.
    """
    flat = [(domain, person) for domain, members in people.items() for person in members.values()]
    sample = random.Random(5).sample(flat, NAIVE_SAMPLE)
    started = time.perf_counter()
    for domain, person in sample:
        found = next((p for p in current if p.account_domain == domain and p.email == person.email), None)
        if found is not None:
            _ = {"match": {"email": found.email}, "patch": person.model_dump(exclude_none=True)}
    return (time.perf_counter() - started) / NAIVE_SAMPLE * len(flat)


def naive(frame: pd.DataFrame, current: list[ListedPerson]) -> tuple[int, int, float]:
    """Per-row loop from the extract, with the List indexed by account (a generous naive);
    returns (patches, adds, seconds). It would send one request per person."""
    started = time.perf_counter()
    by_account: dict[str | None, list[ListedPerson]] = {}
    for listed in current:
        by_account.setdefault(listed.account_domain, []).append(listed)
    patches = adds = 0
    for _index, row in frame.iterrows():
        account = normalize_domain(row["domain"])
        candidate = validate_person(
            {
                "first_name": row["first"],
                "last_name": row["last"],
                "email": normalize_email(row["email"]),
                "title": row["title"],
                "phone_number": normalize_phone(row["phone"]),
            }
        )
        found = None
        for listed in by_account.get(account, []):
            if listed.email and listed.email.lower() == candidate.email:
                found = listed
                break
        if found is not None:
            # Patch every field of every person found, changed or not.
            _ = {"match": {"email": found.email}, "patch": candidate.model_dump(exclude_none=True)}
            patches += 1
        else:
            adds += 1
    return patches, adds, time.perf_counter() - started


def minimum_requests(people: int, accounts: int) -> int:
    return max(math.ceil(people / 500), math.ceil(accounts / 100)) if people else 0


def timed(seconds: dict[str, float], phase: str, started: float) -> None:
    seconds[phase] = time.perf_counter() - started


def run_night(url: str, extract: Path, state: Path | None) -> dict[str, Any]:
    """One night of the whole job in a process of its own: its wall time, peak RSS and summary."""
    command = [sys.executable, __file__, "--night", str(extract), "--url", url]
    if state is not None:
        command += ["--state", str(state)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return figures


def night(url: str, extract: Path, state: str | None) -> None:
    """Child process: one ``sync_people`` of ``extract`` in mirror mode; print its figures as JSON."""
    from listsync.sync import SyncSettings
    from listsync.sync.people import sync_people

    started = time.perf_counter()
    with ListSyncClient(url, API_KEY, timeout=120.0) as client:
        summary = sync_people(
            client,
            TABLE,
            read_extract(extract, arrow_text=True),  # as the people operator reads it
            COLUMN_MAP,
            mode="mirror",
            settings=SyncSettings(max_delete_fraction=0.2, state_path=state, fail_on_error=False),
        )
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "rss": peak_rss_mib(), "summary": summary}))


def state_cost(scale: Scale, rounds: int) -> list[str]:
    """The cost of the sync's state on night 2 (see the module docstring), as result lines: night 2
    with and without a state, ``rounds`` times each, in alternating order (the machine is noisy)."""
    with tempfile.TemporaryDirectory() as folder:
        same, changed = Path(folder) / "night1.csv", Path(folder) / "night2.csv"
        with same.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMN_MAP)
            for _number, account, fields in list_people(scale):
                writer.writerow((domain(account), fields["email"], *_rest(fields, fields["title"])))
        write_extract(scale, changed)
        nights: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        for round_ in range(rounds):
            for with_state in (True, False) if round_ % 2 == 0 else (False, True):
                with ChildEmulator(__file__, "--people", str(scale.people)) as url:
                    if with_state:
                        state = Path(folder) / f"state{round_}"
                        first = run_night(url, same, state)
                        kept = state.stat().st_size
                    nights[with_state].append(run_night(url, changed, state if with_state else None))
    best = {key: min(runs, key=lambda night: night["seconds"]) for key, runs in nights.items()}
    seconds = {key: [round(night["seconds"], 1) for night in runs] for key, runs in nights.items()}
    rss = {key: [round(night["rss"]) for night in runs] for key, runs in nights.items()}
    extra = best[True]["seconds"] - best[False]["seconds"]
    extra_rss = min(rss[True]) - min(rss[False])
    return [
        f"whole job, mirror, {scale.people:,} people: night 1 (extract as the List holds it) "
        f"{first['seconds']:.1f} s, {first['summary']['requests']['total']} write requests, keeps a state "
        f"of {kept / 2**20:.1f} MiB ({kept / scale.people:.1f} bytes a person)",
        f"night 2 (5% removed, 5% retitled, 10% new), {rounds} runs each, alternating: with the state "
        f"{seconds[True]} s, peak RSS {rss[True]} MiB, {best[True]['summary']['requests']['total']} write "
        f"requests; without a state {seconds[False]} s, peak RSS {rss[False]} MiB, "
        f"{best[False]['summary']['requests']['total']} write requests",
        f"the state's cost on night 2 (best against best): {extra:+.1f} s "
        f"({extra / best[False]['seconds']:+.1%} of its wall time), {extra_rss:+,} MiB of peak RSS "
        f"(lowest against lowest), {kept / 2**20:.1f} MiB kept",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=100_000, help="people in the List (default 100,000)")
    parser.add_argument(
        "--naive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time the naive baselines (default: up to 100,000 people)",
    )
    parser.add_argument("--append-results", action="store_true", help="append a section to RESULTS.md")
    parser.add_argument(
        "--compare",
        metavar="REVISION",
        help="also run the phases with the code of REVISION (e.g. a commit before a change), for ratios",
    )
    parser.add_argument(
        "--state-cost", action="store_true", help="time the whole job's night 2 with and without a sync state"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="with --state-cost: runs of each night 2 (default 2)"
    )
    parser.add_argument("--figures-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(SERVE_FLAG, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--night", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    args = parser.parse_args()
    scale = Scale(args.people)
    if args.serve_emulator:
        serve_emulator(scale)
        return
    if args.night:
        night(args.url, args.night, args.state)
        return
    if args.state_cost:
        record(
            state_cost(scale, args.rounds),
            args.append_results,
            f"People sync's state, {scale.people:,} people",
        )
        return
    with_naive = args.naive if args.naive is not None else scale.people <= 100_000
    # As a sync does (ListSyncJob.run); a revision before it (--compare) chose its pool under another name.
    memory = importlib.import_module("listsync.sync.memory")
    returning = getattr(memory, "use_returning_allocator", getattr(memory, "use_returning_arrow_pool", None))
    if returning is not None:
        returning()
    # Between its steps a sync gives freed pages back (ListSyncJob.run); a revision before did not.
    give_back = getattr(memory, "give_back_freed_memory", lambda: None)

    seconds: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory() as folder,
        ChildEmulator(__file__, "--people", str(scale.people)) as url,
    ):
        path = Path(folder) / "extract.csv"
        extract_rows_written = write_extract(scale, path)
        with ListSyncClient(url, API_KEY, timeout=120.0) as client:
            started = time.perf_counter()
            people = prepare(path)
            timed(seconds, "read + prepare", started)
            give_back()
            started = time.perf_counter()
            current = read_list(client)
            timed(seconds, "read List", started)
            give_back()
            started = time.perf_counter()
            plan = plan_people_sync(people, current, fields=set(COLUMN_MAP.values()), mode="mirror")
            timed(seconds, "plan", started)
            planned_rss = peak_rss_mib()
            del people, current
            started = time.perf_counter()
            applied = apply_people_plan(plan, client, table_id=TABLE)
            timed(seconds, "apply", started)
            rss = peak_rss_mib()
            sent = requests_by_kind(url, ENDPOINTS)
            server = server_seconds(url, scale.people)
            after = plan_people_sync(
                prepare(path),
                read_list(client),
                fields=set(COLUMN_MAP.values()),
                mode="mirror",
            )
            baselines = []
            if with_naive:
                frame = pd.read_csv(path, dtype=str, keep_default_na=False)
                listed = list(client.iter_targetable_people(TABLE, page_size=PAGE_SIZE))
                naive_patches, naive_adds, naive_seconds = naive(frame, listed)
                prepared = prepare_people(
                    read_extract(path, arrow_text=True), COLUMN_MAP, rejects=Rejects()
                ).people
                nested_seconds = naive_planner(prepared, listed)
                ours_seconds = seconds["read + prepare"] + seconds["plan"]
                baselines = [
                    f"naive nested-loop planner (same prepared input; {NAIVE_SAMPLE} people timed, "
                    f"extrapolated): {nested_seconds:,.0f} s -> our plan step is "
                    f"{nested_seconds / seconds['plan']:,.0f}x faster",
                    f"naive per-row loop from the extract (iterrows, scalar rules, List indexed by "
                    f"account): {naive_seconds:.2f} s -> ours (read + prepare + plan) is "
                    f"{naive_seconds / ours_seconds:.1f}x faster",
                    f"naive write requests: {naive_patches + naive_adds:,} (one per person: "
                    f"{naive_patches:,} patches + {naive_adds:,} adds) -> "
                    f"{(naive_patches + naive_adds) / max(sum(sent.values()), 1):.0f}x ours",
                ]

    minimum = {
        kind: minimum_requests(len(items), len({item.account_domain for item in items}))
        for kind, items in (("add", plan.adds), ("patch", plan.patches), ("delete", plan.deletes))
    }
    phases = " + ".join(f"{phase} {value:.2f} s" for phase, value in seconds.items())
    lines = [
        f"List: {scale.people:,} people on {scale.accounts:,} accounts; extract: "
        f"{extract_rows_written:,} CSV rows (5% removed, 5% changed, {scale.new:,} new); mode mirror",
        f"plan: {len(plan.adds):,} adds, {len(plan.patches):,} patches, {len(plan.deletes):,} deletes, "
        f"{plan.unchanged:,} unchanged",
        f"phases: {phases} = {sum(seconds.values()):.2f} s; read + prepare + plan "
        f"{seconds['read + prepare'] + seconds['plan']:.2f} s",
        f"read List: {seconds['read List']:.2f} s ({scale.people / seconds['read List']:,.0f} people/s), "
        f"of which the server answering every page raw takes {server:.2f} s and decoding the rest, "
        f"{max(seconds['read List'] - server, 0):.2f} s",
        f"apply: write requests sent {sent} = {sum(sent.values())}, minimum {minimum} = "
        f"{sum(minimum.values())}; failed {len(applied.failed)}",
        f"after apply, a new plan holds {after.size} writes ({after.unchanged:,} unchanged)",
        f"peak RSS of the syncing process: {planned_rss:,.0f} MiB through plan, {rss:,.0f} MiB through apply",
        *baselines,
    ]
    figures = {
        **seconds,
        "read + prepare + plan": seconds["read + prepare"] + seconds["plan"],
        "rss": planned_rss,
    }
    if args.figures_json:
        print(json.dumps(figures))
        return
    if args.compare:
        before = baseline(args.compare, scale.people)
        lines.append(
            f"the same run with the code of {args.compare}: read + prepare + plan "
            f"{before['read + prepare + plan']:.2f} s, read List {before['read List']:.2f} s, "
            f"peak RSS through plan {before['rss']:,.0f} MiB -> read + prepare + plan "
            f"{before['read + prepare + plan'] / figures['read + prepare + plan']:.1f}x faster, read List "
            f"{before['read List'] / figures['read List']:.1f}x faster, peak RSS "
            f"{before['rss'] / figures['rss']:.1f}x smaller"
        )
    record(lines, args.append_results, f"People sync, {scale.people:,} people")


def record(lines: list[str], append: bool, title: str) -> None:
    """Print the result lines; with ``append``, add them to RESULTS.md under ``title``."""
    for line in lines:
        print(line)
    if append:
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write(
                f"\n## {title} (benchmarks/people_sync.py), "
                f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n\n"
                f"Machine: 2 cores / 24 GiB, python-svc (Python {platform.python_version()}); emulator in "
                f"a child process; load average at the end {os.getloadavg()[0]:.1f} (the machine is shared "
                "with other engineers' test runs).\n\n" + "".join(f"- {line}\n" for line in lines)
            )


if __name__ == "__main__":
    main()
