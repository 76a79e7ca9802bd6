"""Fixtures of the rows upsert tests: an emulator serving a rows List, and a client for it.

DAGs defined in a test run with the suite's ``run_dag`` (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from fastapi import FastAPI

from listsync.client.client import ListSyncClient
from listsync.emulator import Emulator, EmulatorConfig, ListConfig, create_app, serve_in_thread

SECRET = "sk_rows_test"
USER = "usr_rows"
TABLE = "tbl_rows_upsert"
COLUMNS = [
    {"id": "domain", "type": "text"},
    {"id": "name", "type": "text"},
    {"id": "arr", "type": "number"},
    {
        "id": "plan",
        "type": "enum",
        "options": [
            {"key": "free", "label": "Free"},
            {"key": "team", "label": "Team"},
            {"key": "enterprise", "label": "Enterprise"},
        ],
    },
    {"id": "owner", "type": "text"},
    {"id": "health_score", "type": "number"},
    {"id": "metadata", "type": "json"},
    {"id": "renewal_date", "type": "date"},
    {"id": "last_seen", "type": "date"},
]
# The endpoints that write rows and cells, as the emulator names them in its counters.
ROW_WRITES = (
    "POST /v1/lists/{tableId}/rows",
    "PATCH /v1/lists/{tableId}/cells",
    "DELETE /v1/lists/{tableId}/rows",
)


def rows_config(*, unique_domains: bool = True) -> EmulatorConfig:
    """A tenant with one rows List; without unique domains the List can hold duplicate keys."""
    table = ListConfig.model_validate(
        {"id": TABLE, "columns": COLUMNS, "account_column": "domain", "unique_domains": unique_domains}
    )
    return EmulatorConfig(secret_keys=[SECRET], users=[USER], lists=[table])


class LiveEmulator:
    """A served emulator: its base URL, its in-process handle, and helpers to inspect it."""

    def __init__(self, base_url: str, app: FastAPI) -> None:
        self.base_url = base_url
        self.handle: Emulator = app.state.emulator

    def client(self, **options: Any) -> ListSyncClient:
        return ListSyncClient(self.base_url, SECRET, USER, **options)

    def rows(self) -> list[dict[str, Any]]:
        """The List's rows' cells, in insertion order."""
        return [dict(row.cells) for row in self.handle.state.lists[TABLE].rows.values()]

    def seed(self, *rows: dict[str, Any]) -> list[str]:
        """Add rows directly (no request counted); return their ids."""
        with self.client() as client:
            result = client.add_rows(TABLE, [{"cells": cells} for cells in rows])
        self.handle.stats.clear()
        return result.row_ids

    def writes(self) -> dict[str, int]:
        """Row write requests received since the last reset, by endpoint."""
        return {endpoint: self.handle.stats.requests[endpoint] for endpoint in ROW_WRITES}


@pytest.fixture
def serve() -> Iterator[Callable[..., LiveEmulator]]:
    """Starts an emulator with :func:`rows_config` options; stopped at the end of the test."""
    with ExitStack() as stack:

        def start(**options: Any) -> LiveEmulator:
            app = create_app(rows_config(**options))
            return LiveEmulator(stack.enter_context(serve_in_thread(app)), app)

        yield start


@pytest.fixture
def emulator(serve: Callable[..., LiveEmulator]) -> LiveEmulator:
    return serve()
