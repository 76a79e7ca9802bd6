"""What the three operators share through ListSyncExtractOperator."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from listsync.extract.csv_reader import ARROW_TEXT
from listsync.operators.people import SyncTargetablePeopleOperator
from listsync.operators.rows import UpsertRowsOperator
from listsync.operators.signals import IngestSignalsOperator

from ..support import read_jsonl

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


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_an_unknown_naive_timezone_fails_at_parse_time(name: str) -> None:
    operator_class, options = OPERATORS[name]
    with pytest.raises(ValueError, match="'Mars/Olympus' is not an IANA time zone name"):
        operator_class(task_id="job", source="extract.csv", naive_timezone="Mars/Olympus", **options)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_the_naive_timezone_reaches_the_extract_reader(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import listsync.extract.sources

    seen: list[Any] = []
    real_read_extract = listsync.extract.sources.read_extract

    def read_extract(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("naive_timezone"))
        return real_read_extract(*args, **kwargs)

    monkeypatch.setattr(listsync.extract.sources, "read_extract", read_extract)
    path = tmp_path / "extract.csv"
    path.write_text("domain,email,id\nacme.com,a@acme.com,1\n", encoding="utf-8")
    operator_class, options = OPERATORS[name]
    operator = operator_class(task_id="job", source=str(path), naive_timezone="Europe/Paris", **options)

    with operator.read_extract() as frames:
        assert len(pd.concat(frames)) == 1
    assert seen == ["Europe/Paris"]


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_the_people_job_reads_a_csv_as_arrow_text_and_the_others_as_python_values(
    name: str, tmp_path: Path
) -> None:
    path = tmp_path / "extract.csv"
    path.write_text("domain,email,id\nacme.com,,1\n", encoding="utf-8")
    operator_class, options = OPERATORS[name]
    operator = operator_class(task_id="job", source=str(path), **options)

    with operator.read_extract() as frames:
        (frame,) = frames
    if name == "people":  # prepared as columns: no Python string is made for a value
        assert frame.dtypes.eq(ARROW_TEXT).all() and frame["email"].isna().all()
    else:
        assert frame.dtypes.eq(object).all() and frame["email"].tolist() == [None]


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_an_extract_read_part_way_is_closed_when_its_block_ends(name: str, tmp_path: Path) -> None:
    """A job that fails after the first chunk (over max_memory, say) lets go of the file at once."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("the files a process holds open are read from /proc/self/fd (Linux)")
    path = tmp_path / "extract.csv"
    path.write_text("domain,email,id\n" + "acme.com,a@acme.com,1\n" * 10, encoding="utf-8")
    operator_class, options = OPERATORS[name]
    operator = operator_class(task_id="job", source=str(path), **options)

    def files_open() -> list[str]:
        return [os.readlink(fd) for fd in Path("/proc/self/fd").iterdir() if fd.exists()]

    with pytest.raises(RuntimeError), operator.read_extract() as frames:
        next(iter(frames))
        assert str(path) in files_open()
        raise RuntimeError("the job failed")
    assert str(path) not in files_open()


def test_ingestion_reads_text_timestamps_without_an_offset_in_the_naive_timezone(
    tmp_path: Path, prepared_events: list[Any]
) -> None:
    path = tmp_path / "events.csv"
    path.write_text("id,at\n1,2026-07-01T09:00:00\n", encoding="utf-8")
    operator = IngestSignalsOperator(
        task_id="ingest",
        source=str(path),
        signal="visit",
        identity_type="account",
        identity_id_column="id",
        timestamp_column="at",
        naive_timezone="Europe/Paris",
        dry_run=True,
    )

    assert operator.execute({})["events"] == 1  # type: ignore[arg-type]
    assert [event.timestamp for event in prepared_events] == ["2026-07-01T07:00:00.000000Z"]


def test_ingestion_writes_its_rejects_to_an_object_storage_uri(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    path.write_text("id,at\n1,2026-07-01T09:00:00Z\n,2026-07-01T09:00:00Z\n2,yesterday\n", encoding="utf-8")
    # The rejects writer creates parent folders only for local paths.
    (tmp_path / "out").mkdir()
    uri = (tmp_path / "out" / "rejects.jsonl").as_uri()
    operator = IngestSignalsOperator(
        task_id="ingest",
        source=str(path),
        signal="visit",
        identity_type="account",
        identity_id_column="id",
        timestamp_column="at",
        rejects_path=uri,
        dry_run=True,
    )

    summary = operator.execute({})  # type: ignore[arg-type]

    assert summary["rows_rejected"] == 2 and summary["events"] == 1
    assert [record["row"] for record in read_jsonl(tmp_path / "out" / "rejects.jsonl")] == [2, 3]
    assert "rejects.jsonl" in summary["rejects_path"]


@pytest.mark.parametrize("name", ["people", "rows"])
def test_trigger_params_set_the_mode_the_dry_run_and_the_delete_fraction(name: str) -> None:
    operator_class, options = OPERATORS[name]
    templated = {"mode": "{{ params.mode }}", "max_delete_fraction": "{{ params.fraction }}"}
    if name == "people":
        templated["delete_scope"] = "{{ params.scope }}"
    operator = operator_class(
        task_id="job", source="extract.csv", dry_run="{{ params.dry_run }}", **templated, **options
    )
    params = {"mode": "update_only", "dry_run": True, "fraction": 0.25, "scope": "list"}

    operator.render_template_fields({"params": params, "ds": "2026-01-02"})

    settings = operator.sync_settings({"params": params})
    assert (settings.dry_run, settings.max_delete_fraction, operator.mode) == (True, 0.25, "update_only")
    assert name == "rows" or operator.delete_scope == "list"


@pytest.mark.parametrize(
    ("parameter", "value", "message"),
    [
        ("dry_run", "perhaps", "dry_run must be true or false; got 'perhaps'"),
        ("max_delete_fraction", "a tenth", "max_delete_fraction must be a number; got 'a tenth'"),
        ("max_delete_fraction", "1.5", "max_delete_fraction"),
    ],
)
def test_a_rendered_setting_that_makes_no_sense_fails_the_task_clearly(
    parameter: str, value: str, message: str
) -> None:
    operator_class, options = OPERATORS["people"]
    operator = operator_class(
        task_id="job", source="extract.csv", **{parameter: "{{ params.value }}"}, **options
    )
    operator.render_template_fields({"params": {"value": value}})

    with pytest.raises(ValueError, match=message):
        operator.sync_settings({"params": {}})


@pytest.mark.parametrize("name", ["people", "rows"])
def test_an_unknown_mode_fails_when_the_dag_is_parsed(name: str) -> None:
    operator_class, options = OPERATORS[name]
    with pytest.raises(ValueError, match="mode must be one of"):
        operator_class(task_id="job", source="extract.csv", mode="replace", **options)


def test_rows_deletes_go_with_the_upsert_mode_alone() -> None:
    operator_class, options = OPERATORS["rows"]
    with pytest.raises(ValueError, match="delete_missing deletes rows, which mode 'insert_only' never does"):
        operator_class(
            task_id="job", source="extract.csv", mode="insert_only", delete_missing=True, **options
        )
