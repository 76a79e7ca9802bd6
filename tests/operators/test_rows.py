"""UpsertRowsOperator through Airflow: ``dag.test()`` against the emulator, from PostgreSQL and CSV."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from listsync.client.errors import BadRequestError
from listsync.emulator import FaultRule
from listsync.operators.rows import UpsertRowsOperator
from listsync.sync.rows import cell_values_equal

from ..support import LiveEmulator
from ..support.tenants import ROW_WRITES
from ..support.tenants import ROWS_SECRET as SECRET
from ..support.tenants import ROWS_TABLE as TABLE
from ..support.tenants import ROWS_USER as USER

UTC = dt.timezone.utc
POST_ROWS = "POST /v1/lists/{tableId}/rows"
GET_ROWS = "GET /v1/lists/{tableId}/rows"
WAREHOUSE_COLUMNS = {
    "website": "domain",
    "company": "name",
    "arr": "arr",
    "tier": "plan",
    "owner": "owner",
    "health": "health_score",
    "meta": "metadata",
    "renewal": "renewal_date",
    "last_seen": "last_seen",
}


def rows_dag(dag_id: str, **operator_options: Any) -> Any:
    from airflow.sdk import DAG

    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=dt.datetime(2026, 1, 1, tzinfo=UTC),
        params={"table_id": TABLE},
    ) as dag:
        UpsertRowsOperator(
            task_id="upsert_rows", table_id="{{ params.table_id }}", key_column="domain", **operator_options
        )
    return dag


def by_domain(rows_emulator: LiveEmulator) -> dict[str, dict[str, Any]]:
    rows = rows_emulator.rows(TABLE)
    counts = Counter(row["domain"] for row in rows)
    assert all(count == 1 for count in counts.values()), f"duplicate rows: {counts}"
    return {row["domain"]: row for row in rows}


# --- the operator itself ---------------------------------------------------------------------


def test_extract_arguments_are_checked_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match="exactly one extract"):
        UpsertRowsOperator(
            task_id="t",
            table_id=TABLE,
            key_column="domain",
            column_map={},
            source="a.csv",
            sql="select 1",
            sql_conn_id="db",
        )


def test_templated_fields_are_the_documented_ones() -> None:
    operator = UpsertRowsOperator(
        task_id="t", table_id="{{ x }}", key_column="domain", column_map={"a": "domain"}, source="{{ y }}"
    )
    assert set(operator.template_fields) == {
        "table_id",
        "column_map",
        "source",
        "sql",
        "rejects_path",
        "plan_path",
        "outcomes_path",
        "report_path",
        "state_path",
        "user_id",
        "shard",
        "mode",
        "max_delete_fraction",
        "is_dry_run",
        "approved_plan",
    }
    assert all(hasattr(operator, name) for name in operator.template_fields)


def test_user_id_overrides_the_connection_user(
    rows_emulator: LiveEmulator, connect_listsync: Callable[..., None], tmp_path: Path
) -> None:
    connect_listsync(rows_emulator.url, SECRET, USER)
    source = tmp_path / "accounts.csv"
    source.write_text("Domain\nacme.com\n")
    operator = UpsertRowsOperator(
        task_id="t",
        table_id=TABLE,
        key_column="domain",
        column_map={"Domain": "domain"},
        source=str(source),
        user_id="usr_other",
    )
    with pytest.raises(BadRequestError, match="User not found: usr_other"):
        operator.execute({})
    assert SECRET not in json.dumps(operator.template_fields)


# --- end to end through Airflow --------------------------------------------------------------


@pytest.fixture
def warehouse_table(postgres_url: str) -> Iterator[tuple[str, Any]]:
    """A PostgreSQL table of accounts with numeric, jsonb, date, timestamptz and non-Latin text."""
    import sqlalchemy as sa

    name = f"rows_upsert_accounts_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"create table {name} (account_id bigint primary key, website text, company text, "
                "arr numeric(14, 2), tier text, owner text, health double precision, meta jsonb, "
                "renewal date, last_seen timestamptz)"
            )
        )
        conn.execute(
            sa.text(
                f"insert into {name} values "
                "(1, 'https://www.Acme.com/', 'Acme Ünïcode 株式会社', 1200.50, 'team', 'ann', 0.9, "
                """ '{"region": "emea", "tags": ["a", "b"], "n": {"x": 1.5}}', '2027-01-31', """
                "'2026-11-20 10:00:00+02'), "
                "(2, 'beta.io', 'Beta', 300.00, 'free', null, 42, '[1, 2, 3]', null, null), "
                "(3, 'gamma.dev', 'Gamma', null, 'enterprise', 'bo', null, null, '2026-12-01', null)"
            )
        )
    try:
        yield name, engine
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"drop table if exists {name}"))
        engine.dispose()


@pytest.mark.slow
@pytest.mark.postgres
def test_dag_upserts_a_postgres_table_then_reruns_without_writes(
    rows_emulator: LiveEmulator,
    warehouse_table: tuple[str, Any],
    postgres_url: str,
    run_dag: Callable[..., Any],
    connect_listsync: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    import sqlalchemy as sa

    table, engine = warehouse_table
    connect_listsync(rows_emulator.url, SECRET, USER)
    # The Airflow connection names the same database as the fixture, in the URI form Airflow takes.
    warehouse = sa.engine.make_url(postgres_url).set(drivername="postgresql")
    monkeypatch.setenv("AIRFLOW_CONN_ROWS_WAREHOUSE", warehouse.render_as_string(hide_password=False))
    rows_emulator.seed(TABLE, {"domain": "stale.io", "name": "Stale"})
    dag = rows_dag(
        "rows_upsert_postgres",
        column_map=WAREHOUSE_COLUMNS,
        sql="select * from {{ params.source_table }} order by account_id",
        sql_conn_id="rows_warehouse",
        delete_missing=True,
        max_delete_fraction=1.0,
        plan_path=str(tmp_path / "plan-{{ ts_nodash }}.jsonl"),
    )
    dag.params["source_table"] = table

    first = run_dag(dag, logical_date=dt.datetime(2026, 11, 20, 1, tzinfo=UTC))

    assert first.state == "success"
    rows = by_domain(rows_emulator)
    assert set(rows) == {"acme.com", "beta.io", "gamma.dev"}
    acme = rows.pop("acme.com")
    assert cell_values_equal(dt.datetime(2026, 11, 20, 8, tzinfo=UTC), acme.pop("last_seen"))
    assert acme == {
        "domain": "acme.com",
        "name": "Acme Ünïcode 株式会社",
        "arr": 1200.5,
        "plan": "team",
        "owner": "ann",
        "health_score": 0.9,
        "metadata": {"region": "emea", "tags": ["a", "b"], "n": {"x": 1.5}},
        "renewal_date": "2027-01-31",
    }
    assert rows == {
        "beta.io": {
            "domain": "beta.io",
            "name": "Beta",
            "arr": 300,
            "plan": "free",
            "health_score": 42,
            "metadata": [1, 2, 3],
        },
        "gamma.dev": {
            "domain": "gamma.dev",
            "name": "Gamma",
            "plan": "enterprise",
            "owner": "bo",
            "renewal_date": "2026-12-01",
        },
    }
    assert rows_emulator.requests(*ROW_WRITES) == {
        "POST /v1/lists/{tableId}/rows": 1,
        "PATCH /v1/lists/{tableId}/cells": 0,
        "DELETE /v1/lists/{tableId}/rows": 1,
    }

    rows_emulator.stats.clear()
    second = run_dag(dag, logical_date=dt.datetime(2026, 11, 21, 1, tzinfo=UTC))
    assert second.state == "success"
    assert sum(rows_emulator.requests(*ROW_WRITES).values()) == 0
    assert (tmp_path / "plan-20261121T010000.jsonl").read_text() == ""

    with engine.begin() as conn:
        conn.execute(sa.text(f"update {table} set arr = 310, meta = '[1, 2]' where account_id = 2"))
        conn.execute(sa.text(f"delete from {table} where account_id = 3"))
    third = run_dag(dag, logical_date=dt.datetime(2026, 11, 22, 1, tzinfo=UTC))
    assert third.state == "success"
    assert rows_emulator.requests(*ROW_WRITES) == {
        "POST /v1/lists/{tableId}/rows": 0,
        "PATCH /v1/lists/{tableId}/cells": 1,
        "DELETE /v1/lists/{tableId}/rows": 1,
    }
    rows = by_domain(rows_emulator)
    assert set(rows) == {"acme.com", "beta.io"}
    assert (rows["beta.io"]["arr"], rows["beta.io"]["metadata"]) == (310, [1, 2])


@pytest.mark.slow
def test_dag_run_with_a_dropped_row_add_ends_without_duplicates(
    rows_emulator: LiveEmulator,
    run_dag: Callable[..., Any],
    connect_listsync: Callable[..., None],
    tmp_path: Path,
) -> None:
    # A short timeout: the job waits that long (and a margin) before re-reading a lost add.
    connect_listsync(rows_emulator.url, SECRET, USER, timeout=0.5)
    source = tmp_path / "accounts.csv"
    source.write_text("Domain,Name\na.io,A\nb.io,B\nc.io,C\nd.io,D\n", encoding="utf-8")
    # The first POST rows is applied, then its connection is closed before the answer is sent.
    rows_emulator.faults.add([FaultRule(endpoint=POST_ROWS, kind="drop_after", times=1)])
    dag = rows_dag(
        "rows_upsert_dropped_add",
        column_map={"Domain": "domain", "Name": "name"},
        source=str(source),
        chunk_size=2,
    )

    run = run_dag(dag, logical_date=dt.datetime(2026, 11, 20, 1, tzinfo=UTC))

    assert run.state == "success"
    assert {domain: row["name"] for domain, row in by_domain(rows_emulator).items()} == {
        "a.io": "A",
        "b.io": "B",
        "c.io": "C",
        "d.io": "D",
    }
    # Two chunks sent once each; the dropped one's two keys re-read instead of re-sent; then one
    # read of the four written rows by id verifies them.
    assert rows_emulator.stats.requests[POST_ROWS] == 2
    assert rows_emulator.stats.requests[GET_ROWS] == 1 + 2 + 1


def test_plan_and_rejects_may_go_to_object_storage(
    rows_emulator: LiveEmulator, connect_listsync: Callable[..., None], tmp_path: Path
) -> None:
    connect_listsync(rows_emulator.url, SECRET, USER)
    source = tmp_path / "accounts.csv"
    source.write_text("Domain,Name\nacme.com,Acme\nnot a domain,Bad\n", encoding="utf-8")
    (tmp_path / "out").mkdir()  # a file:// store, like a bucket, does not create folders
    operator = UpsertRowsOperator(
        task_id="t",
        table_id=TABLE,
        key_column="domain",
        column_map={"Domain": "domain", "Name": "name"},
        source=str(source),
        plan_path=f"file://{tmp_path}/out/plan.jsonl",
        rejects_path=f"file://{tmp_path}/out/rejects.jsonl",
    )

    summary = operator.execute({})

    assert (summary["added"], summary["rejected"]) == (1, 1)
    assert summary["plan_path"].endswith("out/plan.jsonl")
    assert json.loads((tmp_path / "out" / "plan.jsonl").read_text())["key"] == "acme.com"
    reject = json.loads((tmp_path / "out" / "rejects.jsonl").read_text())
    assert reject["row"] == 2 and "not a domain" in json.dumps(reject["reasons"])
    # The report goes beside the plan, in its store.
    assert summary["report_path"] == summary["plan_path"].removesuffix(".jsonl") + ".html"
    assert "acme.com" in (tmp_path / "out" / "plan.html").read_text(encoding="utf-8")
