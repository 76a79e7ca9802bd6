"""``listsync ingest`` killed with SIGKILL, again and again, and started again with the same command.

The command keeps its checkpoint by default (no ``--checkpoint``): each start resumes where the
killed one stopped and says so, no event is lost and none is sent twice, and a start after the
backfill completed sends nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest

from listsync.emulator import demo_config, serve_in_thread

from .emulated import API_KEY, ingested_references

EVENTS = 3000
WINDOW = 0.5  # seconds: page_visit (Event) takes 100 events a window, so 30 windows in all
KILLS = 10


@pytest.fixture
def base_url() -> Iterator[str]:
    with serve_in_thread(demo_config().model_copy(update={"window_seconds": WINDOW})) as url:
        yield url


def start(extract: Path, base_url: str) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "listsync.cli", "ingest", "--source", str(extract), "--base-url", base_url,
        "--signal", "page_visit", "--identity-type", "account", "--identity-id-column", "account",
        "--reference-column", "ref", "--signal-type", "page_visit=Event",
    ]  # fmt: skip
    env = {**os.environ, "LISTSYNC_API_KEY": API_KEY}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def ingested(base_url: str) -> int:
    return len(httpx.get(f"{base_url}/_emulator/state").json()["events"])


@pytest.mark.slow
def test_sigkill_at_ten_points_loses_and_duplicates_nothing(base_url: str, tmp_path: Path) -> None:
    references = [f"visit-{i:05d}" for i in range(EVENTS)]
    extract = tmp_path / "visits.csv"
    pd.DataFrame({"ref": references, "account": [f"acct-{i % 97}" for i in range(EVENTS)]}).to_csv(
        extract, index=False
    )

    resumed: list[str] = []
    for kill in range(1, KILLS + 1):
        process = start(extract, base_url)
        # Let it get further than the last one, then kill it in the middle of a window, where a
        # paced backfill spends its time.
        target = kill * EVENTS // (KILLS + 2)
        deadline = time.monotonic() + 60
        while ingested(base_url) < target and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(WINDOW / 2)
        assert process.poll() is None, f"run {kill} ended before it was killed: {process.communicate()}"
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=30)
        assert process.returncode == -signal.SIGKILL
        if kill > 1:
            resumed.append(err)

    process = start(extract, base_url)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    summary = json.loads(out)
    resumed.append(err)

    counts = ingested_references(base_url)
    assert set(counts) == set(references)  # 0 lost
    duplicated = sum(count - 1 for count in counts.values())
    assert duplicated == 0
    assert summary["possibly_duplicated"] >= duplicated
    assert summary["acknowledged"] == EVENTS
    # Every start after the first said where it resumed.
    assert all("resuming from" in text for text in resumed), resumed

    again = start(extract, base_url)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0
    assert "nothing left to send" in err
    assert ingested(base_url) == EVENTS
