"""One List per customer segment: the warehouse's accounts of each plan go to their own List.

Each sales team works from a List of its own segment. One ``UpsertRowsOperator`` is mapped over
the segments (``expand_kwargs``, one map index per List in ``SEGMENT_LISTS``): each map index reads
the accounts of its plan and upserts them into its List, is retried on its own when it fails, and
is shown in the UI under the List's id (``map_index_template``). Its plan and rejects files are
named after its List, so the map indexes of a run never write the same file.

Add a segment by adding a List to ``SEGMENT_LISTS``; the Lists must exist in the service with the
columns of ``SEGMENT_COLUMNS`` (the emulator's demo tenant has the three below). Each map index
reports its own List as its OpenLineage output, and, when it wrote to its List, emits that List's
asset event (``listsync://<service host>/<tableId>``) through the alias
``listsync_segment_lists_changed``: an Asset outlet would be shared by every map index. Trigger it
by hand, or give it a schedule.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.sdk import AssetAlias, dag

from listsync.operators import UpsertRowsOperator

# The plan of the warehouse's crm_accounts -> the List of that segment.
SEGMENT_LISTS = {
    "enterprise": "tbl_accounts_enterprise",
    "team": "tbl_accounts_team",
    "free": "tbl_accounts_free",
}

# Warehouse column -> List column id; accounts are keyed by domain, normalised as a domain.
SEGMENT_COLUMNS = {
    "website": "domain",
    "company_name": "name",
    "annual_revenue": "arr",
    "account_owner": "owner",
    "health_score": "health_score",
}

DEFAULT_OUTPUT_DIR = os.environ.get("LISTSYNC_OUTPUT_DIR") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "listsync"
)
OUTPUT_DIR = f"{{{{ var.value.get('listsync_output_dir', {DEFAULT_OUTPUT_DIR!r}) }}}}"
RUN_DIR = OUTPUT_DIR + "/segment_lists/{{ (dag_run.logical_date or dag_run.run_after) | ts_nodash }}"


def segment_arguments(plan: str, table_id: str) -> dict[str, Any]:
    """The arguments of the map index that fills ``table_id`` with the accounts of ``plan``."""
    return {
        "table_id": table_id,
        "sql": f"SELECT {', '.join(SEGMENT_COLUMNS)} FROM crm_accounts WHERE plan = '{plan}'",
        "plan_path": f"{RUN_DIR}/{table_id}.plan.jsonl",
        "rejects_path": f"{RUN_DIR}/{table_id}.rejects.jsonl",
    }


@dag(
    dag_id="segment_lists",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    # Each map index writes a List of its own, so they run side by side; two runs of the DAG
    # would write the same Lists (their leases would make one wait).
    max_active_runs=1,
    tags=["listsync", "example"],
    doc_md=__doc__,
)
def segment_lists() -> None:
    UpsertRowsOperator.partial(
        task_id="upsert_segment_rows",
        key_column="domain",
        column_map=SEGMENT_COLUMNS,
        sql_conn_id="listsync_warehouse",
        # Rendered after the run, with the map index's own arguments.
        map_index_template="{{ task.table_id }}",
        outlets=[AssetAlias("listsync_segment_lists_changed")],
    ).expand_kwargs([segment_arguments(plan, table_id) for plan, table_id in SEGMENT_LISTS.items()])


segment_lists()
