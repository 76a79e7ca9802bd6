"""The ingestion of an extract's signal events: sent as they are read, resumed from checkpoints.

The flow of a backfill::

    summary = ingest_events(client, frames, mapping, ...)        # the whole flow, as JSON

Events are made by :func:`~listsync.signals.build.prepare_events` as the extract is read, and
sent at each signal's pace by :mod:`~listsync.signals.sender` as they come, so memory does not
grow with the extract. Re-runs are safe because everything a retry depends on is deterministic:
events come in the extract's order with references that depend only on what they say, so the
checkpoint written before each send and after each acknowledged batch still describes the same
events when a retried task reads the same extract again, which is checked before anything is
sent (:meth:`~listsync.signals.build.EventStream.position`).

Checkpoints live in any object with ``get(key, default)`` and ``set(key, value)`` taking JSON
values (Airflow's ``context["task_state_store"]``); :class:`~listsync.signals.checkpoints.CheckpointStore`
adapts one, or keeps the checkpoint in memory where there is none. The mapping of columns to
events is :class:`~listsync.signals.columns.EventMapping`. Nothing here imports Airflow.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from listsync.client.models import SignalEvent
from listsync.errors import ListSyncError
from listsync.extract.rejects import Rejects
from listsync.files import OpenableFile, write_json_lines
from listsync.signals.build import EventStream, prepare_events
from listsync.signals.checkpoints import CheckpointStore
from listsync.signals.columns import EventMapping
from listsync.signals.reports import IngestReport, SignalReport
from listsync.signals.sender import MAX_QUEUED_EVENTS, stream_events

if TYPE_CHECKING:
    import pandas as pd

    from listsync.client.client import ListSyncClient

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 2
"""Version of the checkpoint envelope written by :func:`ingest_events` (1: events sorted by
timestamp, refused with a message saying so)."""

# Counters of the client's per-signal report that add up across the parts of one ingestion
# (the tries of a task and the stretches between its deferrals).
_ADDITIVE_COUNTERS = (
    "rate_limited_resends",
    "requests",
    "rate_limited_responses",
    "seconds_waited",
)


def nothing_left_to_send(summary: Mapping[str, Any]) -> bool:
    """Whether an ingestion found every event acknowledged by an earlier try or run and sent none."""
    before = sum((summary.get("resumed_from") or {}).values())
    return bool(before) and summary.get("acknowledged") == before and not summary.get("pending")


class CheckpointMismatchError(ListSyncError, ValueError):
    """The checkpoint was written for different events than the extract now gives.

    The checkpoint marks acknowledged events by their position in the extract's order, so it can
    only be applied to the very same events; resuming anyway could skip unsent events or resend
    acknowledged ones.
    """


def _resume_point(saved: Mapping[str, Any] | None, store: CheckpointStore) -> dict[str, Any] | None:
    """The saved envelope, if it is one this version can resume from; ``None`` to start afresh."""
    if saved is None:
        return None
    if saved.get("format") == 1:
        raise CheckpointMismatchError(
            f"checkpoint {store.key!r} was written by an earlier version of listsync, which sent events "
            "sorted by timestamp; this one sends them in the extract's order, so the positions it "
            "records name other events. Finish the ingestion with the version that started it, or "
            "start fresh (fresh=True, --fresh) to send every event again (acknowledged ones would then "
            "be duplicated)."
        )
    if saved.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointMismatchError(
            f"checkpoint {store.key!r} has format {saved.get('format')!r}, expected {CHECKPOINT_FORMAT}; "
            "it was written by another version of listsync"
        )
    return dict(saved)


def _checked(stream: EventStream, read: Mapping[str, Any], store: CheckpointStore) -> Iterator[SignalEvent]:
    """The events of ``stream``, compared with the ones checkpoint ``read`` was written for as
    soon as as many are read, before that last one is given out."""
    horizon = int(read.get("events", 0))
    for event in stream:
        if stream.events == horizon:
            _compare(stream.position(), read, store)
        yield event
    if stream.events < horizon:
        _compare(stream.position(), read, store)


def _compare(position: Mapping[str, Any], read: Mapping[str, Any], store: CheckpointStore) -> None:
    now, before = position["signals"], read.get("signals", {})
    changed = sorted(signal for signal in set(now) | set(before) if now.get(signal) != before.get(signal))
    if changed:
        raise CheckpointMismatchError(
            f"the extract changed since checkpoint {store.key!r} was written: the events of "
            f"{', '.join(changed)} are not the ones read before, so the task cannot tell which "
            "were sent. Make the extract repeatable (a fixed data interval, no late rows), or delete "
            "the checkpoint to send every event again (acknowledged ones would then be duplicated)."
        )


def ingest_events(
    client: ListSyncClient | None,
    frames: Iterable[pd.DataFrame],
    mapping: EventMapping,
    *,
    rejects: Rejects,
    signal_types: Mapping[str, str] | None = None,
    batch_size: int = 100,
    checkpoints: CheckpointStore | None = None,
    max_wait: float | None = None,
    dry_run: bool = False,
    naive_timezone: str = "UTC",
    rejects_file: OpenableFile | None = None,
    deferred_seconds: float = 0.0,
    deferred_signals: Collection[str] = (),
    max_queued: int = MAX_QUEUED_EVENTS,
) -> dict[str, Any]:
    """Read the events of an extract and send them as they are read, resuming from the checkpoint;
    return the summary.

    Memory stays bounded whatever the number of events: the extract is read chunk by chunk,
    at most ``max_queued`` events wait unsent at a time, and duplicates are recognised in 20
    bytes per event (:class:`~listsync.signals.build.EventStream`). Events go out in the
    extract's order (per signal; signals progress at their own pace), so a retried task reading
    the same extract meets the same events in the same order, and the checkpoint's positions
    still name them.

    :param client: the service client; may be ``None`` for a dry run.
    :param frames: chunks from :func:`~listsync.extract.sources.read_extract`.
    :param mapping: which columns hold which event fields.
    :param rejects: where rejected rows go, as they are met; the summary gives their file. When
        ``rejects`` has no path they are written to a temporary file instead (kept, and named
        in the summary, when some row was rejected) and ``rejects.records`` stays empty.
    :param signal_types: signal slug → ``"Event"``, ``"Metric"`` or ``"State"``, which sets its
        pace; slugs not listed are probed (see :func:`~listsync.signals.sender.send_events`).
    :param batch_size: events per request, 1 to 100.
    :param checkpoints: where the checkpoint is read from and written to before every send and
        after every acknowledged batch; ``None`` keeps it in memory only.
    :param max_wait: the longest rate-limit wait to sleep through; when the next wait is longer,
        read the rest of the extract without sending (to count it) and return with
        ``summary["resume_at"]`` set (ISO 8601); call again after that time.
    :param dry_run: read and count only; nothing is sent and no event is kept.
    :param naive_timezone: the zone of timestamps written without an offset.
    :param rejects_file: where the rejected rows go when ``rejects`` has no path: an object with
        ``open()`` such as ``ObjectStoragePath``, written from the temporary file at the end.
    :param deferred_seconds: how long the ingestion waited outside this call since the last one
        returned with ``resume_at`` (a deferred task); counted in ``seconds_waited``, for the
        whole run and for each of ``deferred_signals`` (the signals that had events left).
    :param max_queued: events read but not yet sent, at most (see
        :func:`~listsync.signals.sender.stream_events`).
    :raises CheckpointMismatchError: the checkpoint was written for other events (checked
        before anything is sent), or by a version of listsync that ordered events differently.

    The checkpoint (format 2) records, besides the client's acknowledged positions, how far the
    reading had got when it was written (:meth:`~listsync.signals.build.EventStream.position`).
    A resumed call reads that far before its first send and compares: a change in that part of
    the extract fails with :class:`CheckpointMismatchError`; events beyond it (rows added at the
    end) are simply sent.

    The summary (JSON-serialisable): ``rows_read``, ``rows_rejected``, ``duplicates_collapsed``,
    ``rejects_path``, ``events``, ``acknowledged`` (over every try, with the checkpoint),
    ``rejected_by_service``, ``pending``, ``rate_limited_resends``, ``requests``,
    ``rate_limited_responses`` (429s), ``seconds_waited``, ``possibly_duplicated``,
    ``resumed_from`` (events per signal acknowledged before this call, or ``None``),
    ``resume_at``, ``dry_run``, ``normalization_version`` and the same counters per signal under
    ``signals``, with the service's reasons for rejected events. The counters of requests, 429s,
    waits and re-sends add up over the deferrals of one task (the waits include the time spent
    deferred, ``deferred_seconds``); a try that crashed contributes only its acknowledged events.
    """
    if client is None and not dry_run:
        raise ValueError("ingest_events needs a client unless dry_run=True")
    store = checkpoints if checkpoints is not None else CheckpointStore()
    saved = _resume_point(store.load(), store)
    previous: dict[str, Any] = saved["totals"] if saved else {}
    if deferred_seconds:
        previous = _add_wait(previous, deferred_seconds, deferred_signals)
    report: IngestReport | None = None
    with _RejectsOutput(rejects, rejects_file) as output:
        stream = prepare_events(frames, mapping, rejects=output.rejects, naive_timezone=naive_timezone)
        events = _checked(stream, saved["read"], store) if saved else iter(stream)
        if client is None or dry_run:
            for _ in events:
                pass
        else:
            report = _send(
                client,
                stream,
                events,
                saved,
                store,
                previous=previous,
                signal_types=signal_types,
                batch_size=batch_size,
                max_wait=max_wait,
                max_queued=max_queued,
            )
    summary = _summary_base(stream, output.path, dry_run)
    if report is None:
        summary["signals"] = {
            signal: {"events": count} for signal, count in stream.counts_by_signal().items()
        }
        return summary
    summary.update(_sent_summary(stream, report, _add_totals(previous, report), resumed=saved is not None))
    if nothing_left_to_send(summary):
        log.warning(
            "Nothing left to send: every event was acknowledged by an earlier try or run (the checkpoint "
            "says so). To send them again on purpose, start fresh (fresh=True, --fresh)."
        )
    for signal, signal_summary in summary["signals"].items():
        for reason, count in signal_summary["rejected_reasons"].items():
            log.warning("%d event(s) of signal %r rejected by the service: %s", count, signal, reason)
    return summary


def _send(
    client: ListSyncClient,
    stream: EventStream,
    events: Iterator[SignalEvent],
    saved: Mapping[str, Any] | None,
    store: CheckpointStore,
    *,
    previous: Mapping[str, Any],
    signal_types: Mapping[str, str] | None,
    batch_size: int,
    max_wait: float | None,
    max_queued: int,
) -> IngestReport:
    """Send ``events`` as they are read, saving the checkpoint envelope whenever the client's changes."""
    if saved:
        log.info("Resuming from the checkpoint; acknowledged before, per signal: %s", saved["acknowledged"])
    # Where the reading was at the last save: the client's positions all lie before it. (At the
    # end the reading may have gone further, to count what an early return leaves unsent; a
    # resumed try need not read that far before its first send.)
    read = saved["read"] if saved else stream.position()
    logged = -1

    def on_checkpoint(client_checkpoint: dict[str, Any]) -> None:
        nonlocal read, logged
        read = stream.position()
        envelope = _envelope(read, client_checkpoint, previous)
        store.save(envelope)
        acknowledged = sum(envelope["acknowledged"].values())
        if acknowledged != logged:  # saved before each send too, with nothing new acknowledged
            logged = acknowledged
            log.info("Checkpoint: %d events acknowledged, %d read", acknowledged, read["events"])

    report = stream_events(
        client,
        events,
        signal_types,
        batch_size=batch_size,
        checkpoint=saved["client"] if saved else None,
        on_checkpoint=on_checkpoint,
        max_wait=max_wait,
        max_queued=max_queued,
        read_first=int(saved["read"].get("events", 0)) if saved else 0,
    )
    store.save(_envelope(read, report.checkpoint, _add_totals(previous, report)))
    return report


class _RejectsOutput:
    """Where the rejected rows of one ingestion go: ``rejects`` when it writes to a file, else a
    temporary file, copied to ``rejects_file`` at the end when one is given.

    :attr:`path` (after the ``with`` block) is the file the summary names, or ``None`` when no
    file was asked for and no row was rejected.
    """

    def __init__(self, rejects: Rejects, rejects_file: OpenableFile | None) -> None:
        self._given = rejects
        self._file = rejects_file
        self.path: str | None = str(rejects.path) if rejects.path is not None else None
        self.rejects = rejects
        if rejects.path is None:
            # Kept on disk, not in memory: an extract may reject any number of rows.
            with tempfile.NamedTemporaryFile(
                prefix="listsync-ingest-rejects-", suffix=".jsonl", delete=False
            ) as spool:
                self.rejects = Rejects(spool.name)

    def __enter__(self) -> _RejectsOutput:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.rejects is self._given:
            self.rejects.flush()
            return
        self.rejects.close()
        spool = self.rejects.path
        assert spool is not None
        if self._file is not None:
            with spool.open(encoding="utf-8") as lines:
                self.path = write_json_lines((json.loads(line) for line in lines), self._file)
            spool.unlink()
        elif self.rejects.count:
            self.path = str(spool)
        else:
            spool.unlink()


def _summary_base(stream: EventStream, rejects_path: str | None, dry_run: bool) -> dict[str, Any]:
    return {
        "rows_read": stream.stats.read,
        "rows_rejected": stream.stats.rejected,
        "duplicates_collapsed": stream.stats.duplicates,
        "rejects_path": rejects_path,
        "events": stream.events,
        "normalization_version": stream.normalization_version,
        "dry_run": dry_run,
        "resumed_from": None,
        "resume_at": None,
    }


def _envelope(
    read: Mapping[str, Any], client_checkpoint: Mapping[str, Any], totals: Mapping[str, Any]
) -> dict[str, Any]:
    acknowledged = {
        signal: int(state.get("prefix", 0)) + sum(end - start for start, end in state.get("ranges", []))
        for signal, state in client_checkpoint.get("signals", {}).items()
    }
    return {
        "format": CHECKPOINT_FORMAT,
        "read": dict(read),
        "acknowledged": acknowledged,
        "client": dict(client_checkpoint),
        "totals": dict(totals),
    }


def _add_totals(previous: Mapping[str, Any], report: IngestReport) -> dict[str, Any]:
    """``previous`` totals plus this run's counters.

    Batches carry several signals, so the run's requests, 429s and waits are kept apart from the
    per-signal ones rather than summed from them.
    """
    signals = {signal: dict(counters) for signal, counters in previous.get("signals", {}).items()}
    for signal, signal_report in report.signals.items():
        counters = signals.setdefault(signal, {})
        for name in _ADDITIVE_COUNTERS:
            counters[name] = counters.get(name, 0) + getattr(signal_report, name)
    return {
        "signals": signals,
        "requests": previous.get("requests", 0) + report.requests,
        "rate_limited_responses": previous.get("rate_limited_responses", 0) + report.rate_limited_responses,
        "seconds_waited": previous.get("seconds_waited", 0.0) + report.seconds_waited,
    }


def _add_wait(totals: Mapping[str, Any], seconds: float, signals: Iterable[str]) -> dict[str, Any]:
    """``totals`` with a wait of ``seconds`` added, for the run and each of ``signals``."""
    by_signal = {signal: dict(counters) for signal, counters in totals.get("signals", {}).items()}
    for signal in signals:
        counters = by_signal.setdefault(signal, {})
        counters["seconds_waited"] = counters.get("seconds_waited", 0.0) + seconds
    return {**totals, "signals": by_signal, "seconds_waited": totals.get("seconds_waited", 0.0) + seconds}


def _sent_summary(
    stream: EventStream, report: IngestReport, totals: Mapping[str, Any], *, resumed: bool
) -> dict[str, Any]:
    counts = stream.counts_by_signal()
    signals: dict[str, dict[str, Any]] = {}
    for signal in sorted(set(counts) | set(report.signals)):
        signal_report = report.signals.get(signal, SignalReport())
        counters = totals["signals"].get(signal, {})
        reasons = Counter(signal_report.rejected.values())
        # Counted from the checkpoint, where each try records its own as it goes: a try that
        # crashed leaves no counters, but its possible duplicates are there.
        twice = report.checkpoint.get("signals", {}).get(signal, {}).get("twice", [])
        signals[signal] = {
            "events": counts.get(signal, 0),
            "acknowledged": signal_report.skipped + signal_report.acknowledged,
            "rejected_by_service": len(signal_report.rejected),
            "rejected_reasons": dict(sorted(reasons.items())),
            **{name: counters.get(name, 0) for name in _ADDITIVE_COUNTERS},
            "possibly_duplicated": sum(end - start for start, end in twice),
        }
    return {
        "acknowledged": sum(s["acknowledged"] for s in signals.values()),
        "rejected_by_service": sum(s["rejected_by_service"] for s in signals.values()),
        "pending": report.pending,
        "rate_limited_resends": sum(s["rate_limited_resends"] for s in signals.values()),
        "requests": totals["requests"],
        "rate_limited_responses": totals.get("rate_limited_responses", 0),
        "seconds_waited": round(totals["seconds_waited"], 3),
        "possibly_duplicated": sum(s["possibly_duplicated"] for s in signals.values()),
        "resumed_from": (
            {signal: r.skipped for signal, r in sorted(report.signals.items()) if r.skipped}
            if resumed
            else None
        ),
        "resume_at": (
            datetime.fromtimestamp(report.resume_at, timezone.utc).isoformat()
            if report.resume_at is not None
            else None
        ),
        "signals": signals,
    }
