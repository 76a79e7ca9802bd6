"""OpenLineage of the operators: the extract a task read, and what it wrote at the service.

Inputs, the extract:

- a ``source`` file is one dataset named by its location: namespace ``file`` and the absolute
  path for a local file (a path or a ``file://`` URI), ``s3://<bucket>`` (``gs://<bucket>``...)
  and the key for object storage;
- a ``sql`` query gives the tables it reads, found by the SQL parser of Airflow's OpenLineage
  provider, in the namespace of ``sql_conn_id``'s database as its hook names it
  (``postgres://<host>:<port>``, tables ``<database>.<schema>.<table>``). A hook that tells
  OpenLineage nothing about its database (SQLite's) gets ``<connection type>://<host>`` and the
  tables as the query names them. The query is the job's ``sql`` facet.

Output, in the namespace ``listsync://<host of the listsync connection>`` (that of the
``listsync`` Asset URIs, :mod:`listsync.assets`): the List, named by its ``tableId``, for the
people and rows syncs; ``events``, the service's signal event intake, for an ingestion (events are
not stored in a List; the signal slugs come from the rows). A dry run writes nothing and reports
no output. The plan and rejects files are the task's reports about its run, not reported.

This module needs Airflow's OpenLineage provider (``apache-airflow-providers-openlineage``);
the operators import it only when that is installed.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import Dataset

from listsync.assets import service_namespace
from listsync.operators.extract import check_extract_arguments, storage_path

__all__ = ["extract_lineage", "file_dataset", "service_dataset", "sql_lineage"]


def service_dataset(base_url: str, name: str) -> Dataset:
    """What a task wrote at the service at ``base_url``: a List by its ``tableId``, or ``events``."""
    return Dataset(namespace=service_namespace(base_url), name=name)


def extract_lineage(*, source: str | None, sql: str | None, sql_conn_id: str | None) -> OperatorLineage:
    """The datasets an extract reads (``source``, or ``sql`` on ``sql_conn_id``), as inputs."""
    check_extract_arguments(source, sql, sql_conn_id)
    if sql is not None and sql_conn_id is not None:
        return sql_lineage(sql, sql_conn_id)
    assert source is not None  # check_extract_arguments guarantees it
    return OperatorLineage(inputs=[file_dataset(source)])


def file_dataset(source: str) -> Dataset:
    """The dataset of an extract file: a local path, or an object-storage URI (whose
    ``conn_id@`` is the store's connection, not part of the name)."""
    path = storage_path(source)
    if isinstance(path, Path):
        return Dataset(namespace="file", name=os.path.abspath(path))
    if path.protocol == "file":
        return Dataset(namespace="file", name=f"/{path.key.lstrip('/')}")
    return Dataset(namespace=path.namespace, name=path.key)


def sql_lineage(sql: str, sql_conn_id: str) -> OperatorLineage:
    """The tables ``sql`` reads, as inputs in the namespace of ``sql_conn_id``'s database, and
    the query as the job's ``sql`` facet. The database is not asked for the tables' schemas."""
    from airflow.providers.openlineage.sqlparser import (
        DatabaseInfo,
        SQLParser,
        get_openlineage_facets_with_sql,
    )
    from airflow.sdk import BaseHook
    from openlineage.client.facet_v2 import sql_job

    hook = BaseHook.get_hook(sql_conn_id)
    lineage = get_openlineage_facets_with_sql(
        hook=hook, sql=sql, conn_id=sql_conn_id, database=None, use_connection=False
    )
    if lineage is not None:
        return lineage
    # The hook gives no OpenLineage database info (SQLite's does not): name the database by
    # its connection, and the tables as the query writes them (their schema is not known).
    connection = hook.get_connection(sql_conn_id)
    namespace = SQLParser.create_namespace(
        DatabaseInfo(scheme=connection.conn_type, authority=connection.host or None)
    )
    parsed = SQLParser(dialect="generic").parse(SQLParser.split_sql_string(sql))
    tables = parsed.in_tables if parsed is not None else []
    return OperatorLineage(
        inputs=[Dataset(namespace=namespace, name=table.qualified_name) for table in tables],
        job_facets={"sql": sql_job.SQLJobFacet(query=SQLParser.normalize_sql(sql))},
    )
