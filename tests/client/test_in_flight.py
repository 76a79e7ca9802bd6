"""Requests in flight together: the client's adaptive limit, and List pages asked for ahead."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pytest

from listsync.client.errors import RateLimitedError, ServerError
from listsync.client.in_flight import InFlightLimit, check_max_in_flight
from listsync.client.paging import iter_offset_pages
from listsync.sync.fan_out import fan_out

from ..support import FakeClock


def refused(retry_after: float | None = None) -> RateLimitedError:
    return RateLimitedError(
        429, "GET", "/v1/lists/t/rows", "slow down", reset_at=None, retry_after=retry_after
    )


def fail_in_slot(limit: InFlightLimit, error: Exception) -> None:
    with pytest.raises(type(error)), limit.slot():
        raise error


def answer_in_slot(limit: InFlightLimit, times: int) -> None:
    for _ in range(times):
        with limit.slot():
            pass


def most_at_once(work_seconds: float, runs: int, start: Callable[[Callable[[], None]], None]) -> int:
    """The most runs of a ``work_seconds`` task seen at once when ``start`` runs each of them."""
    lock = threading.Lock()
    now = peak = 0

    def task() -> None:
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)
        time.sleep(work_seconds)
        with lock:
            now -= 1

    for _ in range(runs):
        start(task)
    return peak


def test_the_limit_halves_on_push_back_and_grows_back_one_at_a_time(fake_clock: FakeClock) -> None:
    limit = InFlightLimit(8, clock=fake_clock, sleep=fake_clock.sleep)

    fail_in_slot(limit, refused())
    assert limit.limit == 4
    fail_in_slot(limit, ServerError(503, "GET", "/v1/lists", "busy"))
    assert limit.limit == 2
    fail_in_slot(limit, ValueError("a bug of the caller's is no push back"))
    assert (limit.limit, limit.decreases) == (2, 2)

    answer_in_slot(limit, 1)
    assert limit.limit == 2  # one answer at a limit of two is not yet a round of them
    answer_in_slot(limit, 1)
    assert limit.limit == 3
    answer_in_slot(limit, 3 + 4 + 5 + 6 + 7)
    assert limit.limit == 8  # never past the ceiling
    answer_in_slot(limit, 50)
    assert limit.limit == 8


def test_the_limit_never_drops_below_one(fake_clock: FakeClock) -> None:
    limit = InFlightLimit(2, clock=fake_clock, sleep=fake_clock.sleep)
    for _ in range(4):
        fail_in_slot(limit, refused())
    assert limit.limit == 1


def test_retry_after_pauses_every_new_request_until_then(fake_clock: FakeClock) -> None:
    limit = InFlightLimit(4, clock=fake_clock, sleep=fake_clock.sleep)
    start = fake_clock()

    fail_in_slot(limit, refused(retry_after=2.5))
    answer_in_slot(limit, 1)

    assert fake_clock() - start == pytest.approx(2.5)
    assert sum(fake_clock.slept) == pytest.approx(2.5)


def test_no_more_requests_at_once_than_the_limit() -> None:
    limit = InFlightLimit(3, clock=time.time, sleep=time.sleep)
    threads: list[threading.Thread] = []

    def start(task: Callable[[], None]) -> None:
        def run() -> None:
            with limit.slot():
                task()

        threads.append(threading.Thread(target=run))
        threads[-1].start()

    peak = most_at_once(0.05, 9, start)
    for thread in threads:
        thread.join()
    assert peak == 3


@pytest.mark.parametrize("wrong", [0, 65, True, 2.0, "4"])
def test_max_in_flight_is_a_whole_number_from_1_to_64(wrong: object) -> None:
    with pytest.raises(ValueError, match="max_in_flight must be"):
        check_max_in_flight(wrong)  # type: ignore[arg-type]


def test_a_list_read_shrinks_the_limit_on_a_5xx_and_ingestion_takes_no_slot(make_client) -> None:
    statuses = iter([503, 200, 429, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(statuses)
        if request.url.path.endswith("/rows"):
            return httpx.Response(
                status, json={"success": status == 200, "data": {"rows": [], "hasMore": False}}
            )
        body = {"success": True, "data": [{"id": "evt_1", "status": "pending"}]}
        return httpx.Response(status, json=body if status == 200 else {"error": "slow down"})

    client = make_client(handler, max_in_flight=4)
    client.get_rows("tbl_1")
    assert (client.in_flight.limit, client.in_flight.decreases) == (2, 1)

    client.ingest_batch([{"signal": "page_visit", "identity": {"type": "account", "id": "u1"}}])
    assert (client.in_flight.limit, client.in_flight.decreases) == (2, 1)


class Service:
    """``count`` items behind offset paging, served at most ``cap`` a page, its end told as
    ``end`` says; counts the pages asked for and the most asked for at once."""

    def __init__(self, count: int, *, cap: int, end: str) -> None:
        self.count, self.cap, self.end = count, cap, end
        self.asked: list[int] = []
        self.at_once = self.peak = 0
        self.lock = threading.Lock()

    def fetch(self, offset: int) -> tuple[list[int], bool | None, int | None]:
        with self.lock:
            self.asked.append(offset)
            self.at_once += 1
            self.peak = max(self.peak, self.at_once)
        time.sleep(0.002)
        items = list(range(offset, min(offset + self.cap, self.count)))
        with self.lock:
            self.at_once -= 1
        more = offset + len(items) < self.count if self.end == "flag" else None
        total = self.count if self.end == "total" else None
        return items, more, total


@pytest.mark.parametrize("end", ["total", "flag", "empty page"])
@pytest.mark.parametrize("in_flight", [1, 2, 4, 8])
def test_pages_asked_for_ahead_give_the_same_items_in_order(end: str, in_flight: int) -> None:
    service = Service(1_003, cap=10, end=end)

    items = list(iter_offset_pages(service.fetch, in_flight=in_flight))

    assert items == list(range(1_003))
    needed = 101 + (end == "empty page")  # 101 pages hold the items; the empty one ends it
    assert needed <= len(service.asked) <= needed + in_flight - 1 + (end != "total")
    assert service.peak <= in_flight
    if in_flight > 1:
        assert service.peak > 1


def test_pages_kept_ahead_of_a_reader_at_work_are_read_meanwhile_in_flight_at_a_time() -> None:
    service = Service(1_003, cap=10, end="total")
    items = iter_offset_pages(service.fetch, in_flight=2, pages_ahead=6)

    # The reader takes the first page and an item of the second, then works on them a while.
    assert [next(items) for _ in range(11)] == list(range(11))
    deadline = time.monotonic() + 5
    while len(service.asked) < 7 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)  # no page more is asked for while the reader is away

    assert sorted(service.asked) == list(range(0, 70, 10))  # the second page and five past it
    assert service.peak <= 2
    assert list(items) == list(range(11, 1_003))


def test_a_page_shorter_than_the_one_before_drops_the_pages_asked_for_after_it() -> None:
    served: list[int] = []

    def fetch(offset: int) -> tuple[list[int], bool | None, int | None]:
        served.append(offset)
        cap = 3 if offset == 5 else 5  # the service serves less at one offset
        return list(range(offset, min(offset + cap, 40))), None, 40

    assert list(iter_offset_pages(fetch, in_flight=1)) == list(range(40))
    assert 10 not in served
    served.clear()

    assert list(iter_offset_pages(fetch, in_flight=4)) == list(range(40))
    assert {10, 8} <= set(served)  # 10 was asked for ahead, dropped, and 8 asked for instead


def test_fan_out_keeps_order_and_bounds_what_runs_at_once() -> None:
    lock = threading.Lock()
    running = peak = 0

    def work(item: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01 * (item % 3))
        with lock:
            running -= 1
        return item * item

    assert list(fan_out(work, range(20), at_once=4)) == [item * item for item in range(20)]
    assert 1 < peak <= 4


def test_fan_out_goes_on_past_a_slow_item() -> None:
    finished: list[int] = []

    def work(item: int) -> int:
        time.sleep(0.5 if item == 0 else 0.01)
        finished.append(item)
        return item

    assert list(fan_out(work, range(8), at_once=2)) == list(range(8))
    # While the first item takes its time, the other thread works through those after it.
    assert finished.index(0) >= 3


def test_fan_out_raises_at_the_items_turn_and_starts_nothing_after() -> None:
    started: list[int] = []

    def work(item: int) -> int:
        started.append(item)
        if item == 2:
            raise ValueError("refused")
        return item

    results = fan_out(work, range(100), at_once=3)
    assert [next(results), next(results)] == [0, 1]
    with pytest.raises(ValueError, match="refused"):
        next(results)
    assert max(started) < 10
