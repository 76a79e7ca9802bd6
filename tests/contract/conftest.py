"""Fixtures for contract tests: ``ListSyncClient`` against a live emulator on one fake clock.

The emulator implements the spec on its own (it does not import the client), so a test here
fails when the two read the spec differently. The client's ``sleep`` advances the clock the
emulator reads, so waiting for a rate-limit window takes no real time.

``emulator`` is the demo tenant; a test that needs its own tenant or one emulator per profile
serves it with ``live_emulator(config)`` (tests/support), the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from listsync.client import ListSyncClient

from ..support import LiveEmulator


@pytest.fixture
def emulator(live_emulator: Callable[..., LiveEmulator]) -> LiveEmulator:
    """The demo tenant, live on the test's fake clock."""
    return live_emulator()


@pytest.fixture
def client(emulator: LiveEmulator) -> ListSyncClient:
    """A client with the demo secret key and user, on the fake clock."""
    return emulator.client()
