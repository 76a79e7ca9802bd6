"""The test kit's fixtures, for every folder (registered by ``tests/conftest.py``).

``fake_clock`` is time that moves only when told; ``live_emulator(...)`` serves a fresh emulator
for the test (see :func:`tests.support.emulator.serve_emulator`); ``people_emulator``,
``people_client`` and ``rows_emulator`` serve the tenants of :mod:`tests.support.tenants`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from listsync.client import ListSyncClient

from .clock import FakeClock
from .emulator import LiveEmulator, serve_emulator
from .tenants import ACCOUNTS, PEOPLE_TABLE, people_config, rows_config


@pytest.fixture
def fake_clock() -> FakeClock:
    """A :class:`FakeClock` at 2027-01-15T08:00:00Z."""
    return FakeClock()


@pytest.fixture
def live_emulator(fake_clock: FakeClock) -> Iterator[Callable[..., LiveEmulator]]:
    """Starts an emulator on a live socket: ``live_emulator(config=None, *, clock=fake_clock,
    faults=(), sleep=None, port=0, **settings)``, the arguments of :func:`serve_emulator`.

    Each call serves a new app (no state, counter or fault shared with another emulator), on the
    test's ``fake_clock`` unless ``clock`` says otherwise. Everything stops at the end of the test.
    """
    with ExitStack() as stack:

        def start(*args: Any, clock: FakeClock | None = fake_clock, **options: Any) -> LiveEmulator:
            return stack.enter_context(serve_emulator(*args, clock=clock, **options))

        yield start


@pytest.fixture
def people_emulator(live_emulator: Callable[..., LiveEmulator]) -> LiveEmulator:
    """A fresh emulator serving the people List (:func:`tests.support.tenants.people_config`)."""
    return live_emulator(people_config())


@pytest.fixture
def people_client(people_emulator: LiveEmulator) -> ListSyncClient:
    """A client of ``people_emulator`` whose List holds the rows of the :data:`ACCOUNTS`
    (the counters cleared after, so a test sees only its own requests)."""
    people_emulator.seed(PEOPLE_TABLE, *({"domain": domain} for domain in ACCOUNTS))
    return people_emulator.client()


@pytest.fixture
def rows_emulator(live_emulator: Callable[..., LiveEmulator]) -> LiveEmulator:
    """A fresh emulator serving the rows List (:func:`tests.support.tenants.rows_config`)."""
    return live_emulator(rows_config())
