"""``listsync upsert-rows`` against the emulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from listsync.cli import main
from listsync.emulator import FaultRule

from ..support import LiveEmulator, read_jsonl
from ..support.tenants import ROW_WRITES
from ..support.tenants import ROWS_SECRET as SECRET
from ..support.tenants import ROWS_TABLE as TABLE
from ..support.tenants import ROWS_USER as USER


def upsert_rows(rows_emulator: LiveEmulator, source: Path, *extra: str) -> int:
    return main(
        [
            "upsert-rows",
            "--base-url",
            rows_emulator.url,
            "--user-id",
            USER,
            "--table-id",
            TABLE,
            "--key-column",
            "domain",
            "--source",
            str(source),
            "--map",
            "Domain=domain",
            "--map",
            "ARR=arr",
            "--map",
            "Meta=metadata",
            "--json-column",
            "Meta",
            "--json-column",
            "ARR",
            *extra,
        ]
    )


@pytest.fixture
def accounts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LISTSYNC_API_KEY", SECRET)
    source = tmp_path / "accounts.csv"
    source.write_text(
        'Domain,ARR,Meta\nacme.com,100,"{""tier"": 1}"\nhttps://Beta.io/,2.5,\n', encoding="utf-8"
    )
    return source


def test_upsert_rows_writes_then_reruns_without_writes(
    rows_emulator: LiveEmulator, accounts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert upsert_rows(rows_emulator, accounts) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["added"] == 2 and summary["requests"]["total"] == 1
    # CSV cells are text; --json-column parses ARR into numbers and Meta into an object.
    assert rows_emulator.rows(TABLE) == [
        {"domain": "acme.com", "arr": 100, "metadata": {"tier": 1}},
        {"domain": "beta.io", "arr": 2.5},
    ]

    rows_emulator.stats.clear()
    assert upsert_rows(rows_emulator, accounts, "--chunk-size", "update_cells=10") == 0
    assert json.loads(capsys.readouterr().out)["unchanged"] == 2
    assert sum(rows_emulator.requests(*ROW_WRITES).values()) == 0


def test_dry_run_prints_the_plan_counts_and_writes_nothing(
    rows_emulator: LiveEmulator, accounts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.jsonl"
    assert upsert_rows(rows_emulator, accounts, "--dry-run", "--plan-path", str(plan)) == 0
    assert json.loads(capsys.readouterr().out)["planned"]["add_rows"] == 2
    assert [entry["key"] for entry in read_jsonl(plan)] == ["acme.com", "beta.io"]
    assert rows_emulator.rows(TABLE) == []


def test_update_only_updates_the_rows_held_and_adds_none(
    rows_emulator: LiveEmulator, accounts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows_emulator.seed(TABLE, {"domain": "acme.com", "arr": 5})
    assert upsert_rows(rows_emulator, accounts, "--mode", "update_only") == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["updated"], summary["added"], summary["not_added"]) == (1, 0, 1)
    assert rows_emulator.rows(TABLE) == [{"domain": "acme.com", "arr": 100, "metadata": {"tier": 1}}]


def test_unsafe_deletes_exit_1_without_writing(
    rows_emulator: LiveEmulator, accounts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows_emulator.seed(TABLE, {"domain": "gone.io"}, {"domain": "acme.com"})
    assert upsert_rows(rows_emulator, accounts, "--delete-missing") == 1
    assert "Refusing to delete 1 of 2 rows" in capsys.readouterr().err
    assert sum(rows_emulator.requests(*ROW_WRITES).values()) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--chunk-size", "add_rows=501"), "chunk_size for add_rows must be between 1 and 500"),
        (("--sql", "select 1"), "give --source FILE, or --sql QUERY with --sql-url URL"),
        (("--mode", "update_only", "--delete-missing"), "mode 'update_only' never does"),
    ],
)
def test_bad_arguments_exit_2(
    rows_emulator: LiveEmulator,
    accounts: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    message: str,
) -> None:
    assert upsert_rows(rows_emulator, accounts, *extra) == 2
    assert message in capsys.readouterr().err


def test_a_missing_api_key_exits_2(
    rows_emulator: LiveEmulator,
    accounts: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("LISTSYNC_API_KEY")
    assert upsert_rows(rows_emulator, accounts) == 2
    assert "no API key" in capsys.readouterr().err


def test_a_wrong_api_key_is_never_printed(
    rows_emulator: LiveEmulator,
    accounts: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", "sk_wrong_secret_value")
    assert upsert_rows(rows_emulator, accounts) == 1
    output = capsys.readouterr()
    assert "Invalid API key" in output.err
    assert "sk_wrong_secret_value" not in output.out + output.err


def test_rows_that_fail_are_named_in_the_outcomes_file_permanent_apart_from_transient(
    rows_emulator: LiveEmulator,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", SECRET)
    rows_emulator.seed(TABLE, {"domain": "acme.com", "arr": 1})
    # The service fails every cell update; it refuses a text in the number column.
    rows_emulator.faults.add([FaultRule(endpoint="PATCH /v1/lists/{tableId}/cells", kind="error")])
    source = tmp_path / "accounts.csv"
    source.write_text('Domain,ARR,Meta\nacme.com,100,\nbad.io,"""lots""",\n', encoding="utf-8")
    outcomes, database = tmp_path / "outcomes.jsonl", tmp_path / "history.db"

    status = upsert_rows(
        rows_emulator,
        source,
        "--outcomes-path",
        str(outcomes),
        "--verify-timeout",
        "0",
        "--history-table",
        "runs",
        "--history-url",
        f"sqlite:///{database}",
        "--history-outcomes-table",
        "outcomes",
    )

    err = capsys.readouterr().err
    assert status == 1
    assert f"1 failed permanently (1 x POST /v1/lists/{TABLE}/rows -> 400: " in err
    assert f"1 failed on transient errors (1 x outcome unknown (PATCH /v1/lists/{TABLE}/cells -> 500: " in err
    assert "re-run to retry them" in err
    shown = {row["domain"]: row for row in rows_emulator.rows(TABLE)}
    expected = {
        ("add", "bad.io", 400, False) if "bad.io" not in shown else None,
        ("update", "acme.com", 500, True) if shown["acme.com"]["arr"] == 1 else None,
    }
    lines = read_jsonl(outcomes)
    assert {(line["action"], line["key"], line["status"], line["curable"]) for line in lines} == expected
    with sa.create_engine(f"sqlite:///{database}").connect() as conn:
        copied = conn.execute(sa.text("select key, status from outcomes order by key")).all()
    assert [tuple(row) for row in copied] == [("acme.com", 500), ("bad.io", 400)]
