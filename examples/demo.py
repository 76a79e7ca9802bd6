"""``make demo``: the nightly CRM-to-List sync, end to end on this machine.

1. An Airflow home under ``.demo/airflow`` on SQLite (migrated once, reused after).
2. The example warehouse (``examples/generate_data.py``) in ``.demo/warehouse.db``.
3. The service emulator on a free local port (``listsync emulator``), with ``examples/emulator.yaml``.
4. ``airflow dags test crm_to_list_nightly`` for three nights: a week ago, on the CRM as it was
   then (the List starts empty); last night, after a week of CRM changes (adds, updates and
   deletes); tonight, with nothing changed, so nothing must be written. After each, a report of
   what the run read, rejected and wrote, checked against the emulator's own state and counters.
5. The emulator is stopped whatever happens; nothing keeps running after the script.

Run it again at will: every run starts from a fresh emulator and regenerates the data.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEMO_DIR = REPO / ".demo"
AIRFLOW_HOME = DEMO_DIR / "airflow"
OUTPUT_DIR = DEMO_DIR / "output"
LOG_DIR = DEMO_DIR / "logs"
WAREHOUSE = DEMO_DIR / "warehouse.db"
BIN = Path(sys.executable).parent
DAG_ID = "crm_to_list_nightly"
TABLE_ID = "tbl_accounts"
EMULATOR_STARTUP_SECONDS = 20.0
DAG_RUN_TIMEOUT_SECONDS = 600.0
# Endpoints of /_emulator/stats that change a List; a run that converged sends none of them.
LIST_WRITE_ENDPOINTS = (
    "POST /v1/lists/{tableId}/targetable-people",
    "PATCH /v1/lists/{tableId}/targetable-people",
    "DELETE /v1/lists/{tableId}/targetable-people",
    "POST /v1/lists/{tableId}/rows",
    "PATCH /v1/lists/{tableId}/cells",
    "DELETE /v1/lists/{tableId}/rows",
)


class DemoError(Exception):
    """A step of the demo failed; the message says which and where its log is."""


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY='value'`` lines of a shell environment file (comments and blank lines skipped)."""
    env = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = shlex.split(value)[0]
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def run_logged(command: list[str], env: dict[str, str], log_name: str, timeout: float) -> None:
    """Run ``command`` with its output in ``.demo/logs/<log_name>.log``; raise with the log's tail."""
    log_path = LOG_DIR / f"{log_name}.log"
    with log_path.open("w") as log:
        try:
            result = subprocess.run(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise DemoError(
                f"{' '.join(command[:3])} did not finish in {timeout:.0f} s; see {log_path}"
            ) from exc
    if result.returncode != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-25:])
        raise DemoError(f"{' '.join(command[:3])} failed (exit {result.returncode}); see {log_path}\n{tail}")


@contextmanager
def emulator(env: dict[str, str]) -> Iterator[str]:
    """Start ``listsync emulator`` on a free port; yield its base URL; always stop it."""
    port = free_port()
    log_path = LOG_DIR / "emulator.log"
    command = [
        str(BIN / "listsync"),
        "emulator",
        "--port",
        str(port),
        "--config",
        str(REPO / "examples/emulator.yaml"),
    ]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + EMULATOR_STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                raise DemoError(f"the emulator exited with {process.returncode}; see {log_path}")
            try:
                get_json(f"{base_url}/_emulator/stats")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise DemoError(
                        f"the emulator did not answer in {EMULATOR_STARTUP_SECONDS:.0f} s"
                    ) from None
                time.sleep(0.2)
        yield base_url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def airflow_env() -> dict[str, str]:
    """The environment of every command: the demo's Airflow home, DAG folder and output folder.

    Set explicitly, so an Airflow configuration of the user's own (``AIRFLOW_HOME`` and the
    like in their shell) is not touched and does not leak in.
    """
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "LISTSYNC_OUTPUT_DIR": str(OUTPUT_DIR),
        # `airflow dags test` of Airflow 3.3.2 cannot finish a run of a DAG with a deadline.
        "LISTSYNC_NIGHTLY_DEADLINE": "off",
    }


def with_connections(env: dict[str, str], base_url: str) -> dict[str, str]:
    """``env`` plus the connections of ``examples/connections.env``, aimed at this demo's emulator
    and warehouse."""
    connections = read_env_file(REPO / "examples" / "connections.env")
    service = json.loads(connections["AIRFLOW_CONN_LISTSYNC_DEFAULT"])
    service["host"] = base_url
    warehouse = json.loads(connections["AIRFLOW_CONN_LISTSYNC_WAREHOUSE"])
    warehouse["host"] = str(WAREHOUSE)
    return {
        **env,
        "AIRFLOW_CONN_LISTSYNC_DEFAULT": json.dumps(service),
        "AIRFLOW_CONN_LISTSYNC_WAREHOUSE": json.dumps(warehouse),
    }


def list_contents(state: dict[str, Any]) -> tuple[int, int]:
    """Rows and targetable people of the demo List in an ``/_emulator/state`` snapshot."""
    rows = state["lists"][TABLE_ID]["rows"]
    return len(rows), sum(len(row["people"]) for row in rows)


def list_writes(stats: dict[str, Any]) -> dict[str, int]:
    endpoints = stats["endpoints"]
    return {name: endpoints.get(name, {}).get("requests", 0) for name in LIST_WRITE_ENDPOINTS}


def relative(path: str | Path) -> str:
    try:
        return str(Path(path).relative_to(REPO))
    except ValueError:
        return str(path)


# (summary key, label) of the counts the report shows.
READ_COUNTS = (("read", "read"), ("rejected", "rejected"), ("duplicates", "duplicates"))
ROW_WRITE_COUNTS = (
    ("added", "rows added"),
    ("cells_updated", "cells updated"),
    ("deleted", "rows deleted"),
    ("unchanged", "unchanged"),
    ("failed", "failed"),
)
PEOPLE_WRITE_COUNTS = (
    ("added", "added"),
    ("updated", "updated"),
    ("deleted", "deleted"),
    ("unchanged", "unchanged"),
    ("failed", "failed"),
)


def counts(summary: dict[str, Any], keys: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{label} {summary[key]}" for key, label in keys)


def describe_run(summary: dict[str, Any], with_reasons: bool) -> list[str]:
    rows, people = summary["rows"], summary["people"]
    lines = [
        f"  Accounts  {counts(rows, READ_COUNTS)}  ->  {counts(rows, ROW_WRITE_COUNTS)}",
        f"  People    {counts(people, READ_COUNTS)}  ->  {counts(people, PEOPLE_WRITE_COUNTS)}",
    ]
    if with_reasons:
        for label, part in (("accounts", rows), ("people", people)):
            # The summary file keeps its keys sorted: the most frequent first again.
            reasons = sorted((part.get("reject_reasons") or {}).items(), key=lambda item: (-item[1], item[0]))
            if reasons:
                lines.append(f"  Rejected {label}, and why:")
                lines.extend(f"    {n:>2} x {reason}" for reason, n in reasons)
    sent = [
        f"{label}: "
        + ", ".join(
            f"{n} {kind.replace('_', ' ')}" for kind, n in part["requests"].items() if kind != "total" and n
        )
        for label, part in (("rows", rows), ("people", people))
        if part["requests"]["total"]
    ]
    total = rows["requests"]["total"] + people["requests"]["total"]
    lines.append(f"  Write requests: {total}" + (f" ({'; '.join(sent)})" if sent else ""))
    lines.append(f"  Plan, rejects and summary files: {relative(Path(rows['plan_path']).parent)}/")
    reports = [Path(part["report_path"]).name for part in (rows, people) if part.get("report_path")]
    lines.append(f"  Reports to open in a browser, in that folder: {', '.join(reports) or 'none written'}")
    return lines


def check_against_emulator(
    summary: dict[str, Any],
    before: tuple[dict[str, Any], dict[str, Any]],
    after: tuple[dict[str, Any], dict[str, Any]],
) -> list[str]:
    """Compare what the summary says was written with what the emulator holds and counted."""
    rows, people = summary["rows"], summary["people"]
    rows_before, people_before = list_contents(before[0])
    rows_after, people_after = list_contents(after[0])
    writes = {
        name: list_writes(after[1])[name] - list_writes(before[1])[name] for name in LIST_WRITE_ENDPOINTS
    }
    problems = []
    expected_rows = rows_before + rows["added"] - rows["deleted"]
    if rows_after != expected_rows:
        problems.append(f"the List holds {rows_after} rows, the summary implies {expected_rows}")
    expected_people = people_before + people["added"] - people["deleted"]
    if people_after != expected_people:
        problems.append(f"the List holds {people_after} people, the summary implies {expected_people}")
    sent = rows["requests"]["total"] + people["requests"]["total"]
    if sum(writes.values()) != sent:
        problems.append(f"the emulator counted {sum(writes.values())} write requests, the summaries {sent}")
    if problems:
        raise DemoError("the run's summary does not match the emulator: " + "; ".join(problems))
    return [
        f"  Checked against the emulator: {TABLE_ID} holds {rows_after} rows and {people_after} people;"
        f" it received {sum(writes.values())} write requests."
    ]


def nightly_run(
    env: dict[str, str], base_url: str, logical_date: datetime, log_name: str
) -> tuple[dict[str, Any], float, list[str]]:
    """Run the nightly DAG once; return its summary, its duration and the emulator's check of it."""
    before = get_json(f"{base_url}/_emulator/state"), get_json(f"{base_url}/_emulator/stats")
    started = time.monotonic()
    run_logged(
        [str(BIN / "airflow"), "dags", "test", DAG_ID, logical_date.isoformat()],
        env,
        log_name,
        DAG_RUN_TIMEOUT_SECONDS,
    )
    seconds = time.monotonic() - started
    summary_path = OUTPUT_DIR / DAG_ID / logical_date.strftime("%Y%m%dT%H%M%S") / "summary.json"
    if not summary_path.is_file():
        raise DemoError(f"the run wrote no summary at {summary_path}; see {LOG_DIR / log_name}.log")
    summary = json.loads(summary_path.read_text())
    after = get_json(f"{base_url}/_emulator/state"), get_json(f"{base_url}/_emulator/stats")
    return summary, seconds, check_against_emulator(summary, before, after)


def load_warehouse(snapshot: str, env: dict[str, str]) -> None:
    command = [sys.executable, str(REPO / "examples" / "generate_data.py"), "--sqlite", str(WAREHOUSE)]
    run_logged([*command, "--snapshot", snapshot], env, f"generate-data-{snapshot}", 120)


def main() -> int:
    started = time.monotonic()
    for directory in (AIRFLOW_HOME, LOG_DIR):
        directory.mkdir(parents=True, exist_ok=True)
    # Plan and rejects files of earlier demos would only confuse the report's paths.
    shutil.rmtree(OUTPUT_DIR, ignore_errors=True)
    base_env = airflow_env()

    print("listsync demo: the nightly CRM-to-List sync (dags/crm_to_list_nightly.py), three nights in a row")
    print(f"- Airflow home (SQLite): {relative(AIRFLOW_HOME)}; logs of every step: {relative(LOG_DIR)}/")
    run_logged([str(BIN / "airflow"), "db", "migrate"], base_env, "airflow-db-migrate", 300)
    print(f"- Warehouse (SQLite): {relative(WAREHOUSE)}, a messy CRM extract from examples/generate_data.py")

    last_night = datetime.now(timezone.utc).replace(hour=2, minute=0, second=0, microsecond=0)
    if last_night > datetime.now(timezone.utc):
        last_night -= timedelta(days=1)
    nights = [
        ("previous", last_night - timedelta(days=7), "A week ago: the first sync fills the empty List"),
        ("current", last_night - timedelta(days=1), "Last night: a week of CRM changes to carry over"),
        ("current", last_night, "Tonight: the CRM did not change"),
    ]
    loaded = None
    with emulator(base_env) as base_url:
        print(f"- Emulator: {base_url}, List {TABLE_ID} (examples/emulator.yaml)")
        env = with_connections(base_env, base_url)
        for number, (snapshot, logical_date, title) in enumerate(nights, start=1):
            if snapshot != loaded:
                load_warehouse(snapshot, base_env)
                loaded = snapshot
            summary, seconds, check = nightly_run(env, base_url, logical_date, f"run-{number}")
            print(f"\n{title}  [airflow dags test {DAG_ID} {logical_date:%Y-%m-%dT%H:%M}, {seconds:.0f} s]")
            print("\n".join(describe_run(summary, with_reasons=number == 2)))
            print("\n".join(check))
    writes = summary["rows"]["requests"]["total"] + summary["people"]["requests"]["total"]
    if writes:
        raise DemoError(f"the last run, on unchanged data, sent {writes} write requests instead of none")
    print("\nNothing changed, so nothing was written: the sync converges. The emulator is stopped.")
    print(f"Done in {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DemoError as error:
        print(f"\ndemo failed: {error}", file=sys.stderr)
        sys.exit(1)
