"""Spec §8 and assumptions A5–A7: per-signal fixed windows, headers, partial and full limiting.

The app runs on a fake clock starting at 2027-01-15T08:00:00Z, the start of a window.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from listsync.emulator import Emulator, demo_config
from listsync.emulator.store import ApiError
from listsync.emulator.windows import FixedWindowLimiter, iso_utc

EVENTS = "/v1/events"
BATCH = "/v1/events/batch"
NEXT_MINUTE = "2027-01-15T08:01:00.000Z"


def headers_of(response):
    return {
        name: response.headers.get(name)
        for name in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")
    }


@pytest.mark.parametrize(("signal", "limit"), [("page_visit", 100), ("seats_used", 1000), ("deal_stage", 30)])
def test_single_headers_give_the_type_limit_remaining_and_window_end(
    client, make_event, fake_clock, signal, limit
):
    fake_clock.sleep(15.25)
    first = client.post(EVENTS, json=make_event(signal))
    second = client.post(EVENTS, json=make_event(signal))
    assert headers_of(first) == {
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(limit - 1),
        "X-RateLimit-Reset": NEXT_MINUTE,
        "Retry-After": None,
    }
    assert second.headers["X-RateLimit-Remaining"] == str(limit - 2)


def test_single_is_refused_after_the_limit_with_retry_after(client, make_event, fake_clock, emulator):
    for _ in range(30):
        assert client.post(EVENTS, json=make_event("deal_stage")).status_code == 200
    fake_clock.sleep(20.5)
    refused = client.post(EVENTS, json=make_event("deal_stage"))
    assert refused.status_code == 429
    assert headers_of(refused) == {
        "X-RateLimit-Limit": "30",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": NEXT_MINUTE,
        "Retry-After": "40",  # 39.5 s to the reset, rounded up
    }
    assert len(emulator.state.events) == 30
    assert emulator.stats.snapshot()["events_rate_limited"] == {"deal_stage": 1}


def test_window_resets_after_window_seconds(client, make_event, fake_clock):
    for _ in range(30):
        client.post(EVENTS, json=make_event("deal_stage"))
    fake_clock.sleep(59.999)
    assert client.post(EVENTS, json=make_event("deal_stage")).status_code == 429
    fake_clock.sleep(0.001)
    fresh = client.post(EVENTS, json=make_event("deal_stage"))
    assert fresh.status_code == 200
    assert fresh.headers["X-RateLimit-Remaining"] == "29"
    assert fresh.headers["X-RateLimit-Reset"] == "2027-01-15T08:02:00.000Z"


def test_window_seconds_comes_from_the_config(client_for, fake_clock, make_event):
    config = demo_config().model_copy(update={"window_seconds": 5.0})
    with client_for(config) as c:
        for _ in range(30):
            c.post(EVENTS, json=make_event("deal_stage"))
        limited = c.post(EVENTS, json=make_event("deal_stage"))
        assert limited.status_code == 429
        assert limited.headers["X-RateLimit-Reset"] == "2027-01-15T08:00:05.000Z"
        assert limited.headers["Retry-After"] == "5"
        fake_clock.sleep(5)
        assert c.post(EVENTS, json=make_event("deal_stage")).status_code == 200


def test_windows_are_aligned_to_the_epoch():
    limiter = FixedWindowLimiter(60, clock=lambda: 0.0)
    assert limiter.window("sig", 10, 1_800_000_059.9).reset_at == 1_800_000_060
    assert limiter.window("sig", 10, 1_800_000_060.0).reset_at == 1_800_000_120
    assert iso_utc(1_800_000_060.5) == "2027-01-15T08:01:00.500Z"


def test_signals_are_limited_independently(client, make_event):
    for _ in range(30):
        client.post(EVENTS, json=make_event("deal_stage"))
    assert client.post(EVENTS, json=make_event("deal_stage")).status_code == 429
    other = client.post(EVENTS, json=make_event("page_visit"))
    assert other.status_code == 200
    assert other.headers["X-RateLimit-Remaining"] == "99"


def test_batch_counts_each_event_against_its_own_signal(client, make_event):
    events = [make_event("page_visit")] * 7 + [make_event("deal_stage")] * 3 + [make_event("seats_used")] * 10
    response = client.post(BATCH, json={"events": events})
    assert response.status_code == 200
    assert len(response.json()["data"]) == 20
    # Highest limit across the batch (Metric), lowest remaining after it (State: 30 - 3).
    assert headers_of(response) == {
        "X-RateLimit-Limit": "1000",
        "X-RateLimit-Remaining": "27",
        "X-RateLimit-Reset": NEXT_MINUTE,
        "Retry-After": None,
    }
    for signal, remaining in (("page_visit", "92"), ("deal_stage", "26"), ("seats_used", "989")):
        single = client.post(EVENTS, json=make_event(signal))
        assert single.headers["X-RateLimit-Remaining"] == remaining


def test_partial_limiting_is_200_with_rate_limited_entries_in_order(client, make_event, emulator):
    for _ in range(28):
        client.post(EVENTS, json=make_event("deal_stage"))
    events = [make_event("deal_stage", reference=f"s{i}") for i in range(4)]
    events.insert(1, make_event("page_visit", reference="p0"))
    events.append(make_event("deal_stage"))
    response = client.post(BATCH, json={"events": events})
    assert response.status_code == 200
    body = response.json()
    assert body["success"] is True
    assert [a["reference"] for a in body["data"]] == ["s0", "p0", "s1"]
    assert body["rate_limited"] == [
        {"signal_id": "sig_dealstage01", "reference": "s2"},
        {"signal_id": "sig_dealstage01", "reference": "s3"},
        {"signal_id": "sig_dealstage01"},
    ]
    assert headers_of(response) == {
        "X-RateLimit-Limit": "100",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": NEXT_MINUTE,
        "Retry-After": None,
    }
    assert len(emulator.state.events) == 28 + 3
    stats = emulator.stats.snapshot()
    assert stats["events_accepted"] == {"deal_stage": 30, "page_visit": 1}
    assert stats["events_rate_limited"] == {"deal_stage": 3}


def test_full_limiting_is_429_and_ingests_nothing(client, make_event, emulator, fake_clock):
    for _ in range(30):
        client.post(EVENTS, json=make_event("deal_stage"))
    fake_clock.sleep(45)
    response = client.post(BATCH, json={"events": [make_event("deal_stage", reference="x")] * 3})
    assert response.status_code == 429
    assert response.json() == {"success": False, "error": "Rate limit exceeded for all events in batch"}
    assert headers_of(response) == {
        "X-RateLimit-Limit": "30",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": NEXT_MINUTE,
        "Retry-After": "15",
    }
    assert len(emulator.state.events) == 30


def test_a_batch_that_fills_the_window_exactly_is_not_limited(client, make_event):
    response = client.post(BATCH, json={"events": [make_event("deal_stage")] * 30})
    assert response.status_code == 200
    assert "rate_limited" not in response.json()
    assert response.headers["X-RateLimit-Remaining"] == "0"
    assert client.post(EVENTS, json=make_event("deal_stage")).status_code == 429


def test_rate_limits_are_configurable(client_for, make_event):
    config = demo_config().model_copy(update={"rate_limits": {"Event": 2, "Metric": 5, "State": 1}})
    with client_for(config) as c:
        response = c.post(BATCH, json={"events": [make_event("page_visit")] * 3})
        assert len(response.json()["rate_limited"]) == 1
        assert response.headers["X-RateLimit-Limit"] == "2"


LIMITS = {"page_visit": 100, "seats_used": 1000, "deal_stage": 30}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(
            st.lists(st.sampled_from(sorted(LIMITS)), min_size=1, max_size=100),
            st.floats(min_value=0, max_value=50),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_batches_follow_a_greedy_per_signal_fixed_window_model(fake_clock, make_event, steps):
    """Any sequence of mixed batches and pauses: each batch accepts, per signal and in request
    order, what is left of that signal's window; the headers give the highest limit of the batch's
    signals, their lowest remaining and the window's end."""
    fake_clock.now = fake_clock.START  # the fixture is shared by every example; each starts afresh
    emulator = Emulator(demo_config(), fake_clock, asyncio.sleep)
    used: dict[tuple[str, int], int] = {}
    for slugs, pause in steps:
        fake_clock.sleep(pause)
        window = int(fake_clock() // 60)
        left = {slug: LIMITS[slug] - used.get((slug, window), 0) for slug in slugs}
        expected = []
        for index, slug in enumerate(slugs):
            if left[slug] > 0:
                left[slug] -= 1
                used[slug, window] = used.get((slug, window), 0) + 1
                expected.append(str(index))
        events = [make_event(slug, reference=str(index)) for index, slug in enumerate(slugs)]
        try:
            result = emulator.signals.ingest_batch({"events": events})
        except ApiError as error:
            assert (error.status, expected) == (429, [])
            headers = error.headers
        else:
            assert [ack["reference"] for ack in result.body["data"]] == expected
            limited = [entry["reference"] for entry in result.body.get("rate_limited", [])]
            assert sorted(limited + expected, key=int) == [str(i) for i in range(len(slugs))]
            headers = result.headers
        assert headers["X-RateLimit-Limit"] == str(max(LIMITS[slug] for slug in slugs))
        assert headers["X-RateLimit-Remaining"] == str(min(left.values()))
        assert headers["X-RateLimit-Reset"] == iso_utc((window + 1) * 60)
