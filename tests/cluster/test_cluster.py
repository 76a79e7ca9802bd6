"""The example DAGs on a real Airflow cluster, run by the scheduler and a Celery worker.

``deploy/cluster.py`` (what ``make cluster`` runs) starts the deployment once for the module:
PostgreSQL metadata database, Redis broker, api-server, scheduler, dag-processor, triggerer and one
Celery worker, with the settings docker-compose.yml uses, the emulator and a PostgreSQL warehouse
holding the example data. Runs are started as a user starts them (``airflow dags trigger``,
unpausing), never with ``dags test``:

* the nightly sync's summary, read from XCom through the REST API, says what the List now holds.
  The emulator plays a hosted service (the ``hosted`` profile: writes shown 2 s after their
  answer, values kept in its own forms), and the DAG's default settings keep the sync's state in
  its List asset's state store, so the next night's run sends no write at all;
* the signal backfill catches up on its ten days. The emulator's rate windows last
  :data:`WINDOW_SECONDS` instead of a minute, and the cluster's policy
  (``airflow_local_settings.py`` here) scales the operator's deferral threshold to them: windows
  are waited for in the worker, and the first request's Retry-After, longer than a window, defers
  the task to the triggerer. In the middle of :data:`KILL_DAY`, the worker's task process and its
  Celery pool process are killed with SIGKILL; the retry resumes from the checkpoint, and no event
  is lost or sent twice without the summary saying so.

The cluster is stopped, and its databases dropped, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import httpx
import psutil
import pytest
import yaml

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "deploy" / "cluster.py"
POLICY = Path(__file__).with_name("airflow_local_settings.py")
NIGHTLY = "crm_to_list_nightly"
APPROVAL = "approve_large_delete"
BACKFILL = "signal_backfill"
INGEST_TASK = "ingest_signal_events"
TABLE_ID = "tbl_accounts"
WINDOW_SECONDS = 2
# Page visits (an Event signal) are held to this many a window, so each day waits for two or
# three windows, in its worker.
EVENT_LIMIT = 15
# The first event request is answered 429 with this Retry-After: longer than a window, so the
# task defers (the policy's threshold is DEFER_AFTER_SECONDS).
RETRY_AFTER_SECONDS = 5
KILL_DAY = "2026-11-04"
START_TIMEOUT = 300.0
RUN_TIMEOUT = 240.0
# Endpoints of /_emulator/stats that change a List.
LIST_WRITES = (
    "POST /v1/lists/{tableId}/rows",
    "PATCH /v1/lists/{tableId}/cells",
    "DELETE /v1/lists/{tableId}/rows",
    "POST /v1/lists/{tableId}/targetable-people",
    "PATCH /v1/lists/{tableId}/targetable-people",
    "DELETE /v1/lists/{tableId}/targetable-people",
)


class Cluster:
    """A running cluster: its ``cluster.json``, the Airflow CLI and REST API, and the emulator."""

    def __init__(self, state: dict[str, Any], launcher: ModuleType) -> None:
        self.state = state
        self.env = {**launcher.inherited_environment(), **state["env"]}
        self.api = httpx.Client(base_url=state["urls"]["ui"] + "/api/v2", timeout=30)
        token = httpx.post(state["urls"]["ui"] + "/auth/token", json=state["login"], timeout=30)
        token.raise_for_status()
        self.api.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def airflow(self, *args: str) -> str:
        result = subprocess.run(
            [str(Path(sys.executable).with_name("airflow")), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, f"airflow {' '.join(args)} failed:\n{result.stderr[-3000:]}"
        return result.stdout

    def get(self, path: str, **params: Any) -> Any:
        response = self.api.get(path, params=params)
        response.raise_for_status()
        return response.json()

    def task_instances(self, dag_id: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get(f"/dags/{dag_id}/dagRuns/~/taskInstances", limit=100)[
            "task_instances"
        ]
        return found

    def return_value(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
        value: dict[str, Any] = self.get(f"{path}/xcomEntries/return_value")["value"]
        return value

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The log of a task's try, as the UI shows it (the REST API's JSON, as text)."""
        path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/logs/{try_number}"
        response = self.api.get(path, params={"full_content": True}, headers={"Accept": "application/json"})
        response.raise_for_status()
        return response.text

    def emulator(self, what: str) -> Any:
        response = httpx.get(f"{self.state['urls']['emulator']}/_emulator/{what}", timeout=30)
        response.raise_for_status()
        return response.json()

    def list_events(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The asset events a DAG run emitted."""
        events: list[dict[str, Any]] = self.get(
            "/assets/events", source_dag_id=dag_id, source_run_id=run_id, limit=100
        )["asset_events"]
        return events

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str, state: str) -> None:
        path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
        deadline = time.monotonic() + RUN_TIMEOUT
        while self.get(path)["state"] != state:
            assert time.monotonic() < deadline, f"{dag_id} {run_id} {task_id} never {state}; see {self.logs}"
            time.sleep(1)

    def respond(self, dag_id: str, run_id: str, task_id: str, option: str) -> dict[str, Any]:
        """Answer a human-in-the-loop task as a person does in the UI; its details as shown."""
        path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/-1/hitlDetails"
        details: dict[str, Any] = self.get(path)
        self.api.patch(path, json={"chosen_options": [option]}).raise_for_status()
        return details

    def wait_for_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            run: dict[str, Any] = self.get(f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")
            if run["state"] in {"success", "failed"}:
                return run
            assert time.monotonic() < deadline, f"{dag_id} {run_id} still {run['state']}; see {self.logs}"
            time.sleep(1)

    @property
    def logs(self) -> str:
        return str(Path(self.state["processes"]["scheduler"]["log"]).parent)


@pytest.fixture(scope="module")
def cluster(
    postgres_url: str, redis_url: str, launcher: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster")
    config = yaml.safe_load((REPO / "examples" / "emulator.yaml").read_text())
    config["profile"] = "hosted"
    config["window_seconds"] = WINDOW_SECONDS
    config["rate_limits"] = {"Event": EVENT_LIMIT}
    config["faults"] = {
        "rules": [
            {
                "endpoint": "POST /v1/events/batch",
                "kind": "rate_limit",
                "retry_after_seconds": RETRY_AFTER_SECONDS,
                "times": 1,
            }
        ]
    }
    (root / "emulator.yaml").write_text(yaml.safe_dump(config))
    directory = root / "deployment"
    command = [
        sys.executable, str(LAUNCHER), "start", "--dir", str(directory),
        "--postgres", postgres_url, "--redis", redis_url,
        "--emulator-config", str(root / "emulator.yaml"), "--local-settings", str(POLICY),
        # The executor's report of the lost task makes it a retry at once; the heartbeat timeout
        # is the fallback, shortened from five minutes.
        "--set", "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT=60",
        # The nightly DAG's deadline, which dag.test() cannot run, runs here.
        "--set", "LISTSYNC_NIGHTLY_DEADLINE=4",
        "--timeout", str(START_TIMEOUT),
    ]  # fmt: skip
    try:
        started = subprocess.run(
            command, capture_output=True, text=True, timeout=START_TIMEOUT * 2, check=False
        )
        assert started.returncode == 0, f"the cluster did not start:\n{started.stderr[-3000:]}"
        running = Cluster(json.loads((directory / "cluster.json").read_text()), launcher)
        with running.api:
            yield running
    finally:
        stop(directory)


def stop(directory: Path) -> None:
    """``deploy/cluster.py stop`` on the cluster started in ``directory``."""
    stopped = subprocess.run(
        [sys.executable, str(LAUNCHER), "stop", "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert stopped.returncode == 0, stopped.stderr


def plan_keys(path: str, action: str, key: str) -> set[str]:
    lines = Path(path).read_text().splitlines()
    return {entry[key] for entry in map(json.loads, lines) if entry["action"] == action}


def test_a_nightly_run_triggered_on_the_cluster_leaves_the_list_its_summary_describes(cluster: Cluster):
    # Triggered for the date the scheduler would run next, so unpausing adds no run of its own.
    logical_date = cluster.get(f"/dags/{NIGHTLY}")["next_dagrun_logical_date"]
    run_id = "nightly_on_the_cluster"
    cluster.airflow("dags", "trigger", NIGHTLY, "--logical-date", logical_date, "--run-id", run_id)
    cluster.airflow("dags", "unpause", NIGHTLY)

    assert cluster.wait_for_run(NIGHTLY, run_id)["state"] == "success"
    summary = cluster.return_value(NIGHTLY, run_id, "report")
    rows, people = summary["rows"], summary["people"]
    held = cluster.emulator("state")["lists"][TABLE_ID]["rows"]
    stats = cluster.emulator("stats")["endpoints"]

    # The List started empty: it holds the rows and people the run says it added, the accounts
    # its plan lists, and the emulator received the write requests the summary counts.
    assert rows["added"] > 0 and people["added"] > 0
    assert rows["failed"] == people["failed"] == 0
    assert len(held) == rows["added"] - rows["deleted"]
    assert {row["cells"]["domain"] for row in held} == plan_keys(rows["plan_path"], "add", "key")
    assert sum(len(row["people"]) for row in held) == people["added"] - people["deleted"]
    assert {row["accountDomain"] for row in held if row["people"]} == plan_keys(
        people["plan_path"], "add", "account_domain"
    )
    writes = sum(stats.get(endpoint, {}).get("requests", 0) for endpoint in LIST_WRITES)
    assert writes == rows["requests"]["total"] + people["requests"]["total"]
    # The service showed the writes late and kept some values its own way: nothing was drift.
    assert people["unconfirmed"] == people["drift"] == rows["unconfirmed"] == rows["drift"] == 0
    assert people["state"].startswith("the asset state store of listsync_tbl_accounts")

    # The next night, nothing having changed in the CRM: nothing is written.
    second = "nightly_on_the_cluster_again"
    cluster.airflow("dags", "trigger", NIGHTLY, "--run-id", second)
    assert cluster.wait_for_run(NIGHTLY, second)["state"] == "success"
    again = cluster.return_value(NIGHTLY, second, "report")
    stats_after = cluster.emulator("stats")["endpoints"]
    assert sum(stats_after.get(endpoint, {}).get("requests", 0) for endpoint in LIST_WRITES) == writes
    assert again["rows"]["requests"]["total"] == again["people"]["requests"]["total"] == 0
    assert again["people"]["unchanged"] == people["added"] - people["deleted"]

    # The List's asset event: one from each task that wrote, with its counts; none from a night
    # with nothing to write, nor from a dry run.
    events = cluster.list_events(NIGHTLY, run_id)
    assert sorted((event["source_task_id"], event["extra"]["requests"]) for event in events) == sorted(
        [
            ("sync_targetable_people", people["requests"]["total"]),
            ("upsert_account_rows", rows["requests"]["total"]),
        ]
    )
    assert {event["uri"] for event in events} == {f"listsync://api.example.com/{TABLE_ID}"}
    assert (
        next(e for e in events if e["source_task_id"] == "sync_targetable_people")["extra"]["added"]
        == (people["added"])
    )
    assert cluster.list_events(NIGHTLY, second) == []
    dry = "nightly_on_the_cluster_dry_run"
    cluster.airflow("dags", "trigger", NIGHTLY, "--run-id", dry, "--conf", json.dumps({"dry_run": True}))
    assert cluster.wait_for_run(NIGHTLY, dry)["state"] == "success"
    assert cluster.return_value(NIGHTLY, dry, "report")["people"]["dry_run"] is True
    assert cluster.list_events(NIGHTLY, dry) == []


def test_the_command_line_shows_and_resets_the_nightly_state_in_the_asset_state_store(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    from listsync.cli import main
    from listsync.commands.airflow_states import TOKEN_ENV

    asset = f"listsync://api.example.com/{TABLE_ID}"
    monkeypatch.setenv(TOKEN_ENV, str(cluster.api.headers["Authorization"]).removeprefix("Bearer "))
    where = ["--airflow-url", cluster.state["urls"]["ui"], "--asset", asset, "--job", "people"]
    where += ["--table-id", TABLE_ID]
    # The key every night of the nightly keeps its people sync's state under.
    key = cluster.return_value(NIGHTLY, "nightly_on_the_cluster", "report")["people"]["state"].rsplit(" ", 1)[
        -1
    ]
    asset_id = next(
        item["id"] for item in cluster.get("/assets", uri_pattern=asset)["assets"] if item["uri"] == asset
    )

    def keys() -> set[str]:
        return {entry["key"] for entry in cluster.get(f"/assets/{asset_id}/state-store")["asset_state_store"]}

    assert main(["state", "show", *where, "--output", "json"]) == 0
    shown = {row["where"].rsplit(" ", 1)[-1]: row for row in json.loads(capsys.readouterr().out)}
    # The second night found every person of the List in step: its state holds each of them.
    held = cluster.emulator("state")["lists"][TABLE_ID]["rows"]
    assert shown[key]["items"] == sum(len(row["people"]) for row in held) > 0
    assert {(row["job"], row["table_id"]) for row in shown.values()} == {("people", TABLE_ID)}
    rows_states = {name for name in keys() if name.startswith(f"rows-{TABLE_ID}-")}
    assert rows_states and set(shown) <= keys()

    # A reset deletes the people states alone: the rows upsert's state and the leases stay.
    kept = cluster.get(f"/assets/{asset_id}/state-store/{key}")["value"]
    assert main(["state", "reset", *where, "--yes"]) == 0
    assert not set(shown) & keys() and rows_states <= keys()
    assert main(["state", "show", *where]) == 1
    # Put back for the tests after this one, which expect the nights' state.
    cluster.api.put(f"/assets/{asset_id}/state-store/{key}", json={"value": kept}).raise_for_status()
    # A token the deployment refuses is one line naming the variable, never the token.
    monkeypatch.setenv(TOKEN_ENV, "not-a-token")
    assert main(["state", "show", *where]) == 1
    refused = capsys.readouterr().err
    assert TOKEN_ENV in refused and "not-a-token" not in refused


def remove_contacts(cluster: Cluster, share: int) -> int:
    """Remove every ``share``-th contact with an e-mail from the warehouse's CRM; how many."""
    import sqlalchemy as sa

    engine = sa.create_engine(cluster.state["env"]["AIRFLOW_CONN_LISTSYNC_WAREHOUSE"])
    try:
        with engine.begin() as conn:
            ids = conn.execute(
                sa.text("SELECT contact_id FROM crm_contacts WHERE email IS NOT NULL ORDER BY contact_id")
            ).scalars()
            gone = [contact for number, contact in enumerate(ids) if number % share == 0]
            conn.execute(sa.text("DELETE FROM crm_contacts WHERE contact_id = ANY(:ids)"), {"ids": gone})
    finally:
        engine.dispose()
    return len(gone)


def account_in_crm(cluster: Cluster) -> str:
    """The account domain of a contact still in the warehouse's CRM."""
    import sqlalchemy as sa

    from listsync.extract.contact_rules import normalize_domain

    engine = sa.create_engine(cluster.state["env"]["AIRFLOW_CONN_LISTSYNC_WAREHOUSE"])
    try:
        with engine.connect() as conn:
            query = (
                "SELECT account_website FROM crm_contacts WHERE email IS NOT NULL ORDER BY contact_id LIMIT 1"
            )
            website = conn.execute(sa.text(query)).scalar_one()
    finally:
        engine.dispose()
    return normalize_domain(website)


def list_writes(cluster: Cluster) -> int:
    stats = cluster.emulator("stats")["endpoints"]
    return sum(stats.get(endpoint, {}).get("requests", 0) for endpoint in LIST_WRITES)


def test_a_large_delete_is_applied_only_as_approved(cluster: Cluster):
    # After the nightly test: the List holds the CRM's people. A clean-up removes a quarter.
    remove_contacts(cluster, 4)
    writes = list_writes(cluster)

    # Approved: the plan is applied, exactly.
    approved = "approve_on_the_cluster"
    cluster.airflow("dags", "unpause", APPROVAL)
    cluster.airflow("dags", "trigger", APPROVAL, "--run-id", approved)
    cluster.wait_for_task(APPROVAL, approved, "approve", "awaiting_input")
    details = cluster.respond(APPROVAL, approved, "approve", "Approve")
    assert "would delete" in details["body"] and "The first" in details["body"]
    assert cluster.wait_for_run(APPROVAL, approved)["state"] == "success"
    plan = cluster.return_value(APPROVAL, approved, "plan")
    applied = cluster.return_value(APPROVAL, approved, "apply")
    lines = [json.loads(line) for line in Path(plan["plan_path"]).read_text().splitlines()]
    kinds = Counter(line["action"] for line in lines)
    assert kinds["delete"] > 0.1 * plan["list_people"]
    assert (applied["deleted"], applied["added"], applied["updated"]) == (
        kinds["delete"],
        kinds["add"],
        kinds["patch"],
    )
    assert list_writes(cluster) == writes + applied["requests"]["total"]
    writes = list_writes(cluster)

    # Rejected: nothing is written.
    remove_contacts(cluster, 4)
    rejected = "reject_on_the_cluster"
    cluster.airflow("dags", "trigger", APPROVAL, "--run-id", rejected)
    cluster.wait_for_task(APPROVAL, rejected, "approve", "awaiting_input")
    cluster.respond(APPROVAL, rejected, "approve", "Reject")
    cluster.wait_for_run(APPROVAL, rejected)
    states = {
        ti["task_id"]: ti["state"] for ti in cluster.task_instances(APPROVAL) if ti["dag_run_id"] == rejected
    }
    assert states["apply"] == "skipped"
    assert list_writes(cluster) == writes

    # The List changes while the plan waits for approval: the approved plan is refused.
    changed = "approve_a_stale_plan_on_the_cluster"
    cluster.airflow("dags", "trigger", APPROVAL, "--run-id", changed)
    cluster.wait_for_task(APPROVAL, changed, "approve", "awaiting_input")
    account = account_in_crm(cluster)
    from listsync.client import ListSyncClient

    connection = json.loads(cluster.env["AIRFLOW_CONN_LISTSYNC_DEFAULT"])
    service = (connection["host"], connection["password"], connection["extra"]["user_id"])
    with ListSyncClient(*service) as client:  # someone adds a person by hand
        client.add_people(
            TABLE_ID, [{"accountDomain": account, "people": [{"first_name": "Hand", "email": "hand@x.io"}]}]
        )
    time.sleep(3)  # the hosted profile shows a write 2 s after its answer
    writes = list_writes(cluster)
    cluster.respond(APPROVAL, changed, "approve", "Approve")
    assert cluster.wait_for_run(APPROVAL, changed)["state"] == "failed"
    assert list_writes(cluster) == writes
    # It failed because the plan made now is not the one approved, and for nothing else.
    states = {
        ti["task_id"]: ti["state"] for ti in cluster.task_instances(APPROVAL) if ti["dag_run_id"] == changed
    }
    assert states["apply"] == "failed"
    log = cluster.task_log(APPROVAL, changed, "apply")
    assert "PlanChangedError" in log
    assert "the plan made now differs from the approved plan" in log


def add_contacts(cluster: Cluster, count: int) -> set[tuple[str, str]]:
    """Add ``count`` contacts known by a phone alone or a name alone (the service does not merge
    those on add) to accounts of the CRM; their (account domain, first name)."""
    import sqlalchemy as sa

    from listsync.extract.contact_rules import normalize_domain

    engine = sa.create_engine(cluster.state["env"]["AIRFLOW_CONN_LISTSYNC_WAREHOUSE"])
    try:
        with engine.begin() as conn:
            query = "SELECT DISTINCT account_website FROM crm_contacts WHERE email IS NOT NULL ORDER BY 1"
            websites = list(conn.execute(sa.text(query)).scalars())[:10]
            added = [
                {
                    "id": f"003LEASE{number:05d}",
                    "website": websites[number % len(websites)],
                    "first": f"Lease{number}",
                    "last": f"Race{number}" if number % 2 else None,
                    "phone": None if number % 2 else f"+1415555{number:04d}",
                }
                for number in range(count)
            ]
            conn.execute(
                sa.text(
                    "INSERT INTO crm_contacts (contact_id, account_website, first_name, last_name, phone) "
                    "VALUES (:id, :website, :first, :last, :phone)"
                ),
                added,
            )
    finally:
        engine.dispose()
    return {(normalize_domain(person["website"]), person["first"]) for person in added}


def task_log(cluster: Cluster, dag_id: str, run_id: str, task_id: str) -> str:
    path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/logs/1"
    content = cluster.get(path, full_content=True)["content"]
    return json.dumps(content)


def test_the_approval_and_the_nightly_sync_of_one_list_write_one_after_the_other(cluster: Cluster):
    # New CRM people known by a phone or a name alone: two writers at once would add them twice.
    new = add_contacts(cluster, 20)
    # The apply's first add is held 20 s at the service, so the nightly's people sync starts while
    # the apply writes.
    httpx.post(
        f"{cluster.state['urls']['emulator']}/_emulator/faults",
        json={
            "rules": [
                {
                    "endpoint": "POST /v1/lists/{tableId}/targetable-people",
                    "kind": "latency",
                    "latency_seconds": 20,
                    "times": 1,
                }
            ]
        },
        timeout=30,
    ).raise_for_status()
    allow = json.dumps({"max_delete_fraction": 1.0})  # what earlier tests left in the CRM
    approval, nightly = "apply_while_the_nightly_runs", "nightly_while_an_apply_writes"
    cluster.airflow("dags", "trigger", APPROVAL, "--run-id", approval, "--conf", allow)
    cluster.wait_for_task(APPROVAL, approval, "apply", "running")
    cluster.airflow("dags", "trigger", NIGHTLY, "--run-id", nightly, "--conf", allow)

    assert cluster.wait_for_run(APPROVAL, approval)["state"] == "success"
    assert cluster.wait_for_run(NIGHTLY, nightly)["state"] == "success"
    applied = cluster.return_value(APPROVAL, approval, "apply")
    synced = cluster.return_value(NIGHTLY, nightly, "report")["people"]

    # The apply wrote the new people; the nightly waited for it, then found nothing to write.
    assert applied["added"] >= len(new) and applied["lease_waited_for"] is None
    assert synced["requests"]["total"] == 0
    assert synced["lease_waited_for"].startswith(f"DAG {APPROVAL}, run {approval}, task apply, try 1 on ")
    assert synced["lease_wait_seconds"] > 5
    log = task_log(cluster, NIGHTLY, nightly, "sync_targetable_people")
    assert f"is held by DAG {APPROVAL}, run {approval}, task apply" in log
    # Every person once: none of the new ones twice, none lost.
    held = cluster.emulator("state")["lists"][TABLE_ID]["rows"]
    people = Counter((row["accountDomain"], person["first_name"]) for row in held for person in row["people"])
    assert all(people[person] == 1 for person in new), {person: people[person] for person in new}
    assert synced["list_duplicates"] == 0


def warehouse_events(cluster: Cluster) -> dict[str, str]:
    """Event id -> the day (YYYY-MM-DD) it happened, for every row of the warehouse's events."""
    import sqlalchemy as sa

    engine = sa.create_engine(cluster.state["env"]["AIRFLOW_CONN_LISTSYNC_WAREHOUSE"])
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT event_id, occurred_at FROM signal_events")).all()
    finally:
        engine.dispose()
    return {event_id: occurred_at.date().isoformat() for event_id, occurred_at in rows}


def kill_task(cluster: Cluster, task_instance: dict[str, Any]) -> bool:
    """SIGKILL the task's process and the Celery pool process running it; ``False`` when the task
    has no process on the worker at this moment."""
    worker = psutil.Process(cluster.state["processes"]["celery-worker"]["pid"])
    try:
        task = psutil.Process(task_instance["pid"])
        pool = task.parent()
    except (psutil.Error, TypeError):
        return False
    if pool is None or pool.ppid() != worker.pid:
        return False
    os.kill(task.pid, signal.SIGKILL)
    os.kill(pool.pid, signal.SIGKILL)
    return True


def test_a_deferrable_backfill_survives_sigkill_of_its_worker_processes(cluster: Cluster):
    days = warehouse_events(cluster)
    cluster.airflow("dags", "unpause", BACKFILL)

    states_seen: set[str] = set()
    killed_at: int | None = None  # how many of the day's events the service held then
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        tis = cluster.task_instances(BACKFILL)
        states_seen.update(ti["state"] for ti in tis)
        assert not [ti for ti in tis if ti["state"] == "failed"], f"a day failed; see {cluster.logs}"
        if len(tis) == len(set(days.values())) and all(ti["state"] == "success" for ti in tis):
            break
        victim = next((ti for ti in tis if ti["logical_date"].startswith(KILL_DAY)), None)
        if killed_at is None and victim is not None and victim["state"] == "running":
            held = {
                e["reference"]
                for e in cluster.emulator("state")["events"]
                if days.get(e["reference"]) == KILL_DAY
            }
            if (
                held
                and len(held) < sum(day == KILL_DAY for day in days.values())
                and kill_task(cluster, victim)
            ):
                killed_at = len(held)
        assert time.monotonic() < deadline, (
            f"the backfill is not done: {sorted(map(str, states_seen))}; see {cluster.logs}"
        )
        time.sleep(0.2)

    assert killed_at is not None, f"{KILL_DAY} ended before its worker processes could be killed"
    assert "deferred" in states_seen, "no wait was deferred to the triggerer"
    by_day = {ti["logical_date"][:10]: ti for ti in tis}
    assert by_day[KILL_DAY]["try_number"] >= 2, "the killed task was not retried"
    assert {ti["try_number"] for day, ti in by_day.items() if day != KILL_DAY} == {1}

    received = Counter(event["reference"] for event in cluster.emulator("state")["events"])
    accounted = 0
    for day, ti in sorted(by_day.items()):
        summary = cluster.return_value(BACKFILL, ti["dag_run_id"], INGEST_TASK)
        held = {reference: n for reference, n in received.items() if days[reference] == day}
        # Nothing the summary counts as acknowledged is missing, and every copy the service
        # holds beyond the first is one the summary owns up to.
        assert summary["acknowledged"] == len(held), day
        assert sum(n - 1 for n in held.values()) <= summary["possibly_duplicated"], day
        accounted += summary["acknowledged"] + summary["rows_rejected"] + summary["rejected_by_service"]
        if day == KILL_DAY:
            # The retry picked up every event the killed try had got to the service: acknowledged
            # (resumed after) or in flight (sent again, and counted as possibly duplicated).
            resumed = sum((summary["resumed_from"] or {}).values())
            assert resumed + summary["possibly_duplicated"] >= killed_at, summary
    # No event of the warehouse went unaccounted for: each was ingested or rejected with a reason.
    assert accounted == len(days)
    assert set(received) <= set(days)


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_stop_ends_every_process_and_drops_the_databases(cluster: Cluster, postgres_url: str, redis_url: str):
    import redis
    import sqlalchemy as sa

    directory = Path(cluster.state["processes"]["scheduler"]["log"]).parents[1]
    stopping = time.time()
    stop(directory)

    # Each component led a process group of its own; none has a process left (Celery's pool and
    # task processes included). A process started since is not one of them, though it may lead a
    # group of the same number: process ids are used again (32,768 of them on many Linux hosts).
    groups = {record["pid"] for record in cluster.state["processes"].values()}
    left = psutil.process_iter(["pid", "name", "create_time"])
    assert [p.info for p in left if process_group(p.pid) in groups and p.info["create_time"] < stopping] == []
    with redis.Redis.from_url(redis_url, db=cluster.state["redis_db"]) as broker:
        assert broker.dbsize() == 0
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            names = conn.execute(sa.text("SELECT datname FROM pg_database")).scalars().all()
    finally:
        engine.dispose()
    assert not [name for name in names if name in cluster.state["databases"]]
