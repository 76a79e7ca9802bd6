"""A List's asset event means a change: a sync that wrote emits one with its counts; a dry run and
a run with nothing to write emit none. Checked in Airflow's metadata database after real task
runs (``dag.test()``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from listsync.operators.people import SyncTargetablePeopleOperator
from listsync.operators.rows import UpsertRowsOperator

from ..support import LiveEmulator
from ..support.tenants import PEOPLE_API_KEY, PEOPLE_TABLE, ROWS_SECRET, ROWS_TABLE, ROWS_USER, rows_config

CONTACTS = "domain,email,first\nacme.com,ann@acme.com,Ann\nbeta.io,cy@beta.io,Cy\n"


def list_events(uri: str) -> list[dict[str, Any]]:
    """The asset events of ``uri`` in the metadata database, oldest first: their ``extra``."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
        return [
            dict(extra)
            for extra in session.scalars(query.where(AssetModel.uri == uri).order_by(AssetEvent.id))
        ]


@pytest.mark.slow
def test_a_people_sync_emits_its_lists_event_only_when_it_wrote(
    run_dag: Callable[..., Any],
    people_emulator: LiveEmulator,
    tmp_path: Path,
    connect_listsync: Callable[..., None],
) -> None:
    from airflow.sdk import DAG, Asset, AssetAlias

    people_emulator.seed(PEOPLE_TABLE, {"domain": "acme.com"}, {"domain": "beta.io"})
    connect_listsync(people_emulator.url, PEOPLE_API_KEY, "usr_people")
    (tmp_path / "contacts.csv").write_text(CONTACTS, encoding="utf-8")
    uri = f"listsync://api.example.com/{PEOPLE_TABLE}"
    with DAG(
        "people_asset_events",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        params={"dry_run": False},
    ) as dag:
        SyncTargetablePeopleOperator(
            task_id="sync_people",
            table_id=PEOPLE_TABLE,
            source=str(tmp_path / "contacts.csv"),
            column_map={"domain": "account_domain", "email": "email", "first": "first_name"},
            dry_run="{{ params.dry_run }}",
            inlets=[Asset(uri=uri, name="people_list")],
            outlets=[AssetAlias("people_list_changed")],
        )

    assert run_dag(dag, run_conf={"dry_run": True}).state == "success"
    assert list_events(uri) == []  # a dry run changed nothing

    assert run_dag(dag, run_conf={"dry_run": False}).state == "success"
    (event,) = list_events(uri)
    assert (event["added"], event["updated"], event["deleted"], event["requests"]) == (2, 0, 0, 1)

    assert run_dag(dag, run_conf={"dry_run": False}).state == "success"
    assert len(list_events(uri)) == 1  # nothing to write: no new event


@pytest.mark.slow
def test_each_list_of_a_mapped_upsert_gets_its_own_event(
    run_dag: Callable[..., Any],
    live_emulator: Callable[..., LiveEmulator],
    tmp_path: Path,
    connect_listsync: Callable[..., None],
) -> None:
    from airflow.sdk import DAG, AssetAlias

    config = rows_config()
    other = config.lists[0].model_copy(update={"id": "tbl_rows_other"})
    emulator = live_emulator(config.model_copy(update={"lists": [*config.lists, other]}))
    emulator.seed(ROWS_TABLE, {"domain": "gamma.org"})  # this List has its row already
    connect_listsync(emulator.url, ROWS_SECRET, ROWS_USER)
    (tmp_path / "first.csv").write_text("domain\nacme.com\nbeta.io\n", encoding="utf-8")
    (tmp_path / "second.csv").write_text("domain\ngamma.org\n", encoding="utf-8")
    with DAG("rows_asset_events", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
        UpsertRowsOperator.partial(
            task_id="upsert",
            key_column="domain",
            column_map={"domain": "domain"},
            outlets=[AssetAlias("rows_changed")],
        ).expand_kwargs(
            [
                {"table_id": other.id, "source": str(tmp_path / "first.csv")},
                {"table_id": ROWS_TABLE, "source": str(tmp_path / "second.csv")},
            ]
        )

    assert run_dag(dag).state == "success"

    host = emulator.url.split("://", 1)[1].rstrip("/")
    (event,) = list_events(f"listsync://{host}/{other.id}")
    assert event["added"] == 2
    assert list_events(f"listsync://{host}/{ROWS_TABLE}") == []  # unchanged: no event
