"""What the three job commands share through listsync.commands.common: bad arguments exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from listsync.cli import main

COMMANDS = {
    "sync-people": [
        "sync-people",
        "--table-id",
        "tbl_1",
        "--map",
        "domain=account_domain",
        "--map",
        "email=email",
        "--map",
        "first=first_name",
    ],
    "upsert-rows": ["upsert-rows", "--table-id", "tbl_1", "--key-column", "domain", "--map", "domain=domain"],
    "ingest": ["ingest", "--signal", "visit", "--identity-type", "account", "--identity-id-column", "id"],
}
SERVICE = ["--base-url", "http://127.0.0.1:9", "--api-key", "sk_test"]


@pytest.fixture
def extract(tmp_path: Path) -> Path:
    path = tmp_path / "extract.csv"
    path.write_text("domain,email,id\nacme.com,a@acme.com,1\n", encoding="utf-8")
    return path


def usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``listsync argv``, check it exits 2 printing nothing on stdout, return its one-line message."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_missing_source_file_exits_2_naming_it(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.csv"
    message = usage_error(capsys, [*COMMANDS[command], "--source", str(missing), *SERVICE])
    assert message.startswith(f"listsync {command}: ") and str(missing) in message


@pytest.mark.parametrize("command", ["sync-people", "upsert-rows"])
@pytest.mark.parametrize(
    ("option", "value"),
    [("--max-delete-fraction", "1.5"), ("--max-delete-fraction", "-0.1"), ("--max-reject-fraction", "2")],
)
def test_a_fraction_outside_0_to_1_exits_2(
    command: str, option: str, value: str, extract: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    message = usage_error(capsys, [*COMMANDS[command], "--source", str(extract), option, value, *SERVICE])
    assert option in message and "between 0 and 1" in message


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_naive_timezone_exits_2(
    command: str, extract: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*COMMANDS[command], "--source", str(extract), "--naive-timezone", "Mars/Olympus", *SERVICE]
    message = usage_error(capsys, argv)
    assert "--naive-timezone" in message and "'Mars/Olympus'" in message


def test_ingest_reads_text_timestamps_in_the_naive_timezone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prepared_events: list[Any]
) -> None:
    path = tmp_path / "events.csv"
    path.write_text("id,at\n1,2026-07-01T09:00:00\n", encoding="utf-8")
    argv = [*COMMANDS["ingest"], "--timestamp-column", "at", "--source", str(path), "--dry-run"]

    assert main([*argv, "--naive-timezone", "Europe/Paris", *SERVICE]) == 0
    assert [event.timestamp for event in prepared_events] == ["2026-07-01T07:00:00.000000Z"]
    assert json.loads(capsys.readouterr().out)["events"] == 1
