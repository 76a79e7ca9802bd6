"""Fixtures of the bad-input corpus: one emulator for all its cases, reset before each one.

Retries keep their number of attempts but do not wait (``fast_retries``), so a case against a
server that fails takes milliseconds, not the seconds of the real backoff; nothing else of the
code under test is changed. No case may hang: servers that never answer meet a short request
timeout (or a subprocess that is killed), and ``time_limit`` interrupts any case that still runs
after :data:`CASE_LIMIT` seconds, which then fails.
"""

from __future__ import annotations

import functools
import gc
import signal
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from ..support import LiveEmulator, serve_emulator
from .harness import ACCOUNTS, API_KEY, TABLE


def reset_service(service: LiveEmulator, *, people: bool = False) -> None:
    """Empty the List but for the account rows of :data:`ACCOUNTS` (and two people on them)."""
    service.reset()
    with service.client() as client:
        client.add_rows(TABLE, [{"cells": {"domain": domain, "name": domain}} for domain in ACCOUNTS])
        if people:
            client.add_people(
                TABLE,
                [
                    {
                        "accountDomain": "acme.com",
                        "people": [{"first_name": "Old", "email": "old@acme.com"}],
                    },
                    {
                        "accountDomain": "beta.io",
                        "people": [{"first_name": "Bea", "email": "bea@beta.io"}],
                    },
                ],
            )
    service.stats.clear()


CASE_LIMIT = 30.0


class CaseTookTooLong(BaseException):
    """Raised in a case still running after :data:`CASE_LIMIT` seconds; a ``BaseException``, so
    that no ``except Exception`` of the code under test can take it for an ordinary error."""


@pytest.fixture(autouse=True)
def time_limit() -> Iterator[None]:
    def expire(_signum: int, _frame: Any) -> None:
        raise CaseTookTooLong(f"the case ran for more than {CASE_LIMIT:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, CASE_LIMIT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module", autouse=True)
def collect_leftovers() -> Iterator[None]:
    """After the corpus, collect what failed runs left (an extract file a traceback kept open), so
    its ``ResourceWarning`` is not raised in an unrelated test later in the session."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(scope="module")
def badinput_service() -> Iterator[LiveEmulator]:
    """The demo tenant (its user is :data:`USER`) with the corpus's key, on the wall clock."""
    with serve_emulator(clock=None, secret_keys=[API_KEY]) as service:
        yield service


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries without the backoff waits (same attempts, same decisions)."""
    import listsync.client.client
    from listsync.client.retry import RetryPolicy

    monkeypatch.setattr(
        listsync.client.client,
        "RetryPolicy",
        functools.partial(RetryPolicy, backoff_initial=0.001, backoff_max=0.002),
    )


@pytest.fixture(autouse=True)
def api_key_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
