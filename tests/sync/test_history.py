"""record_run: real sync runs recorded in SQLite and PostgreSQL, read back and compared with their
summaries; failed runs, rejects, tables made by an older listsync, two runs creating one table."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from listsync.client import ListSyncClient
from listsync.emulator import FaultRule
from listsync.sync.history import COUNT_COLUMNS, MAX_ERROR_LENGTH, SyncRun, record_run
from listsync.sync.lease import Lease
from listsync.sync.people import sync_people
from listsync.sync.rows import upsert_rows
from listsync.sync.settings import SyncMode, SyncSettings
from listsync.sync.state import FileStateStore
from listsync.sync.steps import SyncFailedError

from ..support import LiveEmulator, read_jsonl
from ..support.tenants import PEOPLE_TABLE, ROWS_TABLE, people_in_list

UTC = timezone.utc
START = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
PEOPLE_MAP = {
    "Company Domain": "account_domain",
    "Email": "email",
    "First": "first_name",
    "Last": "last_name",
    "Title": "title",
}
ANN = {"Company Domain": "acme.com", "Email": "ann@acme.com", "First": "Ann", "Last": "Lee", "Title": "CTO"}
BOB = {"Company Domain": "acme.com", "Email": "bob@acme.com", "First": "Bob", "Last": "Ray", "Title": None}
CY = {"Company Domain": "beta.io", "Email": "cy@beta.io", "First": "Cy", "Last": "Doe", "Title": "VP"}
DEE = {"Company Domain": "gamma.org", "Email": "dee@gamma.org", "First": "Dee", "Last": "Fox", "Title": None}
BAD_EMAIL = {
    "Company Domain": "gamma.org",
    "Email": "not-an-email",
    "First": "Eve",
    "Last": "Gold",
    "Title": None,
}
LOG = "listsync.sync.history"


@dataclass
class Warehouse:
    """A database for one test, with the names of its runs, rejects and outcomes tables (dropped
    after)."""

    engine: sa.engine.Engine
    runs: str
    rejects: str
    outcomes: str

    def read(self, table: str, order_by: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            reflected = sa.Table(table, sa.MetaData(), autoload_with=conn)
            query = sa.select(reflected).order_by(reflected.c[order_by])
            return [dict(row._mapping) for row in conn.execute(query)]

    def run_rows(self) -> list[dict[str, Any]]:
        return self.read(self.runs, "started_at")

    def reject_rows(self) -> list[dict[str, Any]]:
        return self.read(self.rejects, "row_number")


@contextmanager
def warehouse_at(url: str) -> Iterator[Warehouse]:
    suffix = uuid.uuid4().hex[:8]
    engine = sa.create_engine(url)
    made = Warehouse(
        engine, f"listsync_runs_{suffix}", f"listsync_rejects_{suffix}", f"listsync_outcomes_{suffix}"
    )
    try:
        yield made
    finally:
        with engine.begin() as conn:
            for name in (made.runs, made.rejects, made.outcomes):
                conn.execute(sa.text(f"drop table if exists {name}"))
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Warehouse]:
    """A SQLite file, then the PostgreSQL test database."""
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
    with warehouse_at(url) as made:
        yield made


@pytest.fixture
def sqlite_warehouse(tmp_path: Path) -> Iterator[Warehouse]:
    with warehouse_at(f"sqlite:///{tmp_path / 'warehouse.db'}") as made:
        yield made


@pytest.fixture
def postgres_warehouse(postgres_url: str) -> Iterator[Warehouse]:
    with warehouse_at(postgres_url) as made:
        yield made


def people(*records: dict[str, Any]) -> list[pd.DataFrame]:
    # dtype=object, as read_extract gives: None stays None.
    return [pd.DataFrame(list(records), columns=list(PEOPLE_MAP), dtype=object)]


def utc(moment: datetime) -> datetime:
    """A time read back, in UTC (SQLite gives back the UTC time it stored, naive)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def top_level_counts(summary: Mapping[str, Any]) -> set[str]:
    return {name for name, value in summary.items() if isinstance(value, int) and not isinstance(value, bool)}


def assert_row_holds(row: dict[str, Any], run: SyncRun) -> None:
    """The row's counts are the summary's, NULL where it has none, and its JSON is the summary."""
    summary = run.summary
    assert summary is not None
    assert top_level_counts(summary) <= set(COUNT_COLUMNS), "a summary count has no column"
    expected = {name: summary.get(name) for name in COUNT_COLUMNS}
    expected["requests_total"] = summary["requests"]["total"]
    assert {name: row[name] for name in COUNT_COLUMNS} == expected
    assert json.loads(row["summary"]) == summary
    assert (row["run_id"], row["job"], row["table_id"], row["state"]) == (
        run.run_id,
        run.job,
        run.table_id,
        run.state,
    )
    assert (utc(row["started_at"]), utc(row["finished_at"])) == (run.started_at, run.finished_at)


def test_three_people_runs_are_recorded_with_their_summaries(
    warehouse: Warehouse, people_client: ListSyncClient, tmp_path: Path
) -> None:
    runs = []
    extracts: list[tuple[SyncMode, list[pd.DataFrame]]] = [
        ("upsert", people(ANN, BOB, CY, BAD_EMAIL)),
        ("upsert", people({**ANN, "Title": "CEO"}, BOB, CY, DEE)),
        ("mirror", people({**ANN, "Title": "CEO"}, CY, DEE)),
    ]
    # The second run starts in another time zone: read back in order only if stored in UTC.
    starts = [
        START,
        datetime(2027, 1, 15, 10, 30, tzinfo=timezone(timedelta(hours=2))),
        START + timedelta(hours=1),
    ]
    for number, ((mode, frames), started) in enumerate(zip(extracts, starts, strict=True), 1):
        summary = sync_people(
            people_client,
            PEOPLE_TABLE,
            frames,
            PEOPLE_MAP,
            mode=mode,
            settings=SyncSettings(rejects_path=tmp_path / f"rejects-{number}.jsonl", max_delete_fraction=0.5),
        )
        run = SyncRun(
            "people",
            PEOPLE_TABLE,
            "success",
            started,
            started + timedelta(minutes=5),
            summary,
            dag_id="crm_sync",
            task_id="sync_people",
            airflow_run_id=f"scheduled__2027-01-1{number}",
        )
        record_run(warehouse.engine, warehouse.runs, run)
        runs.append(run)

    rows = warehouse.run_rows()

    assert [row["run_id"] for row in rows] == [run.run_id for run in runs]
    for row, run in zip(rows, runs, strict=True):
        assert_row_holds(row, run)
    assert [(row["added"], row["updated"], row["deleted"], row["rejected"]) for row in rows] == [
        (3, 0, 0, 1),
        (1, 1, 0, 0),
        (0, 0, 1, 0),
    ]
    assert [row["mode"] for row in rows] == ["upsert", "upsert", "mirror"]
    assert [(row["dry_run"], row["shard"], row["error"]) for row in rows] == [(False, None, None)] * 3
    assert [(row["dag_id"], row["task_id"], row["airflow_run_id"]) for row in rows] == [
        ("crm_sync", "sync_people", f"scheduled__2027-01-1{number}") for number in (1, 2, 3)
    ]
    # The rows upsert's counts stay empty in a people run's row.
    assert {(row["list_rows"], row["cells_updated"], row["read_requests"]) for row in rows} == {
        (None, None, None)
    }


def test_a_run_that_waited_for_the_lease_records_whom_it_waited_for_and_how_long(
    warehouse: Warehouse, people_client: ListSyncClient, tmp_path: Path
) -> None:
    holder = Lease(
        FileStateStore(tmp_path / "people.state").lease(f"people-{PEOPLE_TABLE}-all"), "the nightly run"
    )
    holder.take()
    threading.Timer(0.5, holder.release).start()

    summary = sync_people(
        people_client,
        PEOPLE_TABLE,
        people(ANN),
        PEOPLE_MAP,
        settings=SyncSettings(state_path=tmp_path / "people.state"),
    )
    record_run(
        warehouse.engine, warehouse.runs, SyncRun("people", PEOPLE_TABLE, "success", START, START, summary)
    )

    (row,) = warehouse.run_rows()
    assert row["lease_waited_for"] == summary["lease_waited_for"]
    assert str(row["lease_waited_for"]).startswith("the nightly run since ")
    assert row["lease_wait_seconds"] == summary["lease_wait_seconds"] >= 0.4
    assert row["lease_held_by"] is None


def test_a_rows_upsert_is_recorded_with_its_summary(
    warehouse: Warehouse, rows_emulator: LiveEmulator
) -> None:
    rows_emulator.seed(ROWS_TABLE, {"domain": "acme.com", "name": "Acme", "arr": 1})
    frames = [
        pd.DataFrame(
            [
                {"Domain": "acme.com", "Name": "Acme Inc", "ARR": 1},
                {"Domain": "beta.io", "Name": "Beta", "ARR": 5},
            ],
            dtype=object,
        )
    ]
    with rows_emulator.client() as client:
        summary = upsert_rows(
            client,
            ROWS_TABLE,
            frames,
            key_column="domain",
            column_map={"Domain": "domain", "Name": "name", "ARR": "arr"},
        )
    run = SyncRun("rows", ROWS_TABLE, "success", START, START + timedelta(seconds=3), summary)

    record_run(warehouse.engine, warehouse.runs, run)

    [row] = warehouse.run_rows()
    assert_row_holds(row, run)
    assert (row["added"], row["updated"], row["cells_updated"], row["deleted"]) == (1, 1, 1, 0)
    assert row["read_requests"] == summary["read_requests"] > 0
    assert (row["mode"], row["conflicts"], row["list_people"]) == ("upsert", None, None)


def test_a_failed_sync_is_recorded_with_its_summary_and_error(
    warehouse: Warehouse, people_client: ListSyncClient
) -> None:
    unknown = {**BOB, "Company Domain": "unknown.example", "Email": "bob@unknown.example"}
    with pytest.raises(SyncFailedError) as caught:
        sync_people(people_client, PEOPLE_TABLE, people(ANN, unknown), PEOPLE_MAP)
    failure = caught.value
    run = SyncRun(
        "people",
        PEOPLE_TABLE,
        "failed",
        START,
        START + timedelta(minutes=1),
        failure.summary,
        error=str(failure),
    )

    record_run(warehouse.engine, warehouse.runs, run)

    [row] = warehouse.run_rows()
    assert_row_holds(row, run)
    assert (row["state"], row["added"], row["failed"]) == ("failed", 1, 1)
    assert row["error"] == str(failure)
    assert "Account not found: unknown.example" in row["error"]


def test_a_run_failed_before_its_summary_keeps_its_error_on_one_cut_line(
    sqlite_warehouse: Warehouse,
) -> None:
    error = "Could not read the extract:\n  people.csv: no such file\n" + "x" * 5000
    run = SyncRun("rows", ROWS_TABLE, "failed", START, START, error=error)

    record_run(sqlite_warehouse.engine, sqlite_warehouse.runs, run)

    [row] = sqlite_warehouse.run_rows()
    assert row["error"].startswith("Could not read the extract: people.csv: no such file xxx")
    assert len(row["error"]) == MAX_ERROR_LENGTH and row["error"].endswith("…")
    assert (row["summary"], row["mode"], row["dry_run"]) == (None, None, None)
    assert {row[name] for name in COUNT_COLUMNS} == {None}


def test_the_rejects_of_a_run_are_copied_to_the_rejects_table(
    warehouse: Warehouse, people_client: ListSyncClient, tmp_path: Path
) -> None:
    no_name = {"Company Domain": "beta.io", "Email": None, "First": None, "Last": None, "Title": "Zoë"}
    rejects_path = tmp_path / "rejects.jsonl"
    summary = sync_people(
        people_client,
        PEOPLE_TABLE,
        people(ANN, BAD_EMAIL, CY, no_name),
        PEOPLE_MAP,
        settings=SyncSettings(rejects_path=rejects_path),
    )
    run = SyncRun("people", PEOPLE_TABLE, "success", START, START, summary)

    record_run(warehouse.engine, warehouse.runs, run, rejects_table=warehouse.rejects)

    rejects = read_jsonl(rejects_path)
    assert [reject["row"] for reject in rejects] == [2, 4]
    copied = warehouse.reject_rows()
    assert [
        (row["run_id"], row["row_number"], json.loads(row["reasons"]), json.loads(row["original"]))
        for row in copied
    ] == [(run.run_id, reject["row"], reject["reasons"], reject["original"]) for reject in rejects]
    assert warehouse.run_rows()[0]["rejected"] == 2


def test_the_outcomes_of_runs_are_copied_to_the_outcomes_table_keyed_to_each_run(
    warehouse: Warehouse,
    people_client: ListSyncClient,
    people_emulator: LiveEmulator,
    rows_emulator: LiveEmulator,
    tmp_path: Path,
) -> None:
    # People of an account the List has no row for, and rows whose adds the service fails.
    nowhere = [{**person, "Company Domain": "nowhere.example"} for person in (ANN, BOB)]
    people_path, rows_path = tmp_path / "people.outcomes.jsonl", tmp_path / "rows.outcomes.jsonl"
    people_run = SyncRun(
        "people",
        PEOPLE_TABLE,
        "success",
        START,
        START,
        sync_people(
            people_client,
            PEOPLE_TABLE,
            people(*nowhere, CY),
            PEOPLE_MAP,
            settings=SyncSettings(outcomes_path=people_path, fail_on_error=False),
        ),
    )
    rows_emulator.faults.add([FaultRule(endpoint="POST /v1/lists/{tableId}/rows", kind="error")])
    with rows_emulator.client(sleep=lambda seconds: None) as client:
        rows_summary = upsert_rows(
            client,
            ROWS_TABLE,
            [pd.DataFrame([{"Domain": "a.io", "Name": "A"}, {"Domain": "b.io", "Name": "B"}])],
            key_column="domain",
            column_map={"Domain": "domain", "Name": "name"},
            settings=SyncSettings(outcomes_path=rows_path, fail_on_error=False, verify_timeout=0),
        )
    rows_run = SyncRun("rows", ROWS_TABLE, "success", START, START + timedelta(seconds=1), rows_summary)

    for run in (people_run, rows_run):
        record_run(warehouse.engine, warehouse.runs, run, outcomes_table=warehouse.outcomes)

    # The lines name what the List lacks: the people of an account it has no row for, the rows.
    listed = people_in_list(people_emulator)
    people_lines, rows_lines = read_jsonl(people_path), read_jsonl(rows_path)
    assert (
        sorted(line["identity"] for line in people_lines)
        == sorted(
            f"email:{person['Email']}" for person in (*nowhere, CY) if person["Company Domain"] not in listed
        )
        == ["email:ann@acme.com", "email:bob@acme.com"]
    )
    assert (
        sorted(line["key"] for line in rows_lines)
        == sorted({"a.io", "b.io"} - {row["domain"] for row in rows_emulator.rows(ROWS_TABLE)})
        == ["a.io", "b.io"]
    )
    assert {(line["status"], line["curable"]) for line in people_lines} == {(404, False)}
    assert {(line["status"], line["curable"]) for line in rows_lines} == {(500, True)}
    fields = ("outcome", "action", "account_domain", "identity", "key", "row_id", "plan_line", "status")
    copied = [
        (row["run_id"], *(row[name] for name in fields), row["message"], bool(row["curable"]))
        for row in warehouse.read(warehouse.outcomes, "run_id")
    ]
    assert sorted(copied, key=str) == sorted(
        [
            (run.run_id, *(line.get(name) for name in fields), line["message"], line["curable"])
            for run, lines in ((people_run, people_lines), (rows_run, rows_lines))
            for line in lines
        ],
        key=str,
    )
    counts = [(row["failed"], row["failed_permanent"], row["failed_curable"]) for row in warehouse.run_rows()]
    assert counts == [(2, 2, 0), (2, 0, 2)]


def test_a_large_rejects_file_is_copied_whole(sqlite_warehouse: Warehouse, tmp_path: Path) -> None:
    # More than two batches, the last one partial.
    rejects_path = tmp_path / "rejects.jsonl"
    with rejects_path.open("w", encoding="utf-8") as handle:
        for number in range(1, 2501):
            handle.write(json.dumps({"row": number, "reasons": ["bad"], "original": {"n": number}}) + "\n")
    summary = {"table_id": PEOPLE_TABLE, "rejected": 2500, "rejects_path": str(rejects_path)}
    run = SyncRun("people", PEOPLE_TABLE, "success", START, START, summary)

    record_run(sqlite_warehouse.engine, sqlite_warehouse.runs, run, rejects_table=sqlite_warehouse.rejects)

    copied = sqlite_warehouse.reject_rows()
    assert [row["row_number"] for row in copied] == list(range(1, 2501))
    assert json.loads(copied[-1]["original"]) == {"n": 2500}


@pytest.mark.parametrize(
    ("rejects_path", "said"), [("s3://bucket/rejects.jsonl", "not one local file"), ("gone.jsonl", "is gone")]
)
def test_rejects_that_cannot_be_read_here_are_skipped_with_a_warning(
    sqlite_warehouse: Warehouse,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    rejects_path: str,
    said: str,
) -> None:
    where = rejects_path if "://" in rejects_path else str(tmp_path / rejects_path)
    summary = {"table_id": PEOPLE_TABLE, "rejected": 1, "rejects_path": where}
    run = SyncRun("people", PEOPLE_TABLE, "success", START, START, summary)

    with caplog.at_level(logging.WARNING, logger=LOG):
        record_run(
            sqlite_warehouse.engine, sqlite_warehouse.runs, run, rejects_table=sqlite_warehouse.rejects
        )

    assert [row["rejected"] for row in sqlite_warehouse.run_rows()] == [1]
    assert sqlite_warehouse.reject_rows() == []
    [warning] = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert where in warning and said in warning


def test_a_table_of_an_older_listsync_gets_the_columns_it_has_and_a_warning(
    warehouse: Warehouse, caplog: pytest.LogCaptureFixture
) -> None:
    timestamp = "timestamptz" if warehouse.engine.dialect.name == "postgresql" else "timestamp"
    with warehouse.engine.begin() as conn:
        conn.execute(
            sa.text(
                f"create table {warehouse.runs} (run_id varchar(250) primary key, job varchar(16), "
                f"table_id varchar(250), state varchar(16), started_at {timestamp}, "
                f"finished_at {timestamp}, added bigint, summary text)"
            )
        )
    summary = {"table_id": PEOPLE_TABLE, "added": 2, "failed": 0, "requests": {"add": 1, "total": 1}}
    run = SyncRun("people", PEOPLE_TABLE, "success", START, START + timedelta(seconds=1), summary)

    with caplog.at_level(logging.WARNING, logger=LOG):
        record_run(warehouse.engine, warehouse.runs, run)

    [row] = warehouse.run_rows()
    assert (row["run_id"], row["added"], json.loads(row["summary"])) == (run.run_id, 2, summary)
    assert utc(row["started_at"]) == START
    [warning] = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warehouse.runs in warning
    missing = warning.split("lacks the column(s) ")[1].split(" (")[0].split(", ")
    assert "failed" in missing and "requests_total" in missing and "mode" in missing
    assert "added" not in missing and "run_id" not in missing


def test_a_table_without_run_id_is_refused(sqlite_warehouse: Warehouse) -> None:
    with sqlite_warehouse.engine.begin() as conn:
        conn.execute(sa.text(f"create table {sqlite_warehouse.runs} (id integer, added bigint)"))
    run = SyncRun("people", PEOPLE_TABLE, "success", START, START, {"added": 1})

    with pytest.raises(ValueError, match=f"{sqlite_warehouse.runs} exists without a run_id column"):
        record_run(sqlite_warehouse.engine, sqlite_warehouse.runs, run)

    with sqlite_warehouse.engine.connect() as conn:
        assert conn.execute(sa.text(f"select count(*) from {sqlite_warehouse.runs}")).scalar() == 0


@pytest.mark.postgres
def test_a_run_that_loses_the_race_to_create_the_table_records_into_the_winners(
    postgres_warehouse: Warehouse,
) -> None:
    engine, table = postgres_warehouse.engine, postgres_warehouse.runs
    run = SyncRun("people", PEOPLE_TABLE, "success", START, START, {"added": 1})
    errors: list[BaseException] = []

    def record() -> None:
        try:
            record_run(engine, table, run)
        except BaseException as error:  # handed to the test's thread
            errors.append(error)

    with engine.connect() as winner:
        # Another run's CREATE, not committed yet: the recording waits on it, then fails to create.
        transaction = winner.begin()
        winner.execute(
            sa.text(
                f"create table {table} (run_id varchar(250) primary key, job varchar(16), "
                "table_id varchar(250), state varchar(16), started_at timestamptz, finished_at timestamptz, "
                "added bigint)"
            )
        )
        recording = threading.Thread(target=record)
        recording.start()
        wait_until_waiting_on_a_lock(engine, table)
        transaction.commit()
    recording.join(timeout=10)

    assert not recording.is_alive() and errors == []
    assert [(row["run_id"], row["added"]) for row in postgres_warehouse.run_rows()] == [(run.run_id, 1)]


def wait_until_waiting_on_a_lock(engine: sa.engine.Engine, table: str) -> None:
    deadline = time.monotonic() + 10
    query = sa.text(
        "select count(*) from pg_stat_activity where wait_event_type = 'Lock' and query like :table"
    )
    with engine.connect() as conn:
        while conn.execute(query, {"table": f"%{table}%"}).scalar() == 0:
            assert time.monotonic() < deadline, "the recording never waited on the other run's CREATE"
            time.sleep(0.02)
            conn.rollback()


def test_a_run_is_checked_when_made() -> None:
    with pytest.raises(ValueError, match="started_at must be time zone aware"):
        SyncRun("people", PEOPLE_TABLE, "success", datetime(2027, 1, 15), START)
    with pytest.raises(ValueError, match="not of 'tbl_other'"):
        SyncRun("people", "tbl_other", "success", START, START, {"table_id": PEOPLE_TABLE})
    with pytest.raises(ValueError, match="state must be one of success, failed"):
        SyncRun("people", PEOPLE_TABLE, "done", START, START)  # type: ignore[arg-type]
