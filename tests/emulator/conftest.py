"""Fixtures for the emulator tests: an in-process app on the fake clock, and clients for it.

The app's injected latency is slept on the fake clock too, so ``fake_clock.slept`` records it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from listsync.emulator import Emulator, EmulatorConfig, create_app, demo_config

from ..support import FakeClock

SECRET = "sk_demo_listsync"
TABLE = "tbl_accounts"


@pytest.fixture
def config() -> EmulatorConfig:
    """The demo tenant: the names the rest of the project relies on."""
    return demo_config()


@pytest.fixture
def app(config: EmulatorConfig, fake_clock: FakeClock) -> FastAPI:
    return create_app(config, clock=fake_clock, sleep=fake_clock.async_sleep)


@pytest.fixture
def emulator(app: FastAPI) -> Emulator:
    """The in-process handle (``state``, ``stats``, ``faults``) of ``app``."""
    handle: Emulator = app.state.emulator
    return handle


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    """A client with the demo secret key."""
    with TestClient(app, headers={"Authorization": f"Bearer {SECRET}"}) as test_client:
        yield test_client


def _event(signal: str = "page_visit", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "signal": signal,
        "identity": {"type": "account", "id": "acct_1"},
        "data": {"seats": 3, "stage": "won"},
    }
    body.update(fields)
    return body


@pytest.fixture
def client_for(fake_clock: FakeClock) -> Callable[[EmulatorConfig], TestClient]:
    """Makes a client (demo secret key) for an app of another config, on the same fake clock."""

    def make(config: EmulatorConfig) -> TestClient:
        return TestClient(create_app(config, clock=fake_clock), headers={"Authorization": f"Bearer {SECRET}"})

    return make


@pytest.fixture
def serve(fake_clock: FakeClock) -> Iterator[Callable[..., TestClient]]:
    """Makes a client (demo secret key) of the demo tenant under a profile, on the fake clock;
    keyword arguments replace config fields (``dialect_overrides``, say)."""

    def make(profile: str, **fields: Any) -> TestClient:
        data = {**demo_config().model_dump(), "profile": profile, **fields}
        app = create_app(EmulatorConfig.model_validate(data), clock=fake_clock, sleep=fake_clock.async_sleep)
        return stack.enter_context(TestClient(app, headers={"Authorization": f"Bearer {SECRET}"}))

    with ExitStack() as stack:
        yield make


@pytest.fixture
def make_event() -> Callable[..., dict[str, Any]]:
    """Builds a valid event body for a demo signal (data carries every demo signal's required
    keys); keyword arguments replace fields."""
    return _event


@pytest.fixture
def add_accounts(client: TestClient) -> Callable[..., list[str]]:
    """Adds one row per domain to the demo List; returns the new row ids."""

    def add(*domains: str) -> list[str]:
        response = client.post(
            f"/v1/lists/{TABLE}/rows",
            json={"userId": "usr_demo", "rows": [{"cells": {"domain": d}} for d in domains]},
        )
        assert response.status_code == 200, response.text
        return [row["id"] for row in response.json()["data"]["rows"]]

    return add


def _assert_error(response: Any, status: int, message: str) -> None:
    assert response.status_code == status, response.text
    assert response.json() == {"success": False, "error": message}


@pytest.fixture
def expect_error() -> Callable[[Any, int, str], None]:
    """Asserts a response is the §7 error envelope with exactly this status and message."""
    return _assert_error
