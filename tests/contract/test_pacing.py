"""Contract: ``send_events`` paces to the service's windows, however the service places them.

The spec gives each window's end in ``X-RateLimit-Reset`` but not whether windows are aligned to
the clock or opened by a signal's first event (A5). On a fake clock that both sides read, a
request takes no time, so the client must finish exactly when the limits allow: at the start of
the slowest signal's last window, without one event refused on the way.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from listsync.emulator import PROFILES
from listsync.signals.sender import send_events

from ..support import SOLE_WRITER_PROFILES, LiveEmulator

WINDOW = 60.0
LIMITS = {"page_visit": 100, "seats_used": 1000, "deal_stage": 30}
TYPES = {"page_visit": "Event", "seats_used": "Metric", "deal_stage": "State"}
COUNTS = {"page_visit": 150, "seats_used": 1500, "deal_stage": 100}


def events() -> list[dict[str, Any]]:
    data = {"seats": 1, "stage": "won"}
    made = [
        {
            "signal": slug,
            "identity": {"type": "account", "id": f"a{i}"},
            "data": data,
            "reference": f"{slug}{i}",
        }
        for slug, count in COUNTS.items()
        for i in range(count)
    ]
    # A backfill reads its signals interleaved, in timestamp order.
    return sorted(made, key=lambda event: int(event["reference"].lstrip("abcdefghijklmnopqrstuvwxyz_")))


class Slow(httpx.HTTPTransport):
    """A network on the fake clock: each request arrives ``latency`` / 2 after it is sent, and
    its answer as long after that, so the signals' windows open at different instants."""

    def __init__(self, clock: Any, latency: float) -> None:
        super().__init__()
        self.clock = clock
        self.latency = latency
        self.requests = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        self.clock.sleep(self.latency / 2)
        response = super().handle_request(request)
        self.clock.sleep(self.latency / 2)
        return response


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
@pytest.mark.parametrize(
    ("offset", "latency"), [(0.0, 0.0), (37.5, 0.0), (37.5, 1.3)], ids=["boundary", "mid-window", "slow"]
)
def test_send_events_takes_the_time_the_windows_allow(
    profile: str, offset: float, latency: float, fake_clock: Any, live_emulator: Callable[..., LiveEmulator]
) -> None:
    fake_clock.now += offset
    start = fake_clock.now
    emulator = live_emulator(profile=profile)
    transport = Slow(fake_clock, latency)
    with emulator.client(transport=transport) as client:
        report = send_events(client, events(), TYPES)

    windows = max(math.ceil(COUNTS[slug] / LIMITS[slug]) for slug in COUNTS)
    gone = start % WINDOW if PROFILES[profile].windows == "aligned" else 0.0
    minimum = (windows - 1) * WINDOW - gone
    # Each request costs its latency; nothing else may be spent (an idle signal would be).
    assert minimum <= fake_clock.now - start <= minimum + transport.requests * latency + 1e-6
    stats = emulator.stats.snapshot()
    assert sum(stats["events_rate_limited"].values()) == 0
    assert report.acknowledged == sum(COUNTS.values())
    stored = Counter(event["reference"] for event in emulator.state.events)
    assert set(stored.values()) == {1} and len(stored) == sum(COUNTS.values())
