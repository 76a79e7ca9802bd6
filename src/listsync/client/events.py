"""``send_events``: ingest any number of signal events at the pace the service allows.

How it paces (spec §8): every signal has its own budget per window (Event 100, Metric 1,000,
State 30 per minute, from ``signal_types``). A single-threaded loop builds each batch from every
signal that has budget left, taking per signal at most what its window allows, so signals
progress together and the total rate is the sum of their limits. It sleeps (the client's
injected ``sleep``) only when no signal with events left has budget, until the earliest reset,
saying every ten seconds which signals wait and how long yet (:class:`listsync.progress.Progress`).
A signal of unknown type is probed with one event in a batch of its own; the response's
``X-RateLimit-*`` headers then give its limit (batch headers aggregate over signals, rule 4, so
only single-signal responses are read this way).

How it keeps every event: each event carries a ``reference`` (the caller's, else
``<signal>:<position>``, its position among the caller's events of that signal, ``#<n>`` added
should the caller have given that reference to another event), so every
acknowledgement and every ``rate_limited`` entry maps back to exactly one event. Events not
acknowledged by a response, whether listed in ``rate_limited`` or not, go back to the head of
their signal's queue. A 429 re-queues the whole batch and waits for the reset. ``404 Signals
not found`` rejects the events of those slugs with that message and sends the rest. A 400
refuses a whole batch for one bad event: when the message names it (``events[<i>]: ...``, A27)
that event is rejected and the rest re-queued; otherwise the batch's events are re-sent one per
request, so only the bad one is rejected. A batch whose fate was unknown (timeout after sending) is sent
again and its events are counted as ``possibly_duplicated``. Other errors (authentication, a
server failing after retries) are raised: the checkpoint lets a retry resume.

Checkpoint format (JSON)::

    {"version": 1, "signals": {"<slug>": {"prefix": 120, "ranges": [[130, 135]], "maybe": [[135, 140]]}}}

``prefix`` counts the leading events of that signal (in the caller's order) that are
acknowledged; ``ranges`` lists half-open position ranges acknowledged beyond it; ``maybe`` lists
the events possibly applied but not acknowledged: a batch is written there before it is sent, and
stays there when its fate is unknown. A run resumed from the checkpoint sends those events again
and counts them ``possibly_duplicated``, so a crash between a send and its checkpoint, or a try
killed while a batch was in flight, is never silent. ``twice`` lists the acknowledged events that
were sent again after a send of unknown fate: possibly stored twice, whichever try sent them.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from listsync.client.errors import (
    BadRequestError,
    InvalidRecordError,
    RateLimitedError,
    SignalsNotFoundError,
)
from listsync.client.models import MAX_EVENTS_PER_BATCH, BatchIngestResult, SignalEvent, validate_event
from listsync.client.ratelimit import SIGNAL_TYPE_LIMITS, RateLimitInfo, SignalBudget
from listsync.client.retry import Attempts
from listsync.progress import Progress

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
_EVENT_INDEX = re.compile(r"^events\[(?P<index>\d+)\]")
NO_SIGNAL = "(no signal)"
"""Report key for events that name no signal."""


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
    """What :func:`send_events` did, per signal slug.

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


@dataclass
class _Pending:
    signal: str
    position: int
    event: SignalEvent
    maybe_sent: bool = False

    @property
    def reference(self) -> str:
        # validated events always carry a reference (assigned on intake)
        return self.event.reference or ""


class _Acked:
    """One signal's positions: acknowledged (a prefix count plus ranges beyond it) and in doubt."""

    def __init__(self, saved: Mapping[str, Any] | None = None) -> None:
        saved = saved or {}
        self.positions: set[int] = set(range(int(saved.get("prefix", 0))))
        self.positions.update(_from_ranges(saved.get("ranges", [])))
        self.in_doubt: set[int] = _from_ranges(saved.get("maybe", []))
        # Acknowledged after a send whose fate was unknown: possibly stored twice.
        self.twice: set[int] = _from_ranges(saved.get("twice", []))

    def to_dict(self) -> dict[str, Any]:
        prefix = 0
        while prefix in self.positions:
            prefix += 1
        saved: dict[str, Any] = {"prefix": prefix, "ranges": _ranges(p for p in self.positions if p > prefix)}
        if self.in_doubt:
            saved["maybe"] = _ranges(self.in_doubt)
        if self.twice:
            saved["twice"] = _ranges(self.twice)
        return saved


def _ranges(positions: Iterable[int]) -> list[list[int]]:
    """Half-open ranges covering ``positions``."""
    ranges: list[list[int]] = []
    for position in sorted(positions):
        if ranges and ranges[-1][1] == position:
            ranges[-1][1] = position + 1
        else:
            ranges.append([position, position + 1])
    return ranges


def _from_ranges(ranges: Iterable[Sequence[int]]) -> set[int]:
    return {position for start, end in ranges for position in range(int(start), int(end))}


class _Sender:
    def __init__(
        self,
        client: ListSyncClient,
        signal_types: Mapping[str, str],
        batch_size: int,
        checkpoint: Mapping[str, Any] | None,
        on_checkpoint: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        if not 1 <= batch_size <= MAX_EVENTS_PER_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_EVENTS_PER_BATCH}")
        self.client = client
        self.batch_size = batch_size
        self.on_checkpoint = on_checkpoint
        self.limits = {
            slug: SIGNAL_TYPE_LIMITS.get(kind.strip().capitalize()) for slug, kind in signal_types.items()
        }
        saved = (checkpoint or {}).get("signals", {}) if checkpoint else {}
        if checkpoint and checkpoint.get("version", CHECKPOINT_VERSION) != CHECKPOINT_VERSION:
            raise ValueError(f"unsupported checkpoint version: {checkpoint.get('version')!r}")
        self.acked: dict[str, _Acked] = {slug: _Acked(value) for slug, value in saved.items()}
        # Positions an earlier try may have had applied: counted possibly_duplicated when acknowledged.
        self.doubted = {slug: set(acked.in_doubt) for slug, acked in self.acked.items()}
        self.queues: dict[str, deque[_Pending]] = {}
        self.budgets: dict[str, SignalBudget] = {}
        self.references: set[str] = set()
        self.rotation = 0
        self.report = IngestReport()
        # A wait for a window says every ten seconds which signals wait and for how long yet.
        self.progress = Progress(
            log, "Waiting for the rate-limit window of %s: %.0f s left", clock=client.clock
        )

    # -- intake ----------------------------------------------------------------------------------

    def take(self, events: Iterable[SignalEvent | Mapping[str, Any]]) -> None:
        positions: dict[str, int] = {}
        unnamed: list[_Pending] = []
        for raw in events:
            slug = _slug_of(raw)
            position = positions.get(slug, 0)
            positions[slug] = position + 1
            if position in self._acked(slug).positions:
                self.report.signal(slug).skipped += 1
                continue
            reference = _reference_of(raw) or f"{slug}:{position}"
            try:
                event = validate_event(raw)
            except InvalidRecordError as exc:
                self.report.signal(slug).rejected[reference] = str(exc)
                continue
            pending = _Pending(slug, position, event, maybe_sent=position in self.doubted.get(slug, ()))
            if event.reference is None:
                # Named once every caller reference is known, so a derived one never takes one.
                unnamed.append(pending)
            elif event.reference in self.references:
                # Two events with one reference could not be told apart in the response.
                self.report.signal(slug).rejected[reference] = "duplicate reference"
                continue
            else:
                self.references.add(event.reference)
            self.queues.setdefault(slug, deque()).append(pending)
            self.budgets.setdefault(slug, SignalBudget(self.limits.get(slug)))
        for pending in unnamed:
            reference = f"{pending.signal}:{pending.position}"
            suffix = 0
            while reference in self.references:
                suffix += 1
                reference = f"{pending.signal}:{pending.position}#{suffix}"
            self.references.add(reference)
            pending.event = pending.event.model_copy(update={"reference": reference})

    def _acked(self, slug: str) -> _Acked:
        return self.acked.setdefault(slug, _Acked())

    # -- the loop --------------------------------------------------------------------------------

    def run(self, max_wait: float | None) -> IngestReport:
        while any(self.queues.values()):
            now = self.client.clock()
            batch = self._next_batch(now)
            if batch:
                self._send(batch)
                continue
            waiting = [slug for slug, queue in self.queues.items() if queue]
            resume_at = min(self.budgets[slug].next_open(now) for slug in waiting)
            wait = max(0.0, resume_at - now)
            if max_wait is not None and wait > max_wait:
                self.report.resume_at = resume_at
                break
            self.progress.sleep(wait, self.client.sleep, ", ".join(waiting))
            self._waited(wait, waiting)
        self.report.pending = sum(len(queue) for queue in self.queues.values())
        self.report.checkpoint = self.checkpoint()
        return self.report

    def checkpoint(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "signals": {
                slug: acked.to_dict()
                for slug, acked in self.acked.items()
                if acked.positions or acked.in_doubt
            },
        }

    def _next_batch(self, now: float) -> list[_Pending]:
        slugs = [slug for slug, queue in self.queues.items() if queue]
        if not slugs:
            return []
        # Rotate the starting signal so that, when a batch fills up, no signal always comes last.
        start = self.rotation % len(slugs)
        self.rotation += 1
        batch: list[_Pending] = []
        for slug in slugs[start:] + slugs[:start]:
            budget = self.budgets[slug]
            queue = self.queues[slug]
            available = budget.available(now)
            room = min(available, self.batch_size - len(batch))
            if room <= 0:
                continue
            # A signal that will spend its window's budget needs to learn when the window ends,
            # and only an answer about it alone says so (a batch's headers merge its signals',
            # spec §8 rule 4): until its window is known, it travels alone. An unknown limit is
            # probed with one event.
            alone = not budget.known or (len(queue) >= available and not budget.window_known(now))
            if alone and batch:
                continue
            if not budget.known:
                room = 1
            taken = [queue.popleft() for _ in range(min(room, len(queue)))]
            budget.spend(len(taken), now)
            batch.extend(taken)
            if alone or len(batch) >= self.batch_size:
                break
        return batch

    def _save(self) -> None:
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.checkpoint())

    def _doubt(self, items: Iterable[_Pending], doubted: bool) -> None:
        for item in items:
            (self._acked(item.signal).in_doubt.add if doubted else self._acked(item.signal).in_doubt.discard)(
                item.position
            )

    def _send(self, batch: list[_Pending]) -> None:
        # In doubt until the answer says otherwise, and saved so before it goes: a crash or a kill
        # between the send and its checkpoint leaves the batch marked, never silently re-sent.
        self._doubt(batch, True)
        self._save()
        slugs = list(dict.fromkeys(item.signal for item in batch))
        self.report.requests += 1
        for slug in slugs:
            self.report.signal(slug).requests += 1
        attempts = Attempts()
        try:
            result = self.client.ingest_batch(
                [item.event for item in batch], retry_rate_limited=False, attempts=attempts
            )
        except RateLimitedError as exc:
            self._after_attempts(batch, slugs, attempts)
            self._rate_limited_all(batch, slugs, exc)
            return
        except SignalsNotFoundError as exc:
            self._after_attempts(batch, slugs, attempts)
            self._unknown_signals(batch, exc)
            return
        except BadRequestError as exc:
            self._after_attempts(batch, slugs, attempts)
            self._bad_request(batch, exc)
            return
        except Exception:
            self._after_attempts(batch, slugs, attempts)
            self._requeue(batch)
            raise
        self._after_attempts(batch, slugs, attempts)
        self._acknowledge(batch, slugs, result)

    def _after_attempts(self, batch: list[_Pending], slugs: list[str], attempts: Attempts) -> None:
        # ``requests`` counts HTTP attempts: a batch retried by the client counts each time.
        retries = max(0, attempts.sent - 1)
        self.report.requests += retries
        for slug in slugs:
            self.report.signal(slug).requests += retries
        if attempts.after_unknown_outcome:
            for item in batch:
                item.maybe_sent = True
        if attempts.waited:
            self._waited(attempts.waited, slugs)

    def _waited(self, seconds: float, slugs: Iterable[str]) -> None:
        self.report.seconds_waited += seconds
        for slug in slugs:
            self.report.signal(slug).seconds_waited += seconds

    def _acknowledge(self, batch: list[_Pending], slugs: list[str], result: BatchIngestResult) -> None:
        now = self.client.clock()
        by_reference = {item.reference: item for item in batch}
        # An entry whose reference names no event of the batch is matched like one without (A7).
        limited = {entry.reference for entry in result.rate_limited if entry.reference in by_reference}
        acked: dict[str, str] = {}
        unreferenced = []
        for ack in result.acks:
            if ack.reference in by_reference:
                acked[ack.reference] = ack.id
            else:
                unreferenced.append(ack)
        if unreferenced:
            # Tolerance: acks without a reference follow request order (public docs).
            candidates = [
                i.reference for i in batch if i.reference not in acked and i.reference not in limited
            ]
            acked.update((ref, ack.id) for ref, ack in zip(candidates, unreferenced, strict=False))

        info = RateLimitInfo(result.rate_limit_limit, result.rate_limit_remaining, result.rate_limit_reset_at)
        self._learn(slugs, info, now)
        back = [item for item in batch if item.reference not in acked]
        unlisted = [item for item in back if item.reference not in limited]
        anonymous = sum(1 for entry in result.rate_limited if entry.reference not in limited)
        if len(unlisted) > anonymous:
            # Neither acknowledged nor listed as rate limited: the service may have ingested them.
            for item in unlisted:
                item.maybe_sent = True
        for item in batch:
            report = self.report.signal(item.signal)
            ack_id = acked.get(item.reference)
            if ack_id is None:
                # Re-queued, never dropped.
                report.rate_limited_resends += 1
                continue
            report.acknowledged += 1
            report.ack_ids.append(ack_id)
            report.possibly_duplicated += item.maybe_sent
            acked_positions = self._acked(item.signal)
            acked_positions.positions.add(item.position)
            acked_positions.in_doubt.discard(item.position)
            if item.maybe_sent:
                acked_positions.twice.add(item.position)
        # Only a rate_limited entry says a signal's window is spent.
        spent = [item for item in back if item.reference in limited] + (unlisted if anonymous else [])
        for slug in dict.fromkeys(item.signal for item in spent):
            self.budgets[slug].exhaust(info.reset_at, now)
        # Listed as rate limited: this send was refused. The rest of ``back`` may have been applied,
        # and so may a listed event an earlier send of which had an unknown fate.
        self._doubt((item for item in back if item.reference in limited and not item.maybe_sent), False)
        self._requeue(back)
        self._save()

    def _learn(self, slugs: list[str], info: RateLimitInfo, now: float) -> None:
        for slug in slugs:
            budget = self.budgets[slug]
            if len(slugs) == 1:
                # Only a single-signal answer's headers describe one signal (spec §8 rule 4).
                budget.observe(info, now)
            if not budget.known:
                # No headers to learn from: assume the strictest published limit.
                budget.limit, budget.known = min(SIGNAL_TYPE_LIMITS.values()), True

    def _rate_limited_all(self, batch: list[_Pending], slugs: list[str], exc: RateLimitedError) -> None:
        now = self.client.clock()
        until = (
            exc.reset_at
            if exc.reset_at is not None
            else (now + exc.retry_after if exc.retry_after is not None else None)
        )
        self.report.rate_limited_responses += 1
        for slug in slugs:
            report = self.report.signal(slug)
            report.rate_limited_responses += 1
            self.budgets[slug].exhaust(until, now)
        for item in batch:
            self.report.signal(item.signal).rate_limited_resends += 1
        self._settled_unapplied(batch)
        self._requeue(batch)

    def _unknown_signals(self, batch: list[_Pending], exc: SignalsNotFoundError) -> None:
        unknown = set(exc.slugs)
        if not unknown & {item.signal for item in batch}:
            # The message names nothing we sent: reject the batch rather than loop on it.
            unknown = {item.signal for item in batch}
        # A 404 refuses the whole request before counting it against any limit (A4).
        for item in batch:
            if item.signal not in unknown:
                self.budgets[item.signal].refund(1)
        for slug in unknown:
            report = self.report.signal(slug)
            for item in [i for i in batch if i.signal == slug] + list(self.queues.get(slug, ())):
                report.rejected[item.reference] = exc.message
            self.queues.pop(slug, None)
        self._settled_unapplied(batch)
        self._requeue([item for item in batch if item.signal not in unknown])

    def _bad_request(self, batch: list[_Pending], exc: BadRequestError) -> None:
        # One bad event refuses the whole batch, and nothing was counted against a limit (A4).
        named = _EVENT_INDEX.match(exc.message)
        index = int(named["index"]) if named else None
        if len(batch) == 1 or (index is not None and index < len(batch)):
            bad = batch[index or 0]
            self.report.signal(bad.signal).rejected[bad.reference] = exc.message
            rest = [item for item in batch if item is not bad]
            for item in batch:
                self.budgets[item.signal].refund(1)
            self._settled_unapplied(batch)
            self._requeue(rest)
            return
        # The message does not say which event is bad: send each on its own so that only the bad
        # one is rejected. Their budget stays spent: the same events go out, in more requests.
        for item in batch:
            self._send([item])

    def _settled_unapplied(self, batch: list[_Pending]) -> None:
        """The service refused the whole batch: this send applied none of it. Events an earlier
        send of which had an unknown fate stay in doubt."""
        self._doubt((item for item in batch if not item.maybe_sent), False)
        self._save()

    def _requeue(self, items: list[_Pending]) -> None:
        # Back to the head of each signal's queue, keeping the caller's order.
        for item in reversed(items):
            queue = self.queues.get(item.signal)
            if queue is not None:
                queue.appendleft(item)


def _slug_of(raw: SignalEvent | Mapping[str, Any]) -> str:
    value = raw.signal if isinstance(raw, SignalEvent) else raw.get("signal")
    return value.strip() if isinstance(value, str) and value.strip() else NO_SIGNAL


def _reference_of(raw: SignalEvent | Mapping[str, Any]) -> str | None:
    value = raw.reference if isinstance(raw, SignalEvent) else raw.get("reference")
    return value.strip() if isinstance(value, str) and value.strip() else None


def send_events(
    client: ListSyncClient,
    events: Iterable[SignalEvent | Mapping[str, Any]],
    signal_types: Mapping[str, str] | None = None,
    *,
    batch_size: int = MAX_EVENTS_PER_BATCH,
    checkpoint: Mapping[str, Any] | None = None,
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
    max_wait: float | None = None,
) -> IngestReport:
    """Ingest ``events`` (models or §2.3 mappings), pacing each signal at its own limit.

    :param signal_types: slug -> ``"Event"``, ``"Metric"`` or ``"State"``; a slug not listed is
        probed and its limit read from the response headers.
    :param batch_size: events per request, at most 100.
    :param checkpoint: a checkpoint from an earlier run (``report.checkpoint`` or the last
        ``on_checkpoint`` value): events it marks acknowledged are skipped and counted in
        ``skipped``. Positions are per signal in the order of ``events``, so pass the same events
        in the same order.
    :param on_checkpoint: called with the checkpoint (a small JSON-serialisable dict) after each
        batch that got acknowledgements; store it where a retried task can read it.
    :param max_wait: the longest sleep allowed; when the next wait would be longer, return at once
        with ``report.resume_at`` (epoch seconds) set and the unsent events left unsent.
    :raises AuthenticationError, ServerError, TransportError, ...: failures that no pacing can
        cure; everything acknowledged before is in the last ``on_checkpoint`` value.
    """
    sender = _Sender(client, signal_types or {}, batch_size, checkpoint, on_checkpoint)
    sender.take(events)
    return sender.run(max_wait)
