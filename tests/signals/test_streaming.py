"""Ingestion as the extract is read: extract order, duplicates across chunks, bounded reading, resume."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from listsync.client import ListSyncClient
from listsync.client.errors import ServerError
from listsync.extract.rejects import Rejects
from listsync.signals.build import EventStream, SeenReferences, prepare_events
from listsync.signals.checkpoints import CheckpointStore
from listsync.signals.columns import EventMapping
from listsync.signals.ingest import CheckpointMismatchError, ingest_events

from ..support import read_jsonl
from ..support.signal_data import (
    MAPPING_COLUMNS,
    SIGNAL_TYPES,
    DictStore,
    fail_next_batch,
    ingested_references,
    mixed_rows,
    valid_references,
)

MAPPING = EventMapping(**MAPPING_COLUMNS)


class Frames:
    """The rows in chunks, handed out as they are asked for; counts the chunks handed out."""

    def __init__(self, rows: list[dict[str, Any]], chunk: int) -> None:
        self.rows = rows
        self.chunk = chunk
        self.pulled = 0

    def __iter__(self) -> Iterator[pd.DataFrame]:
        for start in range(0, len(self.rows), self.chunk):
            self.pulled += 1
            yield pd.DataFrame(self.rows[start : start + self.chunk], dtype=object)

    @property
    def total(self) -> int:
        return -(-len(self.rows) // self.chunk)


def known_signal_rows() -> list[dict[str, str]]:
    return [row for row in mixed_rows() if row["signal"] != "not_a_signal"]


def sent_order(base_url: str) -> list[str]:
    return [event["reference"] for event in httpx.get(f"{base_url}/_emulator/state").json()["events"]]


def test_events_are_sent_in_the_extract_order_of_each_signal(base_url: str, client: ListSyncClient) -> None:
    rows = known_signal_rows()
    rows.reverse()  # latest first: the order sent is the extract's, not the timestamps'

    ingest_events(client, Frames(rows, chunk=16), MAPPING, rejects=Rejects(), signal_types=SIGNAL_TYPES)

    sent = sent_order(base_url)
    valid = valid_references(rows)
    for signal in SIGNAL_TYPES:
        in_extract = [row["event_id"] for row in rows if row["signal"] == signal and row["event_id"] in valid]
        assert [ref for ref in sent if ref in set(in_extract)] == in_extract, signal


def test_duplicates_across_chunks_collapse_or_are_rejected_naming_the_first_row(tmp_path: Path) -> None:
    # 5,000 rows, the second half repeating the first's references far beyond one chunk and one
    # group of rows; one repeat in ten says something else.
    rows = [
        {
            "event_id": f"ev-{i % 2500}",
            "signal": "page_visit",
            "object_type": "account",
            "object_id": f"acc-{i % 2500}",
            "payload": json.dumps({"n": i % 2500, "changed": i >= 2500 and i % 10 == 0}),
            "occurred_at": "2026-11-01T00:00:00Z",
        }
        for i in range(5000)
    ]
    rejects_path = tmp_path / "rejects.jsonl"

    with Rejects(rejects_path) as rejects:
        summary = ingest_events(None, Frames(rows, chunk=300), MAPPING, rejects=rejects, dry_run=True)

    assert summary["events"] == 2500
    assert summary["duplicates_collapsed"] == 2250
    assert summary["rows_rejected"] == 250
    records = read_jsonl(rejects_path)
    assert [record["row"] for record in records] == [i + 1 for i in range(2500, 5000, 10)]
    for record in records:
        first = record["row"] - 2500
        assert record["reasons"] == [
            f"duplicate of row {first}: same reference (ev-{first - 1}) but different values "
            f"(row {first}, the first in the extract, is kept)"
        ]


def test_a_crash_mid_stream_resumes_with_other_chunks_sending_each_event_once(
    base_url: str, client: ListSyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(EventStream, "GROUP_ROWS", 5)  # a small extract still read in many groups
    rows = known_signal_rows()
    backend = DictStore()
    held: list[int] = []

    class FailingAfterFourBatches(DictStore):
        def set(self, key: str, value: Any) -> None:
            backend.set(key, value)
            # Read but not acknowledged: what the task held when it saved.
            held.append(value["read"]["events"] - sum(value["acknowledged"].values()))
            if sum(value["acknowledged"].values()) == 40 and not self.writes:
                self.writes += 1
                fail_next_batch(base_url)

    first = Frames(rows, chunk=7)
    with pytest.raises(ServerError):
        ingest_events(
            client,
            first,
            MAPPING,
            rejects=Rejects(),
            signal_types=SIGNAL_TYPES,
            batch_size=10,
            checkpoints=CheckpointStore(FailingAfterFourBatches()),
            max_queued=15,
        )
    assert len(ingested_references(base_url)) == 40
    assert first.pulled < first.total  # it sent as it read: most of the extract was never read
    assert max(held) <= 15  # at most max_queued events read and not yet acknowledged

    summary = ingest_events(
        client,
        Frames(rows, chunk=50),
        MAPPING,
        rejects=Rejects(),
        signal_types=SIGNAL_TYPES,
        batch_size=10,
        checkpoints=CheckpointStore(backend),
        max_queued=15,
    )

    assert ingested_references(base_url) == dict.fromkeys(valid_references(rows), 1)
    assert sum(summary["resumed_from"].values()) == 40
    assert summary["acknowledged"] == summary["events"] == len(valid_references(rows))
    # The batch the 500 refused was marked in doubt before it went, and says so when re-sent.
    assert summary["possibly_duplicated"] == 10


def test_rows_added_at_the_end_after_a_run_are_sent_on_the_next(
    base_url: str, client: ListSyncClient
) -> None:
    rows = known_signal_rows()
    store = CheckpointStore()
    ingest_events(client, Frames(rows, chunk=64), MAPPING, rejects=Rejects(), checkpoints=store)
    late = {**rows[0], "event_id": "ev-late"}

    summary = ingest_events(
        client, Frames([*rows, late], chunk=64), MAPPING, rejects=Rejects(), checkpoints=store
    )

    assert ingested_references(base_url) == dict.fromkeys([*valid_references(rows), "ev-late"], 1)
    assert summary["acknowledged"] == summary["events"] == len(valid_references(rows)) + 1


def test_a_checkpoint_of_the_timestamp_ordered_format_is_refused_saying_why(client: ListSyncClient) -> None:
    old = {"format": 1, "fingerprints": {}, "acknowledged": {"page_visit": 3}, "client": {}, "totals": {}}
    store = CheckpointStore(fallback=old)

    with pytest.raises(CheckpointMismatchError, match=r"sorted by timestamp.*--fresh"):
        ingest_events(
            client, Frames(known_signal_rows(), chunk=64), MAPPING, rejects=Rejects(), checkpoints=store
        )


def test_events_are_made_only_as_they_are_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EventStream, "GROUP_ROWS", 10)
    rows = known_signal_rows()
    frames = Frames(rows, chunk=10)
    prepared = prepare_events(frames, MAPPING, rejects=Rejects())

    assert frames.pulled == 0
    events = iter(prepared)
    next(events)
    assert frames.pulled == 1
    assert (prepared.stats.read, prepared.events) == (10, 1)
    # Given out once: a second pass over the same result finds what the first left.
    assert len(list(prepared)) + 1 == len(valid_references(rows)) == prepared.events
    assert list(prepared) == []


def test_the_references_seen_take_twenty_bytes_each() -> None:
    rows = [
        {
            "event_id": f"ev-{i}",
            "signal": "page_visit",
            "object_type": "account",
            "object_id": "a",
            "payload": "{}",
            "occurred_at": None,
        }
        for i in range(30_000)
    ]
    prepared = prepare_events(Frames(rows, chunk=5_000), MAPPING, rejects=Rejects())
    for _ in prepared:
        pass

    assert len(prepared.seen) == prepared.events == 30_000
    assert prepared.seen.nbytes == 20 * 30_000


def test_the_reference_set_finds_the_first_row_of_each_reference_whatever_the_groups() -> None:
    import numpy as np

    seen = SeenReferences()
    seen.MAX_RUN = 8  # many runs, some merged: lookups must go through all of them
    keys = np.array([5, 9, 5, 1, 9, 7, 5, 3, 1, 8, 2, 9], dtype=np.uint64)
    contents = np.array([1, 1, 1, 1, 2, 1, 3, 1, 1, 1, 1, 1], dtype=np.uint64)
    firsts, sames = [], []
    for start in range(0, len(keys), 3):
        rows = np.arange(start + 1, start + 4, dtype=np.int64)[: len(keys[start : start + 3])]
        first, same = seen.offer(keys[start : start + 3], contents[start : start + 3], rows)
        firsts.extend(first.tolist())
        sames.extend(same.tolist())

    assert firsts == [0, 0, 1, 0, 2, 0, 1, 0, 4, 0, 0, 2]
    assert [same for first, same in zip(firsts, sames, strict=True) if first] == [
        True,
        False,
        False,
        True,
        True,
    ]
