"""The people sync tests' names for the kit's people tenant (:mod:`tests.support.tenants`):
``emulator`` is a fresh emulator serving the people List, ``client`` a client of it whose List
holds the account rows, ``write_requests()`` the write requests answered so far by kind, and
``list_people()`` the people the List holds. DAGs built in a test run with the suite's
``run_dag`` (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from listsync.client import ListSyncClient

from ...support import LiveEmulator
from ...support.tenants import people_in_list, people_writes


@pytest.fixture
def emulator(people_emulator: LiveEmulator) -> LiveEmulator:
    return people_emulator


@pytest.fixture
def client(people_client: ListSyncClient) -> ListSyncClient:
    return people_client


@pytest.fixture
def write_requests(people_emulator: LiveEmulator) -> Callable[[], dict[str, int]]:
    return lambda: people_writes(people_emulator)


@pytest.fixture
def list_people(people_emulator: LiveEmulator) -> Callable[[], dict[str, list[dict[str, Any]]]]:
    return lambda: people_in_list(people_emulator)
