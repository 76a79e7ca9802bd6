"""Fixtures for contract tests: ``ListSyncClient`` against a live emulator on one fake clock.

The emulator implements the spec on its own (it does not import the client), so a test here
fails when the two read the spec differently. The client's ``sleep`` advances the clock the
emulator reads, so waiting for a rate-limit window takes no real time.

``live_emulator(config)`` serves a fresh emulator of any config (any profile) the same way, for
tests that need their own tenant or one emulator per profile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from fastapi import FastAPI

from listsync.client import ListSyncClient
from listsync.emulator import Emulator, EmulatorConfig, create_app, demo_config, serve_in_thread


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


class LiveEmulator:
    """An emulator served on a real socket for one test: its URL, its in-process handle, clients.

    Made by :func:`live_emulator`; the emulator and its clients run on the test's fake clock, so
    a rate-limit wait or a retry back-off takes no real time.
    """

    def __init__(self, url: str, app: FastAPI, clock: Any, api_key: str, user_id: str | None) -> None:
        self.url = url
        self.handle: Emulator = app.state.emulator
        self._clock = clock
        self._api_key = api_key
        self._user_id = user_id
        self._clients: list[ListSyncClient] = []

    def client(self, **options: Any) -> ListSyncClient:
        """A client of this emulator (closed at the end of the test)."""
        options = {"clock": self._clock, "sleep": self._clock.sleep, "rand": lambda: 0.0, **options}
        made = ListSyncClient(self.url, self._api_key, self._user_id, **options)
        self._clients.append(made)
        return made

    def close_clients(self) -> None:
        for made in self._clients:
            made.close()


@pytest.fixture
def live_emulator(fake_clock: Any) -> Iterator[Callable[..., LiveEmulator]]:
    """Starts a fresh emulator for ``config`` on a live socket: ``live_emulator(config)``.

    Each call serves a new app (no state, counter or fault shared with another emulator), on the
    test's ``fake_clock``; clients use the config's first secret key and first user unless told
    otherwise. Everything stops at the end of the test.
    """
    with ExitStack() as stack:

        def start(
            config: EmulatorConfig, *, api_key: str | None = None, user_id: str | None = None
        ) -> LiveEmulator:
            app = create_app(config, clock=fake_clock)
            url = stack.enter_context(serve_in_thread(app))
            live = LiveEmulator(
                url,
                app,
                fake_clock,
                api_key or config.secret_keys[0],
                user_id if user_id is not None else (config.users[0] if config.users else None),
            )
            stack.callback(live.close_clients)
            return live

        yield start
