"""OpenLineage of the operators, compared with the OpenLineage client's own models.

``get_openlineage_facets_on_complete`` is what Airflow's OpenLineage integration calls when a task
succeeds; its inputs are the extract (a file, or the tables of a query), its output what the task
wrote at the service, in the namespace the ``listsync`` Asset URIs convert to.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import sql_job

from listsync.operators import (
    IngestSignalsOperator,
    SplitPeopleOperator,
    SyncTargetablePeopleOperator,
    UpsertRowsOperator,
)

SERVICE = "listsync://127.0.0.1:8080"
PEOPLE_COLUMNS = {"website": "account_domain", "first": "first_name"}


@pytest.fixture(autouse=True)
def listsync_default(connect_listsync):
    """The service the operators write to: http://127.0.0.1:8080 (nothing is sent to it)."""
    connect_listsync("http://127.0.0.1:8080", "sk_test_lineage")


def rows_operator(**extract: Any) -> UpsertRowsOperator:
    return UpsertRowsOperator(
        task_id="rows",
        table_id="tbl_accounts",
        key_column="domain",
        column_map={"website": "domain"},
        **extract,
    )


def test_a_people_sync_reads_its_local_file_and_writes_its_list(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    operator = SyncTargetablePeopleOperator(
        task_id="people", table_id="tbl_accounts", source="contacts.csv", column_map=PEOPLE_COLUMNS
    )

    lineage = operator.get_openlineage_facets_on_complete(task_instance=None)

    assert lineage.inputs == [Dataset(namespace="file", name=str(Path.cwd() / "contacts.csv"))]
    assert lineage.outputs == [Dataset(namespace=SERVICE, name="tbl_accounts")]
    assert lineage.job_facets == {}


def test_a_split_reads_its_file_and_the_list_and_writes_nothing_at_the_service(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    operator = SplitPeopleOperator(
        task_id="split",
        table_id="tbl_accounts",
        source="contacts.csv",
        column_map=PEOPLE_COLUMNS,
        shards=4,
        parts_path="parts",
    )

    lineage = operator.get_openlineage_facets_on_complete(task_instance=None)

    assert lineage.inputs == [
        Dataset(namespace="file", name=str(Path.cwd() / "contacts.csv")),
        Dataset(namespace=SERVICE, name="tbl_accounts"),
    ]
    assert lineage.outputs == []


@pytest.mark.parametrize(
    ("source", "dataset"),
    [
        # The connection of the store (aws_default@) is not part of the data's name.
        (
            "s3://aws_default@exports/accounts/2026-11-21.parquet",
            ("s3://exports", "accounts/2026-11-21.parquet"),
        ),
        ("gs://exports/accounts.csv", ("gs://exports", "accounts.csv")),
        ("file:///data/accounts.csv", ("file", "/data/accounts.csv")),
        ("/data/accounts.csv", ("file", "/data/accounts.csv")),
    ],
)
def test_a_file_extract_is_named_by_its_store_and_path(source, dataset):
    namespace, name = dataset

    lineage = rows_operator(source=source).get_openlineage_facets_on_complete(task_instance=None)

    assert lineage.inputs == [Dataset(namespace=namespace, name=name)]


def test_a_query_on_sqlite_reads_the_tables_it_names(tmp_path, monkeypatch):
    # SQLite's hook tells OpenLineage nothing about its database: the connection names it.
    database = tmp_path / "warehouse.db"
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps({"conn_type": "sqlite", "host": str(database)}))
    query = "SELECT a.website, c.email FROM crm_accounts a JOIN crm.contacts c ON c.account_id = a.account_id"

    lineage = rows_operator(sql=query, sql_conn_id="warehouse").get_openlineage_facets_on_complete(None)

    assert lineage.inputs == [
        Dataset(namespace=f"sqlite://{database}", name="crm_accounts"),
        Dataset(namespace=f"sqlite://{database}", name="crm.contacts"),
    ]
    assert lineage.outputs == [Dataset(namespace=SERVICE, name="tbl_accounts")]
    assert lineage.job_facets == {"sql": sql_job.SQLJobFacet(query=query)}


def test_a_query_on_postgresql_reads_its_tables_in_the_databases_namespace(postgres_url, monkeypatch):
    from sqlalchemy.engine import make_url

    url = make_url(postgres_url)
    connection = {"conn_type": "postgres", "host": url.host, "port": url.port, "login": url.username}
    monkeypatch.setenv("AIRFLOW_CONN_CRM_PG", json.dumps({**connection, "schema": url.database}))
    query = "SELECT website FROM crm_accounts WHERE plan = 'team'"

    lineage = rows_operator(sql=query, sql_conn_id="crm_pg").get_openlineage_facets_on_complete(None)

    # Airflow's PostgreSQL hook names the database; its current schema qualifies the table.
    assert lineage.inputs == [
        Dataset(namespace=f"postgres://{url.host}:{url.port}", name=f"{url.database}.public.crm_accounts")
    ]
    assert lineage.outputs == [Dataset(namespace=SERVICE, name="tbl_accounts")]
    assert lineage.job_facets["sql"] == sql_job.SQLJobFacet(query=query)


def test_an_ingestion_writes_to_the_services_event_intake():
    operator = IngestSignalsOperator(
        task_id="events",
        source="s3://exports/events.parquet",
        signal_column="signal",
        identity_type="account",
        identity_id_column="account_id",
    )

    lineage = operator.get_openlineage_facets_on_complete(task_instance=None)

    assert lineage.inputs == [Dataset(namespace="s3://exports", name="events.parquet")]
    assert lineage.outputs == [Dataset(namespace=SERVICE, name="events")]


@pytest.mark.parametrize(
    "operator",
    [
        rows_operator(source="accounts.csv", dry_run=True),
        SyncTargetablePeopleOperator(
            task_id="people", table_id="t", source="c.csv", column_map=PEOPLE_COLUMNS, dry_run=True
        ),
        IngestSignalsOperator(
            task_id="events",
            source="e.csv",
            signal="s",
            identity_type="account",
            identity_id_column="id",
            dry_run=True,
        ),
    ],
    ids=["rows", "people", "events"],
)
def test_a_dry_run_reads_its_extract_and_writes_nothing(operator):
    lineage = operator.get_openlineage_facets_on_complete(task_instance=None)

    assert [dataset.name for dataset in lineage.inputs] == [str(Path.cwd() / operator.source)]
    assert lineage.outputs == []


def test_the_lists_asset_is_the_dataset_the_operators_write():
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset
    from airflow.sdk import Asset

    operator = rows_operator(source="accounts.csv")
    (written,) = operator.get_openlineage_facets_on_complete(task_instance=None).outputs

    assert (
        translate_airflow_asset(Asset("listsync://127.0.0.1:8080/tbl_accounts"), lineage_context=None)
        == written
    )


def test_without_the_openlineage_provider_there_is_no_lineage(monkeypatch):
    # None in sys.modules makes the import fail as if the provider were not installed.
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.extractors", None)
    monkeypatch.delitem(sys.modules, "listsync.operators.lineage", raising=False)

    assert rows_operator(source="accounts.csv").get_openlineage_facets_on_complete(task_instance=None) is None
