"""Runs after the nightly sync changed the accounts List, never after a dry run or a quiet night.

Scheduled on the List's Asset (``listsync://api.example.com/tbl_accounts``, the one
``crm_to_list_nightly`` names): the List operators emit its event only when they wrote to it,
with their summary's counts in the event's ``extra``. ``report_changes`` logs them; put here what
must follow a change of the List (a refresh of a dashboard, a notice to the sales team...).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from airflow.sdk import Asset, dag, task

log = logging.getLogger(__name__)

ACCOUNTS_LIST = Asset(uri="listsync://api.example.com/tbl_accounts", name="listsync_tbl_accounts")


@dag(
    dag_id="list_changed_consumer",
    schedule=[ACCOUNTS_LIST],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["listsync", "example"],
    doc_md=__doc__,
)
def list_changed_consumer() -> None:
    @task
    def report_changes(**context: Any) -> list[dict[str, Any]]:
        """The counts of each change of the List that triggered this run."""
        events = context["triggering_asset_events"][ACCOUNTS_LIST]
        changes = [dict(event.extra) for event in events]
        for change in changes:
            log.info("The List changed: %s", change)
        return changes

    report_changes()


list_changed_consumer()
