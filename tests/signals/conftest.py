"""Fixtures of the ingestion tests: a fake clock, the emulator on it, and a client of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from listsync.client import ListSyncClient

from .emulated import FakeClock, client_for, emulator_on


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def base_url(clock: FakeClock) -> Iterator[str]:
    with emulator_on(clock) as url:
        yield url


@pytest.fixture
def client(base_url: str, clock: FakeClock) -> Iterator[ListSyncClient]:
    with client_for(base_url, clock) as client:
        yield client
