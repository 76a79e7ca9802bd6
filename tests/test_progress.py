"""Progress lines: at most one every ten seconds, from the loops that can run for minutes.

Time is a fake clock that advances only when told: by a sleep, or by the work a loop does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import listsync.progress
from listsync.client.paging import iter_offset_pages
from listsync.extract.sources import read_extract
from listsync.progress import Progress


@pytest.fixture
def clock(fake_clock: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The suite's fake clock, at 0 (a monotonic clock's seconds), the clock of every
    :class:`Progress` made without one in this test."""
    fake_clock.now = 0.0
    monkeypatch.setattr(listsync.progress, "monotonic", fake_clock)
    return fake_clock


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == logger]


def test_a_line_is_logged_only_when_the_last_is_ten_seconds_old(
    clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    progress = Progress(logging.getLogger("work"), "%d done")
    logged = []
    with caplog.at_level(logging.INFO):
        for done in range(1, 31):
            clock.now += 1.5  # each item takes 1.5 s
            logged.append(progress(done))

    # Due at 10 s, then 10 s after each line: items 7 (10.5 s), 14 (21 s), 21 (31.5 s), 28 (42 s).
    assert lines(caplog, "work") == ["7 done", "14 done", "21 done", "28 done"]
    assert [done for done, line in enumerate(logged, start=1) if line] == [7, 14, 21, 28]


def test_a_long_sleep_says_every_ten_seconds_how_long_is_left(
    clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    progress = Progress(logging.getLogger("wait"), "waiting for %s: %.0f s left")
    clock.now += 4  # some work before the wait

    with caplog.at_level(logging.INFO):
        progress.sleep(45, clock.sleep, "page_visit")

    assert clock.now == 49
    assert clock.slept == [6, 10, 10, 10, 9]  # each step ends when a line is due
    assert lines(caplog, "wait") == [
        "waiting for page_visit: 39 s left",
        "waiting for page_visit: 29 s left",
        "waiting for page_visit: 19 s left",
        "waiting for page_visit: 9 s left",
    ]


def test_a_short_sleep_logs_nothing_and_sleeps_once(clock: Any, caplog: pytest.LogCaptureFixture) -> None:
    progress = Progress(logging.getLogger("wait"), "waiting: %.0f s left")

    with caplog.at_level(logging.INFO):
        progress.sleep(3, clock.sleep)

    assert clock.slept == [3]
    assert lines(caplog, "wait") == []


def test_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match="every must be more than 0"):
        Progress(logging.getLogger("x"), "m", every=0)


def test_reading_a_long_extract_says_how_many_rows_are_read(
    clock: Any, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    path = tmp_path / "big.csv"
    pd.DataFrame({"id": range(100)}).to_csv(path, index=False)

    with caplog.at_level(logging.INFO):
        for _ in read_extract(path, chunk_size=10):
            clock.now += 4  # each chunk of 10 rows takes 4 s to handle

    assert lines(caplog, "listsync.extract.sources") == [
        f"Extract {path}: {rows} rows read so far" for rows in (40, 70, 100)
    ]


def test_paging_a_long_list_says_how_many_pages_and_items_are_read(
    clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def fetch(offset: int) -> tuple[list[int], bool | None, int | None]:
        clock.now += 3  # a page takes 3 s to come
        return list(range(offset, min(offset + 100, 1000))), None, 1000

    with caplog.at_level(logging.INFO):
        items = list(iter_offset_pages(fetch, what="people of tbl_accounts"))

    assert items == list(range(1000))
    assert lines(caplog, "listsync.client.paging") == [
        "4 pages, 400 people of tbl_accounts read so far",
        "8 pages, 800 people of tbl_accounts read so far",
    ]
