"""Fixtures of the ingestion tests: a fake clock, the emulator on it, and a client of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from listsync.client import ListSyncClient

from .emulated import client_for, emulator_on


@pytest.fixture
def clock(fake_clock: Any) -> Any:
    """The suite's fake clock (``fake_clock``), under the name these tests use."""
    return fake_clock


@pytest.fixture
def base_url(clock: Any) -> Iterator[str]:
    with emulator_on(clock) as url:
        yield url


@pytest.fixture
def client(base_url: str, clock: Any) -> Iterator[ListSyncClient]:
    with client_for(base_url, clock) as client:
        yield client
