"""The nightly people sync of ``tbl_accounts``, split into shards that run as mapped tasks.

The same extract, column map and List as ``crm_to_list_nightly``, for when one task cannot hold
the whole List's people in memory:

1. ``upsert_account_rows``: the warehouse's ``crm_accounts`` become the List's account rows, so
   the accounts the people go to exist (as in ``crm_to_list_nightly``).
2. ``split_people``: :class:`SplitPeopleOperator` reads the extract and pages the List once, and
   writes each of the four shards its part in the run's ``parts`` folder: the extract's people of
   the accounts whose normalised domain hashes to the shard (prepared: rejects and duplicates are
   the split's), and the List's people of those accounts as read. It writes nothing to the List.
3. ``sync_targetable_people``: :class:`SyncTargetablePeopleOperator` mapped over ``shard="0/4"``
   to ``"3/4"``, each with ``parts_path``: each map index plans its part, re-reads the accounts it
   writes in (by the service's account filter: the part is a snapshot, and others may have changed
   the List since), writes, and reads back its own accounts. The four together mirror the whole
   List, each person written by one of them. Each names itself after its shard in the UI and
   writes its own plan file. A shard that fails is retried alone, from its part.
4. ``report``: one summary of the split and the four shards (``combine_summaries``), to XCom.

The List is paged once a night, by the split, which holds the prepared extract (as the unsharded
sync does) but none of the List; a shard holds a quarter. The shards no longer page the List
(they read their own accounts by the account filter), but they take turns all the same
(``max_active_tis_per_dagrun=1``): each takes the List's lease, as the unsharded sync does, so that
neither another night nor ``crm_to_list_nightly`` writes the List at the same time; shards running
at once would only wait for each other's lease, holding worker slots.

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

from listsync.operators import SplitPeopleOperator, SyncTargetablePeopleOperator, UpsertRowsOperator

log = logging.getLogger(__name__)

TABLE_ID = "tbl_accounts"
WAREHOUSE_CONN_ID = "listsync_warehouse"
SHARDS = 4

DEFAULT_OUTPUT_DIR = os.environ.get("LISTSYNC_OUTPUT_DIR") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "listsync"
)
OUTPUT_DIR = f"{{{{ var.value.get('listsync_output_dir', {DEFAULT_OUTPUT_DIR!r}) }}}}"
RUN_DIR = OUTPUT_DIR + "/sharded_people_sync/{{ (dag_run.logical_date or dag_run.run_after) | ts_nodash }}"
# Where the split leaves each shard its part, for the shards and their retries.
PARTS_DIR = RUN_DIR + "/parts"
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
    split = SplitPeopleOperator(
        task_id="split_people",
        table_id=TABLE_ID,
        sql="SELECT * FROM crm_contacts",
        sql_conn_id=WAREHOUSE_CONN_ID,
        column_map=CONTACT_COLUMNS,
        shards=SHARDS,
        parts_path=PARTS_DIR,
        rejects_path=f"{RUN_DIR}/people.rejects.jsonl",
    )
    people = SyncTargetablePeopleOperator.partial(
        task_id="sync_targetable_people",
        table_id=TABLE_ID,
        parts_path=PARTS_DIR,
        column_map=CONTACT_COLUMNS,
        mode="mirror",
        delete_scope="accounts_in_source",
        plan_path=f"{SHARD_FILE}.plan.jsonl",
        map_index_template="shard {{ task.shard }}",
        # One shard at a time: each holds the List's lease (the unsharded sync's) while it writes;
        # shards started at once would wait for it, holding worker slots.
        max_active_tis_per_dagrun=1,
    ).expand(shard=[f"{index}/{SHARDS}" for index in range(SHARDS)])
    rows >> split >> people

    @task
    def report(split: dict[str, Any], summaries: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """Add up the split's and the shards' summaries into one summary of the sync."""
        from listsync.sync.steps import combine_summaries

        summary = combine_summaries(summaries, split=split)
        log.info("Summary of the sharded sync of %s:\n%s", TABLE_ID, json.dumps(summary, indent=2))
        return summary

    # The XComArgs become the split's summary and the shards' summaries when the task runs.
    report(split.output, people.output)  # type: ignore[arg-type]


sharded_people_sync()
