"""``send_events``: ingest any number of signal events at the pace the service allows.

:func:`send_events` takes the events at once; :func:`stream_events` reads them as it sends,
holding at most ``max_queued`` unsent (a backfill of millions of events in bounded memory). Both
take the client as :class:`EventEndpoints`, the batch endpoint and the clock and sleep, and
return an :class:`~listsync.signals.reports.IngestReport`.

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
acknowledged; ``ranges`` lists half-open position ranges acknowledged beyond it (held as ranges
in memory too, so their size follows the gaps, not the events); ``maybe`` lists
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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from listsync.client.errors import (
    BadRequestError,
    InvalidRecordError,
    RateLimitedError,
    SignalsNotFoundError,
)
from listsync.client.models import MAX_EVENTS_PER_BATCH, BatchIngestResult, SignalEvent, validate_event
from listsync.client.rate_hints import SIGNAL_TYPE_LIMITS, RateLimitInfo, SignalBudget
from listsync.client.retry import Attempts
from listsync.progress import Progress
from listsync.signals.positions import SignalPositions
from listsync.signals.reports import IngestReport

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
MAX_QUEUED_EVENTS = 20_000
"""How many events :func:`stream_events` holds read but unsent, at most, by default."""
_EVENT_INDEX = re.compile(r"^events\[(?P<index>\d+)\]")
NO_SIGNAL = "(no signal)"
"""Report key for events that name no signal."""


class EventEndpoints(Protocol):
    """The part of a client the sender uses: the batch endpoint, and the clock and sleep it paces
    by (a :class:`~listsync.client.client.ListSyncClient` is one; a test may pass a fake)."""

    clock: Callable[[], float]
    sleep: Callable[[float], None]

    def ingest_batch(
        self,
        events: Sequence[SignalEvent | Mapping[str, Any]],
        *,
        retry_rate_limited: bool = True,
        attempts: Attempts | None = None,
    ) -> BatchIngestResult: ...


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


class _Sender:
    def __init__(
        self,
        client: EventEndpoints,
        signal_types: Mapping[str, str],
        batch_size: int,
        checkpoint: Mapping[str, Any] | None,
        on_checkpoint: Callable[[dict[str, Any]], None] | None,
        *,
        keep_ack_ids: bool = True,
    ) -> None:
        if not 1 <= batch_size <= MAX_EVENTS_PER_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_EVENTS_PER_BATCH}")
        self.client = client
        self.batch_size = batch_size
        self.on_checkpoint = on_checkpoint
        self.keep_ack_ids = keep_ack_ids
        self.limits = {
            slug: SIGNAL_TYPE_LIMITS.get(kind.strip().capitalize()) for slug, kind in signal_types.items()
        }
        saved = (checkpoint or {}).get("signals", {}) if checkpoint else {}
        if checkpoint and checkpoint.get("version", CHECKPOINT_VERSION) != CHECKPOINT_VERSION:
            raise ValueError(f"unsupported checkpoint version: {checkpoint.get('version')!r}")
        self.acked: dict[str, SignalPositions] = {
            slug: SignalPositions(value) for slug, value in saved.items()
        }
        # Positions an earlier try may have had applied: counted possibly_duplicated when acknowledged.
        self.doubted = {slug: set(acked.in_doubt) for slug, acked in self.acked.items()}
        self.queues: dict[str, deque[_Pending]] = {}
        self.queued = 0
        self.budgets: dict[str, SignalBudget] = {}
        # The references of the events queued or in flight: one batch never carries two alike.
        self.references: set[str] = set()
        # Events read, in all and per signal (the position of the next one).
        self.read = 0
        self.positions: dict[str, int] = {}
        # Slugs the service said it does not know, with its message: their later events are
        # rejected as they are read, not sent to be refused again.
        self.unknown: dict[str, str] = {}
        self.source: Iterator[SignalEvent | Mapping[str, Any]] | None = None
        self.rotation = 0
        self.report = IngestReport()
        # A wait for a window says every ten seconds which signals wait and for how long yet.
        self.progress = Progress(
            log, "Waiting for the rate-limit window of %s: %.0f s left", clock=client.clock
        )

    # -- intake ----------------------------------------------------------------------------------

    def take(self, events: Iterable[SignalEvent | Mapping[str, Any]]) -> None:
        """Queue every event at once; derived references are named once every caller's is known,
        so that a derived one never takes one a caller gave."""
        unnamed = [
            pending for raw in events if (pending := self._admit(raw)) and pending.event.reference is None
        ]
        for pending in unnamed:
            self._name(pending)

    def read_from(self, events: Iterable[SignalEvent | Mapping[str, Any]]) -> None:
        """Read ``events`` as the run goes, keeping at most about ``max_queued`` of them queued."""
        self.source = iter(events)

    def _pull(self, wanted: int, read_at_least: int = 0) -> None:
        """Read events from the source until ``wanted`` are queued and ``read_at_least`` read, or it ends."""
        while self.source is not None and (self.queued < wanted or self.read < read_at_least):
            raw = next(self.source, None)
            if raw is None:
                self.source = None
            elif (pending := self._admit(raw)) is not None and pending.event.reference is None:
                self._name(pending)

    def _admit(self, raw: SignalEvent | Mapping[str, Any]) -> _Pending | None:
        """Queue one event, unless it is acknowledged already or cannot be sent."""
        slug = _slug_of(raw)
        position = self.positions.get(slug, 0)
        self.positions[slug] = position + 1
        self.read += 1
        if position in self._acked(slug):
            self.report.signal(slug).skipped += 1
            return None
        reference = _reference_of(raw) or f"{slug}:{position}"
        if slug in self.unknown:
            self.report.signal(slug).rejected[reference] = self.unknown[slug]
            return None
        try:
            event = validate_event(raw)
        except InvalidRecordError as exc:
            self.report.signal(slug).rejected[reference] = str(exc)
            return None
        if event.reference is not None:
            if event.reference in self.references:
                # Two events with one reference could not be told apart in the response.
                self.report.signal(slug).rejected[reference] = "duplicate reference"
                return None
            self.references.add(event.reference)
        pending = _Pending(slug, position, event, maybe_sent=position in self.doubted.get(slug, ()))
        self.queues.setdefault(slug, deque()).append(pending)
        self.queued += 1
        self.budgets.setdefault(slug, SignalBudget(self.limits.get(slug)))
        return pending

    def _name(self, pending: _Pending) -> None:
        reference = f"{pending.signal}:{pending.position}"
        suffix = 0
        while reference in self.references:
            suffix += 1
            reference = f"{pending.signal}:{pending.position}#{suffix}"
        self.references.add(reference)
        pending.event = pending.event.model_copy(update={"reference": reference})

    def _settle(self, item: _Pending) -> None:
        """``item`` is acknowledged or rejected: it leaves the references held."""
        self.references.discard(item.reference)

    def _unread(self) -> int:
        """Read the rest of the source without sending; how many of its events are not acknowledged."""
        left = 0
        for raw in self.source or ():
            slug = _slug_of(raw)
            position = self.positions.get(slug, 0)
            self.positions[slug] = position + 1
            left += position not in self._acked(slug)
        self.source = None
        return left

    def _acked(self, slug: str) -> SignalPositions:
        return self.acked.setdefault(slug, SignalPositions())

    # -- the loop --------------------------------------------------------------------------------

    def run(self, max_wait: float | None, *, max_queued: int = 0, read_first: int = 0) -> IngestReport:
        # Events are read before the first send up to ``read_first`` (so a caller checking them
        # against a checkpoint has done so before anything goes), then as the queues empty.
        self._pull(max_queued, read_first)
        while True:
            self._pull(max_queued)
            if not self.queued:
                break
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
        self.report.pending = self.queued + self._unread()
        self.report.checkpoint = self.checkpoint()
        return self.report

    def checkpoint(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "signals": {
                slug: acked.to_dict() for slug, acked in self.acked.items() if acked or acked.in_doubt
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
            self.queued -= len(taken)
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
            if self.keep_ack_ids:
                report.ack_ids.append(ack_id)
            self._settle(item)
            report.possibly_duplicated += item.maybe_sent
            acked_positions = self._acked(item.signal)
            acked_positions.add(item.position)
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
                self._settle(item)
            self.queued -= len(self.queues.pop(slug, ()))
            self.unknown[slug] = exc.message
        self._settled_unapplied(batch)
        self._requeue([item for item in batch if item.signal not in unknown])

    def _bad_request(self, batch: list[_Pending], exc: BadRequestError) -> None:
        # One bad event refuses the whole batch, and nothing was counted against a limit (A4).
        named = _EVENT_INDEX.match(exc.message)
        index = int(named["index"]) if named else None
        if len(batch) == 1 or (index is not None and index < len(batch)):
            bad = batch[index or 0]
            self.report.signal(bad.signal).rejected[bad.reference] = exc.message
            self._settle(bad)
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
                self.queued += 1


def _slug_of(raw: SignalEvent | Mapping[str, Any]) -> str:
    value = raw.signal if isinstance(raw, SignalEvent) else raw.get("signal")
    return value.strip() if isinstance(value, str) and value.strip() else NO_SIGNAL


def _reference_of(raw: SignalEvent | Mapping[str, Any]) -> str | None:
    value = raw.reference if isinstance(raw, SignalEvent) else raw.get("reference")
    return value.strip() if isinstance(value, str) and value.strip() else None


def send_events(
    client: EventEndpoints,
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


def stream_events(
    client: EventEndpoints,
    events: Iterable[SignalEvent | Mapping[str, Any]],
    signal_types: Mapping[str, str] | None = None,
    *,
    batch_size: int = MAX_EVENTS_PER_BATCH,
    checkpoint: Mapping[str, Any] | None = None,
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
    max_wait: float | None = None,
    max_queued: int = MAX_QUEUED_EVENTS,
    read_first: int = 0,
) -> IngestReport:
    """:func:`send_events` for any number of events: read as they are sent, in bounded memory.

    ``events`` is read lazily, at most ``max_queued`` of them waiting unsent at a time (a signal
    whose window is spent holds the reading up once that many of its events wait). What this
    asks of the caller, which :func:`send_events` would check over the whole list:

    - every event carries a ``reference`` no other event of ``events`` has (two with one
      reference are told apart only while both wait unsent); events without one are named
      ``<signal>:<position>``, so mix the two only if no caller reference looks like that;
    - the report's ``ack_ids`` stay empty (one id per event would grow with the events).

    :param read_first: how many events to read before the first send, however many that
        queues (the acknowledged ones among them are skipped as they are read): a caller that
        checks the events it gives against those ``checkpoint`` was written for does so before
        anything is sent.
    :param max_queued: events held read but unsent, at most; 1 or more.

    The other parameters, the report and the errors are those of :func:`send_events`. When
    ``max_wait`` makes it return early, the rest of ``events`` is read (and not sent), so that
    ``report.pending`` counts every event left.
    """
    if max_queued < 1:
        raise ValueError(f"max_queued must be 1 or more, got {max_queued}")
    sender = _Sender(client, signal_types or {}, batch_size, checkpoint, on_checkpoint, keep_ack_ids=False)
    sender.read_from(events)
    return sender.run(max_wait, max_queued=max_queued, read_first=read_first)
