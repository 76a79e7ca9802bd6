r"""Backfill signal events from the warehouse, one day per run, at the speed the limits allow.

``catchup=True`` over the example history (2026-11-01 to 2026-11-10): each daily run ingests the
events of its own data interval, selected by the templated query. Unpaused, the scheduler
catches up on every day. To run a range of days on demand, ask the scheduler for a backfill::

    airflow backfill create --dag-id signal_backfill \
        --from-date 2026-11-01 --to-date 2026-11-10 --max-active-runs 1

Days that already have a run are left alone (``--reprocess-behavior none``, the default);
``failed`` re-runs the failed ones, ``completed`` the successful ones too. A re-run resumes from
its day's checkpoint: a failed day sends only the events it had not sent, and a completed day
sends nothing, and says so. To send a day's events again on purpose, give the task
``fresh=True`` (or delete its checkpoint, ``listsync_ingest_checkpoint`` in the task's state
store) before re-running it. The README's "Backfills" section has the details.

A manual run covers the last whole UTC day before its logical date
(``airflow dags test signal_backfill 2026-11-04`` ingests 2026-11-03); one triggered without a
logical date (Airflow 3's default, ``airflow dags trigger signal_backfill``) covers the last whole
day before the time it was triggered for: yesterday. Each run keeps its own checkpoint, so two
runs covering one day both send its events; re-run a day by clearing its run instead. The rejects
of each day go to a folder named after that day.

The three signals have their own rate limits (Event 100, Metric 1,000, State 30 events a minute,
shared by everyone sending to that signal). The task waits for a window to reopen in its worker;
a longer wait the service asks for (a Retry-After of minutes) defers the task, freeing its worker
slot, until then.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import CronDataIntervalTimetable, dag

from listsync.operators import IngestSignalsOperator

DEFAULT_OUTPUT_DIR = os.environ.get("LISTSYNC_OUTPUT_DIR") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "listsync"
)
OUTPUT_DIR = f"{{{{ var.value.get('listsync_output_dir', {DEFAULT_OUTPUT_DIR!r}) }}}}"
RUN_DIR = OUTPUT_DIR + "/signal_backfill/{{ day_of_run(dag_run)[0] | ds_nodash }}"

# The day's bounds render as '2026-11-01 00:00:00+00:00', which both a PostgreSQL timestamptz
# and the ISO text of the SQLite example warehouse compare correctly against. Ordering by the
# event's own id keeps the extract, and so the checkpoint, stable across retries.
EVENTS_OF_THE_DAY = """
{%- set day_start, day_end = day_of_run(dag_run) %}
SELECT event_id, occurred_at, signal, object_type, object_id, payload
FROM signal_events
WHERE occurred_at >= '{{ day_start }}' AND occurred_at < '{{ day_end }}'
ORDER BY event_id
"""


def day_of_run(dag_run: Any) -> tuple[datetime, datetime]:
    """The UTC ``[start, end)`` a run ingests: its data interval; for a run without one (triggered
    with no logical date), the last whole day before the time it was triggered for."""
    start, end = dag_run.data_interval_start, dag_run.data_interval_end
    if start is None or end is None:
        end = dag_run.run_after.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        start = end - timedelta(days=1)
    return _utc(start), _utc(end)


def _utc(moment: datetime) -> datetime:
    # A plain datetime, so that it renders the same whatever datetime class Airflow hands over.
    return datetime.fromtimestamp(moment.timestamp(), tz=timezone.utc)


@dag(
    dag_id="signal_backfill",
    # A data-interval timetable: each run's interval is the whole day it is named after (a plain
    # "@daily" would trigger at midnight with an empty interval in Airflow 3).
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=datetime(2026, 11, 1),
    end_date=datetime(2026, 11, 10),
    catchup=True,
    # Days run one after another: they share the signals' rate limits, so parallel days would
    # only wait for each other's windows.
    max_active_runs=1,
    default_args={"retries": 3, "retry_delay": timedelta(minutes=1)},
    tags=["listsync", "example"],
    doc_md=__doc__,
    user_defined_macros={"day_of_run": day_of_run},
)
def signal_backfill() -> None:
    IngestSignalsOperator(
        task_id="ingest_signal_events",
        sql=EVENTS_OF_THE_DAY,
        sql_conn_id="listsync_warehouse",
        signal_column="signal",
        identity_type_column="object_type",
        identity_id_column="object_id",
        data_column="payload",
        timestamp_column="occurred_at",
        reference_column="event_id",
        # Each signal is paced at its type's limit from the first batch on.
        signal_types={"page_visit": "Event", "seats_used": "Metric", "deal_stage": "State"},
        deferrable=True,
        rejects_path=f"{RUN_DIR}/events.rejects.jsonl",
    )


signal_backfill()
