"""``listsync history``: the last runs of a List job from its history table, on SQLite and
PostgreSQL, rows written before the rows upsert's counts took their shared names included."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from listsync.cli import main
from listsync.sync.history import SyncRun, record_run
from listsync.sync.summary import PeopleSummary, RowsSummary

START = datetime(2026, 11, 1, 2, tzinfo=timezone.utc)


@pytest.fixture(params=["sqlite", "postgresql"])
def warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(SQLAlchemy URL, runs table) of a warehouse holding four runs: three nights of a people
    sync and a rows upsert of the second night, and a rows upsert an older listsync recorded."""
    table = f"listsync_runs_{uuid.uuid4().hex[:8]}"
    url = (
        f"sqlite:///{tmp_path / 'warehouse.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = sa.create_engine(url)
    for night, added in enumerate((3, 1, 0)):
        summary = PeopleSummary(
            table_id="tbl_people",
            mode="upsert",
            delete_scope="list",
            normalization_version="1",
            read=5,
            added=added,
        )
        started = START + timedelta(days=night)
        run = SyncRun(
            "people",
            "tbl_people",
            "success",
            started,
            started + timedelta(seconds=30),
            summary.model_dump(mode="json"),
        )
        record_run(engine, table, run)
    rows = RowsSummary(
        table_id="tbl_rows", mode="upsert", key_column="domain", normalization_version="1", added=9
    )
    started = START + timedelta(days=1, hours=1)
    record_run(
        engine, table, SyncRun("rows", "tbl_rows", "success", started, started, rows.model_dump(mode="json"))
    )
    with engine.begin() as conn:
        # What an older listsync wrote: the rows upsert's count under its old name.
        conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN rows_added BIGINT"))
        conn.execute(
            sa.text(
                f"INSERT INTO {table} (run_id, job, table_id, state, started_at, finished_at, rows_added) "
                "VALUES ('old', 'rows', 'tbl_rows', 'success', :at, :at, 4)"
            ),
            {"at": START - timedelta(days=1)},
        )
    yield url, table
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {table}"))
    engine.dispose()


def history(capsys: pytest.CaptureFixture[str], url: str, table: str, *options: str) -> tuple[int, str]:
    status = main(["history", "--history-table", table, "--history-url", url, *options])
    return status, capsys.readouterr().out


def test_the_runs_come_newest_first_one_row_a_run_old_names_read_as_today(
    warehouse: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = history(capsys, *warehouse, "--output", "json")

    assert status == 0
    runs = json.loads(out)
    assert [(run["job"], run["table_id"], run["added"]) for run in runs] == [
        ("people", "tbl_people", 0),
        ("rows", "tbl_rows", 9),
        ("people", "tbl_people", 1),
        ("people", "tbl_people", 3),
        ("rows", "tbl_rows", 4),
    ]
    assert "rows_added" not in runs[-1] and "summary" not in runs[0]
    assert runs[0]["started_at"].startswith("2026-11-03 02:00:00")


def test_a_list_a_job_and_a_limit_narrow_the_runs(
    warehouse: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = history(
        capsys, *warehouse, "--output", "json", "--job", "rows", "--table-id", "tbl_rows", "--limit", "1"
    )

    assert status == 0
    assert [(run["run_id"] != "old", run["added"]) for run in json.loads(out)] == [(True, 9)]


def test_a_table_shows_a_run_a_line(warehouse: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    status, out = history(capsys, *warehouse, "--output", "table", "--table-id", "tbl_people")

    assert status == 0
    lines = out.strip().splitlines()
    assert lines[0].split()[:6] == ["started_at", "job", "table_id", "mode", "dry_run", "state"]
    assert [re.split(r"\s{2,}", line)[0] for line in lines[1:]] == [
        "2026-11-03 02:00:00",
        "2026-11-02 02:00:00",
        "2026-11-01 02:00:00",
    ]


def test_a_table_that_is_not_there_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["history", "--history-table", "runs", "--history-url", f"sqlite:///{tmp_path / 'none.db'}"]
    )

    assert status == 2
    assert "listsync history: no table runs in sqlite:///" in capsys.readouterr().err
