"""ingest_events end to end against the emulator on a fake clock: exactly once, resume, early return."""

from __future__ import annotations

from typing import Any

import httpx
import pandas as pd
import pytest

from listsync.client import ListSyncClient
from listsync.client.errors import ServerError
from listsync.extract.rejects import Rejects
from listsync.signals.checkpoints import CheckpointStore
from listsync.signals.columns import EventMapping
from listsync.signals.ingest import CheckpointMismatchError, ingest_events

from ..support import read_jsonl
from ..support.signal_data import (
    INVALID_ROWS,
    MAPPING_COLUMNS,
    SIGNAL_TYPES,
    UNKNOWN_SIGNAL_ROWS,
    DictStore,
    fail_next_batch,
    ingested_references,
    mixed_rows,
    valid_references,
)

MAPPING = EventMapping(**MAPPING_COLUMNS)


def frames(rows: list[dict[str, str]], chunk: int = 64) -> list[pd.DataFrame]:
    return [pd.DataFrame(rows[i : i + chunk], dtype=object) for i in range(0, len(rows), chunk)]


def test_every_valid_row_is_ingested_once_and_every_other_row_is_accounted_for(
    base_url: str, client: ListSyncClient, tmp_path
) -> None:
    rows = mixed_rows()
    rejects_path = tmp_path / "rejects.jsonl"
    with Rejects(rejects_path) as rejects:
        summary = ingest_events(client, frames(rows), MAPPING, rejects=rejects, signal_types=SIGNAL_TYPES)

    assert ingested_references(base_url) == dict.fromkeys(valid_references(rows), 1)
    assert summary["rows_read"] == len(rows)
    assert summary["rows_rejected"] == INVALID_ROWS
    assert len(rejects_path.read_text().splitlines()) == INVALID_ROWS
    assert summary["rejects_path"] == str(rejects_path)
    assert summary["events"] == len(rows) - INVALID_ROWS
    assert summary["acknowledged"] == len(rows) - INVALID_ROWS - UNKNOWN_SIGNAL_ROWS
    assert summary["signals"]["not_a_signal"]["rejected_reasons"] == {
        "Signals not found: not_a_signal": UNKNOWN_SIGNAL_ROWS
    }
    assert {slug: s["acknowledged"] for slug, s in summary["signals"].items()} == {
        "deal_stage": 35,
        "not_a_signal": 0,
        "page_visit": 150,
        "seats_used": 40,
    }
    # 150 Event and 35 State events need a second window; the wait is reported, not hidden.
    assert summary["seconds_waited"] > 0
    assert summary["pending"] == 0
    assert summary["resumed_from"] is None
    assert summary["resume_at"] is None


def test_a_crash_after_acknowledged_batches_resumes_without_resending(
    base_url: str, client: ListSyncClient
) -> None:
    rows = mixed_rows()
    backend = DictStore()

    class FailingAfterTwoBatches(DictStore):
        def set(self, key: str, value: Any) -> None:
            backend.set(key, value)
            if sum(value["acknowledged"].values()) == 40 and not self.writes:
                self.writes += 1
                fail_next_batch(base_url)

    with pytest.raises(ServerError):
        ingest_events(
            client,
            frames(rows),
            MAPPING,
            rejects=Rejects(),
            signal_types=SIGNAL_TYPES,
            batch_size=20,
            checkpoints=CheckpointStore(FailingAfterTwoBatches()),
        )
    sent_before_crash = ingested_references(base_url)
    assert len(sent_before_crash) == 40

    summary = ingest_events(
        client,
        frames(rows, chunk=1000),
        MAPPING,
        rejects=Rejects(),
        signal_types=SIGNAL_TYPES,
        batch_size=20,
        checkpoints=CheckpointStore(backend),
    )

    assert ingested_references(base_url) == dict.fromkeys(valid_references(rows), 1)
    assert sum(summary["resumed_from"].values()) == 40
    assert summary["acknowledged"] == len(valid_references(rows))


def test_a_long_wait_returns_early_and_the_next_call_resumes_from_the_checkpoint(
    base_url: str, fake_clock: Any, client: ListSyncClient
) -> None:
    rows = [row for row in mixed_rows(page_visits=150, seats=0, stages=0) if row["signal"] == "page_visit"]
    store = CheckpointStore()
    run = lambda: ingest_events(  # noqa: E731
        client,
        frames(rows),
        MAPPING,
        rejects=Rejects(),
        signal_types=SIGNAL_TYPES,
        checkpoints=store,
        max_wait=5,
    )

    first = run()

    assert first["acknowledged"] == 100
    assert first["pending"] == 50
    assert first["resume_at"] == "2027-01-15T08:01:00+00:00"
    assert fake_clock.slept == []  # it returned instead of sleeping
    assert len(ingested_references(base_url)) == 100

    fake_clock.now = pd.Timestamp(first["resume_at"]).timestamp()
    second = run()

    assert second["resume_at"] is None
    assert second["resumed_from"] == {"page_visit": 100}
    assert second["acknowledged"] == 150
    assert second["requests"] == first["requests"] + 1  # counters add up over the parts
    assert ingested_references(base_url) == dict.fromkeys(valid_references(rows), 1)


def test_a_wait_for_a_window_says_every_ten_seconds_which_signal_waits_and_how_long(
    fake_clock: Any, client: ListSyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    rows = mixed_rows(page_visits=150, seats=0, stages=0)

    with caplog.at_level("INFO", logger="listsync.signals.sender"):
        summary = ingest_events(client, frames(rows), MAPPING, rejects=Rejects(), signal_types=SIGNAL_TYPES)

    # 100 page visits fill the first window; the other 50 wait the rest of the minute.
    assert summary["seconds_waited"] == sum(fake_clock.slept) == 60.0
    assert fake_clock.slept == [10.0] * 6
    assert [r.getMessage() for r in caplog.records if r.name == "listsync.signals.sender"] == [
        f"Waiting for the rate-limit window of page_visit: {left} s left" for left in (50, 40, 30, 20, 10)
    ]


def test_a_checkpoint_for_other_events_is_refused(client: ListSyncClient) -> None:
    rows = mixed_rows(page_visits=10, seats=0, stages=0)
    store = CheckpointStore()
    ingest_events(client, frames(rows), MAPPING, rejects=Rejects(), checkpoints=store)
    # A late row read before the acknowledged ones: positions no longer name the same events.
    late = {**rows[0], "event_id": "ev-late", "occurred_at": "2026-11-01T00:00:30Z"}

    with pytest.raises(CheckpointMismatchError, match="page_visit"):
        ingest_events(client, frames([late, *rows]), MAPPING, rejects=Rejects(), checkpoints=store)


def test_dry_run_counts_and_sends_nothing(base_url: str) -> None:
    rows = mixed_rows(page_visits=5, seats=3, stages=2)

    summary = ingest_events(None, frames(rows), MAPPING, rejects=Rejects(), dry_run=True)

    assert summary["dry_run"] is True
    assert summary["signals"] == {
        "deal_stage": {"events": 2},
        "not_a_signal": {"events": 2},
        "page_visit": {"events": 5},
        "seats_used": {"events": 3},
    }
    assert summary["rows_rejected"] == INVALID_ROWS
    assert httpx.get(f"{base_url}/_emulator/state").json()["events"] == []


def test_the_summary_counts_every_429_even_when_no_signal_met_them_all(
    base_url: str, client: ListSyncClient
) -> None:
    rows = mixed_rows(page_visits=5, seats=5, stages=0)
    rule = {"endpoint": "POST /v1/events/batch", "kind": "rate_limit", "retry_after_seconds": 2, "times": 2}
    httpx.post(f"{base_url}/_emulator/faults", json={"rules": [rule]}).raise_for_status()

    summary = ingest_events(client, frames(rows), MAPPING, rejects=Rejects(), signal_types=SIGNAL_TYPES)

    # The known signals share the first batch; the slug of unknown type is probed alone in the
    # second. Each 429 met different signals, and the run met two.
    assert {signal: s["rate_limited_responses"] for signal, s in summary["signals"].items()} == {
        "not_a_signal": 1,
        "page_visit": 1,
        "seats_used": 1,
    }
    assert summary["rate_limited_responses"] == 2
    assert summary["seconds_waited"] == 2
    assert ingested_references(base_url) == dict.fromkeys(valid_references(rows), 1)


def test_rejects_without_a_path_go_to_a_file_the_summary_names(base_url: str) -> None:
    # Like the people and rows syncs: a rejected row is never left without a readable reason.
    rows = mixed_rows(page_visits=3, seats=2, stages=1)

    summary = ingest_events(None, frames(rows), MAPPING, rejects=Rejects(), dry_run=True)

    assert summary["rows_rejected"] == INVALID_ROWS
    assert summary["rejects_path"] is not None
    records = read_jsonl(summary["rejects_path"])
    assert len(records) == INVALID_ROWS
    assert all(record["reasons"] for record in records)
