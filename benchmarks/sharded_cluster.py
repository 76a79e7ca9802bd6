"""People sync split once, then sharded over mapped tasks, on a real Airflow deployment (CeleryExecutor).

Run: ``.venv/bin/python benchmarks/sharded_cluster.py [--people N[,N...]] [--shards N]
[--concurrency N] [--shards-at-once N] [--carry-to N] [--append-results]`` (default: 300,000
people, 8 shards, 2 worker slots, shards not limited). It needs what ``make cluster`` needs:
PostgreSQL and Redis on this machine (``LISTSYNC_CLUSTER_POSTGRES_URL``,
``LISTSYNC_CLUSTER_REDIS_URL``). Not part of ``make test``.

1. The List and the extract are those of ``benchmarks/people_sync.py``: N people, 5 on each of
   N/5 account rows, put straight into the emulator's state; the extract (a CSV file) removes 5%,
   retitles 5% and adds 10% new people.
2. ``deploy/cluster.py`` starts the deployment (PostgreSQL metadata database, Redis broker,
   api-server, scheduler, dag-processor, triggerer, one Celery worker, the emulator). Its
   emulator is this script with ``--serve-emulator``: the demo tenant of ``examples/emulator.yaml``
   (the deployment's connection reaches it) with the List loaded into ``tbl_accounts``. The DAG
   folder holds only ``sharded_cluster_dag.py``: ``SplitPeopleOperator`` (the extract read and the
   List paged once, each shard's part written), then ``SyncTargetablePeopleOperator`` mapped over
   ``shard="i/n"`` with ``parts_path``, mirror mode, accounts in source, and a task combining the
   summaries.
3. The DAG is triggered through the REST API, and while it runs the worker's task processes are
   watched. Then, for the split and per shard: its peak RSS, its phases' times (from its task
   log), its write requests (its summary); how often the List was paged whole in the night (the
   emulator's pages of unfiltered reads, against the pages of one read) and the reads by account;
   the people the shards wrote and the write requests the emulator received, against an
   unsharded sync's; and whether the List equals the extract afterwards.
4. Everything started is stopped, and its databases dropped, also on failure or Ctrl-C.

How the peak RSS of a shard is measured: each task instance runs in a process of its own, which
the Celery pool process forks; the kernel keeps that process's high-water RSS (``VmHWM`` in
``/proc/<pid>/status``), read every 0.2 s while it lives. The last reading is the peak unless
the process grew in its last 0.2 s (its last steps write small files and the summary). The
figure includes the pages the process shares with the pool process it was forked from (Airflow,
imported before the fork); its RSS when first seen is printed beside it.

The Celery worker has 2 slots by default (``--concurrency``): one per core of the 2-core machine
the figures in RESULTS.md come from, so 8 shards run 2 at a time, as they would on such a worker;
more slots would only make the shards take turns on the CPU while each holds its memory.
``--shards-at-once 1`` makes the shards take turns whatever the slots (``max_active_tis_per_dagrun``);
they take turns anyway, as each holds the List's lease while it writes (the others wait for it).

With several sizes (``--people 1000000,3000000``), each is a night on a deployment of its own,
and a shard's peak is carried to a List of ``--carry-to`` people (default 10,000,000) on paper:
the slope of the shards' mean peak against their mean people (extract and List) between the
smallest and the largest size is what a shard holds a person, the rest of the largest shard's
peak what it holds whatever its people (the task process, its libraries); the largest shard is
grown in proportion to the List. A List the emulator cannot hold on one machine is sized this way.

Targets: every shard's peak RSS <= 1 GB (and, carried, at ``--carry-to``), the List equals the
extract, total writes == the minimum of an unsharded sync: the people written (added, patched,
deleted) are the unsharded plan's, each once. Write requests are compared too: with the caps per
request, n shards need up to 3 x (n - 1) more than one unsharded sync, as each rounds its last
request of each kind up.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import httpx
import psutil
from child_emulator import SERVE_FLAG, requests_by_kind
from people_sync import (
    COLUMN_MAP,
    ENDPOINTS,
    Scale,
    list_people,
    load_list,
    minimum_requests,
    write_extract,
)
from people_sync import domain as list_domain

from listsync.extract.contact_rules import normalize_domain, normalize_email

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("RESULTS.md")
DAG_FILE = Path(__file__).with_name("sharded_cluster_dag.py")
# Names the DAG file reads (it is parsed by Airflow, never imported from here).
DAG_ID = "sharded_cluster_benchmark"
SETTINGS_VARIABLE = "LISTSYNC_SHARDED_BENCHMARK"
TASK_ID = "sync_targetable_people"
SPLIT_TASK_ID = "split_people"
RUN_ID = "sharded_cluster_benchmark"
# The demo tenant's List (examples/emulator.yaml), which the deployment's connection reaches.
TABLE = "tbl_accounts"
MAX_SHARD_RSS = 1000 * 1000 * 1000  # 1 GB
#: The List a shard's peak is carried to from two sizes measured (``--carry-to``).
CARRY_TO = 10_000_000
SAMPLE_SECONDS = 0.2


def load_launcher() -> ModuleType:
    """``deploy/cluster.py`` as a module."""
    spec = importlib.util.spec_from_file_location("listsync_deploy_cluster", REPO / "deploy" / "cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclasses look their module up by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# -- the deployment's emulator (this script with --serve-emulator) ----------------------------------


def serve_emulator(scale: Scale, config: Path, port: int) -> None:
    """The emulator of ``config`` with the List loaded into :data:`TABLE`, served until SIGTERM."""
    import uvicorn

    from listsync.emulator import create_app, load_config

    app = create_app(load_config(config))
    load_list(app, TABLE, scale)
    uvicorn.run(app, host="127.0.0.1", port=port, lifespan="off", access_log=False, log_level="warning")


# -- the task processes' memory -----------------------------------------------------------------


@dataclass
class TaskProcess:
    """A task process of the worker as seen while it ran; sizes in bytes."""

    peak_rss: int
    first_rss: int


def proc_status(pid: int) -> dict[str, int]:
    """The ``Vm*`` sizes of ``/proc/<pid>/status``, in bytes."""
    sizes = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Vm"):
                name, value = line.split(":", 1)
                sizes[name] = int(value.split()[0]) * 1024  # kB
    return sizes


class TaskMemoryWatch:
    """Reads, every :data:`SAMPLE_SECONDS` in a thread, the high-water RSS of every task process
    of the Celery worker ``worker_pid``: the children of its pool processes."""

    def __init__(self, worker_pid: int) -> None:
        self.worker = psutil.Process(worker_pid)
        self.seen: dict[int, TaskProcess] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> TaskMemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            for task in self._task_processes():
                try:
                    sizes = proc_status(task.pid)
                except (OSError, ValueError):
                    continue  # it ended between the listing and the reading
                if "VmHWM" not in sizes:
                    continue  # it has exited and not been waited for yet: its memory is gone
                seen = self.seen.setdefault(task.pid, TaskProcess(0, sizes["VmRSS"]))
                seen.peak_rss = max(seen.peak_rss, sizes["VmHWM"])

    def _task_processes(self) -> Iterator[psutil.Process]:
        try:
            pools = self.worker.children()
        except psutil.Error:
            return
        for pool in pools:
            try:
                yield from pool.children()
            except psutil.Error:
                continue


# -- the deployment's REST API ------------------------------------------------------------------


class AirflowApi:
    """The api-server's ``/api/v2``, logged in as the deployment's user."""

    def __init__(self, state: Any) -> None:
        self.http = httpx.Client(base_url=state.urls["ui"] + "/api/v2", timeout=60)
        token = httpx.post(state.urls["ui"] + "/auth/token", json=state.login, timeout=60)
        token.raise_for_status()
        self.http.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()

    def wait_for_dag(self, timeout: float) -> None:
        """Wait until the dag-processor has parsed the DAG and the api-server knows it."""
        deadline = time.monotonic() + timeout
        while self.http.get(f"/dags/{DAG_ID}").status_code != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{DAG_ID} not parsed after {timeout:.0f} s")
            time.sleep(1)

    def run_state(self) -> str:
        state: str = self.call("GET", f"/dags/{DAG_ID}/dagRuns/{RUN_ID}")["state"]
        return state

    def task_instances(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.call(
            "GET", f"/dags/{DAG_ID}/dagRuns/{RUN_ID}/taskInstances", params={"limit": 1000}
        )["task_instances"]
        return found


# -- what the List should hold and holds ----------------------------------------------------------

# (account domain, e-mail) -> title: the people of a List or an extract, compared by identity.
People = dict[tuple[str, str], str]


def extract_people(path: Path) -> People:
    """The extract's people, their domain and e-mail normalised as the sync does."""
    with path.open(newline="", encoding="utf-8") as handle:
        return {
            (normalize_domain(row["domain"]), normalize_email(row["email"])): row["title"]
            for row in csv.DictReader(handle)
        }


def list_before(scale: Scale) -> People:
    """The people the List held before the run."""
    return {
        (list_domain(account), fields["email"]): fields["title"] for _, account, fields in list_people(scale)
    }


def held_people(emulator_url: str) -> tuple[People, int]:
    """The List's people in the emulator's state, and how many people it holds (copies included)."""
    state = httpx.get(f"{emulator_url}/_emulator/state", timeout=600).json()
    people: People = {}
    count = 0
    for row in state["lists"][TABLE]["rows"]:
        for person in row["people"]:
            people[(row["accountDomain"], person["email"])] = person.get("title")
            count += 1
    return people, count


def changes(before: People, after: People) -> dict[str, list[str]]:
    """The accounts of the people an unsharded sync must add, patch and delete, one entry each."""
    return {
        "add": [domain for domain, email in after.keys() - before.keys()],
        "patch": [key[0] for key, title in after.items() if key in before and before[key] != title],
        "delete": [domain for domain, email in before.keys() - after.keys()],
    }


def minimum(accounts_of_people: Mapping[str, list[str]]) -> dict[str, int]:
    """Per kind, the fewest write requests the caps allow for people on these accounts."""
    return {
        kind: minimum_requests(len(domains), len(set(domains)))
        for kind, domains in accounts_of_people.items()
    }


def planned(plan_path: str) -> dict[str, list[str]]:
    """The accounts of the people a shard's plan file adds, patches and deletes."""
    kinds: dict[str, list[str]] = {kind: [] for kind in ENDPOINTS}
    with open(plan_path, encoding="utf-8") as plan:
        for entry in map(json.loads, plan):
            if entry["action"] in kinds:
                kinds[entry["action"]].append(entry["account_domain"])
    return kinds


# -- a shard's task log: its phases and its summary ------------------------------------------------

# Phases and the text of the log line that ends each, in order: Airflow's, then the sync's
# (listsync.sync.job and the people steps). A shard reads its part, plans, re-reads the accounts
# it writes in and plans again before its "Plan for" line: one phase here.
PHASE_ENDS = (
    ("task start-up", "::endgroup::"),
    ("read part, plan, re-read accounts, plan again", "Plan for "),
    ("plan file", "Plan written to "),
    ("apply", "applied (100%)"),
    ("read back", "People sync summary: "),
)
# The split's phases (listsync.sync.people.split).
SPLIT_PHASE_ENDS = (
    ("task start-up", "::endgroup::"),
    ("read + prepare extract, write its parts", "into "),
    ("read List, write its parts", "Split "),
)
SUMMARY_LINE = "People sync summary: "


@dataclass
class ShardLog:
    """What a shard's task log says: seconds per phase of :data:`PHASE_ENDS` (those it reached),
    and the sync's summary (logged also when the task then fails)."""

    phases: dict[str, float]
    summary: dict[str, Any] | None


def read_shard_log(path: Path, ends: tuple[tuple[str, str], ...] = PHASE_ENDS) -> ShardLog:
    events: list[tuple[datetime, str]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if "timestamp" in entry:
            events.append((datetime.fromisoformat(entry["timestamp"]), str(entry.get("event", ""))))
    seconds: dict[str, float] = {}
    last = events[0][0] if events else None
    for phase, text in ends:
        at = next((when for when, event in events if text in event and last and when >= last), None)
        if at is not None and last is not None:
            seconds[phase], last = (at - last).total_seconds(), at
    summary = next(
        (json.loads(event[len(SUMMARY_LINE) :]) for _, event in events if event.startswith(SUMMARY_LINE)),
        None,
    )
    return ShardLog(seconds, summary)


def task_log(home: Path, map_index: int, try_number: int, task_id: str = TASK_ID) -> Path:
    folder = home / "logs" / f"dag_id={DAG_ID}" / f"run_id={RUN_ID}" / f"task_id={task_id}"
    return folder / (f"map_index={map_index}" if map_index >= 0 else "") / f"attempt={try_number}.log"


# -- the run ------------------------------------------------------------------------------------


def mb(size: float) -> str:
    return f"{size / 1e6:,.0f} MB"


def stop_on_sigterm() -> None:
    """SIGTERM ends the benchmark like Ctrl-C does, through the ``finally`` that stops the cluster."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


@dataclass
class ShardPeak:
    """A shard's peak RSS and its people (its part of the extract and of the List)."""

    people: int
    peak: int


def measure(
    args: argparse.Namespace, people: int, launcher: ModuleType, root: Path, began: float
) -> tuple[list[str], list[ShardPeak]]:
    """Start the deployment in ``root``, run the DAG on a List of ``people``, return the report's
    lines and the shards' peaks (``began``: the start of this size, on the monotonic clock)."""
    scale = Scale(people)
    extract = root / "extract.csv"
    rows = write_extract(scale, extract)
    dags, output = root / "dags", root / "output"
    dags.mkdir()
    output.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    settings = {
        "source": str(extract),
        "table_id": TABLE,
        "column_map": COLUMN_MAP,
        "shards": args.shards,
        "output_dir": str(output),
        "shards_at_once": args.shards_at_once,
    }
    options = launcher.Options(
        emulator_command=[
            sys.executable,
            str(Path(__file__).resolve()),
            SERVE_FLAG,
            "--people",
            str(scale.people),
        ],
        overrides={"AIRFLOW__CORE__DAGS_FOLDER": str(dags), SETTINGS_VARIABLE: json.dumps(settings)},
        postgres_url=args.postgres,
        redis_url=args.redis,
        concurrency=args.concurrency,
        timeout=args.start_timeout,
    )
    state = launcher.start(root / "deployment", options)
    home = Path(state.env["AIRFLOW_HOME"])
    emulator = state.urls["emulator"]
    api = AirflowApi(state)
    api.wait_for_dag(args.start_timeout)
    started_up = time.monotonic() - began
    print(f"- deployment up, List loaded, DAG parsed ({started_up:.0f} s)", flush=True)

    with TaskMemoryWatch(state.processes["celery-worker"]["pid"]) as watch:
        triggered = time.monotonic()
        api.call("POST", f"/dags/{DAG_ID}/dagRuns", json={"dag_run_id": RUN_ID, "logical_date": None})
        api.call("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
        while (run_state := api.run_state()) not in {"success", "failed"}:
            if time.monotonic() - triggered > args.run_timeout:
                raise TimeoutError(f"the run is still {run_state} after {args.run_timeout:.0f} s")
            time.sleep(1)
        run_seconds = time.monotonic() - triggered
    print(f"- run {run_state} ({run_seconds:.0f} s)", flush=True)

    instances = api.task_instances()
    shards = sorted((ti for ti in instances if ti["task_id"] == TASK_ID), key=lambda ti: ti["map_index"])
    split = next(ti for ti in instances if ti["task_id"] == SPLIT_TASK_ID)
    lines = [
        f"List: {scale.people:,} people on {scale.accounts:,} accounts; extract: {rows:,} CSV rows "
        f"(5% removed, 5% changed, {scale.new:,} new); mirror mode, accounts in source; {args.shards} "
        f"shards, Celery worker concurrency {args.concurrency}, shards at once "
        f"{args.shards_at_once or 'not limited'}",
        f"run {run_state}: {run_seconds:.0f} s from trigger to the end of the run; start-up (extract, "
        f"deployment, List, DAG parsed) {started_up:.0f} s",
    ]
    split_seen = watch.seen.get(split["pid"])
    split_log = read_shard_log(task_log(home, -1, split["try_number"], SPLIT_TASK_ID), SPLIT_PHASE_ENDS)
    lines.append(
        f"split: {split['state']} in {split['duration'] or 0:.1f} s, "
        + (
            f"peak RSS {mb(split_seen.peak_rss)} (at start {mb(split_seen.first_rss)})"
            if split_seen
            else "peak RSS not seen"
        )
        + "; "
        + " + ".join(f"{phase} {value:.1f} s" for phase, value in split_log.phases.items())
    )
    peaks: list[ShardPeak] = []
    sharded_minimum, written = Counter[str](), Counter[str]()
    for ti in shards:
        index = ti["map_index"]
        seen = watch.seen.get(ti["pid"])
        shard_log = read_shard_log(task_log(home, index, ti["try_number"]))
        summary = shard_log.summary
        timing = " + ".join(f"{phase} {value:.1f} s" for phase, value in shard_log.phases.items())
        memory = (
            f"peak RSS {mb(seen.peak_rss)} (at start {mb(seen.first_rss)})" if seen else "peak RSS not seen"
        )
        if summary is None:
            lines.append(f"shard {index}/{args.shards}: {ti['state']}, {memory}; {timing}")
            continue
        if seen is not None:
            peaks.append(ShardPeak(summary["passed"] + summary["list_people"], seen.peak_rss))
        sharded_minimum.update(minimum(planned(summary["plan_path"])))
        written.update(add=summary["added"], patch=summary["updated"], delete=summary["deleted"])
        lines.append(
            f"shard {index}/{args.shards}: {ti['state']} in {ti['duration'] or 0:.1f} s, {memory}; {timing}; "
            f"List {summary['list_people']:,} people, planned {summary['planned']}, write requests "
            f"{summary['requests']}; failed {summary['failed']}, drift {summary['drift']}"
            + "".join(f"; {n} x {reason}" for reason, n in list(summary["failure_reasons"].items())[:2])
            + "".join(f"; drift: {reason}" for reason in summary["drift_reasons"][:2])
        )

    expected = extract_people(extract)
    needed_people = changes(list_before(scale), expected)
    needed = minimum(needed_people)
    people_needed = {kind: len(domains) for kind, domains in needed_people.items()}
    sent = requests_by_kind(emulator, ENDPOINTS)
    stats = httpx.get(f"{emulator}/_emulator/stats", timeout=60).json()
    whole_pages = stats["whole_pages"] = stats.get("unfiltered_pages", {}).get(f"people of {TABLE}", 0)
    reads = stats["endpoints"].get("GET /v1/lists/{tableId}/targetable-people", {}).get("requests", 0)
    # A read of several pages asks for its first page again at its end (listsync.client.paging).
    one_read = -(-scale.people // 1000) + 1
    held, count = held_people(emulator)
    equal = held == expected and count == len(held)
    lines += [
        f"List read whole: {whole_pages:,} pages of unfiltered reads = {whole_pages / one_read:.2f} reads "
        f"of {one_read:,} pages; reads by account (the shards' re-reads and read backs): "
        f"{reads - whole_pages:,} requests",
        f"people written: {dict(written)} = {sum(written.values()):,}; an unsharded sync writes "
        f"{people_needed} = {sum(people_needed.values()):,}",
        f"write requests: sent {sent} = {sum(sent.values())}; minimum of an unsharded sync {needed} = "
        f"{sum(needed.values())}; sum of the shards' own minimums {dict(sharded_minimum)} = "
        f"{sum(sharded_minimum.values())}",
        f"List after the run: {count:,} people ({len(held):,} distinct), extract: {len(expected):,} people; "
        f"{sum(held.get(key) != title for key, title in expected.items()):,} of the extract's missing or "
        f"with another title, {len(held.keys() - expected.keys()):,} not in the extract",
        f"target: every shard <= {mb(MAX_SHARD_RSS)}: "
        + _verdict(len(peaks) == args.shards and max(p.peak for p in peaks) <= MAX_SHARD_RSS)
        + f" (largest {mb(max((p.peak for p in peaks), default=0))}; "
        f"{len(peaks)} of {args.shards} shards seen)",
        "target: List equals extract: " + _verdict(equal),
        "target: total writes == the unsharded minimum, people written: "
        + _verdict(written == people_needed)
        + f" ({sum(written.values()):,} vs {sum(people_needed.values()):,})",
        f"write requests == the unsharded minimum: {_verdict(sent == needed)} ({sum(sent.values())} vs "
        f"{sum(needed.values())}); == the sum of the shards' own minimums (each shard rounds its last "
        f"request of each kind up): {_verdict(sum(sent.values()) == sum(sharded_minimum.values()))} "
        f"({sum(sharded_minimum.values())})",
    ]
    return lines, peaks


def carried(sizes: Mapping[int, list[ShardPeak]], shards: int, carry_to: int) -> list[str]:
    """What a shard's peak comes to with a List of ``carry_to`` people, on paper, from the shards
    measured at the smallest and the largest List: the bytes a person of a shard (the slope of the
    shards' mean peak against their mean people) and what a shard holds whatever its people (the
    rest), applied to the largest shard of the largest List grown to ``carry_to``."""
    (small, small_peaks), (large, large_peaks) = min(sizes.items()), max(sizes.items())

    def mean(values: list[int]) -> float:
        return sum(values) / len(values)

    slope = (mean([p.peak for p in large_peaks]) - mean([p.peak for p in small_peaks])) / (
        mean([p.people for p in large_peaks]) - mean([p.people for p in small_peaks])
    )
    largest = max(large_peaks, key=lambda p: p.peak)
    fixed = largest.peak - slope * largest.people
    people = largest.people * carry_to / large
    peak = fixed + slope * people
    return [
        f"a shard's peak against its people (extract and List), between {small:,} and {large:,} people: "
        f"{slope:,.0f} bytes a person, and {mb(fixed)} whatever its people (the largest shard at "
        f"{large:,}: {mb(largest.peak)} for {largest.people:,} people)",
        f"carried to {carry_to:,} people in {shards} shards: {people:,.0f} people a shard, a peak of "
        f"{mb(peak)}",
        f"target: every shard <= {mb(MAX_SHARD_RSS)} at {carry_to:,} people (carried): "
        + _verdict(peak <= MAX_SHARD_RSS),
    ]


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> None:
    launcher = load_launcher()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--people",
        type=lambda text: [int(size) for size in text.split(",")],
        default=[300_000],
        help="people in the List, or sizes one after the other, comma-separated (default 300,000); "
        "with two or more, a shard's peak is carried to --carry-to",
    )
    parser.add_argument(
        "--carry-to",
        type=int,
        default=CARRY_TO,
        help=f"the List a shard's peak is carried to, from the sizes measured (default {CARRY_TO:,})",
    )
    parser.add_argument(
        "--shards", type=int, default=8, help="mapped tasks the sync is split into (default 8)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=2,
        help="Celery worker slots: at most this many shards at once (default 2: one per core)",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get("LISTSYNC_CLUSTER_POSTGRES_URL", launcher.DEFAULT_POSTGRES_URL),
        help="a PostgreSQL server URL whose user may create databases (env LISTSYNC_CLUSTER_POSTGRES_URL)",
    )
    parser.add_argument(
        "--redis",
        default=os.environ.get("LISTSYNC_CLUSTER_REDIS_URL", launcher.DEFAULT_REDIS_URL),
        help="the Redis server URL (env LISTSYNC_CLUSTER_REDIS_URL)",
    )
    parser.add_argument(
        "--shards-at-once",
        type=int,
        help="at most this many shards of the run at once (default: as many as the worker's slots)",
    )
    parser.add_argument("--start-timeout", type=float, default=600.0, help="seconds for each start-up step")
    parser.add_argument("--run-timeout", type=float, default=4 * 3600.0, help="seconds for the DAG run")
    parser.add_argument("--keep", action="store_true", help="keep the extract, plan files and logs")
    parser.add_argument("--append-results", action="store_true", help="append a section to RESULTS.md")
    # The deployment's emulator: this script, given the port and config by deploy/cluster.py.
    parser.add_argument(SERVE_FLAG, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_emulator:
        serve_emulator(Scale(args.people[0]), args.config, args.port)
        return

    stop_on_sigterm()
    sections, sizes = [], {}
    for people in args.people:
        lines, sizes[people] = night(args, people, launcher)
        sections.append((f"{people:,} people", lines))
    if len(sizes) > 1:
        carry = carried(sizes, args.shards, args.carry_to)
        sections.append((f"a shard carried to {args.carry_to:,} people", carry))
    for title, lines in sections:
        print(f"{title}:\n" + "".join(f"- {line}\n" for line in lines))
    if args.append_results:
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write(
                f"\n## Sharded people sync on the cluster, "
                f"{', '.join(f'{n:,}' for n in args.people)} people, {args.shards} shards "
                f"(benchmarks/sharded_cluster.py), {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n\n"
                f"Machine: 2 cores / 24 GiB, python-svc (Python {platform.python_version()}); the "
                "deployment of deploy/cluster.py (CeleryExecutor); load average at the end "
                f"{os.getloadavg()[0]:.1f} (the machine is shared with other engineers' test runs). "
                f"Command: `.venv/bin/python benchmarks/sharded_cluster.py "
                f"--people {','.join(map(str, args.people))} "
                f"--shards {args.shards} --concurrency {args.concurrency}"
                + (f" --shards-at-once {args.shards_at_once}" if args.shards_at_once else "")
                + (f" --carry-to {args.carry_to}" if len(sizes) > 1 else "")
                + "`.\n\n"
                + "\n".join(
                    (f"{title}:\n\n" if len(sections) > 1 else "") + "".join(f"- {line}\n" for line in lines)
                    for title, lines in sections
                )
            )


def night(args: argparse.Namespace, people: int, launcher: ModuleType) -> tuple[list[str], list[ShardPeak]]:
    """One night on a List of ``people``, on a deployment of its own: the report's lines and the
    shards' peaks."""
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="listsync-sharded-cluster-"))
    print(f"Working in {root} ({people:,} people)", flush=True)
    try:
        lines, peaks = measure(args, people, launcher, root, began)
    finally:
        problems = launcher.stop(root / "deployment")
        if problems:
            print("; ".join(problems), file=sys.stderr)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    lines.append(
        f"end to end, from writing the extract to the deployment stopped: {time.monotonic() - began:.0f} s"
    )
    return lines, peaks


if __name__ == "__main__":
    main()
