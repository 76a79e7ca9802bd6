"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

POSTGRES_URL = os.environ.get(
    "LISTSYNC_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a reachable PostgreSQL test database.

    On a developer machine without PostgreSQL the test is skipped with the reason; under CI
    (``CI=true``) a missing server fails the run, so a green run never hides it.
    """
    import sqlalchemy as sa

    engine = sa.create_engine(POSTGRES_URL)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
    except Exception as exc:  # any failure to connect means "no PostgreSQL here"
        message = f"PostgreSQL not reachable at {POSTGRES_URL}: {exc.__class__.__name__}: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (CI=true: PostgreSQL tests must run)")
        pytest.skip(message)
    finally:
        engine.dispose()
    yield POSTGRES_URL


class FakeClock:
    """Epoch seconds that move only when told: ``clock()`` reads, ``clock.sleep(s)`` advances.

    Pass the same instance as an emulator's ``clock`` and a client's ``clock`` and ``sleep``, and
    a wait for a rate-limit window takes no real time.
    """

    # 2027-01-15T08:00:00Z, the start of a minute, so window ends are easy to state.
    START = 1_800_000_000.0

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake_clock() -> FakeClock:
    """A :class:`FakeClock` at 2027-01-15T08:00:00Z."""
    return FakeClock()
