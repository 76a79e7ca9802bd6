"""The nightly people sync of ``tbl_accounts``, split into shards that run as mapped tasks.

The same extract, column map and List as ``crm_to_list_nightly``, for when one task cannot hold
the whole List's people in memory:

1. ``upsert_account_rows``: the warehouse's ``crm_accounts`` become the List's account rows, so
   the accounts the people go to exist (as in ``crm_to_list_nightly``).
2. ``sync_targetable_people``: :class:`SyncTargetablePeopleOperator` mapped over ``shard="0/4"``
   to ``"3/4"``. Each map index keeps the accounts whose normalised domain hashes to its shard,
   in the extract and in the List, and mirrors them; the four together mirror the whole List,
   each person written by one of them. Each names itself after its shard in the UI and writes
   its own plan and rejects files.
3. ``report``: one summary of the four (``combine_summaries``), returned to XCom.

Every shard still reads the whole extract and pages the whole List (the service cannot filter
by a hash of the domain): a task needs about a quarter of the memory, and the four take longer
than one unsharded sync. The shards take turns (``max_active_tis_per_dagrun=1``): the service
pages a List by offset, so a shard writing while another pages the same List would shift the
other's pages. Shard when memory, not time, is what runs out.

Connections and the output folder are those of ``crm_to_list_nightly``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import dag, task

from listsync.operators import SyncTargetablePeopleOperator, UpsertRowsOperator

log = logging.getLogger(__name__)

TABLE_ID = "tbl_accounts"
WAREHOUSE_CONN_ID = "listsync_warehouse"
SHARDS = 4

DEFAULT_OUTPUT_DIR = os.environ.get("LISTSYNC_OUTPUT_DIR") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "listsync"
)
OUTPUT_DIR = f"{{{{ var.value.get('listsync_output_dir', {DEFAULT_OUTPUT_DIR!r}) }}}}"
RUN_DIR = OUTPUT_DIR + "/sharded_people_sync/{{ (dag_run.logical_date or dag_run.run_after) | ts_nodash }}"
# "people.shard-1-of-4.plan.jsonl": each map index renders its own shard into its file names.
SHARD_FILE = RUN_DIR + "/people.shard-{{ task.shard | replace('/', '-of-') }}"

# As in crm_to_list_nightly.py: warehouse column -> List column id, and -> person field.
ACCOUNT_COLUMNS = {
    "website": "domain",
    "company_name": "name",
    "annual_revenue": "arr",
    "plan": "plan",
    "account_owner": "owner",
    "health_score": "health_score",
    "metadata": "metadata",
    "renewal_date": "renewal_date",
}
CONTACT_COLUMNS = {
    "account_website": "account_domain",
    "first_name": "first_name",
    "last_name": "last_name",
    "email": "email",
    "phone": "phone_number",
    "job_title": "title",
    "profile_url": "network_profile_url",
    "personas": "personas",
}


@dag(
    dag_id="sharded_people_sync",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    tags=["listsync", "example"],
    doc_md=__doc__,
)
def sharded_people_sync() -> None:
    rows = UpsertRowsOperator(
        task_id="upsert_account_rows",
        table_id=TABLE_ID,
        key_column="domain",
        column_map=ACCOUNT_COLUMNS,
        json_columns=["metadata"],
        sql="SELECT * FROM crm_accounts",
        sql_conn_id=WAREHOUSE_CONN_ID,
        plan_path=f"{RUN_DIR}/accounts.plan.jsonl",
        rejects_path=f"{RUN_DIR}/accounts.rejects.jsonl",
    )
    people = SyncTargetablePeopleOperator.partial(
        task_id="sync_targetable_people",
        table_id=TABLE_ID,
        sql="SELECT * FROM crm_contacts",
        sql_conn_id=WAREHOUSE_CONN_ID,
        column_map=CONTACT_COLUMNS,
        mode="mirror",
        delete_scope="accounts_in_source",
        plan_path=f"{SHARD_FILE}.plan.jsonl",
        rejects_path=f"{SHARD_FILE}.rejects.jsonl",
        map_index_template="shard {{ task.shard }}",
        # One shard at a time: the List is paged by offset, so a shard writing while another reads
        # it would shift that one's pages (people skipped or read twice).
        max_active_tis_per_dagrun=1,
    ).expand(shard=[f"{index}/{SHARDS}" for index in range(SHARDS)])
    rows >> people

    @task
    def report(summaries: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """Add up the shards' summaries into one summary of the sync."""
        from listsync.sync.steps import combine_summaries

        summary = combine_summaries(summaries)
        log.info("Summary of the sharded sync of %s:\n%s", TABLE_ID, json.dumps(summary, indent=2))
        return summary

    # The mapped operator's XComArg becomes the shards' summaries when the task runs.
    report(people.output)  # type: ignore[arg-type]


sharded_people_sync()
