"""SyncTargetablePeopleOperator: construction checks, and end to end through Airflow's dag.test()."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from listsync.operators.people import SyncTargetablePeopleOperator

from ..support import LiveEmulator
from ..support.tenants import PEOPLE_API_KEY as API_KEY
from ..support.tenants import PEOPLE_TABLE as TABLE
from ..support.tenants import people_writes

COLUMN_MAP = {
    "domain": "account_domain",
    "email": "email",
    "first": "first_name",
    "last": "last_name",
    "title": "title",
    "linkedin": "network_profile_url",
}
MESSY = """domain,email,first,last,title,linkedin
WWW.Acme.com,ANN@acme.com,Ann,Lee,CTO,
acme.com,,Bob,Ray,Engineer,http://www.example.com/in/bob-ray/?trk=x
beta.io, cy@beta.io ,Cy,Doe,,
beta.io,not an email,Dee,Fox,,
"""
NORMALISED = {
    "acme.com": [
        {"email": "ann@acme.com", "first_name": "Ann", "last_name": "Lee", "title": "CTO"},
        {
            "first_name": "Bob",
            "last_name": "Ray",
            "title": "Engineer",
            "network_profile_url": "https://www.example.com/in/bob-ray",
        },
    ],
    "beta.io": [{"email": "cy@beta.io", "first_name": "Cy", "last_name": "Doe"}],
    "gamma.org": [],
}


def test_exactly_one_extract_is_required_at_parse_time() -> None:
    with pytest.raises(ValueError, match="got neither"):
        SyncTargetablePeopleOperator(task_id="t", table_id=TABLE, column_map=COLUMN_MAP)


def test_a_shard_of_a_split_takes_no_extract_and_needs_its_shard_at_parse_time() -> None:
    with pytest.raises(ValueError, match="give no source= or sql="):
        SyncTargetablePeopleOperator(
            task_id="t", table_id=TABLE, column_map=COLUMN_MAP, source="x.csv", parts_path="p", shard="0/2"
        )
    with pytest.raises(ValueError, match='give the shard \\("i/n"\\) to sync'):
        SyncTargetablePeopleOperator(task_id="t", table_id=TABLE, column_map=COLUMN_MAP, parts_path="p")

    shard = SyncTargetablePeopleOperator(
        task_id="t", table_id=TABLE, column_map=COLUMN_MAP, parts_path="p", shard="0/2"
    )
    assert (shard.parts_path, shard.source, shard.sql) == ("p", None, None)


@pytest.mark.parametrize("shards", [0, -1, 2.0, True, "4"])
def test_a_split_needs_a_whole_number_of_shards_at_parse_time(shards: Any) -> None:
    from listsync.operators import SplitPeopleOperator

    with pytest.raises(ValueError, match="shards must be a whole number, 1 or more"):
        SplitPeopleOperator(
            task_id="t", table_id=TABLE, column_map=COLUMN_MAP, source="x.csv", shards=shards, parts_path="p"
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "replace"}, "mode must be one of upsert, mirror"),
        ({"delete_scope": "everything"}, "delete_scope must be one of"),
        ({"chunk_size": 1000}, "between 1 and 500"),
        ({"max_delete_fraction": 1.5}, "max_delete_fraction must be between 0 and 1, got 1.5"),
        ({"max_reject_fraction": -0.1}, "max_reject_fraction must be between 0 and 1"),
        ({"shard": "4/4"}, 'shard must be "i/n"'),
        ({"verify_timeout": -1}, "verify_timeout must be a number of seconds"),
    ],
)
def test_bad_settings_fail_at_parse_time(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SyncTargetablePeopleOperator(
            task_id="t", table_id=TABLE, column_map=COLUMN_MAP, source="x.csv", **options
        )


def test_construction_does_no_io_and_keeps_templated_fields_unchanged() -> None:
    operator = SyncTargetablePeopleOperator(
        task_id="t",
        table_id="{{ params.table }}",
        column_map={"{{ params.column }}": "email"},
        sql="select * from contacts where day = '{{ ds }}'",
        sql_conn_id="no_such_connection",
        listsync_conn_id="no_such_connection_either",
        user_id="{{ params.user }}",
        plan_path="/plans/{{ run_id }}.jsonl",
    )

    for name in operator.template_fields:
        assert hasattr(operator, name)
    assert operator.table_id == "{{ params.table }}"
    assert operator.sql == "select * from contacts where day = '{{ ds }}'"
    assert operator.plan_path == "/plans/{{ run_id }}.jsonl"


def people_view(people_emulator: LiveEmulator) -> dict[str, list[dict[str, Any]]]:
    fields = set(COLUMN_MAP.values())
    return {
        row.cells["domain"]: sorted(
            ({k: v for k, v in person.items() if k in fields} for person in row.people),
            key=lambda person: person["first_name"],
        )
        for row in people_emulator.state.lists[TABLE].rows.values()
    }


@pytest.mark.slow
def test_a_dag_run_mirrors_the_extract_and_a_second_run_writes_nothing(
    run_dag: Callable[[Any], Any],
    people_client: Any,
    people_emulator: LiveEmulator,
    tmp_path: Path,
    connect_listsync: Callable[..., None],
) -> None:
    from airflow.sdk import DAG

    (tmp_path / "contacts.csv").write_text(MESSY, encoding="utf-8")
    # Ann is there already; Old, someone else's person on an account of the extract, is not in
    # the extract: mirror mode removes them (1 of 2 people, within max_delete_fraction=0.5).
    people_client.add_people(
        TABLE,
        [
            {"accountDomain": "acme.com", "people": [NORMALISED["acme.com"][0]]},
            {"accountDomain": "beta.io", "people": [{"first_name": "Old", "email": "old@beta.io"}]},
        ],
    )
    people_emulator.stats.clear()
    connect_listsync(people_emulator.url, API_KEY, "usr_people")
    with DAG(
        "people_sync_end_to_end",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        params={"table": TABLE, "folder": str(tmp_path)},
    ) as dag:
        SyncTargetablePeopleOperator(
            task_id="sync_people",
            table_id="{{ params.table }}",
            source="{{ params.folder }}/contacts.csv",
            column_map=COLUMN_MAP,
            mode="mirror",
            max_delete_fraction=0.5,
            plan_path="{{ params.folder }}/plan-{{ run_id }}.jsonl",
            rejects_path="{{ params.folder }}/rejects-{{ run_id }}.jsonl",
        )

    first = run_dag(dag)

    assert first.state == "success"
    assert people_view(people_emulator) == NORMALISED
    assert people_writes(people_emulator) == {"add": 1, "patch": 0, "delete": 1}
    summary = first.get_task_instance("sync_people").xcom_pull(task_ids="sync_people")
    assert {k: summary[k] for k in ("read", "rejected", "added", "unchanged", "deleted", "failed")} == {
        "read": 4,
        "rejected": 1,
        "added": 2,
        "unchanged": 1,
        "deleted": 1,
        "failed": 0,
    }
    assert Path(summary["plan_path"]).parent == tmp_path
    assert API_KEY not in json.dumps(summary)

    second = run_dag(dag)

    assert second.state == "success"
    assert people_writes(people_emulator) == {"add": 1, "patch": 0, "delete": 1}  # nothing more was written
    assert people_view(people_emulator) == NORMALISED


@pytest.mark.slow
def test_a_task_whose_chunk_failed_converges_on_its_retry(
    run_dag: Callable[[Any], Any],
    people_client: Any,
    people_emulator: LiveEmulator,
    tmp_path: Path,
    connect_listsync: Callable[..., None],
) -> None:
    from airflow.sdk import DAG

    from listsync.emulator import FaultRule

    (tmp_path / "contacts.csv").write_text(MESSY, encoding="utf-8")
    connect_listsync(people_emulator.url, API_KEY)
    # Every add of try 1 fails with a 500: each of the three people is sent, re-read and sent
    # again twice (9 requests), then the task fails; try 2 writes them.
    people_emulator.faults.add(
        [FaultRule(endpoint="POST /v1/lists/{tableId}/targetable-people", kind="error", times=9)]
    )
    with DAG(
        "people_sync_retry",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        default_args={"retries": 1, "retry_delay": timedelta(0)},
    ) as dag:
        SyncTargetablePeopleOperator(
            task_id="sync_people",
            table_id=TABLE,
            source=str(tmp_path / "contacts.csv"),
            column_map=COLUMN_MAP,
            chunk_size=1,
            # The adds of unknown outcome are not shown: waited for 2 s rather than a minute.
            verify_timeout=2,
        )

    run = run_dag(dag)

    task = run.get_task_instance("sync_people")
    assert (run.state, task.try_number) == ("success", 2)
    add_statuses = people_emulator.stats.statuses["POST /v1/lists/{tableId}/targetable-people"]
    assert (add_statuses["500"], add_statuses["200"]) == (9, 3)
    summary = task.xcom_pull(task_ids="sync_people")
    assert (summary["added"], summary["unchanged"], summary["failed"]) == (3, 0, 0)
    assert people_view(people_emulator) == NORMALISED


def people_dag(dag_id: str, source: Path, *, table_id: str = TABLE, **options: Any) -> Any:
    from airflow.sdk import DAG

    with DAG(
        dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        default_args={"retries": 2, "retry_delay": timedelta(0)},
    ) as dag:
        SyncTargetablePeopleOperator(
            task_id="sync_people", table_id=table_id, source=str(source), column_map=COLUMN_MAP, **options
        )
    return dag


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "options"),
    [
        ("unsafe delete", {"mode": "mirror", "max_delete_fraction": 0.1}),
        ("wrong key", {"listsync_conn_id": "listsync_wrong_key"}),
        ("missing List", {"table_id": "tbl_nowhere"}),
        ("over max_memory", {"max_memory": "100MiB"}),
    ],
)
def test_what_a_retry_cannot_fix_fails_the_task_without_retrying(
    run_dag: Callable[..., Any],
    people_client: Any,
    people_emulator: LiveEmulator,
    tmp_path: Path,
    connect_listsync: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    options: dict[str, Any],
) -> None:
    connect_listsync(people_emulator.url, API_KEY)
    monkeypatch.setenv(
        "AIRFLOW_CONN_LISTSYNC_WRONG_KEY",
        json.dumps({"conn_type": "listsync", "host": people_emulator.url, "password": "sk_nope"}),
    )
    (tmp_path / "contacts.csv").write_text(MESSY, encoding="utf-8")
    if case == "unsafe delete":  # the List holds people the extract does not: most would go
        people_client.add_people(
            TABLE,
            [
                {
                    "accountDomain": "acme.com",
                    "people": [{"first_name": f"P{i}", "email": f"p{i}@acme.com"} for i in range(20)],
                }
            ],
        )
    dag = people_dag(f"people_fail_{case.replace(' ', '_')}", tmp_path / "contacts.csv", **options)

    run = run_dag(dag)

    task = run.get_task_instance("sync_people")
    assert (run.state, task.try_number) == ("failed", 1)  # no retry was spent on it


@pytest.mark.slow
def test_a_failed_sync_leaves_its_summary_in_xcom(
    run_dag: Callable[..., Any],
    people_client: Any,
    people_emulator: LiveEmulator,
    tmp_path: Path,
    connect_listsync: Callable[..., None],
) -> None:
    connect_listsync(people_emulator.url, API_KEY)
    (tmp_path / "contacts.csv").write_text(
        MESSY + "unknown.example,zed@unknown.example,Zed,Orr,,\n", encoding="utf-8"
    )
    dag = people_dag("people_fail_summary", tmp_path / "contacts.csv", retries=0)

    run = run_dag(dag)

    task = run.get_task_instance("sync_people")
    summary = task.xcom_pull(task_ids="sync_people")
    assert run.state == "failed"
    assert (summary["added"], summary["failed"]) == (3, 1)
    assert "Account not found: unknown.example" in json.dumps(summary["failure_reasons"])
