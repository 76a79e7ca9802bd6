"""Counters behind ``/_emulator/stats``: per endpoint, pages of whole Lists, and events per signal."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any


class Stats:
    """Requests and statuses per endpoint (``"POST /v1/events"``), pages of whole Lists served (of
    reads with no filter: ``"people of tbl_1"``), events accepted and limited per signal."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.statuses: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.unfiltered_pages: Counter[str] = Counter()
        self.events_accepted: Counter[str] = Counter()
        self.events_rate_limited: Counter[str] = Counter()

    def record(self, endpoint: str, status: int | str) -> None:
        """Count one answered request; ``status`` is a code or ``"dropped"``."""
        self.requests[endpoint] += 1
        self.statuses[endpoint][str(status)] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "endpoints": {
                endpoint: {
                    "requests": count,
                    "statuses": dict(self.statuses[endpoint]),
                    "rate_limited": self.statuses[endpoint]["429"],
                }
                for endpoint, count in self.requests.items()
            },
            "unfiltered_pages": dict(self.unfiltered_pages),
            "events_accepted": dict(self.events_accepted),
            "events_rate_limited": dict(self.events_rate_limited),
        }

    def clear(self) -> None:
        for counter in (
            self.requests,
            self.statuses,
            self.unfiltered_pages,
            self.events_accepted,
            self.events_rate_limited,
        ):
            counter.clear()
