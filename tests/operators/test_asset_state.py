"""Where an operator keeps its sync's state and lease by default: the asset state store, of its
List's asset or, when its DAG names none, of its connection's state asset; end to end through
``dag.test()`` against a hosted service."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from listsync.emulator import EmulatorConfig
from listsync.operators.asset_state import state_asset
from listsync.operators.people import SyncTargetablePeopleOperator

from ..support import LiveEmulator
from ..support.tenants import ACCOUNTS, PEOPLE_API_KEY, PEOPLE_TABLE, people_config, people_writes

# The README's snippet, as written there but for the List and the files' folder.
README_COLUMN_MAP = {
    "account_website": "account_domain",
    "first_name": "first_name",
    "last_name": "last_name",
    "email": "email",
    "phone": "phone_number",
    "job_title": "title",
}
# Titles the service keeps in its own form (runs of spaces made one): only a sync that keeps
# its state knows the List's "VP of Sales" is what it sent as "VP  of  Sales".
CONTACTS = [
    ("https://acme.com", "Ann", "Lee", "ann@acme.com", None, "VP  of  Sales"),
    ("acme.com", "Bob", "Ray", None, "+14155550123", "Head of   Data"),
    ("beta.io", "Cy", "Doe", "CY@beta.io", None, " CTO "),
    ("gamma.org", "Dee", "Fox", None, None, "Founder"),
]


@pytest.fixture
def hosted(live_emulator: Callable[..., LiveEmulator]) -> LiveEmulator:
    config: EmulatorConfig = people_config().model_copy(
        update={"profile": "hosted", "dialect_overrides": {"lag_seconds": 0.3}}
    )
    served = live_emulator(config, clock=None)
    served.seed(PEOPLE_TABLE, *({"domain": domain} for domain in ACCOUNTS))
    return served


@pytest.fixture
def warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``listsync_warehouse``: a SQLite database holding ``crm_contacts``."""
    path = tmp_path / "warehouse.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE crm_contacts (account_website, first_name, last_name, email, phone, job_title)"
        )
        db.executemany("INSERT INTO crm_contacts VALUES (?, ?, ?, ?, ?, ?)", CONTACTS)
    monkeypatch.setenv(
        "AIRFLOW_CONN_LISTSYNC_WAREHOUSE", json.dumps({"conn_type": "sqlite", "host": str(path)})
    )
    return path


def readme_dag(folder: Path, **options: Any) -> Any:
    from airflow.sdk import DAG

    with DAG("readme_snippet", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
        SyncTargetablePeopleOperator(
            task_id="sync_targetable_people",
            table_id=PEOPLE_TABLE,
            sql="SELECT * FROM crm_contacts",
            sql_conn_id="listsync_warehouse",
            column_map=README_COLUMN_MAP,
            mode="mirror",
            plan_path=f"{folder}/{{{{ ts_nodash }}}}/people.plan.jsonl",
            rejects_path=f"{folder}/{{{{ ts_nodash }}}}/people.rejects.jsonl",
            **options,
        )
    return dag


def summary_of(run: Any) -> dict[str, Any]:
    summary: dict[str, Any] = run.get_task_instance("sync_targetable_people").xcom_pull(
        task_ids="sync_targetable_people"
    )
    return summary


@pytest.mark.slow
def test_the_readme_snippet_keeps_a_state_and_writes_nothing_the_second_time(
    run_dag: Callable[..., Any],
    hosted: LiveEmulator,
    warehouse: Path,
    tmp_path: Path,
    connect_listsync: Callable[..., None],
) -> None:
    connect_listsync(hosted.url, PEOPLE_API_KEY, "usr_people")
    dag = readme_dag(tmp_path)

    first = run_dag(dag)
    assert first.state == "success"
    written = people_writes(hosted)
    assert summary_of(first)["added"] == 4
    assert "listsync_state_listsync_default" in summary_of(first)["state"]
    time.sleep(0.4)  # the service's reads have caught up

    second = run_dag(dag)

    assert second.state == "success"
    summary = summary_of(second)
    assert summary["requests"]["total"] == 0, summary
    assert (summary["unchanged"], summary["edited_in_list"]) == (4, 0)
    assert people_writes(hosted) == written


def test_an_operator_that_names_its_list_keeps_no_state_asset_of_its_own() -> None:
    from airflow.sdk import Asset

    accounts = Asset(uri="listsync://api.example.com/tbl_accounts", name="listsync_tbl_accounts")
    named = SyncTargetablePeopleOperator(
        task_id="a", table_id="tbl_accounts", source="x.csv", column_map={"e": "email"}, inlets=[accounts]
    )
    unnamed = SyncTargetablePeopleOperator(
        task_id="b",
        table_id="tbl_accounts",
        source="x.csv",
        column_map={"e": "email"},
        listsync_conn_id="crm",
    )
    in_file = SyncTargetablePeopleOperator(
        task_id="c", table_id="tbl_accounts", source="x.csv", column_map={"e": "email"}, state_path="/s/state"
    )
    mapped = SyncTargetablePeopleOperator.partial(
        task_id="d", source="x.csv", column_map={"e": "email"}
    ).expand(table_id=["tbl_1", "tbl_2"])

    assert named.inlets == [accounts]
    assert unnamed.inlets == [state_asset("crm")]
    assert in_file.inlets == []
    assert mapped.inlets == [state_asset("listsync_default")]


def hold_lease(asset_name: str, key: str, holder: str, expires: float) -> None:
    """Store a lease record under ``key`` of the asset's state store, as another task would."""
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    record = {"token": "other", "holder": holder, "since": time.time(), "expires": expires}
    with create_session() as session:
        asset_id = session.query(AssetModel.id).filter(AssetModel.name == asset_name).scalar()
        session.merge(AssetStateStoreModel(asset_id=asset_id, key=key, value=json.dumps(json.dumps(record))))


@pytest.mark.slow
def test_a_task_waits_for_a_lease_held_in_the_asset_state_store_then_refuses_naming_its_holder(
    run_dag: Callable[..., Any],
    hosted: LiveEmulator,
    warehouse: Path,
    tmp_path: Path,
    connect_listsync: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    connect_listsync(hosted.url, PEOPLE_API_KEY, "usr_people")
    dag = readme_dag(tmp_path, lock_timeout=1)
    assert run_dag(dag).state == "success"  # registers the state asset
    hosted.stats.clear()
    holder = "DAG approve_large_delete, run manual__1, task apply, try 1 on worker-2"
    key = f"lease-people-{PEOPLE_TABLE}-all"

    hold_lease("listsync_state_listsync_default", key, holder, time.time() + 600)
    refused = run_dag(dag)

    assert refused.state == "failed"
    task_log = capsys.readouterr().out  # the task's log, as dag.test() prints it
    assert f"LeaseHeldError: the people sync of {PEOPLE_TABLE} is being written by {holder}" in task_log
    assert f"delete the key {key} of the asset state store of listsync_state_listsync_default" in task_log
    assert sum(hosted.stats.requests.values()) == 0  # nothing read or written

    hold_lease("listsync_state_listsync_default", key, holder, time.time() - 1)  # its holder is gone
    taken_over = run_dag(dag)

    assert taken_over.state == "success"
    assert summary_of(taken_over)["lease_waited_for"].startswith(holder)
