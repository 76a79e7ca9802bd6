"""A trigger that waits for a rate-limit window to reopen, and nothing else.

:class:`RateLimitWindowTrigger` is what :class:`~listsync.operators.signals.IngestSignalsOperator`
defers to when the next event batch may not be sent before ``resume_at``. It follows the
deferral contract: its arguments are JSON primitives, it never talks to the service (a restarted
triggerer would repeat any write it made), and it fires exactly one event, whose payload carries
the ingestion checkpoint back to the task so that the task resumes after the last acknowledged
batch even where Airflow has no task state store.
"""

from __future__ import annotations

from asyncio import sleep
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from time import time
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

# Sleep at most this long between looks at the clock, so a wall-clock jump (NTP, suspended VM)
# delays the event by at most this much.
MAX_SLEEP_SECONDS = 60.0

#: ``payload["status"]`` of the event fired when the window has reopened.
WINDOW_REOPENED = "window_reopened"


class RateLimitWindowTrigger(BaseTrigger):
    """Wait until ``resume_at``, then fire one event carrying ``checkpoint`` back to the task.

    :param resume_at: when the rate-limit window reopens, ISO 8601 with a UTC offset
        (for example ``2026-11-21T06:12:00+00:00``).
    :param checkpoint: the ingestion checkpoint at the moment of deferral (any JSON value), echoed
        in the event payload.
    """

    def __init__(self, resume_at: str, checkpoint: Any = None) -> None:
        super().__init__()
        moment = datetime.fromisoformat(resume_at)
        if moment.tzinfo is None:
            raise ValueError(f"resume_at must carry a UTC offset, got {resume_at!r}")
        self.resume_at = moment.astimezone(timezone.utc).isoformat()
        self.checkpoint = checkpoint

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the class path and the JSON-primitive arguments that rebuild this trigger."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"resume_at": self.resume_at, "checkpoint": self.checkpoint},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Sleep until ``resume_at`` and yield a single event; sends nothing anywhere."""
        deadline = datetime.fromisoformat(self.resume_at).timestamp()
        while (remaining := deadline - time()) > 0:
            await sleep(min(remaining, MAX_SLEEP_SECONDS))
        yield TriggerEvent(
            {"status": WINDOW_REOPENED, "resume_at": self.resume_at, "checkpoint": self.checkpoint}
        )
