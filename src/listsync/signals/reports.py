"""What a run of the event sender did: per signal (:class:`SignalReport`) and over all of them
(:class:`IngestReport`, which also carries the checkpoint to resume from)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any


@dataclass
class SignalReport:
    """What happened to one signal's events.

    :ivar acknowledged: events the service acknowledged in this run.
    :ivar ack_ids: the service's ids of those events, in acknowledgement order.
    :ivar rejected: reference -> reason, for events that will not be sent (invalid, unknown slug).
    :ivar rate_limited_resends: events listed in ``rate_limited`` (or refused by a 429) and re-queued.
    :ivar requests: batch requests that carried this signal's events (HTTP attempts, retries included).
    :ivar rate_limited_responses: 429 responses met by batches carrying this signal.
    :ivar seconds_waited: seconds slept while this signal had events waiting.
    :ivar possibly_duplicated: acknowledged events that were sent again after an unknown outcome.
    :ivar skipped: events the given checkpoint said were already acknowledged.
    """

    acknowledged: int = 0
    ack_ids: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    rate_limited_resends: int = 0
    requests: int = 0
    rate_limited_responses: int = 0
    seconds_waited: float = 0.0
    possibly_duplicated: int = 0
    skipped: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy."""
        return {
            "acknowledged": self.acknowledged,
            "ack_ids": list(self.ack_ids),
            "rejected": dict(self.rejected),
            "rate_limited_resends": self.rate_limited_resends,
            "requests": self.requests,
            "rate_limited_responses": self.rate_limited_responses,
            "seconds_waited": self.seconds_waited,
            "possibly_duplicated": self.possibly_duplicated,
            "skipped": self.skipped,
        }


@dataclass
class IngestReport:
    """What :func:`~listsync.signals.sender.send_events` did, per signal slug.

    :ivar requests: batch requests sent (HTTP attempts, retries included).
    :ivar rate_limited_responses: 429 responses met (each counts once, whatever signals it carried).
    :ivar seconds_waited: seconds slept waiting for rate-limit windows.
    :ivar resume_at: epoch seconds when sending may go on, set when ``max_wait`` made the run
        return early with events unsent; ``None`` when every event was settled.
    :ivar pending: events left unsent when returning early.
    :ivar checkpoint: the checkpoint of the acknowledged events (pass it to the next run).
    """

    signals: dict[str, SignalReport] = field(default_factory=dict)
    requests: int = 0
    rate_limited_responses: int = 0
    seconds_waited: float = 0.0
    resume_at: float | None = None
    pending: int = 0
    checkpoint: dict[str, Any] = field(default_factory=dict)

    def signal(self, slug: str) -> SignalReport:
        """The report of ``slug`` (created empty on first use)."""
        return self.signals.setdefault(slug, SignalReport())

    @property
    def acknowledged(self) -> int:
        """Events acknowledged in this run, over all signals."""
        return sum(report.acknowledged for report in self.signals.values())

    @property
    def rejected(self) -> int:
        """Events rejected in this run, over all signals."""
        return sum(len(report.rejected) for report in self.signals.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary (for XCom); ``resume_at_iso`` is ``resume_at`` in ISO 8601."""
        return {
            "requests": self.requests,
            "rate_limited_responses": self.rate_limited_responses,
            "seconds_waited": self.seconds_waited,
            "acknowledged": self.acknowledged,
            "rejected": self.rejected,
            "pending": self.pending,
            "resume_at": self.resume_at,
            "resume_at_iso": (
                datetime.fromtimestamp(self.resume_at, tz=timezone.utc).isoformat()
                if self.resume_at is not None
                else None
            ),
            "checkpoint": self.checkpoint,
            "signals": {slug: report.to_dict() for slug, report in self.signals.items()},
        }
