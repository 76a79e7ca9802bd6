"""``send_events``: ingest any number of signal events at the pace the service allows."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from listsync.client.models import SignalEvent

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient


@dataclass
class SignalReport:
    """What happened to one signal's events."""

    acknowledged: int = 0
    ack_ids: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    rate_limited_resends: int = 0
    requests: int = 0
    rate_limited_responses: int = 0
    seconds_waited: float = 0.0
    possibly_duplicated: int = 0
    skipped: int = 0


@dataclass
class IngestReport:
    """What :func:`send_events` did, per signal slug; JSON-friendly through :meth:`to_dict`."""

    signals: dict[str, SignalReport] = field(default_factory=dict)
    requests: int = 0
    seconds_waited: float = 0.0
    resume_at: float | None = None
    checkpoint: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary."""
        raise NotImplementedError


def send_events(
    client: ListSyncClient,
    events: Iterable[SignalEvent | Mapping[str, Any]],
    signal_types: Mapping[str, str] | None = None,
    *,
    batch_size: int = 100,
    checkpoint: Mapping[str, Any] | None = None,
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
    max_wait: float | None = None,
) -> IngestReport:
    """Ingest ``events``, pacing each signal at its own limit, signals in parallel."""
    raise NotImplementedError
