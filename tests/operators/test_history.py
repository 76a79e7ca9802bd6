"""A List operator's run history: one row a run in a warehouse table, through an Airflow
connection (SQLite, PostgreSQL), and through ``--history-url`` on the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from listsync.cli import main
from listsync.operators.people import SyncTargetablePeopleOperator

from ..support import LiveEmulator
from ..support.tenants import PEOPLE_API_KEY as API_KEY
from ..support.tenants import PEOPLE_TABLE as TABLE

COLUMN_MAP = {"domain": "account_domain", "email": "email", "first": "first_name", "title": "title"}
NIGHTS = [
    "domain,email,first,title\nacme.com,ann@acme.com,Ann,CTO\nacme.com,bob@acme.com,Bob,\nbeta.io,cy@beta.io,Cy,\n",
    # Bob retitled, Dee new, a bad e-mail rejected.
    "domain,email,first,title\nacme.com,ann@acme.com,Ann,CTO\nacme.com,bob@acme.com,Bob,COO\n"
    "beta.io,cy@beta.io,Cy,\nbeta.io,dee@beta.io,Dee,\nbeta.io,not an email,Eve,\n",
    # Only Ann is left: mirror mode would delete 3 of 4, more than max_delete_fraction allows.
    "domain,email,first,title\nacme.com,ann@acme.com,Ann,CTO\n",
]


@pytest.fixture(params=["sqlite", "postgresql"])
def warehouse(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str]]:
    """(SQLAlchemy URL, history table) of a warehouse, also the Airflow connection ``warehouse``."""
    table = f"listsync_runs_{uuid.uuid4().hex[:8]}"
    if request.param == "sqlite":
        database = tmp_path / "warehouse.db"
        monkeypatch.setenv(
            "AIRFLOW_CONN_WAREHOUSE", json.dumps({"conn_type": "sqlite", "host": str(database)})
        )
        yield f"sqlite:///{database}", table
        return
    url = sa.engine.make_url(request.getfixturevalue("postgres_url"))
    connection = {"conn_type": "postgres", "host": url.host, "port": url.port, "login": url.username}
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps({**connection, "schema": url.database}))
    yield url.render_as_string(hide_password=False), table
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
    engine.dispose()


def history(url: str, table: str) -> list[dict[str, Any]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY started_at")).mappings().all()
    finally:
        engine.dispose()
    return [dict(row) for row in rows]


def check_row(row: dict[str, Any], summary: dict[str, Any], state: str) -> None:
    """The history row holds the run's state and every count of its summary."""
    assert row["state"] == state and row["table_id"] == TABLE and row["job"] == "people"
    counts = {
        name: value
        for name, value in summary.items()
        if isinstance(value, int) and not isinstance(value, bool)
    }
    assert counts and {name: row[name] for name in counts} == counts
    assert row["requests_total"] == summary["requests"]["total"]
    assert json.loads(row["summary"]) == summary


@pytest.mark.slow
def test_three_nights_of_a_dag_leave_three_rows_that_match_their_summaries(
    run_dag: Callable[[Any], Any],
    people_emulator: LiveEmulator,
    tmp_path: Path,
    connect_listsync: Callable[..., None],
    warehouse: tuple[str, str],
) -> None:
    from airflow.sdk import DAG

    url, table = warehouse
    people_emulator.seed(TABLE, {"domain": "acme.com"}, {"domain": "beta.io"})
    connect_listsync(people_emulator.url, API_KEY, "usr_people")
    extract = tmp_path / "contacts.csv"
    with DAG("people_history", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
        SyncTargetablePeopleOperator(
            task_id="sync_people",
            table_id=TABLE,
            source=str(extract),
            column_map=COLUMN_MAP,
            mode="mirror",
            delete_scope="list",
            max_delete_fraction=0.5,
            history_conn_id="warehouse",
            history_table=table,
            retries=0,
        )

    summaries, states = [], []
    for night in NIGHTS:
        extract.write_text(night, encoding="utf-8")
        run = run_dag(dag)
        states.append(run.state)
        summaries.append(run.get_task_instance("sync_people").xcom_pull(task_ids="sync_people"))

    assert states == ["success", "success", "failed"]
    rows = history(url, table)
    assert len(rows) == 3
    for row, summary in zip(rows[:2], summaries[:2], strict=True):
        check_row(row, summary, "success")
    assert (summaries[1]["added"], summaries[1]["updated"], summaries[1]["rejected"]) == (1, 1, 1)
    # Refused before any write: no summary, the reason kept.
    assert rows[2]["state"] == "failed" and rows[2]["summary"] is None
    assert "Refusing to delete 3 of 4 people" in rows[2]["error"]
    assert {(row["dag_id"], row["task_id"]) for row in rows} == {("people_history", "sync_people")}
    assert len({row["airflow_run_id"] for row in rows}) == 3


@pytest.mark.slow
def test_a_task_names_each_person_it_could_not_write_in_its_outcomes_file_and_table(
    run_dag: Callable[[Any], Any],
    people_emulator: LiveEmulator,
    tmp_path: Path,
    connect_listsync: Callable[..., None],
    warehouse: tuple[str, str],
) -> None:
    from airflow.sdk import DAG

    url, table = warehouse
    outcomes_table = table.replace("runs", "outcomes")
    people_emulator.seed(TABLE, {"domain": "acme.com"})
    connect_listsync(people_emulator.url, API_KEY, "usr_people")
    extract = tmp_path / "contacts.csv"
    # Cy and Dee are of an account the List has no row for.
    extract.write_text(NIGHTS[1].replace("beta.io,not an email,Eve,\n", ""), encoding="utf-8")
    with DAG(
        "people_outcomes",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        params={"folder": str(tmp_path)},
    ) as dag:
        SyncTargetablePeopleOperator(
            task_id="sync_people",
            table_id=TABLE,
            source=str(extract),
            column_map=COLUMN_MAP,
            outcomes_path="{{ params.folder }}/outcomes-{{ ds_nodash }}.jsonl",
            history_conn_id="warehouse",
            history_table=table,
            history_outcomes_table=outcomes_table,
            retries=0,
        )

    engine = sa.create_engine(url)
    try:
        assert run_dag(dag).state == "failed"
        [row] = history(url, table)
        summary = json.loads(row["summary"])
        lines = [json.loads(line) for line in Path(summary["outcomes_path"]).read_text().splitlines()]
        with engine.connect() as conn:
            copied = conn.execute(sa.text(f"SELECT * FROM {outcomes_table}")).mappings().all()
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {outcomes_table}"))
        engine.dispose()

    held = {row.cells["domain"] for row in people_emulator.state.lists[TABLE].rows.values()}
    extract_people = [line.split(",")[:2] for line in extract.read_text().splitlines()[1:]]
    assert sorted(line["identity"] for line in lines) == sorted(
        f"email:{email}" for domain, email in extract_people if domain not in held
    )
    assert {(line["status"], line["curable"]) for line in lines} == {(404, False)}
    assert Path(summary["outcomes_path"]).parent == tmp_path and row["failed_permanent"] == 2
    assert "2 failed permanently" in row["error"] and "re-run" not in row["error"]
    assert sorted((c["run_id"], c["identity"], c["status"]) for c in copied) == sorted(
        (row["run_id"], line["identity"], 404) for line in lines
    )


def test_the_command_line_records_its_runs_without_printing_the_url(
    people_emulator: LiveEmulator,
    tmp_path: Path,
    warehouse: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, table = warehouse
    people_emulator.seed(TABLE, {"domain": "acme.com"}, {"domain": "beta.io"})
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    monkeypatch.setenv("LISTSYNC_HISTORY_URL", url)
    extract = tmp_path / "contacts.csv"
    summaries = []
    for night in NIGHTS[:2]:
        extract.write_text(night, encoding="utf-8")
        command = ["sync-people", "--base-url", people_emulator.url, "--user-id", "usr_people"]
        command += ["--table-id", TABLE, "--source", str(extract), "--no-state", "--history-table", table]
        command += [item for source, field in COLUMN_MAP.items() for item in ("--map", f"{source}={field}")]
        assert main(command) == 0
        summaries.append(json.loads(capsys.readouterr().out))

    rows = history(url, table)
    assert [row["state"] for row in rows] == ["success", "success"]
    for row, summary in zip(rows, summaries, strict=True):
        check_row(row, summary, "success")
        assert row["dag_id"] is None


@pytest.mark.parametrize("debug", [False, True], ids=["one line", "--debug"])
def test_a_history_database_that_is_down_is_one_warning_line_and_the_run_succeeds(
    people_emulator: LiveEmulator, tmp_path: Path, debug: bool
) -> None:
    people_emulator.seed(TABLE, {"domain": "acme.com"}, {"domain": "beta.io"})
    (tmp_path / "contacts.csv").write_text(NIGHTS[0], encoding="utf-8")
    command = [sys.executable, "-m", "listsync.cli", "sync-people", "--base-url", people_emulator.url]
    command += ["--user-id", "usr_people", "--table-id", TABLE, "--source", str(tmp_path / "contacts.csv")]
    command += [item for source, field in COLUMN_MAP.items() for item in ("--map", f"{source}={field}")]
    # Nothing listens on port 9: the history's database is down.
    command += ["--no-state", "--history-table", "runs", "--history-url", "postgresql://127.0.0.1:9/x"]
    env = {**os.environ, "LISTSYNC_API_KEY": API_KEY}

    run = subprocess.run(
        [*command, *(["--debug"] if debug else [])],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["added"] == 3
    warnings = [line for line in run.stderr.splitlines() if "history table" in line]
    assert len(warnings) == 1 and "OperationalError" in warnings[0], run.stderr
    assert warnings[0].startswith("listsync sync-people: The run ") and "sync's outcome stands" in warnings[0]
    assert ("Traceback" in run.stderr) is debug, run.stderr
    if not debug:  # besides the progress lines
        progress = ("Plan for", " applied (")
        assert [line for line in run.stderr.splitlines() if not any(p in line for p in progress)] == warnings


def test_history_options_that_do_not_go_together_exit_2(
    people_emulator: LiveEmulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    monkeypatch.delenv("LISTSYNC_HISTORY_URL", raising=False)
    (tmp_path / "contacts.csv").write_text(NIGHTS[0], encoding="utf-8")
    command = ["sync-people", "--base-url", people_emulator.url, "--table-id", TABLE]
    command += [
        "--source",
        str(tmp_path / "contacts.csv"),
        "--map",
        "domain=account_domain",
        "--map",
        "first=first_name",
    ]

    assert main([*command, "--history-table", "runs"]) == 2
    assert "--history-table needs --history-url" in capsys.readouterr().err


def test_an_operator_with_a_history_table_and_no_connection_fails_at_parse_time() -> None:
    with pytest.raises(ValueError, match="history_table needs history_conn_id"):
        SyncTargetablePeopleOperator(
            task_id="t", table_id=TABLE, column_map=COLUMN_MAP, source="x.csv", history_table="runs"
        )
