"""Backfill signal events from the warehouse, one day per run, at the speed the limits allow.

``catchup=True`` over the example history (2026-11-01 to 2026-11-10): each daily run ingests the
events of its own data interval, selected by the templated query. Re-running a day is safe: each
event carries the warehouse's ``event_id`` as its reference, and a retried task resumes after the
last acknowledged batch. Unpaused, the scheduler catches up on every day; to (re-)run a range of
days, ask the scheduler for a backfill::

    airflow backfill create --dag-id signal_backfill --from-date 2026-11-01 --to-date 2026-11-10

A manual run (``airflow dags test signal_backfill 2026-11-04``) covers the last whole day before
its date, here 2026-11-03. The rejects of each day go to a folder named after that day.

The three signals have their own rate limits (Event 100, Metric 1,000, State 30 events a minute,
shared by everyone sending to that signal); when the next batch has to wait for a window, the task
defers and frees its worker slot until the window reopens.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import CronDataIntervalTimetable, dag

from listsync.operators import IngestSignalsOperator

DEFAULT_OUTPUT_DIR = os.environ.get("LISTSYNC_OUTPUT_DIR") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "listsync"
)
OUTPUT_DIR = f"{{{{ var.value.get('listsync_output_dir', {DEFAULT_OUTPUT_DIR!r}) }}}}"
RUN_DIR = OUTPUT_DIR + "/signal_backfill/{{ data_interval_start | ds_nodash }}"

# The interval bounds render as '2026-11-01 00:00:00+00:00', which both a PostgreSQL timestamptz
# and the ISO text of the SQLite example warehouse compare correctly against. Ordering by the
# event's own id keeps the extract, and so the checkpoint, stable across retries.
EVENTS_OF_THE_INTERVAL = """
SELECT event_id, occurred_at, signal, object_type, object_id, payload
FROM signal_events
WHERE occurred_at >= '{{ data_interval_start }}' AND occurred_at < '{{ data_interval_end }}'
ORDER BY event_id
"""


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
)
def signal_backfill() -> None:
    IngestSignalsOperator(
        task_id="ingest_signal_events",
        sql=EVENTS_OF_THE_INTERVAL,
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
