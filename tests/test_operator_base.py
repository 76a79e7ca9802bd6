"""What the three operators share through ListSyncExtractOperator."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from listsync.operators.people import SyncTargetablePeopleOperator
from listsync.operators.rows import UpsertRowsOperator
from listsync.operators.signals import IngestSignalsOperator

SQL_EXTRACT = {"sql": "queries/accounts.sql", "sql_conn_id": "warehouse"}

OPERATORS: dict[str, tuple[type[Any], dict[str, Any]]] = {
    "people": (
        SyncTargetablePeopleOperator,
        {"table_id": "tbl_1", "column_map": {"domain": "account_domain", "email": "email"}},
    ),
    "rows": (
        UpsertRowsOperator,
        {"table_id": "tbl_1", "key_column": "domain", "column_map": {"domain": "domain"}},
    ),
    "signals": (
        IngestSignalsOperator,
        {"signal": "visit", "identity_type": "account", "identity_id_column": "id"},
    ),
}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_a_sql_file_is_rendered_in_every_operator(name: str, tmp_path: Path) -> None:
    from airflow.sdk import DAG

    (tmp_path / "queries").mkdir()
    (tmp_path / "queries" / "accounts.sql").write_text("SELECT * FROM accounts WHERE day = '{{ ds }}'")
    operator_class, options = OPERATORS[name]
    with DAG(f"sql_file_{name}", schedule=None, template_searchpath=str(tmp_path)):
        operator = operator_class(task_id="job", **SQL_EXTRACT, **options)

    assert ".sql" in operator.template_ext
    operator.resolve_template_files()
    assert operator.sql == "SELECT * FROM accounts WHERE day = '{{ ds }}'"
    operator.render_template_fields({"ds": "2026-01-02", "params": {}, "logical_date": datetime(2026, 1, 2)})
    assert operator.sql == "SELECT * FROM accounts WHERE day = '2026-01-02'"
