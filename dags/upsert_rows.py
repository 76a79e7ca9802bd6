"""A small standalone rows upsert: refresh two columns of the accounts List from the warehouse.

Only the columns in ``column_map`` are compared and written, so this DAG can refresh the health
score and the owner every hour while the nightly sync owns the other columns. Rows whose account
is not yet in the List are added with these columns only; nothing is deleted
(``delete_missing=False``). A refresh that must never create accounts takes
``mode="update_only"`` (the rows the List lacks are counted in ``not_added``). Trigger it by
hand, or give it a schedule.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, AssetAlias, dag

from listsync.notifications import LogNotifier, SyncNotifier
from listsync.operators import UpsertRowsOperator

# A failed refresh, or one whose writes read back otherwise, is said in the task log; give
# SyncNotifier your Slack or SMTP notifier instead of LogNotifier to be told.
ALERTS = SyncNotifier(LogNotifier(), alert_on_drift=True)


@dag(
    dag_id="upsert_rows",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["listsync", "example"],
    doc_md=__doc__,
)
def upsert_rows() -> None:
    UpsertRowsOperator(
        task_id="refresh_health_and_owner",
        table_id="tbl_accounts",
        key_column="domain",
        column_map={"website": "domain", "health_score": "health_score", "account_owner": "owner"},
        sql="SELECT website, health_score, account_owner FROM crm_accounts",
        sql_conn_id="listsync_warehouse",
        delete_missing=False,
        # The nightly sync's Asset (listsync://<service host>/<tableId>): the List it reads (and
        # keeps its state with); its event goes out through the alias only when rows changed.
        inlets=[Asset(uri="listsync://api.example.com/tbl_accounts", name="listsync_tbl_accounts")],
        outlets=[AssetAlias("listsync_tbl_accounts_changed")],
        on_failure_callback=ALERTS,
        on_success_callback=ALERTS,
        # One run of the task at a time; the List's lease holds back the other writers of it.
        max_active_tis_per_dag=1,
    )


upsert_rows()
