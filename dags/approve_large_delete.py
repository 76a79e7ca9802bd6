"""Approve a large delete from the UI, then apply exactly what was approved.

When a CRM clean-up removes many contacts, the nightly mirror refuses to delete more than
``max_delete_fraction`` of the List, rightly: it looks like a broken extract. This DAG lets a
person look and say yes:

1. ``plan``: a dry run of the people sync (the delete limit lifted, nothing sent) writes its plan.
2. ``decide``: the share of the List the plan deletes, against the run's ``max_delete_fraction``
   param (0.1): within it, straight to ``apply``; over it, to ``describe`` and ``approve``.
3. ``approve``: an ``ApprovalOperator`` (Airflow's human-in-the-loop, 3.1 and later) shows the
   counts, the delete fraction, a sample of the people who would go, from the plan file, the
   rejects by reason and where the dry run's report is (``people.plan.html``, beside the plan),
   under *Required actions* in the UI. Rejected: nothing more runs, nothing is written. The Airflow
   users the run's ``reviewers`` param names (user ids) are the ones asked (``assigned_users``),
   and as it starts to wait its ``notifiers`` tell them: :data:`REVIEW_ALERTS`, the
   ``SyncNotifier`` of ``crm_to_list_nightly`` (a warning in the task log through
   ``LogNotifier``; give it your ``SlackNotifier`` or ``SmtpNotifier``), which says who is asked
   and what they will read.
4. ``apply``: the sync again, given the plan file as ``approved_plan``: it plans anew and writes
   only if the plan is the approved file line for line, and no older than a day. If the List or
   the extract moved since the review, it fails before any write; plan and review again.

Connections and the output folder are those of ``crm_to_list_nightly``. On an Airflow without
the human-in-the-loop operators the DAG still parses, and its one task says what it needs.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Asset, AssetAlias, Param, dag, task

from listsync.notifications import LogNotifier, SyncNotifier
from listsync.operators import SyncTargetablePeopleOperator

try:
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    HAS_APPROVAL = True
except ImportError:  # Airflow before 3.1, or an older standard provider
    HAS_APPROVAL = False

TABLE_ID = "tbl_accounts"
WAREHOUSE_CONN_ID = "listsync_warehouse"
ACCOUNTS_LIST = Asset(uri=f"listsync://api.example.com/{TABLE_ID}", name=f"listsync_{TABLE_ID}")
DEFAULT_OUTPUT_DIR = os.environ.get("LISTSYNC_OUTPUT_DIR") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "listsync"
)
OUTPUT_DIR = f"{{{{ var.value.get('listsync_output_dir', {DEFAULT_OUTPUT_DIR!r}) }}}}"
RUN_DIR = OUTPUT_DIR + "/approve_large_delete/{{ (dag_run.logical_date or dag_run.run_after) | ts_nodash }}"
PLAN = f"{RUN_DIR}/people.plan.jsonl"
#: People the approval shows of those the plan deletes.
SAMPLE = 20
# As in crm_to_list_nightly.py: warehouse column -> person field.
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
#: Who hears that an approval waits: the nightly example's alerts (crm_to_list_nightly.py).
REVIEW_ALERTS = SyncNotifier(LogNotifier())
# What the dry run and the apply share: the same extract, map and mode make the same plan.
PEOPLE_SYNC: dict[str, Any] = {
    "table_id": TABLE_ID,
    "sql": "SELECT * FROM crm_contacts",
    "sql_conn_id": WAREHOUSE_CONN_ID,
    "column_map": CONTACT_COLUMNS,
    "mode": "mirror",
    "delete_scope": "accounts_in_source",
    "inlets": [ACCOUNTS_LIST],
}


if HAS_APPROVAL:

    class Review(ApprovalOperator):
        """The approval, asking the users the run's ``reviewers`` param names: ``assigned_users``
        is not templated, so it is read from the params as the task runs."""

        def execute(self, context: Any) -> Any:
            self.assigned_users = [{"id": user, "name": user} for user in context["params"]["reviewers"]]
            return super().execute(context)


@dag(
    dag_id="approve_large_delete",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    # One review at a time; the apply also takes the List's lease, which holds it back while the
    # nightly sync (another DAG) writes the same List.
    max_active_runs=1,
    params={
        "max_delete_fraction": Param(
            0.1,
            type="number",
            minimum=0,
            maximum=1,
            description="a larger share of the List deleted needs approval",
        ),
        "reviewers": Param(
            [],
            type="array",
            items={"type": "string"},
            description="the Airflow user ids asked to approve (none: anyone who may)",
        ),
    },
    tags=["listsync", "example"],
    doc_md=__doc__,
)
def approve_large_delete() -> None:
    if not HAS_APPROVAL:

        @task
        def needs_airflow_3_1() -> None:
            raise RuntimeError(
                "approve_large_delete needs Airflow 3.1 or later with apache-airflow-providers-standard "
                "1.9 or later (airflow.providers.standard.operators.hitl.ApprovalOperator)"
            )

        needs_airflow_3_1()
        return

    plan = SyncTargetablePeopleOperator(
        task_id="plan", dry_run=True, max_delete_fraction=1.0, plan_path=PLAN, **PEOPLE_SYNC
    )

    @task.branch
    def decide(summary: dict[str, Any], **context: Any) -> str:
        """``apply`` when the plan deletes no more than the param allows, else ``describe``."""
        deleting = summary["planned"]["delete"] / max(summary["list_people"], 1)
        return "describe" if deleting > float(context["params"]["max_delete_fraction"]) else "apply"

    @task
    def describe(summary: dict[str, Any]) -> str:
        """What the reviewer reads: the counts, the delete fraction and a sample of the deletes."""
        from listsync.operators.extract import storage_path

        deletes: list[str] = []
        with storage_path(summary["plan_path"]).open("r") as handle:
            for line in handle:
                entry = json.loads(line)
                if entry["action"] == "delete" and len(deletes) < SAMPLE:
                    deletes.append(f"- {entry['identity']} on {entry['account_domain']}")
        planned, held = summary["planned"], summary["list_people"]
        rejected = [f"- {count:,} x {reason}" for reason, count in summary["reject_reasons"].items()]
        return "\n".join(
            [
                f"The people sync of List **{TABLE_ID}** would delete **{planned['delete']:,} of {held:,}** "
                f"people ({planned['delete'] / max(held, 1):.1%}), add {planned['add']:,} and patch "
                f"{planned['patch']:,}. The plan: `{summary['plan_path']}`.",
                "",
                f"The first {len(deletes)} deletes:",
                *deletes,
                "",
                *(
                    [f"{summary['rejected']:,} rows of the CRM were rejected, and why:", *rejected, ""]
                    if rejected
                    else []
                ),
                f"The dry run's report, every count and a sample of each change before and after, to open "
                f"in a browser: `{summary['report_path']}`.",
                "",
                "Approve to apply exactly this plan; it is refused if the List or the CRM changes first.",
            ]
        )

    approve = Review(
        task_id="approve",
        notifiers=[REVIEW_ALERTS],
        subject=f"Apply a large delete to List {TABLE_ID}?",
        body="{{ ti.xcom_pull(task_ids='describe') }}",
        # Rejected: apply is skipped whatever its trigger rule.
        ignore_downstream_trigger_rules=True,
        response_timeout=timedelta(hours=12),
    )
    apply = SyncTargetablePeopleOperator(
        task_id="apply",
        approved_plan=PLAN,
        outlets=[AssetAlias(f"listsync_{TABLE_ID}_changed")],
        # After decide chose it, or after an approval.
        trigger_rule="none_failed_min_one_success",
        max_active_tis_per_dag=1,
        **PEOPLE_SYNC,
    )
    choice = decide(plan.output)  # type: ignore[arg-type]
    review = describe(plan.output)  # type: ignore[arg-type]
    plan >> choice >> [review, apply]
    review >> approve >> apply


approve_large_delete()
