"""Parsing the DAGs stays cheap: building the operators and parsing dags/ imports no data library.

The DAG processor imports every DAG file again and again; pandas, NumPy, PyArrow and
phonenumbers are for the task that runs, not for the parse. Each test runs in a fresh
interpreter, so what the rest of the suite imported does not hide an import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

HEAVY = ("pandas", "numpy", "pyarrow", "phonenumbers", "sqlalchemy")

# Prints, as JSON, which packages of argv[2] (a JSON list) are loaded after ``import airflow.sdk``
# alone (the baseline), and after running the code given as argv[1] too.
PROBE = """
import json, sys
watched = set(json.loads(sys.argv[2]))
loaded = lambda: sorted({name.split(".")[0] for name in sys.modules} & watched)
import airflow.sdk
baseline = loaded()
exec(sys.argv[1])
print(json.dumps({"baseline": baseline, "after": loaded()}))
"""

BUILD_EVERY_OPERATOR = """
from listsync.operators import IngestSignalsOperator, SyncTargetablePeopleOperator, UpsertRowsOperator

SyncTargetablePeopleOperator(
    task_id="people", table_id="tbl", source="people.csv", mode="mirror", chunk_size={"add": 10},
    column_map={"domain": "account_domain", "first": "first_name"}, naive_timezone="Europe/Paris",
)
UpsertRowsOperator(
    task_id="rows", table_id="tbl", key_column="domain", column_map={"website": "domain"},
    sql="SELECT website FROM accounts", sql_conn_id="warehouse", chunk_size=100, encoding="latin-1",
)
IngestSignalsOperator(
    task_id="events", source="s3://aws_default@bucket/events.parquet", signal_column="signal",
    identity_type="account", identity_id_column="id", data_columns=["seats"], batch_size=50,
)
"""

PARSE_EVERY_DAG = f"""
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder={str(REPO / "dags")!r})
assert not bag.import_errors, bag.import_errors
assert len(bag.dag_ids) == {len(list((REPO / "dags").glob("*.py")))}, bag.dag_ids
"""


def heavy_imports(code: str, tmp_path: Path) -> dict[str, list[str]]:
    """The heavy packages loaded by ``import airflow.sdk`` alone, and after ``code`` too."""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, code, json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize("code", [BUILD_EVERY_OPERATOR, PARSE_EVERY_DAG], ids=["operators", "dags"])
def test_building_the_operators_and_parsing_the_dags_imports_no_heavy_package(code, tmp_path):
    loaded = heavy_imports(code, tmp_path)

    # Airflow itself imports SQLAlchemy (its ORM) before any of our code runs: that is the
    # baseline. Whatever else appears was imported by our operators or DAGs.
    assert loaded["baseline"] == ["sqlalchemy"]
    assert loaded["after"] == loaded["baseline"]
