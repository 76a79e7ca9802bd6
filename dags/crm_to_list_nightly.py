"""Nightly CRM-to-List sync: account rows from the warehouse, then the people of those accounts.

Every night at 02:00 UTC:

1. ``upsert_account_rows``: the warehouse's ``crm_accounts`` become rows of the List
   ``tbl_accounts``, keyed by domain; new accounts are added, changed cells patched.
2. ``sync_targetable_people``: the ``crm_contacts`` of those accounts become the accounts'
   targetable people, in mirror mode within the accounts of the extract: a contact who left the
   CRM leaves the List, people of other accounts are never touched. It runs after the rows, so
   the accounts it writes to exist.
3. ``report``: one summary of both, returned to XCom and written beside the plan and rejects files.

Each sync also leaves its report in the run's folder, ``accounts.report.html`` and
``people.report.html``: one page to open in a browser, with its counts, its rejects by reason,
what failed and a sample of the changes, before and after.

Running it without babysitting:

- Both syncs take the List as an inlet (their state lives in its asset state store) and emit the
  List's asset event through the alias ``listsync_tbl_accounts_changed`` only when they wrote
  something, with their counts in the event's ``extra``: a DAG scheduled on the List
  (``list_changed_consumer``) runs after real changes, never after a dry run or a quiet night.
- ``SyncNotifier`` alerts on a failed task, more than 5% of rows rejected, drift or unconfirmed
  writes, and a count of extract rows 20% away from the last successful night; here through
  ``LogNotifier`` (a warning in the task log): give it your ``SlackNotifier`` or ``SmtpNotifier``.
- A deadline: a run not done four hours after its 02:00 logical date (by 06:00 UTC) alerts
  (``$LISTSYNC_NIGHTLY_DEADLINE``: other hours, or ``off``).
- Each task records its run in the warehouse table ``listsync_runs`` (``history_table``).
- Trigger params: ``dry_run`` (plan and write the plan files, send nothing) and
  ``max_delete_fraction`` (a reviewed clean-up may delete more, for one run).

Connections: ``listsync_warehouse`` (any SQL database Airflow has a hook for: SQLite by default,
PostgreSQL in the compose stack) and ``listsync_default`` (the service). The plan, rejects, report
and summary files go under the Airflow Variable ``listsync_output_dir``, else ``$LISTSYNC_OUTPUT_DIR``,
else ``$AIRFLOW_HOME/listsync``, one folder per run named after its logical date (or, for a run
triggered without one, such as ``airflow dags trigger crm_to_list_nightly``, after the time it was
triggered for); a local path, or an object-storage URI (``s3://aws_default@bucket/listsync``)
where workers share no disk.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, AssetAlias, Param, dag, task
from airflow.sdk.definitions.callback import SyncCallback
from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

from listsync.notifications import LogNotifier, SyncNotifier
from listsync.operators import SyncTargetablePeopleOperator, UpsertRowsOperator

log = logging.getLogger(__name__)

TABLE_ID = "tbl_accounts"
WAREHOUSE_CONN_ID = "listsync_warehouse"
# The List as an Asset, listsync://<host of the service>/<tableId>: the same name the tasks'
# OpenLineage output gives it. Put the host of your listsync_default connection here.
SERVICE_HOST = "api.example.com"
ACCOUNTS_LIST = Asset(uri=f"listsync://{SERVICE_HOST}/{TABLE_ID}", name=f"listsync_{TABLE_ID}")
# What the syncs emit the List's event through, only when they wrote to it.
ACCOUNTS_CHANGED = AssetAlias(f"listsync_{TABLE_ID}_changed")
ALERTS = SyncNotifier(LogNotifier(), max_reject_fraction=0.05, alert_on_drift=True, max_count_change=0.2)
# Done by 06:00 UTC, four hours after the run's 02:00 logical date, or an alert
# ($LISTSYNC_NIGHTLY_DEADLINE hours; "off": none). dag.test() of Airflow 3.3.2 cannot finish a run
# of a DAG with a deadline (it looks the alerts up by object, not by id), so the demo and the
# tests that run it that way turn it off; the cluster test runs it on.
DEADLINE_HOURS = os.environ.get("LISTSYNC_NIGHTLY_DEADLINE", "4")
DEADLINE = (
    None
    if DEADLINE_HOURS == "off"
    else DeadlineAlert(
        reference=DeadlineReference.DAGRUN_LOGICAL_DATE,
        interval=timedelta(hours=float(DEADLINE_HOURS)),
        callback=SyncCallback(
            LogNotifier,
            kwargs={
                "message": f"crm_to_list_nightly is not done {DEADLINE_HOURS} hours after its logical date"
            },
        ),
    )
)
# What every sync task of the DAG shares: the List, the alerts, the run history, the trigger params.
SYNC_TASK: dict[str, Any] = {
    "table_id": TABLE_ID,
    "sql_conn_id": WAREHOUSE_CONN_ID,
    "inlets": [ACCOUNTS_LIST],
    "outlets": [ACCOUNTS_CHANGED],
    "on_failure_callback": ALERTS,
    "on_success_callback": ALERTS,
    "history_conn_id": WAREHOUSE_CONN_ID,
    "history_table": "listsync_runs",
    # One run of each writing task at a time, whatever starts it (a manual trigger, a backfill);
    # the List's lease also holds back another DAG or the command line writing the same List.
    "max_active_tis_per_dag": 1,
    "dry_run": "{{ params.dry_run }}",
    "max_delete_fraction": "{{ params.max_delete_fraction }}",
}

DEFAULT_OUTPUT_DIR = os.environ.get("LISTSYNC_OUTPUT_DIR") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "listsync"
)
# Rendered when the task runs, so changing the Variable needs no redeploy.
OUTPUT_DIR = f"{{{{ var.value.get('listsync_output_dir', {DEFAULT_OUTPUT_DIR!r}) }}}}"
# Named after the run's logical date, or, for a run triggered without one (Airflow 3's default for
# a manual run), after the moment it was triggered for.
RUN_DIR = OUTPUT_DIR + "/crm_to_list_nightly/{{ (dag_run.logical_date or dag_run.run_after) | ts_nodash }}"

# Warehouse column -> List column id. The key column, domain, is normalised as a domain, so
# "https://www.Acme.com/" and "ACME.COM." are the same account.
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

# Warehouse column -> person field (spec §2.1); account_domain names the account row.
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
    dag_id="crm_to_list_nightly",
    schedule="0 2 * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    params={
        "dry_run": Param(False, type="boolean", description="plan and write the plan files; send nothing"),
        "max_delete_fraction": Param(
            0.1,
            type="number",
            minimum=0,
            maximum=1,
            description="largest share of the List one run may delete",
        ),
    },
    deadline=DEADLINE,
    tags=["listsync", "example"],
    doc_md=__doc__,
)
def crm_to_list_nightly() -> None:
    rows = UpsertRowsOperator(
        task_id="upsert_account_rows",
        key_column="domain",
        column_map=ACCOUNT_COLUMNS,
        # The CRM keeps metadata as JSON text; the List column holds structured JSON.
        json_columns=["metadata"],
        sql="SELECT * FROM crm_accounts",
        plan_path=f"{RUN_DIR}/accounts.plan.jsonl",
        rejects_path=f"{RUN_DIR}/accounts.rejects.jsonl",
        report_path=f"{RUN_DIR}/accounts.report.html",
        **SYNC_TASK,
    )
    people = SyncTargetablePeopleOperator(
        task_id="sync_targetable_people",
        sql="SELECT * FROM crm_contacts",
        column_map=CONTACT_COLUMNS,
        mode="mirror",
        delete_scope="accounts_in_source",
        plan_path=f"{RUN_DIR}/people.plan.jsonl",
        rejects_path=f"{RUN_DIR}/people.rejects.jsonl",
        report_path=f"{RUN_DIR}/people.report.html",
        **SYNC_TASK,
    )
    rows >> people

    @task
    def report(rows_summary: dict[str, Any], people_summary: dict[str, Any], run_dir: str) -> dict[str, Any]:
        """Combine both summaries, log them, and keep a copy with the run's plan and rejects files."""
        from listsync.operators.extract import storage_path

        summary = {"table_id": TABLE_ID, "rows": rows_summary, "people": people_summary}
        # Like the plan and rejects files, the summary may go to object storage (s3://...).
        path = storage_path(f"{run_dir.rstrip('/')}/summary.json")
        if isinstance(path, Path):
            path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as handle:
            handle.write(json.dumps(summary, indent=2, sort_keys=True, default=str))
        log.info("Summary of the sync of %s, also in %s:\n%s", TABLE_ID, path, json.dumps(summary, indent=2))
        return summary

    # The operators' XComArgs become their summary dicts when the task runs.
    report(rows.output, people.output, run_dir=RUN_DIR)  # type: ignore[arg-type]


crm_to_list_nightly()
