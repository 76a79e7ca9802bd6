"""What a person sees of a command line run: progress on standard error while it works, a table at
the end on a terminal, one JSON document otherwise."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

from listsync.cli import main
from listsync.commands.display import print_result
from listsync.emulator import EmulatorConfig, ListConfig
from listsync.sync.summary import PeopleSummary, RowsSummary, count_names

from ..support import LiveEmulator
from ..support.tenants import ROWS_COLUMNS

API_KEY = "sk_test_display"
USER = "usr_display"
TABLE = "tbl_display"
ROWS = 400
#: Rows of the run watched in a terminal: long enough to be watched (a few seconds).
WATCHED_ROWS = 100_000
TIMEOUT = 120  # seconds a run in the terminal may take
# rich's cursor moves and colours, between the words a terminal shows.
ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\r")


@pytest.fixture
def emulator(live_emulator: Callable[..., LiveEmulator]) -> LiveEmulator:
    table = ListConfig.model_validate({"id": TABLE, "columns": ROWS_COLUMNS, "account_column": "domain"})
    return live_emulator(EmulatorConfig(secret_keys=[API_KEY], users=[USER], lists=[table]), clock=None)


def upsert(base_url: str, folder: Path, *options: str, rows: int = ROWS) -> list[str]:
    source = folder / "accounts.csv"
    source.write_text("domain,name\n" + "".join(f"a{i}.com,Account {i}\n" for i in range(rows)), "utf-8")
    chunks = ["--chunk-size", "20"] if rows == ROWS else []
    return [
        sys.executable, "-m", "listsync.cli", "upsert-rows", "--base-url", base_url, "--user-id", USER,
        "--table-id", TABLE, "--key-column", "domain", "--source", str(source), "--map", "domain=domain",
        "--map", "name=name", *chunks, *options,
    ]  # fmt: skip


def environment(folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LISTSYNC_API_KEY": API_KEY,
        "LISTSYNC_STATE_DIR": str(folder / "state"),
        "TERM": "xterm-256color",
        "COLUMNS": "160",
    }


def in_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    """Run ``argv`` with its standard output and error on a pseudo-terminal; its exit status and
    what the terminal was sent, escapes left out."""
    pid, terminal = pty.fork()
    if pid == 0:  # the child: its standard streams are the terminal
        os.execve(argv[0], argv, env)
    sent = bytearray()
    deadline = time.monotonic() + TIMEOUT
    while True:
        if not select.select([terminal], [], [], max(0.0, deadline - time.monotonic()))[0]:
            os.kill(pid, signal.SIGKILL)  # a run that hangs fails the test rather than the suite
            break
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        sent += chunk
    _, status = os.waitpid(pid, 0)
    os.close(terminal)
    return os.waitstatus_to_exitcode(status), ESCAPES.sub(b"", bytes(sent))


def test_a_sync_in_a_terminal_shows_its_progress_then_a_table(emulator: LiveEmulator, tmp_path: Path) -> None:
    status, shown = in_a_terminal(upsert(emulator.url, tmp_path, rows=WATCHED_ROWS), environment(tmp_path))

    assert status == 0, shown.decode(errors="replace")[-2000:]
    text = shown.decode()
    progress = text.find(f"rows upsert into {TABLE}: ")
    table = re.search(rf"added\s+{WATCHED_ROWS:,}\s+People or rows added to the List", text)
    assert progress >= 0, f"no progress shown: {text[-2000:]}"
    assert table is not None and progress < table.start(), text[-2000:]
    # The bar moved while the run worked: several points of it before the table.
    applied = re.findall(rf"rows upsert into {TABLE}: (\d+) of {WATCHED_ROWS} applied", text[: table.start()])
    assert len(set(applied)) >= 3, text[: table.start()][-2000:]
    assert "{" not in text[table.start() :], "a JSON summary reached the terminal"


def test_without_a_terminal_stdout_is_one_json_document_and_stderr_the_progress(
    emulator: LiveEmulator, tmp_path: Path
) -> None:
    run = subprocess.run(
        upsert(emulator.url, tmp_path),
        check=False,
        capture_output=True,
        text=True,
        env=environment(tmp_path),
        timeout=120,
    )

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["added"] == ROWS
    progress = [line for line in run.stderr.splitlines() if f"rows upsert into {TABLE}:" in line]
    assert progress and progress[-1].startswith("listsync upsert-rows: ") and "100%" in progress[-1]
    assert "summary:" not in run.stderr, "a record that is not progress was shown without -v"


def test_verbose_shows_what_the_run_does_and_output_table_asks_for_a_table(
    emulator: LiveEmulator, tmp_path: Path
) -> None:
    run = subprocess.run(
        upsert(emulator.url, tmp_path, "-v", "--output", "table"),
        check=False,
        capture_output=True,
        text=True,
        env=environment(tmp_path),
        timeout=120,
    )

    assert run.returncode == 0, run.stderr
    assert "Rows upsert summary:" in run.stderr
    assert re.search(rf"added\s+{ROWS}\s", run.stdout) and not run.stdout.lstrip().startswith("{")


@pytest.mark.parametrize("summary_type", [PeopleSummary, RowsSummary])
def test_the_table_shows_every_count_of_a_summary(
    summary_type: type[PeopleSummary | RowsSummary], capsys: pytest.CaptureFixture[str]
) -> None:
    values = {"table_id": "tbl_1", "mode": "upsert", "normalization_version": "1"}
    values |= {"delete_scope": "list"} if summary_type is PeopleSummary else {"key_column": "domain"}
    counts = count_names(summary_type)
    summary = summary_type(**values, **{name: 1000 + place for place, name in enumerate(counts)})

    print_result(summary.model_dump(mode="json"), "table")

    shown = capsys.readouterr().out
    for place, name in enumerate(counts):
        assert re.search(rf"^{name}\s+{1000 + place:,}\s", shown, re.M), f"the table misses {name}"


def test_version_names_the_installed_release(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])

    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"listsync {version('airflow-provider-listsync')}"
