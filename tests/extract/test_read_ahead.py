"""made_ahead: an extract's chunks made in a thread of their own, one ahead of the work on them."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator

import pytest

from listsync.extract.read_ahead import made_ahead

WAIT_SECONDS = 10


def test_items_come_in_their_order_made_in_the_named_thread_one_at_most_ahead() -> None:
    made: list[str] = []
    second_made = threading.Event()

    def items() -> Iterator[int]:
        for number in range(5):
            made.append(threading.current_thread().name)
            if number == 1:
                second_made.set()
            yield number

    taken = []
    for number in made_ahead(items(), name="listsync-extract"):
        if number == 0:
            # The caller is still on the first item: the second is made meanwhile.
            assert second_made.wait(WAIT_SECONDS)
        assert len(made) <= number + 2  # the one taken, and at most the one being made
        taken.append(number)

    assert taken == [0, 1, 2, 3, 4]
    assert all(name.startswith("listsync-extract") for name in made)


def test_an_error_making_an_item_is_raised_where_that_item_would_have_come() -> None:
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("row 40,001: the file ends inside a quoted field")

    taken = []
    with pytest.raises(ValueError, match="row 40,001"):
        for number in made_ahead(items(), name="listsync-extract"):
            taken.append(number)

    assert taken == [1, 2]


def test_a_caller_that_stops_early_has_the_items_closed_in_their_thread() -> None:
    closed_in: list[str] = []

    def items() -> Iterator[int]:
        try:
            yield from range(1_000)
        finally:
            closed_in.append(threading.current_thread().name)

    ahead = made_ahead(items(), name="listsync-extract")
    assert next(ahead) == 0
    ahead.close()

    assert len(closed_in) == 1
    assert closed_in[0].startswith("listsync-extract")


def test_a_failing_caller_has_the_items_closed_before_its_error_goes_on() -> None:
    closed = threading.Event()

    def items() -> Iterator[int]:
        try:
            yield from range(1_000)
        finally:
            closed.set()

    with pytest.raises(RuntimeError, match="the service refused"):
        for _ in made_ahead(items(), name="listsync-extract"):
            raise RuntimeError("the service refused")

    assert closed.is_set()


TASK = contextvars.ContextVar("task", default="none")


def test_the_items_are_made_in_the_callers_context_variables() -> None:
    """A task's logging context (Airflow binds it in context variables) goes with the lines the
    reading thread logs."""
    seen: list[str] = []

    def items() -> Iterator[int]:
        for number in range(3):
            seen.append(TASK.get())
            yield number

    token = TASK.set("sync_targetable_people[3]")
    try:
        assert list(made_ahead(items(), name="listsync-extract")) == [0, 1, 2]
    finally:
        TASK.reset(token)

    assert seen == ["sync_targetable_people[3]"] * 3
