"""Fixtures for contract tests: ``ListSyncClient`` against a live emulator on one fake clock.

The emulator implements the spec on its own (it does not import the client), so a test here
fails when the two read the spec differently. The client's ``sleep`` advances the clock the
emulator reads, so waiting for a rate-limit window takes no real time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from listsync.client import ListSyncClient
from listsync.emulator import create_app, demo_config, serve_in_thread


@pytest.fixture
def app(fake_clock: Any) -> FastAPI:
    return create_app(demo_config(), clock=fake_clock)


@pytest.fixture
def base_url(app: FastAPI) -> Iterator[str]:
    with serve_in_thread(app) as url:
        yield url


@pytest.fixture
def make_client(base_url: str, fake_clock: Any) -> Iterator[Any]:
    """Makes clients of the live emulator (demo user; ``api_key`` defaults to the secret key)."""
    made: list[ListSyncClient] = []

    def make(api_key: str = "sk_demo_listsync", **options: Any) -> ListSyncClient:
        client = ListSyncClient(
            base_url,
            api_key,
            "usr_demo",
            clock=fake_clock,
            sleep=fake_clock.sleep,
            rand=lambda: 0.0,
            **options,
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def client(make_client: Any) -> ListSyncClient:
    """A client with the demo secret key and user, on the fake clock."""
    made: ListSyncClient = make_client()
    return made
