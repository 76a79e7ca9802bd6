"""``listsync ingest`` killed with SIGKILL, again and again, and started again with the same command.

The command keeps its checkpoint by default (no ``--checkpoint``): each start resumes where the
killed one stopped and says so, no event is lost, every event the service holds twice is one the
summary counts as possibly duplicated, the summary counts no other event than those a killed start
left in flight (its checkpoint's events in doubt), and a start after the backfill completed sends
nothing.
Every batch takes the service :data:`LATENCY` seconds, so half the kills land in the pause between
windows and half while a batch is in flight: the service applies that batch all the same, after
its client is gone, and the next start sends it again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pandas as pd
import pytest

from listsync.commands.ingest import JsonFileStore
from listsync.emulator import FaultRule
from listsync.signals.checkpoints import CheckpointStore

from ..support import LiveEmulator
from ..support.signal_data import API_KEY, ingested_references

EVENTS = 3000
WINDOW = 0.5  # seconds: page_visit (Event) takes 100 events a window, so 30 windows in all
KILLS = 10
LATENCY = 0.2  # seconds each batch request is held before the service applies it


class InFlight:
    """The emulator's wait for injected latency, telling when a batch request is held in it."""

    def __init__(self) -> None:
        self.held = threading.Event()

    async def sleep(self, seconds: float) -> None:
        self.held.set()
        try:
            await asyncio.sleep(seconds)
        finally:
            self.held.clear()


@pytest.fixture
def in_flight() -> InFlight:
    return InFlight()


@pytest.fixture
def base_url(in_flight: InFlight, live_emulator: Callable[..., LiveEmulator]) -> str:
    latency = FaultRule(endpoint="POST /v1/events/batch", kind="latency", latency_seconds=LATENCY)
    return live_emulator(clock=None, sleep=in_flight.sleep, window_seconds=WINDOW, faults=[latency]).url


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


def in_doubt(state_dir: Path) -> set[int]:
    """The positions of the events the checkpoint in ``state_dir`` holds in doubt: sent, or about
    to be, and not answered (a killed start's events in flight)."""
    positions: set[int] = set()
    for path in state_dir.glob("*.json"):
        envelope = CheckpointStore(JsonFileStore(path)).load() or {}
        signals = envelope.get("client", {}).get("signals", {})
        for start, end in signals.get("page_visit", {}).get("maybe", []):
            positions.update(range(start, end))
    return positions


@pytest.mark.slow
def test_sigkill_at_ten_points_loses_nothing_and_owns_up_to_every_duplicate(
    base_url: str, in_flight: InFlight, tmp_path: Path, listsync_state_dir: Path
) -> None:
    references = [f"visit-{i:05d}" for i in range(EVENTS)]
    extract = tmp_path / "visits.csv"
    pd.DataFrame({"ref": references, "account": [f"acct-{i % 97}" for i in range(EVENTS)]}).to_csv(
        extract, index=False
    )

    resumed: list[str] = []
    killed_in_flight = 0
    # The events each killed start left in flight, as its checkpoint holds them.
    left_in_doubt: set[int] = set()
    for kill in range(1, KILLS + 1):
        process = start(extract, base_url)
        # Let it get further than the last one, then kill it: on odd kills in the middle of a
        # window, where a paced backfill spends its time; on even ones while a batch is held by the
        # service, sent and not yet answered.
        target = kill * EVENTS // (KILLS + 2)
        deadline = time.monotonic() + 60
        while ingested(base_url) < target and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if kill % 2:
            time.sleep(WINDOW / 2)
        else:
            assert in_flight.held.wait(timeout=30), f"run {kill} sent no batch to be killed during"
        assert process.poll() is None, f"run {kill} ended before it was killed: {process.communicate()}"
        process.send_signal(signal.SIGKILL)
        killed_in_flight += in_flight.held.is_set()
        _, err = process.communicate(timeout=30)
        assert process.returncode == -signal.SIGKILL
        left_in_doubt |= in_doubt(listsync_state_dir)
        if kill > 1:
            resumed.append(err)
    assert killed_in_flight >= KILLS // 2, "the kills aimed at a batch in flight did not land there"

    process = start(extract, base_url)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    summary = json.loads(out)
    resumed.append(err)

    # The service's own count, not the summary's: every reference it holds, and how often.
    counts = ingested_references(base_url)
    assert set(counts) == set(references)  # 0 lost
    duplicated = sum(count - 1 for count in counts.values())
    # A batch killed in flight lands after its client is gone and is sent again by the next start:
    # stored twice, and owned up to; nothing else is stored twice.
    assert duplicated > 0
    # Only events a killed start left in flight may be counted as possibly sent twice: those its
    # checkpoint, written before each send, holds in doubt.
    assert left_in_doubt
    assert duplicated <= summary["possibly_duplicated"] <= len(left_in_doubt)
    assert summary["acknowledged"] == EVENTS
    # Every start after the first said where it resumed.
    assert all("resuming from" in text for text in resumed), resumed

    again = start(extract, base_url)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0
    assert "nothing left to send" in err
    assert ingested(base_url) == EVENTS + duplicated
