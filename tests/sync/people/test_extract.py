"""The operators' extract parameters: source or sql + sql_conn_id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from listsync.operators.extract import (
    check_extract_arguments,
    read_operator_extract,
    sql_engine,
    storage_path,
)


@pytest.mark.parametrize(
    ("source", "sql", "sql_conn_id", "message"),
    [
        (None, None, None, "got neither"),
        ("a.csv", "select 1", "db", "got both"),
        (None, "select 1", None, "sql= needs sql_conn_id="),
        (None, "select 1", "", "sql= needs sql_conn_id="),
        ("a.csv", None, "db", "sql_conn_id= is only used with sql="),
    ],
)
def test_the_extract_must_be_named_exactly_once(
    source: str | None, sql: str | None, sql_conn_id: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_extract_arguments(source, sql, sql_conn_id)


@pytest.mark.parametrize(("source", "sql", "sql_conn_id"), [("a.csv", None, None), (None, "select 1", "db")])
def test_one_extract_is_accepted(source: str | None, sql: str | None, sql_conn_id: str | None) -> None:
    check_extract_arguments(source, sql, sql_conn_id)


def test_a_plain_path_stays_local(tmp_path: Path) -> None:
    assert storage_path(str(tmp_path / "a.csv")) == tmp_path / "a.csv"


def test_a_uri_opens_through_object_storage(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("email\nann@acme.com\n")

    opened = storage_path(f"file://{tmp_path / 'a.csv'}")

    assert type(opened).__name__ == "ObjectStoragePath"
    with opened.open("r") as handle:
        assert handle.read() == "email\nann@acme.com\n"


def test_sql_engine_comes_from_the_airflow_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "crm.db"
    monkeypatch.setenv("AIRFLOW_CONN_CRM_DB", json.dumps({"conn_type": "sqlite", "host": str(database)}))

    engine = sql_engine("crm_db")
    try:
        assert engine.url.database == str(database)
    finally:
        engine.dispose()


def test_a_connection_without_sqlalchemy_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_NOT_A_DB", json.dumps({"conn_type": "fs", "extra": {"path": "/"}}))

    with pytest.raises(ValueError, match=r"'not_a_db' has hook .* no SQLAlchemy engine"):
        sql_engine("not_a_db")


def _rows(frames: Any) -> list[dict[str, Any]]:
    return [row for frame in frames for row in frame.to_dict("records")]


@pytest.mark.parametrize("as_uri", [False, True])
def test_a_file_extract_is_read_from_a_path_or_a_uri(tmp_path: Path, as_uri: bool) -> None:
    (tmp_path / "contacts.csv").write_text("email,zip\nann@acme.com,007\n", encoding="utf-8")
    source = f"file://{tmp_path / 'contacts.csv'}" if as_uri else str(tmp_path / "contacts.csv")

    rows = _rows(read_operator_extract(source=source, sql=None, sql_conn_id=None, chunk_size=10))

    assert rows == [{"email": "ann@acme.com", "zip": "007"}]


def test_a_sql_extract_runs_on_the_connections_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3
    from contextlib import closing

    database = tmp_path / "crm.db"
    with closing(sqlite3.connect(database)) as connection, connection:
        connection.execute("create table contacts (email text, score integer)")
        connection.execute("insert into contacts values ('ann@acme.com', 3), ('bob@acme.com', null)")
    monkeypatch.setenv("AIRFLOW_CONN_CRM_DB", json.dumps({"conn_type": "sqlite", "host": str(database)}))

    rows = _rows(
        read_operator_extract(source=None, sql="select * from contacts order by email", sql_conn_id="crm_db")
    )

    assert rows == [{"email": "ann@acme.com", "score": 3}, {"email": "bob@acme.com", "score": None}]


def test_reading_checks_the_arguments_too() -> None:
    with pytest.raises(ValueError, match="got both"):
        read_operator_extract(source="a.csv", sql="select 1", sql_conn_id="db")


@pytest.fixture
def engines_of_reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The engines ``read_operator_extract`` gets from ``sql_conn_id``, kept to look at after the read."""
    from listsync.operators import extract

    engines: list[Any] = []
    original = extract.sql_engine

    def recorded(sql_conn_id: str) -> Any:
        engines.append(original(sql_conn_id))
        return engines[-1]

    monkeypatch.setattr(extract, "sql_engine", recorded)
    return engines


def _pool_is_empty(engine: Any) -> bool:
    # A pool still holding the query's connection closes it only when garbage collected, with a
    # ResourceWarning (an error in this suite).
    return bool(engine.pool.checkedin() == 0 and engine.pool.checkedout() == 0)


@pytest.mark.postgres
def test_a_sql_extract_leaves_no_postgres_connection_open(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, engines_of_reads: list[Any]
) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(postgres_url)
    connection = {"conn_type": "postgres", "host": url.host, "port": url.port, "login": url.username}
    monkeypatch.setenv("AIRFLOW_CONN_CRM_PG", json.dumps({**connection, "schema": url.database}))

    frames = read_operator_extract(
        source=None, sql="select n from generate_series(1, 5) as n", sql_conn_id="crm_pg", chunk_size=2
    )

    assert [row["n"] for row in _rows(frames)] == [1, 2, 3, 4, 5]
    (engine,) = engines_of_reads
    assert _pool_is_empty(engine)


def test_a_sql_extract_given_up_half_way_leaves_no_connection_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engines_of_reads: list[Any]
) -> None:
    import sqlite3
    from contextlib import closing

    database = tmp_path / "crm.db"
    with closing(sqlite3.connect(database)) as connection, connection:
        connection.execute("create table contacts (email text)")
        connection.executemany("insert into contacts values (?)", [("ann@acme.com",), ("bob@acme.com",)])
    monkeypatch.setenv("AIRFLOW_CONN_CRM_DB", json.dumps({"conn_type": "sqlite", "host": str(database)}))
    frames = read_operator_extract(
        source=None, sql="select * from contacts order by email", sql_conn_id="crm_db", chunk_size=1
    )

    assert next(frames)["email"].tolist() == ["ann@acme.com"]
    frames.close()  # what the garbage collector does to a read given up half-way

    (engine,) = engines_of_reads
    assert _pool_is_empty(engine)
