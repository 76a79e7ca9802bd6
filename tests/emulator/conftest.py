"""Fixtures for the emulator tests: an in-process app on a fake clock, and clients for it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from listsync.emulator import EmulatorConfig, create_app, demo_config

SECRET = "sk_demo_listsync"
TABLE = "tbl_accounts"


class RecordingSleep:
    """Stands in for ``asyncio.sleep``: records injected latency instead of waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def clock(fake_clock: Any) -> Any:
    """The emulator's clock (the suite's ``fake_clock``): ``clock.sleep(s)`` moves time on."""
    return fake_clock


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def config() -> EmulatorConfig:
    """The demo tenant: the names the rest of the project relies on."""
    return demo_config()


@pytest.fixture
def app(config: EmulatorConfig, clock: Any, sleep: RecordingSleep) -> FastAPI:
    return create_app(config, clock=clock, sleep=sleep)


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
def client_for(clock: Any) -> Callable[[EmulatorConfig], TestClient]:
    """Makes a client (demo secret key) for an app of another config, on the same fake clock."""

    def make(config: EmulatorConfig) -> TestClient:
        return TestClient(create_app(config, clock=clock), headers={"Authorization": f"Bearer {SECRET}"})

    return make


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
