"""The history of List syncs as a table in the warehouse: one row a run, queried beside the data.

:func:`record_run` writes a :class:`SyncRun` (what a sync returned, or how it failed) into a
table it creates when missing, on any database SQLAlchemy reaches (PostgreSQL, SQLite...)::

    from datetime import datetime, timezone

    from listsync.sync.history import SyncRun, record_run
    from listsync.sync.steps import SyncFailedError

    started = datetime.now(timezone.utc)
    try:
        summary = sync_people(client, table_id, frames, column_map, settings=settings)
        run = SyncRun("people", table_id, "success", started, datetime.now(timezone.utc), summary)
    except SyncFailedError as error:
        run = SyncRun("people", table_id, "failed", started, datetime.now(timezone.utc),
                      error.summary, error=str(error))
    record_run(engine, "analytics.listsync_runs", run, rejects_table="analytics.listsync_rejects",
               outcomes_table="analytics.listsync_outcomes")

The runs table holds, a row a run: ``run_id`` (primary key), ``job``, ``table_id``, ``mode``,
``dry_run``, ``shard``, ``state`` (``success``, ``failed``), ``started_at``, ``finished_at``, ``error``,
``dag_id``, ``task_id``, ``airflow_run_id``, a BIGINT column for each of :data:`COUNT_COLUMNS`
(NULL where the run's summary has no such count), the run's wait for the List's lease
(``lease_wait_seconds``, ``lease_waited_for``: whom it waited for; ``lease_held_by``: who held it
while a dry run read; :mod:`listsync.sync.lease`), and ``summary``, the whole summary as JSON text.
Times are stored in UTC; SQLite keeps no time zone, and gives them back naive.

The rejects table (``rejects_table``) holds a row per rejected extract row: ``run_id``,
``row_number``, ``reasons`` (a JSON list) and ``original`` (a JSON object), copied from the
run's local rejects file (:mod:`listsync.extract.rejects`). The outcomes table
(``outcomes_table``) holds a row per line of the run's local outcomes file
(:mod:`listsync.sync.outcomes`): ``run_id`` and a column for each field of a line, the
``outcome``, ``action``, ``account_domain`` and ``identity`` (people), ``key`` and ``row_id``
(rows), ``plan_line``, ``status``, ``message`` and ``curable``.

:func:`read_runs` reads the last runs back (``listsync history``), counts an older listsync
wrote under other names (``rows_added``...) under today's.

A table made by an older listsync, with fewer columns, is written to as it is: the columns it
lacks are named in a warning, and the run is recorded without them. Missing tables are created
in a transaction of their own; the rows of one run (the run, its rejects and its outcomes) are
then written in one transaction, so a failed record leaves none of them.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa

from listsync.errors import warn_aside
from listsync.sync.summary import COUNT_NAMES, RENAMED, counts_of

__all__ = ["COUNT_COLUMNS", "MAX_ERROR_LENGTH", "SyncRun", "read_runs", "record_run", "run_recorded"]

log = logging.getLogger(__name__)

#: The counts a run's row holds, each in a BIGINT column of its name: those of either job's
#: summary (:mod:`listsync.sync.summary`; a run fills its own job's, the others are NULL) and
#: ``requests_total``, the summary's ``requests["total"]``.
COUNT_COLUMNS = COUNT_NAMES

#: A run's ``error`` is kept to one line of at most this many characters.
MAX_ERROR_LENGTH = 2000

#: Rejects and outcomes are inserted this many at a time, so that memory holds one batch however
#: many there are.
REJECTS_PER_INSERT = 1000

Job = Literal["people", "rows"]
RunState = Literal["success", "failed"]
_JOBS = ("people", "rows")
_STATES = ("success", "failed")
# Airflow's own limit for DAG, task and run ids.
_ID_LENGTH = 250


@dataclass(frozen=True)
class SyncRun:
    """One run of a List sync, as :func:`record_run` records it.

    :param job: ``"people"`` (``sync_people``) or ``"rows"`` (``upsert_rows``).
    :param table_id: the List.
    :param state: ``"success"`` or ``"failed"``.
    :param started_at: when the run started; time zone aware.
    :param finished_at: when it ended; time zone aware.
    :param summary: the summary the sync returned (or ``SyncFailedError.summary``); None when the
        run failed before it had one.
    :param error: why the run failed (the exception's message); kept to one line of at most
        :data:`MAX_ERROR_LENGTH` characters.
    :param run_id: the run's key in the table (default: a new random one).
    :param dag_id: the Airflow DAG that ran the sync (None outside Airflow), as ``task_id`` and
        ``airflow_run_id``.
    :raises ValueError: an unknown job or state, a naive time, or a summary of another List.
    """

    job: Job
    table_id: str
    state: RunState
    started_at: datetime
    finished_at: datetime
    summary: Mapping[str, Any] | None = None
    error: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    dag_id: str | None = None
    task_id: str | None = None
    airflow_run_id: str | None = None

    def __post_init__(self) -> None:
        if self.job not in _JOBS:
            raise ValueError(f"job must be one of {', '.join(_JOBS)}, got {self.job!r}")
        if self.state not in _STATES:
            raise ValueError(f"state must be one of {', '.join(_STATES)}, got {self.state!r}")
        for name in ("started_at", "finished_at"):
            if getattr(self, name).utcoffset() is None:
                raise ValueError(f"{name} must be time zone aware, e.g. datetime.now(timezone.utc)")
        listed = None if self.summary is None else self.summary.get("table_id")
        if listed is not None and listed != self.table_id:
            raise ValueError(f"the summary is of List {listed!r}, not of {self.table_id!r}")


def record_run(
    engine: sa.engine.Engine,
    table: str,
    run: SyncRun,
    *,
    rejects_table: str | None = None,
    outcomes_table: str | None = None,
) -> None:
    """Record ``run`` as a row of ``table``, with ``rejects_table`` its rejected rows, and with
    ``outcomes_table`` its writes that did not end as planned.

    Missing tables are created. The rejects are read from the summary's ``rejects_path`` when
    it is a local file, the outcomes from its ``outcomes_path``; otherwise (object storage, a
    file gone) a warning says they were not copied.

    :param engine: the warehouse.
    :param table: the runs table, ``name`` or ``schema.name``.
    :param run: the run.
    :param rejects_table: the rejects table, ``name`` or ``schema.name`` (None: rejects are not
        copied).
    :param outcomes_table: the outcomes table, likewise.
    :raises ValueError: a table exists without a ``run_id`` column, or the rejects or outcomes
        file holds a line that is not a JSON object.
    """
    metadata = sa.MetaData()
    runs = _runs_table(metadata, table)
    copies = [
        (_copy_table(metadata, name, columns), what, row_of)
        for name, (columns, what, row_of) in (
            (rejects_table, (_REJECT_COLUMNS, "rejects", _reject_row)),
            (outcomes_table, (_OUTCOME_COLUMNS, "outcomes", _outcome_row)),
        )
        if name is not None
    ]
    _create_missing(engine, metadata, [runs, *(copy for copy, _, _ in copies)])
    with engine.begin() as conn:
        inspector = sa.inspect(conn)
        written = _existing_columns(inspector, runs)
        values = _run_values(run)
        conn.execute(sa.insert(runs), {name: values[name] for name in written})
        for copy, what, row_of in copies:
            path = _local_file(run.summary, what, copy.fullname)
            if path is not None:
                rows = _read_lines(path, what, run.run_id, row_of)
                _copy_lines(conn, copy, _existing_columns(inspector, copy), rows)
    log.info("Run %s of %s recorded in %s", run.run_id, run.table_id, runs.fullname)


def run_recorded(
    job: Job,
    table_id: str,
    sync: Callable[[], dict[str, Any]],
    record: Callable[[SyncRun], None],
    *,
    dag_id: str | None = None,
    task_id: str | None = None,
    airflow_run_id: str | None = None,
) -> dict[str, Any]:
    """Run ``sync`` (a whole ``sync_people`` or ``upsert_rows``) and give the run to ``record``,
    whether it returned or raised, then return its summary or raise its error.

    A record that fails is one warning line (:func:`~listsync.errors.warn_aside`) and changes
    nothing of the sync's outcome: what was written is written, and the run's summary is still
    returned (or its error raised).

    :param dag_id: as ``task_id`` and ``airflow_run_id``, what :class:`SyncRun` records of Airflow.
    """
    started = datetime.now(timezone.utc)

    def run(state: RunState, summary: Mapping[str, Any] | None, error: str | None = None) -> SyncRun:
        finished = datetime.now(timezone.utc)
        return SyncRun(
            job,
            table_id,
            state,
            started,
            finished,
            summary,
            error,
            dag_id=dag_id,
            task_id=task_id,
            airflow_run_id=airflow_run_id,
        )

    try:
        summary = sync()
    except Exception as error:
        _record_safely(
            record, run("failed", getattr(error, "summary", None), f"{type(error).__name__}: {error}")
        )
        raise
    _record_safely(record, run("success", summary))
    return summary


def read_runs(
    engine: sa.engine.Engine,
    table: str,
    *,
    table_id: str | None = None,
    job: Job | None = None,
    limit: int = 20,
) -> list[dict[str, Any]]:
    """The last ``limit`` runs recorded in ``table``, the newest first, each a dict of its
    columns (times in UTC, aware) but ``summary``; only those of ``table_id`` and ``job`` when
    given. A row written before the rows upsert's counts took their shared names has them under
    today's names (:data:`~listsync.sync.summary.RENAMED`).

    :raises ValueError: ``table`` does not exist, or ``limit`` is below 1.
    """
    if limit < 1:
        raise ValueError(f"limit must be 1 or more, got {limit}")
    schema, name = _split_name(table)
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(name, schema=schema):
            raise ValueError(f"no table {table} in {engine.url.render_as_string(hide_password=True)}")
        runs = sa.Table(name, sa.MetaData(), autoload_with=conn, schema=schema)
        query = sa.select(*(column for column in runs.columns if column.name != "summary"))
        if table_id is not None:
            query = query.where(runs.c.table_id == table_id)
        if job is not None:
            query = query.where(runs.c.job == job)
        rows = conn.execute(query.order_by(runs.c.started_at.desc()).limit(limit)).mappings().all()
    return [_read_row(dict(row)) for row in rows]


def _read_row(row: Mapping[str, Any]) -> dict[str, Any]:
    read = {name: value for name, value in row.items() if name not in RENAMED}
    for old, new in RENAMED.items():
        if read.get(new) is None and row.get(old) is not None:
            read[new] = row[old]
    for name in ("started_at", "finished_at"):
        moment = read.get(name)
        # SQLite gives back the UTC time it stored, naive.
        if isinstance(moment, datetime) and moment.tzinfo is None:
            read[name] = moment.replace(tzinfo=timezone.utc)
    return read


def _record_safely(record: Callable[[SyncRun], None], run: SyncRun) -> None:
    try:
        record(run)
    except Exception as error:
        warn_aside(
            log,
            f"The run {run.run_id} of {run.table_id} was not recorded in the history table (the "
            "sync's outcome stands)",
            error,
        )


def _split_name(table: str) -> tuple[str | None, str]:
    schema, _, name = table.rpartition(".")
    if not name:
        raise ValueError(f"a table name is 'name' or 'schema.name', got {table!r}")
    return schema or None, name


def _runs_table(metadata: sa.MetaData, table: str) -> sa.Table:
    schema, name = _split_name(table)
    return sa.Table(
        name,
        metadata,
        sa.Column("run_id", sa.String(_ID_LENGTH), primary_key=True),
        sa.Column("job", sa.String(16), nullable=False),
        sa.Column("table_id", sa.String(_ID_LENGTH), nullable=False),
        sa.Column("mode", sa.String(32)),
        sa.Column("dry_run", sa.Boolean),
        sa.Column("shard", sa.String(32)),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("dag_id", sa.String(_ID_LENGTH)),
        sa.Column("task_id", sa.String(_ID_LENGTH)),
        sa.Column("airflow_run_id", sa.String(_ID_LENGTH)),
        *(sa.Column(count, sa.BigInteger) for count in COUNT_COLUMNS),
        sa.Column("lease_wait_seconds", sa.Float),
        sa.Column("lease_waited_for", sa.Text),
        sa.Column("lease_held_by", sa.Text),
        sa.Column("summary", sa.Text),
        schema=schema,
    )


#: The columns of the rejects table and of the outcomes table, ``run_id`` aside, with their types.
_REJECT_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("row_number", sa.BigInteger),
    ("reasons", sa.Text),
    ("original", sa.Text),
)
_OUTCOME_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("outcome", sa.String(16)),
    ("action", sa.String(32)),
    ("account_domain", sa.Text),
    ("identity", sa.Text),
    ("key", sa.Text),
    ("row_id", sa.Text),
    ("plan_line", sa.BigInteger),
    ("status", sa.Integer),
    ("message", sa.Text),
    ("curable", sa.Boolean),
)


def _copy_table(metadata: sa.MetaData, table: str, columns: tuple[tuple[str, Any], ...]) -> sa.Table:
    """The table a run's rejects or outcomes are copied to, a row per line, keyed to the run."""
    schema, name = _split_name(table)
    return sa.Table(
        name,
        metadata,
        sa.Column("run_id", sa.String(_ID_LENGTH), nullable=False, index=True),
        *(sa.Column(column, kind) for column, kind in columns),
        schema=schema,
    )


def _create_missing(engine: sa.engine.Engine, metadata: sa.MetaData, tables: list[sa.Table]) -> None:
    """Create the tables that do not exist yet, in a transaction of their own: two runs that
    record at once (the shards of one sync, the first time) may both try."""
    try:
        with engine.begin() as conn:
            metadata.create_all(conn, tables=tables, checkfirst=True)
    except sa.exc.DBAPIError:
        # PostgreSQL fails the second CREATE once the first commits; the tables are then there.
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            if not all(inspector.has_table(table.name, schema=table.schema) for table in tables):
                raise


def _existing_columns(inspector: sa.Inspector, table: sa.Table) -> list[str]:
    """The columns of ``table`` its database copy has, warning of the others."""
    existing = {column["name"] for column in inspector.get_columns(table.name, schema=table.schema)}
    if "run_id" not in existing:
        raise ValueError(
            f"table {table.fullname} exists without a run_id column, which listsync needs to record "
            f"its runs; give another table name, or add the column"
        )
    missing = [column.name for column in table.columns if column.name not in existing]
    if missing:
        log.warning(
            "Table %s lacks the column(s) %s (made by an older listsync?): the run is recorded "
            "without them; add them to keep those values",
            table.fullname,
            ", ".join(missing),
        )
    return [column.name for column in table.columns if column.name in existing]


def _run_values(run: SyncRun) -> dict[str, Any]:
    summary = run.summary or {}
    counts = counts_of(summary)
    return {
        "run_id": run.run_id,
        "job": run.job,
        "table_id": run.table_id,
        "mode": _text(summary.get("mode")),
        "dry_run": summary.get("dry_run") if isinstance(summary.get("dry_run"), bool) else None,
        # A combined summary (combine_summaries) has "shards" instead: its row has no shard.
        "shard": _text(summary.get("shard")),
        "state": run.state,
        "started_at": run.started_at.astimezone(timezone.utc),
        "finished_at": run.finished_at.astimezone(timezone.utc),
        "error": None if run.error is None else _one_line(run.error),
        "dag_id": run.dag_id,
        "task_id": run.task_id,
        "airflow_run_id": run.airflow_run_id,
        **{name: counts.get(name) for name in COUNT_COLUMNS},
        "lease_wait_seconds": _seconds(summary.get("lease_wait_seconds")),
        "lease_waited_for": _text(summary.get("lease_waited_for")),
        "lease_held_by": _text(summary.get("lease_held_by")),
        "summary": None if run.summary is None else json.dumps(run.summary, ensure_ascii=False),
    }


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _one_line(error: str) -> str:
    line = " ".join(error.split())
    return line if len(line) <= MAX_ERROR_LENGTH else line[: MAX_ERROR_LENGTH - 1] + "…"


def _local_file(summary: Mapping[str, Any] | None, what: str, table: str) -> Path | None:
    """The run's ``what`` file (``rejects``, ``outcomes``: the summary's ``<what>_path``), when
    it has one to copy into ``table``."""
    where = None if summary is None else summary.get(f"{what}_path")
    if where is None:  # no file: nothing was rejected, or every write ended as planned
        return None
    if not isinstance(where, str) or "://" in where:
        log.warning(
            "The %s at %s are not one local file: they are not copied to %s (read them there)",
            what,
            where,
            table,
        )
        return None
    path = Path(where)
    if not path.is_file():
        log.warning("The %s file %s is gone: its %s are not copied to %s", what, where, what, table)
        return None
    return path


def _copy_lines(
    conn: sa.Connection, table: sa.Table, written: list[str], rows: Iterable[dict[str, Any]]
) -> None:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append({name: row.get(name) for name in written})
        if len(batch) == REJECTS_PER_INSERT:
            conn.execute(sa.insert(table), batch)
            batch = []
    if batch:
        conn.execute(sa.insert(table), batch)


def _read_lines(
    path: Path, what: str, run_id: str, row_of: Callable[[dict[str, Any]], dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """The table's rows for the ``what`` file at ``path``, read a line at a time."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"line {number} of the {what} file {path} is not JSON: {error}") from None
            if not isinstance(item, dict):
                raise ValueError(
                    f"line {number} of the {what} file {path} is not a JSON object: {line[:200]}"
                )
            yield {"run_id": run_id, **row_of(item)}


def _reject_row(reject: dict[str, Any]) -> dict[str, Any]:
    return {
        "row_number": reject.get("row"),
        "reasons": json.dumps(reject.get("reasons", []), ensure_ascii=False),
        "original": json.dumps(reject.get("original", {}), ensure_ascii=False),
    }


def _outcome_row(outcome: dict[str, Any]) -> dict[str, Any]:
    # The record's values as text: a key may be a number.
    record = ("account_domain", "identity", "key", "row_id")
    return {**outcome, **{name: None if outcome.get(name) is None else str(outcome[name]) for name in record}}
