"""An ingestion reading its extract in small chunks, killed with SIGKILL mid-stream and started again.

Each start reads the extract from its beginning in chunks of 40 rows, skips what the checkpoint
says was acknowledged and sends the rest as it reads; no event is lost and none is sent twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pandas as pd
import pytest

from ..support import LiveEmulator
from ..support.signal_data import API_KEY, ingested_references

EVENTS = 1500
WINDOW = 0.5  # seconds: page_visit (Event) takes 100 events a window, seats_used (Metric) 1,000
KILLS = 4

INGEST = """
import json, sys
from listsync.client import ListSyncClient
from listsync.commands.ingest import JsonFileStore
from listsync.signals.build import EventStream
from listsync.signals.checkpoints import CheckpointStore
from listsync.signals.columns import EventMapping
from listsync.signals.ingest import ingest_events
from listsync.extract.rejects import Rejects
from listsync.extract.sources import read_extract

EventStream.GROUP_ROWS = 16
extract, base_url, checkpoint, api_key = sys.argv[1:]
mapping = EventMapping(
    signal_column="signal",
    identity_type="account",
    identity_id_column="account",
    data_columns=["seats"],
    reference_column="ref",
)
with ListSyncClient(base_url, api_key) as client:
    summary = ingest_events(
        client,
        read_extract(extract, chunk_size=40),
        mapping,
        rejects=Rejects(),
        signal_types={"page_visit": "Event", "seats_used": "Metric"},
        checkpoints=CheckpointStore(JsonFileStore(checkpoint)),
        max_queued=30,
    )
print(json.dumps(summary))
"""


@pytest.fixture
def base_url(live_emulator: Callable[..., LiveEmulator]) -> str:
    return live_emulator(clock=None, window_seconds=WINDOW).url


def start(extract: Path, base_url: str, checkpoint: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", INGEST, str(extract), base_url, str(checkpoint), API_KEY]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def ingested(base_url: str) -> int:
    return len(httpx.get(f"{base_url}/_emulator/state").json()["events"])


@pytest.mark.slow
def test_sigkill_mid_stream_with_chunked_reads_loses_and_duplicates_nothing(
    base_url: str, tmp_path: Path
) -> None:
    references = [f"ev-{i:05d}" for i in range(EVENTS)]
    extract = tmp_path / "events.csv"
    signals = ["seats_used" if i % 5 == 0 else "page_visit" for i in range(EVENTS)]
    pd.DataFrame(
        {"ref": references, "signal": signals, "account": [f"a{i % 31}" for i in range(EVENTS)], "seats": 3}
    ).to_csv(extract, index=False)
    checkpoint = tmp_path / "checkpoint.json"

    for kill in range(1, KILLS + 1):
        process = start(extract, base_url, checkpoint)
        target = kill * EVENTS // (KILLS + 2)
        deadline = time.monotonic() + 60
        while ingested(base_url) < target and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(WINDOW / 3)
        assert process.poll() is None, f"run {kill} ended before it was killed: {process.communicate()}"
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)

    process = start(extract, base_url, checkpoint)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err

    counts = ingested_references(base_url)
    assert set(counts) == set(references)  # 0 lost
    assert sum(count - 1 for count in counts.values()) == 0  # 0 duplicated
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["acknowledged"] == summary["events"] == EVENTS
    assert sum(summary["resumed_from"].values()) > 0
