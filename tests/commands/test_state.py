"""``listsync state show|reset``: a rows upsert's state in the state folder and in object storage
(a ``file://`` URI through fsspec), shown with its size and age, reset only once asked."""

from __future__ import annotations

import builtins
import io
import json
from pathlib import Path

import pytest

from listsync.cli import main

from ..support import LiveEmulator
from ..support.tenants import ROWS_SECRET as SECRET
from ..support.tenants import ROWS_TABLE as TABLE
from ..support.tenants import ROWS_USER as USER


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The state folder, where the command line keeps its states."""
    monkeypatch.setenv("LISTSYNC_API_KEY", SECRET)
    monkeypatch.setenv("LISTSYNC_STATE_DIR", str(tmp_path / "states"))
    return tmp_path / "states"


def upsert(rows_emulator: LiveEmulator, tmp_path: Path, *options: str) -> None:
    source = tmp_path / "accounts.csv"
    source.write_text("Domain,ARR\nacme.com,100\nbeta.io,2.5\n", encoding="utf-8")
    command = ["upsert-rows", "--base-url", rows_emulator.url, "--user-id", USER, "--table-id", TABLE]
    command += [
        "--key-column",
        "domain",
        "--source",
        str(source),
        "--map",
        "Domain=domain",
        "--map",
        "ARR=arr",
    ]
    # CSV cells are text: the number column is parsed.
    assert main([*command, "--json-column", "ARR", *options]) == 0


def state(capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, list[dict[str, object]]]:
    status = main(["state", *options, "--output", "json"])
    out = capsys.readouterr().out
    return status, json.loads(out) if out.strip() else []


@pytest.mark.parametrize("where", ["state folder", "object storage"])
def test_a_state_is_shown_then_reset_once_asked(
    rows_emulator: LiveEmulator,
    folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    uri = f"file://{tmp_path}/bucket/rows.state"
    found = ["--state-path", uri] if where == "object storage" else ["--job", "rows", "--table-id", TABLE]
    upsert(rows_emulator, tmp_path, *(["--state-path", uri] if where == "object storage" else []))
    capsys.readouterr()

    status, [shown] = state(capsys, "show", *found)

    assert status == 0
    assert (shown["job"], shown["table_id"], shown["shard"], shown["items"]) == ("rows", TABLE, None, 2)
    assert isinstance(shown["bytes"], int) and shown["bytes"] > 0 and str(shown["age"]).endswith(" s")
    kept = Path(str(shown["where"]).removeprefix("file://"))
    assert kept.is_file() and (
        kept.parent == folder if where == "state folder" else kept.name == "rows.state"
    )

    # Without a terminal, a reset needs --yes; at one, it asks, and "n" keeps the state.
    assert state(capsys, "reset", *found)[0] == 2
    monkeypatch.setattr("sys.stdin", type("Terminal", (io.StringIO,), {"isatty": lambda self: True})())
    monkeypatch.setattr(builtins, "input", lambda prompt: "n")
    assert state(capsys, "reset", *found)[0] == 2
    assert kept.is_file()

    assert state(capsys, "reset", *found, "--yes")[0] == 0
    assert not kept.exists()
    assert state(capsys, "show", *found) == (1, [])


def test_a_state_is_found_by_its_list_and_job_only(
    rows_emulator: LiveEmulator, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upsert(rows_emulator, tmp_path)
    capsys.readouterr()

    assert state(capsys, "show", "--job", "people", "--table-id", TABLE) == (1, [])
    assert state(capsys, "show", "--job", "rows", "--table-id", "tbl_other") == (1, [])
    assert main(["state", "show", "--table-id", TABLE]) == 2
