"""SyncNotifier: the threshold decisions from a table, and alerts of real sync tasks run with
Airflow's ``dag.test()`` against the emulator, whose task callbacks the task runner calls in
process as it finishes each task (``finalize``), as a worker does."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from airflow.sdk import BaseNotifier

from listsync.notifications import AlertThresholds, SyncNotifier, crossed_thresholds, summary_of
from listsync.operators.people import SyncTargetablePeopleOperator

from .support import LiveEmulator
from .support.tenants import PEOPLE_API_KEY as API_KEY
from .support.tenants import PEOPLE_TABLE as TABLE
from .support.tenants import PEOPLE_USER

COLUMN_MAP = {
    "domain": "account_domain",
    "email": "email",
    "first": "first_name",
    "last": "last_name",
    "title": "title",
}
HEADER = "domain,email,first,last,title\n"
#: Four rows, the last rejected (its e-mail is not one).
MESSY = HEADER + (
    "acme.com,ann@acme.com,Ann,Lee,CTO\nacme.com,bob@acme.com,Bob,Ray,\nbeta.io,cy@beta.io,Cy,Doe,\n"
    "beta.io,not an email,Dee,Fox,\n"
)
CLEAN = HEADER + "acme.com,ann@acme.com,Ann,Lee,CTO\nbeta.io,cy@beta.io,Cy,Doe,\n"
NIGHTS = [datetime(2026, 3, day, 2, tzinfo=timezone.utc) for day in (1, 2, 3)]


class Recording(BaseNotifier):
    """A notifier that keeps what it would send: its fields as rendered, and ``listsync``."""

    template_fields = ("subject", "body")

    def __init__(self, sent: list[dict[str, Any]]) -> None:
        super().__init__()
        self.sent = sent
        self.subject = "{{ listsync.subject }}"
        self.body = "{{ listsync.message }}"

    def notify(self, context: Any) -> None:
        self.sent.append({"subject": self.subject, "body": self.body, "listsync": context["listsync"]})


# --- the decisions ----------------------------------------------------------------------------


def people(**counts: Any) -> dict[str, Any]:
    return {"read": 10, "rejected": 0, "other_shards": 0, "drift": 0, "unconfirmed": 0, **counts}


@pytest.mark.parametrize(
    ("summary", "previous", "thresholds", "expected"),
    [
        (people(rejected=9, drift=3, unconfirmed=2), people(read=1), AlertThresholds(), []),
        (people(rejected=2), None, AlertThresholds(max_reject_fraction=0.2), []),
        (
            people(rejected=3),
            None,
            AlertThresholds(max_reject_fraction=0.2),
            ["rejects: 3 of 10 rows rejected (30.0%), more than max_reject_fraction=0.2 allows"],
        ),
        (people(read=0), None, AlertThresholds(max_reject_fraction=0.0), []),
        # A shard's rejects are of its own rows: the extract's less the other shards'.
        (
            people(rejected=1, other_shards=6, shard="1/4"),
            None,
            AlertThresholds(max_reject_fraction=0.2),
            ["rejects: 1 of 4 rows rejected (25.0%), more than max_reject_fraction=0.2 allows"],
        ),
        (people(drift=2, unconfirmed=1), None, AlertThresholds(alert_on_drift=False), []),
        (
            people(
                drift=2, drift_reasons=["patch of acme.com email:a@acme.com: title is 'COO', expected 'CFO'"]
            ),
            None,
            AlertThresholds(alert_on_drift=True),
            [
                "drift: 2 written item(s) read back with other values, e.g. patch of acme.com "
                "email:a@acme.com: title is 'COO', expected 'CFO'"
            ],
        ),
        (
            people(unconfirmed=1),
            None,
            AlertThresholds(alert_on_drift=True),
            ["unconfirmed: 1 write(s) not shown by the List when read back"],
        ),
        # A rows summary has the same read, rejected and drift counts.
        (
            {"read": 5, "rejected": 0, "added": 5, "cells_updated": 0, "drift": 1, "unconfirmed": 1},
            None,
            AlertThresholds(alert_on_drift=True),
            [
                "drift: 1 written item(s) read back with other values",
                "unconfirmed: 1 write(s) not shown by the List when read back",
            ],
        ),
        (people(read=200), None, AlertThresholds(max_count_change=0.2), []),
        (people(read=120), people(read=100), AlertThresholds(max_count_change=0.2), []),
        (people(read=80), people(read=100), AlertThresholds(max_count_change=0.2), []),
        (
            people(read=121),
            people(read=100),
            AlertThresholds(max_count_change=0.2),
            [
                "row count: 121 rows read, 100 at the last successful run (+21.0%), more than "
                "max_count_change=0.2 allows"
            ],
        ),
        (
            people(read=79),
            people(read=100),
            AlertThresholds(max_count_change=0.2),
            [
                "row count: 79 rows read, 100 at the last successful run (-21.0%), more than "
                "max_count_change=0.2 allows"
            ],
        ),
        (
            people(read=5),
            people(read=0),
            AlertThresholds(max_count_change=1.0),
            [
                "row count: 5 rows read, 0 at the last successful run (from none), more than "
                "max_count_change=1.0 allows"
            ],
        ),
        (people(read=0), people(read=0), AlertThresholds(max_count_change=0.0), []),
        (
            people(read=0, rejected=0, drift=1),
            people(read=50),
            AlertThresholds(max_reject_fraction=0.0, alert_on_drift=True, max_count_change=0.5),
            [
                "drift: 1 written item(s) read back with other values",
                "row count: 0 rows read, 50 at the last successful run (-100.0%), more than "
                "max_count_change=0.5 allows",
            ],
        ),
    ],
)
def test_crossed_thresholds(
    summary: dict[str, Any],
    previous: dict[str, Any] | None,
    thresholds: AlertThresholds,
    expected: list[str],
) -> None:
    assert crossed_thresholds(summary, previous, thresholds) == expected


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_reject_fraction": 1.5}, "max_reject_fraction must be between 0 and 1, got 1.5"),
        ({"max_reject_fraction": -0.01}, "max_reject_fraction must be between 0 and 1, got -0.01"),
        ({"max_count_change": math.nan}, "max_count_change must be between 0 and 1, got nan"),
        ({"max_count_change": 2}, "max_count_change must be between 0 and 1, got 2"),
        ({"max_count_change": True}, "max_count_change must be between 0 and 1, got True"),
        ({"max_reject_fraction": "0.1"}, "max_reject_fraction must be between 0 and 1, got '0.1'"),
    ],
)
def test_thresholds_outside_0_to_1_fail_when_the_dag_is_parsed(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SyncNotifier(Recording([]), **options)


def test_the_notifier_that_sends_must_be_an_airflow_notifier() -> None:
    with pytest.raises(TypeError, match="notifier must be an Airflow BaseNotifier, got function"):
        SyncNotifier(lambda context: None)  # type: ignore[arg-type]


# --- real task runs ---------------------------------------------------------------------------


@pytest.fixture
def connected(
    people_client: Any, people_emulator: LiveEmulator, connect_listsync: Callable[..., None]
) -> Any:
    """The people List (account rows seeded), ``listsync_default`` pointing at it."""
    connect_listsync(people_emulator.url, API_KEY, PEOPLE_USER)
    return people_client


def sync_dag(
    dag_id: str, source: Path, notifier: SyncNotifier, *, dag_callbacks: bool = False, **options: Any
) -> Any:
    """A DAG of one people sync of ``source``, ``notifier`` its task's callbacks (and the DAG's)."""
    from airflow.sdk import DAG

    callbacks = {"on_failure_callback": notifier, "on_success_callback": notifier}
    with DAG(
        dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        default_args={"retries": 0},
        **(callbacks if dag_callbacks else {}),
    ) as dag:
        SyncTargetablePeopleOperator(
            task_id="sync_people",
            table_id=TABLE,
            source=str(source),
            column_map=COLUMN_MAP,
            **callbacks,
            **options,
        )
    return dag


def extract(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "contacts.csv"
    path.write_text(text, encoding="utf-8")
    return path


def assert_rendered_from_listsync(sent: list[dict[str, Any]]) -> None:
    """Each notification rendered its own templates from its own ``listsync``, with no secret."""
    for notification in sent:
        assert notification["subject"] == notification["listsync"]["subject"]
        assert notification["body"] == notification["listsync"]["message"]
        assert API_KEY not in json.dumps(notification, default=str)


@pytest.mark.slow
def test_a_clean_success_sends_nothing(run_dag: Callable[..., Any], connected: Any, tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []
    alerts = SyncNotifier(Recording(sent), max_reject_fraction=0.0, alert_on_drift=True, max_count_change=0.0)
    dag = sync_dag("notify_clean", extract(tmp_path, CLEAN), alerts)

    runs = [run_dag(dag, logical_date=night) for night in NIGHTS[:2]]

    assert [run.state for run in runs] == ["success", "success"]
    summary = runs[1].get_task_instance("sync_people").xcom_pull(task_ids="sync_people")
    assert (summary["read"], summary["rejected"], summary["drift"], summary["unconfirmed"]) == (2, 0, 0, 0)
    assert sent == []


@pytest.mark.slow
def test_rejects_over_the_threshold_alert_on_a_successful_run(
    run_dag: Callable[..., Any], connected: Any, tmp_path: Path
) -> None:
    sent: list[dict[str, Any]] = []
    dag = sync_dag(
        "notify_rejects",
        extract(tmp_path, MESSY),
        SyncNotifier(Recording(sent), max_reject_fraction=0.2),
        rejects_path=str(tmp_path / "rejects.jsonl"),
    )

    run = run_dag(dag, logical_date=NIGHTS[0])

    assert run.state == "success"
    [alert] = sent
    assert alert["listsync"]["alerts"] == [
        "rejects: 1 of 4 rows rejected (25.0%), more than max_reject_fraction=0.2 allows"
    ]
    assert alert["listsync"]["summary"] == run.get_task_instance("sync_people").xcom_pull(
        task_ids="sync_people"
    )
    assert alert["subject"] == f"[ListSync] 1 warning(s): notify_rejects.sync_people, List {TABLE}"
    body = alert["body"]
    assert f"DAG notify_rejects, task sync_people, run {run.run_id}, try 1: succeeded" in body
    assert f"List {TABLE}, mode upsert" in body
    assert "Counts: read 4, rejected 1, duplicates 0, added 3, updated 0, deleted 0, unchanged 0" in body
    assert f"Rejected rows and their reasons: {tmp_path / 'rejects.jsonl'}" in body
    assert_rendered_from_listsync(sent)


@pytest.mark.slow
def test_an_unsafe_delete_alerts_from_the_task_and_from_the_dag_without_a_summary(
    run_dag: Callable[..., Any], connected: Any, tmp_path: Path
) -> None:
    # The List holds 20 people the extract does not: mirroring it would delete most of the List.
    connected.add_people(
        TABLE,
        [
            {
                "accountDomain": "acme.com",
                "people": [{"first_name": f"P{i}", "email": f"p{i}@acme.com"} for i in range(20)],
            }
        ],
    )
    sent: list[dict[str, Any]] = []
    alerts = SyncNotifier(Recording(sent), max_reject_fraction=0.0)
    source = extract(tmp_path, MESSY)
    unsafe = {"mode": "mirror", "max_delete_fraction": 0.1}
    dag = sync_dag("notify_unsafe_delete", source, alerts, **unsafe)

    run = run_dag(dag, logical_date=NIGHTS[0])

    assert run.state == "failed"
    [task_alert] = (notification["listsync"] for notification in sent)
    [failure] = task_alert["alerts"]
    assert failure.startswith("failed: AirflowFailException: Refusing to delete 20 of 20 people (100.0%)")
    assert "\n" not in failure
    assert task_alert["summary"] is None
    assert task_alert["subject"] == f"[ListSync] FAILED notify_unsafe_delete.sync_people, List {TABLE}"
    assert "try 1: failed" in task_alert["message"]
    assert "No summary: the task ended before the sync had one." in task_alert["message"]

    # The DAG's failure callback, run the way dag.test() runs it but with the DAG as the DAG
    # processor has it, parsed from its file: dag.test() hands DAG callbacks its serialized DAG,
    # with which no BaseNotifier can render its templates (apache/airflow#64649).
    parsed = sync_dag("notify_unsafe_delete", source, alerts, dag_callbacks=True, **unsafe)
    run.execute_dag_callbacks(
        dag=parsed, success=False, relevant_ti=run.get_task_instance("sync_people"), reason="task_failure"
    )

    dag_alert = sent[1]["listsync"]
    assert dag_alert["alerts"] == ["failed: the DAG run failed (task_failure); task sync_people"]
    assert dag_alert["subject"] == f"[ListSync] FAILED DAG notify_unsafe_delete, List {TABLE}"
    assert (
        f"DAG notify_unsafe_delete, last task sync_people, run {run.run_id}: the DAG run failed"
        in dag_alert["message"]
    )
    assert_rendered_from_listsync(sent)


@pytest.mark.slow
def test_the_row_count_is_compared_with_the_last_successful_run_and_a_failure_gives_its_counts(
    run_dag: Callable[..., Any], connected: Any, tmp_path: Path
) -> None:
    sent: list[dict[str, Any]] = []
    source = extract(tmp_path, MESSY)
    dag = sync_dag("notify_count", source, SyncNotifier(Recording(sent), max_count_change=0.2))

    # Night 1: four rows, no run before it to compare with.
    assert run_dag(dag, logical_date=NIGHTS[0]).state == "success"
    assert sent == []

    # Night 2: eight rows, four of accounts the List does not have: written what could be, failed.
    unknown = "".join(f"nowhere{i}.example,z{i}@nowhere{i}.example,Zed,Orr,\n" for i in range(4))
    source.write_text(MESSY + unknown, encoding="utf-8")
    assert run_dag(dag, logical_date=NIGHTS[1]).state == "failed"
    [failed] = sent
    failure, count = failed["listsync"]["alerts"]
    assert failure.startswith("failed: SyncFailedError: 4 item(s) failed to be written")
    assert count == (
        "row count: 8 rows read, 4 at the last successful run (+100.0%), more than "
        "max_count_change=0.2 allows"
    )
    assert failed["listsync"]["summary"]["failed"] == 4
    assert "Counts: read 8, rejected 1, duplicates 0, added 0, updated 0, deleted 0" in failed["body"]
    assert (
        "- 4 x Account not found: nowhere0.example, nowhere1.example, nowhere2.example, nowhere3.example"
        in failed["body"]
    )
    outcomes = failed["listsync"]["summary"]["outcomes_path"]
    assert outcomes and f"Each record that did not end as planned, and why: {outcomes}" in failed["body"]

    # Night 3: two rows; the failed night is not the one compared with.
    source.write_text(CLEAN, encoding="utf-8")
    assert run_dag(dag, logical_date=NIGHTS[2]).state == "success"
    fewer = sent[1]["listsync"]
    assert fewer["alerts"] == [
        "row count: 2 rows read, 4 at the last successful run (-50.0%), more than max_count_change=0.2 allows"
    ]
    assert fewer["subject"] == f"[ListSync] 1 warning(s): notify_count.sync_people, List {TABLE}"
    assert len(sent) == 2
    # One SyncNotifier served both runs; each rendered the templates anew.
    assert_rendered_from_listsync(sent)


def acknowledge_patches(apply: Callable[[], None] | None = None) -> Callable[[httpx.Request], Any]:
    """A service that answers every people PATCH as done without applying it, after ``apply``."""
    acknowledged = httpx.Response(200, json={"success": True, "data": {"updated": 1, "notFound": []}})

    def answer(request: httpx.Request) -> httpx.Response | None:
        if request.method != "PATCH":
            return None
        if apply is not None:
            apply()
        return acknowledged

    return answer


@pytest.mark.slow
@pytest.mark.parametrize("finding", ["drift", "unconfirmed"])
def test_drift_and_unconfirmed_writes_alert_on_a_successful_run(
    run_dag: Callable[..., Any],
    connected: Any,
    people_emulator: LiveEmulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    intercepting: Callable[..., httpx.BaseTransport],
    finding: str,
) -> None:
    from listsync.client import ListSyncClient
    from listsync.hooks.listsync import ListSyncHook

    sent: list[dict[str, Any]] = []
    source = extract(tmp_path, MESSY)
    dag = sync_dag(
        f"notify_{finding}",
        source,
        SyncNotifier(Recording(sent), alert_on_drift=True),
        # Counted rather than failing the task: the run succeeds and only the threshold speaks.
        fail_on_error=False,
        verify_timeout=0.3,
    )
    assert run_dag(dag, logical_date=NIGHTS[0]).state == "success"
    assert sent == []

    def set_title_coo() -> None:
        # Another writer: the List ends up with a title other than the one the sync sends.
        connected.update_people(
            TABLE,
            [
                {
                    "accountDomain": "acme.com",
                    "people": [{"match": {"email": "bob@acme.com"}, "patch": {"title": "COO"}}],
                }
            ],
        )

    answer = acknowledge_patches(set_title_coo if finding == "drift" else None)
    monkeypatch.setattr(
        ListSyncHook,
        "_build_client",
        lambda hook, retry_policy=None: ListSyncClient(
            people_emulator.url, API_KEY, PEOPLE_USER, transport=intercepting(answer)
        ),
    )
    source.write_text(MESSY.replace("bob@acme.com,Bob,Ray,", "bob@acme.com,Bob,Ray,CFO"), encoding="utf-8")

    run = run_dag(dag, logical_date=NIGHTS[1])

    assert run.state == "success"
    [alert] = sent
    expected = {
        "drift": "drift: 1 written item(s) read back with other values, e.g. patch of acme.com "
        "email:bob@acme.com: title is 'COO', expected 'CFO'",
        "unconfirmed": "unconfirmed: 1 write(s) not shown by the List when read back, e.g. patch of "
        "acme.com email:bob@acme.com: title is still None, expected 'CFO' after 0.3 s",
    }
    assert alert["listsync"]["alerts"] == [expected[finding]]
    assert alert["listsync"]["summary"][finding] == 1
    assert "updated 1" in alert["body"]
    outcomes = alert["listsync"]["summary"]["outcomes_path"]
    assert outcomes and f"Each record that did not end as planned, and why: {outcomes}" in alert["body"]
    assert_rendered_from_listsync(sent)


def test_a_summary_an_older_listsync_returned_is_read_under_todays_names() -> None:
    assert summary_of({"read": 5, "rows_added": 5, "rows_not_added": 1}) == {
        "read": 5,
        "added": 5,
        "not_added": 1,
    }
    assert summary_of({"rows_added": 5}) is None


class Unreachable(BaseNotifier):
    """A notifier whose service is down."""

    def notify(self, context: Any) -> None:
        raise ConnectionError("smtp.example.com:25: connection refused\n  (and a second line)")


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG], ids=["info", "debug"])
def test_an_alert_that_cannot_be_sent_is_one_warning_line_naming_it_and_why(
    caplog: pytest.LogCaptureFixture, level: int
) -> None:
    with caplog.at_level(level, logger="listsync.notifications"):
        SyncNotifier(Unreachable()).notify({"exception": ValueError("the sync failed")})  # type: ignore[typeddict-unknown-key]

    [warning] = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.getMessage().startswith("ListSync alert '[ListSync] FAILED")
    assert warning.getMessage().endswith(
        "was not sent by Unreachable: smtp.example.com:25: connection refused"
    )
    # The traceback only where the log shows debug records.
    assert (warning.exc_info is not None) is (level == logging.DEBUG)
