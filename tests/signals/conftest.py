"""Fixtures of the ingestion tests: the demo emulator on the test's fake clock, and a client of it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from listsync.client import ListSyncClient

from ..support import LiveEmulator


@pytest.fixture
def emulator(live_emulator: Callable[..., LiveEmulator]) -> LiveEmulator:
    """The demo tenant, its rate windows (60 s, as the service's) on the test's fake clock."""
    return live_emulator()


@pytest.fixture
def base_url(emulator: LiveEmulator) -> str:
    return emulator.url


@pytest.fixture
def client(emulator: LiveEmulator) -> ListSyncClient:
    return emulator.client()
