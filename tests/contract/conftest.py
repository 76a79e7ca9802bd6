"""Fixtures for contract tests: ``ListSyncClient`` against a live emulator on one fake clock.

The emulator implements the spec on its own (it does not import the client), so a test here
fails when the two read the spec differently. The client's ``sleep`` advances the clock the
emulator reads, so waiting for a rate-limit window takes no real time.

``emulator`` is the demo tenant; a test that needs its own tenant or one emulator per profile
serves it with ``live_emulator(config)`` (tests/support), the same way.

Every contract test runs twice: with the client's requests one at a time (``max_in_flight=1``)
and with its default of several in flight, so that neither way of sending reads the spec wrong.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from listsync.client import ListSyncClient
from listsync.client.in_flight import MAX_IN_FLIGHT

from ..support import LiveEmulator


@pytest.fixture(autouse=True, params=[1, MAX_IN_FLIGHT], ids=lambda n: f"in-flight-{n}")
def in_flight(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The ``max_in_flight`` of every client a live emulator makes in the test."""
    make_client = LiveEmulator.client

    def client(self: LiveEmulator, **options: object) -> ListSyncClient:
        return make_client(self, **{"max_in_flight": request.param, **options})  # type: ignore[arg-type]

    monkeypatch.setattr(LiveEmulator, "client", client)
    return int(request.param)


@pytest.fixture
def emulator(live_emulator: Callable[..., LiveEmulator]) -> LiveEmulator:
    """The demo tenant, live on the test's fake clock."""
    return live_emulator()


@pytest.fixture
def client(emulator: LiveEmulator) -> ListSyncClient:
    """A client with the demo secret key and user, on the fake clock."""
    return emulator.client()
