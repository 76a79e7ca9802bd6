"""``IngestSignalsOperator``: signal events from an extract, at the pace the rate limits allow."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import conf

from listsync.client.rate_hints import WINDOW_SECONDS
from listsync.operators.base import ListSyncExtractOperator
from listsync.signals.checkpoints import CheckpointStore
from listsync.signals.columns import EventMapping

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DEFAULT_DEFER_AFTER_SECONDS", "IngestSignalsOperator"]

#: The default ``defer_after_seconds``: one rate-limit window and a margin for the difference
#: between the service's clock and the worker's. The ordinary wait for a window to reopen (at most
#: one window) is slept through in the worker, which keeps its place in the extract; only a
#: longer wait the service asks for (a Retry-After of minutes) frees the slot, and only then does
#: the resumed task read the extract again from its start (skipping what was acknowledged).
DEFAULT_DEFER_AFTER_SECONDS = WINDOW_SECONDS + 15.0

# The mapping parameters, passed on to EventMapping under the same names; all but ``version`` are
# templated, so a DAG can take its columns from params.
_TEMPLATED_MAPPING_FIELDS = (
    "signal",
    "signal_column",
    "identity_type",
    "identity_type_column",
    "identity_id_column",
    "data_columns",
    "data_column",
    "timestamp_column",
    "reference_column",
)
_MAPPING_FIELDS = (*_TEMPLATED_MAPPING_FIELDS, "version")


class IngestSignalsOperator(ListSyncExtractOperator):
    """Send the rows of an extract to the service as signal events, each exactly once.

    Rows are mapped to events (give ``signal`` or ``signal_column``, ``identity_type`` or
    ``identity_type_column``, and ``identity_id_column``), validated (invalid rows go to
    ``rejects_path`` with their reasons as they are met) and sent as the extract is read, in its
    order, through the rate-aware ``stream_events`` (:mod:`listsync.signals.sender`): every
    signal at its own limit, signals in parallel, rate-limited events re-sent, unknown signal
    slugs reported with the service's message. Memory does not grow with the number of events.

    After every acknowledged batch a checkpoint goes to the task state store, so a retried task
    resumes after the last acknowledged batch instead of sending again; run where the context has
    no such store (``execute`` called by hand), the task logs a warning and a retry starts over. With
    ``deferrable=True`` a wait longer than ``defer_after_seconds`` (by default longer than a
    rate-limit window, see :data:`DEFAULT_DEFER_AFTER_SECONDS`) frees the worker slot: the task
    defers to :class:`~listsync.triggers.RateLimitWindowTrigger`, which only waits, and resumes from
    the checkpoint, reading the extract again; the time spent deferred counts in
    ``seconds_waited``. Shorter waits are slept through in the worker.

    Returns the summary (to XCom): rows read and rejected, events acknowledged per signal,
    rate-limited re-sends, requests, 429 responses, seconds waited and the checkpoint it resumed
    from (see :func:`listsync.signals.ingest.ingest_events`). ``source``, ``sql`` and the mapping
    are templated, so ``{{ data_interval_start }}`` in ``sql`` backfills one interval per run.

    :param source: the extract file: a local path or an object-storage URI. (templated)
    :param sql: a query giving the extract, run on ``sql_conn_id``. (templated)
    :param sql_conn_id: an Airflow database connection (postgres, sqlite...) for ``sql``.
    :param signal: the signal slug of every event. (templated)
    :param signal_column: the column holding each event's signal slug. (templated)
    :param identity_type: the CRM object type of every event (account, contact, deal, lead or a
        custom type). (templated)
    :param identity_type_column: the column holding each event's object type. (templated)
    :param identity_id_column: the column holding the object's id in the CRM. (templated)
    :param data_columns: columns packed into the event's ``data`` under their names. (templated)
    :param data_column: a column holding the event's ``data`` as a JSON object. (templated)
    :param timestamp_column: the column holding when the event happened (ISO 8601; values without
        an offset are in ``naive_timezone``). (templated)
    :param reference_column: the column holding the event's own reference; without it a
        reference is derived from signal, identity, timestamp and data. (templated)
    :param version: the schema version to use: a number or ``"latest"`` (the default).
    :param signal_types: signal slug → ``"Event"``, ``"Metric"`` or ``"State"``, which sets its
        pace; a slug not listed is probed with one event and paced by the response's headers.
    :param batch_size: events per request, 1 to 100.
    :param deferrable: defer while waiting for a rate-limit window instead of sleeping (default:
        Airflow's ``[operators] default_deferrable``).
    :param defer_after_seconds: with ``deferrable``, the longest wait slept through in place
        (default: one window and a margin, :data:`DEFAULT_DEFER_AFTER_SECONDS`).
    :param fresh: the first try of the task, and the first try after it is cleared, ignore the
        checkpoint an earlier run of this task left and send every event again (duplicating those
        acknowledged before); their retries resume as usual. Without it, a cleared and re-run task
        resumes from that checkpoint: after a complete run it sends nothing, and says so.
    :param rejects_path: where rejected rows go, as JSON lines: a local path or an object-storage
        URI (default: a temporary file, only when some row is rejected). (templated)
    :param dry_run: read, map and count the events; send nothing.
    :param listsync_conn_id: the ``listsync`` connection.
    :param naive_timezone: the zone (IANA name, default ``"UTC"``) of timestamps written without an
        offset, in typed columns and in text alike; an unknown name fails when the DAG is parsed.
    """

    template_fields: Sequence[str] = ("source", "sql", *_TEMPLATED_MAPPING_FIELDS, "rejects_path")
    template_fields_renderers: ClassVar[dict[str, str]] = {"sql": "sql"}
    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        identity_id_column: str,
        signal: str | None = None,
        signal_column: str | None = None,
        identity_type: str | None = None,
        identity_type_column: str | None = None,
        data_columns: Sequence[str] | None = None,
        data_column: str | None = None,
        timestamp_column: str | None = None,
        reference_column: str | None = None,
        version: int | float | str | None = None,
        signal_types: Mapping[str, str] | None = None,
        batch_size: int = 100,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        defer_after_seconds: float = DEFAULT_DEFER_AFTER_SECONDS,
        fresh: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not 1 <= batch_size <= 100:
            raise ValueError(f"batch_size must be between 1 and 100 (the service's cap), got {batch_size}")
        if defer_after_seconds < 0:
            raise ValueError(f"defer_after_seconds must be 0 or more, got {defer_after_seconds}")
        self.signal = signal
        self.signal_column = signal_column
        self.identity_type = identity_type
        self.identity_type_column = identity_type_column
        self.identity_id_column = identity_id_column
        self.data_columns = data_columns
        self.data_column = data_column
        self.timestamp_column = timestamp_column
        self.reference_column = reference_column
        self.version = version
        self.signal_types = signal_types
        self.batch_size = batch_size
        self.deferrable = deferrable
        self.defer_after_seconds = defer_after_seconds
        self.fresh = fresh
        # Fail at parse time on a mapping that could never work (one of each pair, a valid version).
        self._mapping()

    def _mapping(self) -> EventMapping:
        return EventMapping(**{name: getattr(self, name) for name in _MAPPING_FIELDS})

    def service_dataset_name(self) -> str:
        """``events``: the service's event intake (events go to no List)."""
        return "events"

    def execute(self, context: Context) -> dict[str, Any]:
        """Ingest the extract, resuming from the task's checkpoint if an earlier try left one."""
        ti = context.get("ti")
        # A cleared task keeps counting its tries, and clearing sets max_tries to the last try plus
        # the retries: so the first try of the latest clearing (or of the run) is this one.
        retries = self.retries or 0
        first_try = getattr(ti, "max_tries", retries) - retries + 1
        fresh = self.fresh and (ti is None or ti.try_number <= first_try)
        return self._ingest(context, CheckpointStore(self._task_state_store(context), fresh=fresh))

    def execute_complete(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        deferred_at: float | None = None,
        waiting: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Resume after :class:`~listsync.triggers.RateLimitWindowTrigger` fired.

        ``deferred_at`` (epoch seconds) and ``waiting`` (the signals with events left) come from
        the deferral, so that the time spent deferred counts in ``seconds_waited``.

        :raises ValueError: the event is not the trigger's "window reopened" event.
        """
        from listsync.triggers.rate_limit import WINDOW_REOPENED

        if not isinstance(event, dict) or event.get("status") != WINDOW_REOPENED:
            raise ValueError(
                f"expected the rate-limit trigger's {WINDOW_REOPENED!r} event, got "
                f"{event.get('status') if isinstance(event, dict) else type(event).__name__!r}"
            )
        checkpoint = event.get("checkpoint")
        if checkpoint is not None and not isinstance(checkpoint, dict):
            raise ValueError(
                f"the trigger event's checkpoint must be an object, got {type(checkpoint).__name__}"
            )
        # The store's checkpoint wins; the event's copy serves where Airflow has no task state store.
        checkpoints = CheckpointStore(self._task_state_store(context), fallback=checkpoint)
        return self._ingest(context, checkpoints, deferred_at=deferred_at, waiting=waiting)

    def _task_state_store(self, context: Context) -> Any:
        store = context.get("task_state_store")
        if store is None:
            self.log.warning(
                "The task's context has no task state store: the checkpoint is kept in memory only, "
                "so a retry of this task sends every event again"
            )
        return store

    def _ingest(
        self,
        context: Context,
        checkpoints: CheckpointStore,
        *,
        deferred_at: float | None = None,
        waiting: Sequence[str] = (),
    ) -> dict[str, Any]:
        from listsync.extract.rejects import Rejects
        from listsync.signals.ingest import ingest_events
        from listsync.triggers.rate_limit import RateLimitWindowTrigger

        client = None if self.runs_dry else self.get_client()
        # A local file takes the rejects as they come; one in object storage is written at the end.
        target = self.output_file(self.rejects_path)
        local = target if isinstance(target, Path) else None
        rejects_file = None if isinstance(target, Path) else target
        # The client's clock times the deferral, as it does the waits slept through in the worker.
        deferred_seconds = 0.0
        if deferred_at is not None and client is not None:
            deferred_seconds = max(0.0, client.clock() - deferred_at)
            self.log.info("Rate-limit window reopened after %.0f s deferred; resuming", deferred_seconds)
        with (
            self.read_extract() as frames,
            self.failing_the_airflow_way(context),
            Rejects(local) as rejects,
            client if client is not None else nullcontext(),
        ):
            summary = ingest_events(
                client,
                frames,
                self._mapping(),
                rejects=rejects,
                signal_types=self.signal_types,
                batch_size=self.batch_size,
                checkpoints=checkpoints,
                max_wait=self.defer_after_seconds if self.deferrable else None,
                dry_run=self.runs_dry,
                naive_timezone=self.naive_timezone,
                rejects_file=rejects_file,
                deferred_seconds=deferred_seconds,
                deferred_signals=waiting,
            )
        if client is not None and summary["resume_at"] is not None:
            self.log.info(
                "%d of %d events acknowledged; deferring until the rate-limit window reopens at %s",
                summary["acknowledged"],
                summary["events"],
                summary["resume_at"],
            )
            left = [
                signal
                for signal, counts in summary["signals"].items()
                if counts["events"] > counts["acknowledged"] + counts["rejected_by_service"]
            ]
            self.defer(
                trigger=RateLimitWindowTrigger(resume_at=summary["resume_at"], checkpoint=checkpoints.load()),
                method_name="execute_complete",
                kwargs={"deferred_at": client.clock(), "waiting": left},
            )
        self.log.info(
            "Read %d rows (%d rejected); %d of %d events acknowledged, %d rejected by the service",
            summary["rows_read"],
            summary["rows_rejected"],
            summary.get("acknowledged", 0),
            summary["events"],
            summary.get("rejected_by_service", 0),
        )
        return summary
