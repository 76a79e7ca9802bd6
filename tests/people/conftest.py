"""Fixtures for the people sync tests: a live emulator with account rows, and a client on it.

``emulator`` is the in-process handle of a fresh emulator served on a socket for each test
(``serve_in_thread``), so no state, counter or fault leaks between tests: its ``stats`` count
requests per endpoint, its ``state`` holds the List, and ``faults.add`` injects failures.
``client`` is a ``ListSyncClient`` on it whose List already holds the account rows of
:data:`ACCOUNTS` (added through ``add_rows``, then the counters are cleared so a test sees only
its own requests). DAGs built in a test run with the suite's ``run_dag`` (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from listsync.client import ListSyncClient
from listsync.emulator import Emulator, EmulatorConfig, ListConfig, create_app, serve_in_thread
from listsync.emulator.config import ColumnConfig

TABLE = "tbl_people"
API_KEY = "sk_test_people_secret"
USER = "usr_people"
ACCOUNTS = ("acme.com", "beta.io", "gamma.org")
PEOPLE_ENDPOINTS = {
    "add": "POST /v1/lists/{tableId}/targetable-people",
    "patch": "PATCH /v1/lists/{tableId}/targetable-people",
    "delete": "DELETE /v1/lists/{tableId}/targetable-people",
}


@pytest.fixture
def emulator_app() -> Any:
    config = EmulatorConfig(
        secret_keys=[API_KEY],
        users=[USER],
        lists=[
            ListConfig(
                id=TABLE,
                account_column="domain",
                unique_domains=True,
                columns=[ColumnConfig(id="domain"), ColumnConfig(id="name")],
            )
        ],
    )
    return create_app(config)


@pytest.fixture
def emulator_url(emulator_app: Any) -> Iterator[str]:
    with serve_in_thread(emulator_app) as url:
        yield url


@pytest.fixture
def emulator(emulator_app: Any, emulator_url: str) -> Emulator:
    handle: Emulator = emulator_app.state.emulator
    return handle


@pytest.fixture
def client(emulator: Emulator, emulator_url: str) -> Iterator[ListSyncClient]:
    # No real waiting on retries: a test must not depend on time.
    with ListSyncClient(emulator_url, API_KEY, USER, sleep=lambda _seconds: None) as client:
        client.add_rows(TABLE, [{"cells": {"domain": domain}} for domain in ACCOUNTS])
        emulator.stats.clear()
        yield client


@pytest.fixture
def write_requests(emulator: Emulator) -> Callable[[], dict[str, int]]:
    """Write requests the emulator has answered since the test began, by kind."""

    def count() -> dict[str, int]:
        return {kind: emulator.stats.requests[endpoint] for kind, endpoint in PEOPLE_ENDPOINTS.items()}

    return count


@pytest.fixture
def list_people(emulator: Emulator) -> Callable[[], dict[str, list[dict[str, Any]]]]:
    """The List's people as the emulator holds them: account domain → people."""

    def people() -> dict[str, list[dict[str, Any]]]:
        rows = emulator.state.lists[TABLE].rows.values()
        return {row.cells["domain"]: [dict(person) for person in row.people] for row in rows}

    return people
