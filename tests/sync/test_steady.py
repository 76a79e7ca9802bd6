"""Reading a List again until a read is steady: bounded, with growing pauses."""

from __future__ import annotations

from listsync.client.paging import ReadWatch
from listsync.sync.steady import MAX_REREADS, REREAD_PAUSE, read_steadily


def torn_reads(count: int) -> tuple[list[int], object]:
    """A read torn the first ``count`` times, numbering each read."""
    reads: list[int] = []

    def read(watch: ReadWatch) -> int:
        reads.append(len(reads))
        if len(reads) <= count:
            watch.problems.append(f"torn {len(reads)}")
        return len(reads)

    return reads, read


def test_a_steady_read_is_read_once() -> None:
    slept: list[float] = []
    _, read = torn_reads(0)
    result = read_steadily(read, sleep=slept.append, what="people")
    assert (result.value, result.steady, result.rereads, result.problems, slept) == (1, True, 0, [], [])


def test_a_torn_read_is_read_again_after_growing_pauses_until_steady() -> None:
    slept: list[float] = []
    _, read = torn_reads(2)
    result = read_steadily(read, sleep=slept.append, what="people")
    assert (result.value, result.steady, result.rereads) == (3, True, 2)
    assert slept == [REREAD_PAUSE, 2 * REREAD_PAUSE]


def test_a_read_never_steady_is_read_again_a_bounded_number_of_times_and_said_so(caplog) -> None:
    slept: list[float] = []
    reads, read = torn_reads(100)
    result = read_steadily(read, sleep=slept.append, what="the people of tbl_1")
    assert len(reads) == 1 + MAX_REREADS
    assert (result.steady, result.rereads, result.problems) == (False, MAX_REREADS, [f"torn {len(reads)}"])
    assert slept == [REREAD_PAUSE * 2**n for n in range(MAX_REREADS)]
    assert "no delete and no re-add is planned from it" in caplog.text
