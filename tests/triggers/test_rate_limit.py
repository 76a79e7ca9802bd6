"""The rate-limit trigger: JSON-primitive arguments, one event after the wait, no sends."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from listsync.triggers import rate_limit
from listsync.triggers.rate_limit import WINDOW_REOPENED, RateLimitWindowTrigger


@pytest.fixture
def fake_time(fake_clock: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The suite's fake clock, at 2026-11-21T06:00Z, patched into the trigger's module."""
    fake_clock.now = datetime(2026, 11, 21, 6, 0, tzinfo=timezone.utc).timestamp()
    monkeypatch.setattr(rate_limit, "time", fake_clock.time)
    monkeypatch.setattr(rate_limit, "sleep", fake_clock.async_sleep)
    return fake_clock


def collect(trigger: RateLimitWindowTrigger) -> list:
    async def run() -> list:
        return [event async for event in trigger.run()]

    return asyncio.run(run())


def test_serialize_round_trips_through_json() -> None:
    checkpoint = {"acknowledged": {"page-viewed": 300}, "totals": {"requests": 4}}
    trigger = RateLimitWindowTrigger(resume_at="2026-11-21T07:00:00+01:00", checkpoint=checkpoint)

    classpath, kwargs = trigger.serialize()
    rebuilt_kwargs = json.loads(json.dumps(kwargs))

    assert classpath == "listsync.triggers.rate_limit.RateLimitWindowTrigger"
    assert rebuilt_kwargs == {"resume_at": "2026-11-21T06:00:00+00:00", "checkpoint": checkpoint}
    assert RateLimitWindowTrigger(**rebuilt_kwargs).serialize() == (classpath, kwargs)


def test_run_yields_one_event_only_after_resume_at(fake_time: Any) -> None:
    resume_at = datetime.fromtimestamp(fake_time.now, timezone.utc) + timedelta(seconds=150)
    trigger = RateLimitWindowTrigger(resume_at=resume_at.isoformat(), checkpoint={"k": [1, 2]})

    events = collect(trigger)

    assert [event.payload for event in events] == [
        {"status": WINDOW_REOPENED, "resume_at": resume_at.isoformat(), "checkpoint": {"k": [1, 2]}}
    ]
    assert fake_time.now >= resume_at.timestamp()
    # Long waits are cut into bounded sleeps so a clock jump cannot hold the task for long.
    assert max(fake_time.slept) <= rate_limit.MAX_SLEEP_SECONDS
    assert sum(fake_time.slept) == pytest.approx(150)


def test_run_fires_at_once_when_resume_at_has_passed(fake_time: Any) -> None:
    past = datetime.fromtimestamp(fake_time.now - 5, timezone.utc).isoformat()

    events = collect(RateLimitWindowTrigger(resume_at=past))

    assert len(events) == 1
    assert events[0].payload["checkpoint"] is None
    assert fake_time.slept == []


def test_naive_resume_at_is_refused() -> None:
    with pytest.raises(ValueError, match="UTC offset"):
        RateLimitWindowTrigger(resume_at="2026-11-21T06:00:00")
