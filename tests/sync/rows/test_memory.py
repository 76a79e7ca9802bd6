"""upsert_rows with ``max_memory``: the List's rows count as they are read, with the columns mapped."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from listsync.cli import main
from listsync.operators.rows import UpsertRowsOperator
from listsync.sync.memory import BASE_MEMORY, MemoryLimitError, rows_costs
from listsync.sync.rows import upsert_rows
from listsync.sync.settings import SyncSettings

from ...support import LiveEmulator
from ...support.tenants import ROW_WRITES
from ...support.tenants import ROWS_SECRET as SECRET
from ...support.tenants import ROWS_TABLE as TABLE
from ...support.tenants import ROWS_USER as USER

COLUMN_MAP = {"Domain": "domain", "Name": "name", "Owner": "owner"}
GET_ROWS = "GET /v1/lists/{tableId}/rows"


def limit(extract_rows: int, list_rows: int, writes: int = 0) -> int:
    """A max_memory that holds exactly this many extract and List rows of COLUMN_MAP's columns,
    and planned writes."""
    costs = rows_costs(len(COLUMN_MAP))
    reading = extract_rows * costs.extract + list_rows * costs.listed
    return BASE_MEMORY + max(reading, writes * costs.written)


def extract(rows: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "Domain": [f"new{number}.io" for number in range(rows)],
            "Name": [f"New {number}" for number in range(rows)],
            "Owner": ["ann"] * rows,
        }
    )


@pytest.fixture
def seeded(emulator: LiveEmulator) -> LiveEmulator:
    emulator.seed(TABLE, *({"domain": f"d{number}.io", "name": f"D {number}"} for number in range(20)))
    return emulator


def test_too_big_a_list_fails_while_read_and_writes_nothing(seeded: LiveEmulator) -> None:
    with seeded.client() as client, pytest.raises(MemoryLimitError) as failure:
        upsert_rows(
            client,
            TABLE,
            [extract(3)],
            key_column="domain",
            column_map=COLUMN_MAP,
            settings=SyncSettings(max_memory=limit(3, 12)),
        )

    message = str(failure.value)
    assert message.startswith("the rows upsert of tbl_rows_upsert would need about ")
    assert "for 3 extract rows and 13 List rows so far" in message and 'shard="i/n"' in message
    assert sum(seeded.requests(*ROW_WRITES).values()) == 0


def test_an_upsert_under_the_limit_runs(seeded: LiveEmulator) -> None:
    with seeded.client() as client:
        summary = upsert_rows(
            client,
            TABLE,
            [extract(3)],
            key_column="domain",
            column_map=COLUMN_MAP,
            settings=SyncSettings(max_memory=limit(3, 20, writes=3)),
        )

    assert (summary["added"], summary["list_rows"]) == (3, 20)
    assert seeded.stats.requests[GET_ROWS] >= 1


def test_the_command_exits_1_with_one_line_naming_the_shard_option(
    seeded: LiveEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", SECRET)
    extract(3).to_csv(tmp_path / "accounts.csv", index=False)
    options = [
        *("upsert-rows", "--base-url", seeded.url, "--user-id", USER, "--table-id", TABLE),
        *("--key-column", "domain", "--source", str(tmp_path / "accounts.csv")),
        *(f"--map={column}={column_id}" for column, column_id in COLUMN_MAP.items()),
    ]

    assert main([*options, "--max-memory", str(limit(3, 12))]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("listsync upsert-rows: the rows upsert of tbl_rows_upsert")
    assert "13 List rows so far" in lines[0] and 'split it with shard="i/n"' in lines[0]

    assert main([*options, "--max-memory", "off", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["planned"]["add_rows"] == 3
    assert main([*options, "--max-memory", "a lot"]) == 2


def test_the_operator_refuses_a_bad_size_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match="max_memory must be a number of bytes"):
        UpsertRowsOperator(
            task_id="t",
            table_id=TABLE,
            key_column="domain",
            column_map=COLUMN_MAP,
            source="x.csv",
            max_memory="big",
        )
