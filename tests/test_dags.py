"""The example DAGs: every file in dags/ imports cleanly, and the nightly sync runs end to end.

The end-to-end test runs ``crm_to_list_nightly`` with ``dag.test()`` on a SQLite metadata DB,
against a live emulator and the example warehouse, twice: the first run fills the List from the
messy extract, the second, on the same data, must send no write at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from .support import LiveEmulator, load_script, read_jsonl, serve_emulator

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "dags"
TABLE_ID = "tbl_accounts"
WRITE_ENDPOINTS = (
    "POST /v1/lists/{tableId}/targetable-people",
    "PATCH /v1/lists/{tableId}/targetable-people",
    "DELETE /v1/lists/{tableId}/targetable-people",
    "POST /v1/lists/{tableId}/rows",
    "PATCH /v1/lists/{tableId}/cells",
    "DELETE /v1/lists/{tableId}/rows",
)


def test_every_dag_file_imports_without_errors():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {
        "approve_large_delete",
        "crm_to_list_nightly",
        "list_changed_consumer",
        "segment_lists",
        "sharded_people_sync",
        "signal_backfill",
        "upsert_rows",
    }
    for path in DAGS.glob("*.py"):
        assert any(dag.fileloc == str(path) for dag in bag.dags.values()), f"{path.name} defines no DAG"


def test_every_task_that_writes_a_list_runs_one_at_a_time_as_airflow_offers():
    from airflow.dag_processing.dagbag import DagBag

    from listsync.operators.base import ListSyncPlanOperator

    def writes_a_list(task: Any) -> bool:
        # A mapped task is a MappedOperator: its class and arguments are kept aside.
        kind = getattr(task, "operator_class", type(task))
        arguments = getattr(task, "partial_kwargs", vars(task))
        dry = arguments.get("is_dry_run", arguments.get("dry_run"))
        return issubclass(kind, ListSyncPlanOperator) and dry is not True

    bag = DagBag(dag_folder=str(DAGS))
    writers = [(dag, task) for dag in bag.dags.values() for task in dag.tasks if writes_a_list(task)]

    assert len(writers) >= 6
    for dag, task in writers:
        assert dag.max_active_runs == 1 or task.max_active_tis_per_dag == 1, f"{dag.dag_id}.{task.task_id}"
    # The approval's apply writes the nightly's List from another DAG: it is held to one at a time
    # within its DAG, and to the List's lease across both.
    apply = bag.dags["approve_large_delete"].get_task("apply")
    assert (apply.max_active_tis_per_dag, bag.dags["approve_large_delete"].max_active_runs) == (1, 1)


def test_nightly_dag_shape():
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS / "crm_to_list_nightly.py")).dags["crm_to_list_nightly"]
    rows, people, report = (
        dag.get_task(t) for t in ("upsert_account_rows", "sync_targetable_people", "report")
    )

    assert (dag.timetable.expression, str(dag.timetable.timezone)) == ("0 2 * * *", "UTC")
    assert people.upstream_task_ids == {"upsert_account_rows"}
    assert report.upstream_task_ids == {"upsert_account_rows", "sync_targetable_people"}
    assert (people.mode, people.delete_scope) == ("mirror", "accounts_in_source")
    assert {rows.sql_conn_id, people.sql_conn_id} == {"listsync_warehouse"}
    assert {rows.listsync_conn_id, people.listsync_conn_id} == {"listsync_default"}
    assert (
        [a.uri for a in rows.inlets]
        == [a.uri for a in people.inlets]
        == ["listsync://api.example.com/tbl_accounts"]
    )
    # The List's event goes through an alias, emitted only by a task that wrote.
    assert (
        [a.name for a in rows.outlets]
        == [a.name for a in people.outlets]
        == ["listsync_tbl_accounts_changed"]
    )
    assert rows.history_table == people.history_table == "listsync_runs"


def test_the_nightly_dag_is_due_four_hours_after_its_logical_date(monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import timedelta

    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.deadline import DeadlineReference

    monkeypatch.setenv("LISTSYNC_NIGHTLY_DEADLINE", "4")
    dag = DagBag(dag_folder=str(DAGS / "crm_to_list_nightly.py")).dags["crm_to_list_nightly"]

    (deadline,) = dag.deadline if isinstance(dag.deadline, list) else [dag.deadline]
    assert deadline.reference == DeadlineReference.DAGRUN_LOGICAL_DATE
    assert deadline.interval == timedelta(hours=4)


def backfill_intervals(dag: Any) -> list[Any]:
    """The data intervals the scheduler creates for ``dag`` with catchup, start to end date."""
    from airflow.serialization.decoders import decode_timetable
    from airflow.serialization.encoders import encode_timetable
    from airflow.timetables.base import TimeRestriction

    timetable = decode_timetable(encode_timetable(dag.timetable))
    restriction = TimeRestriction(earliest=dag.start_date, latest=dag.end_date, catchup=dag.catchup)
    intervals, last = [], None
    while (
        info := timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
    ) is not None:
        intervals.append(info.data_interval)
        last = info.data_interval
    return intervals


def render(dag: Any, template: str, **dag_run: Any) -> str:
    """``template`` rendered as a task of ``dag`` renders it, for a run with the fields ``dag_run``
    and no Airflow Variables set."""
    fields = {"logical_date": None, "data_interval_start": None, "data_interval_end": None, **dag_run}
    env = dag.get_template_env()
    return env.from_string(template).render(dag_run=SimpleNamespace(**fields), var={"value": {}})


def test_backfill_runs_one_day_of_the_example_history_each_and_selects_that_days_events(tmp_path):
    import sqlalchemy as sa
    from airflow.dag_processing.dagbag import DagBag

    generate_data = load_script("examples/generate_data.py")
    dataset = generate_data.generate()
    generate_data.load(dataset, f"sqlite:///{tmp_path / 'warehouse.db'}")
    dag = DagBag(dag_folder=str(DAGS / "signal_backfill.py")).dags["signal_backfill"]
    task = dag.get_task("ingest_signal_events")

    intervals = backfill_intervals(dag)

    assert task.deferrable is True
    days = [
        (generate_data.HISTORY_START + timedelta(days=i)).isoformat()
        for i in range(generate_data.HISTORY_DAYS)
    ]
    assert [interval.start.date().isoformat() for interval in intervals] == days
    assert all(interval.end - interval.start == timedelta(days=1) for interval in intervals)
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'warehouse.db'}")
    with engine.connect() as conn:
        for interval, day in zip(intervals, days, strict=True):
            sql = render(
                dag,
                task.sql,
                logical_date=interval.start,
                data_interval_start=interval.start,
                data_interval_end=interval.end,
                run_after=interval.end,
            )
            ids = [row.event_id for row in conn.execute(sa.text(sql))]
            assert sorted(ids) == sorted(
                e["event_id"] for e in dataset.events if e["occurred_at"].startswith(day)
            )
    engine.dispose()


def test_runs_without_a_logical_date_render_from_when_they_were_triggered():
    # Airflow 3 triggers a manual run without a logical date (nor a data interval) by default.
    backfill = repo_dag("signal_backfill")
    ingest = backfill.get_task("ingest_signal_events")
    triggered = datetime(2026, 11, 3, 22, 30, tzinfo=timezone.utc)

    sql = render(backfill, ingest.sql, run_after=triggered)

    # The last whole UTC day before the run: 2026-11-02.
    assert "occurred_at >= '2026-11-02 00:00:00+00:00' AND occurred_at < '2026-11-03 00:00:00+00:00'" in sql
    assert render(backfill, ingest.rejects_path, run_after=triggered).endswith(
        "/signal_backfill/20261102/events.rejects.jsonl"
    )
    nightly = repo_dag("crm_to_list_nightly")
    plan_path = nightly.get_task("upsert_account_rows").plan_path
    assert render(nightly, plan_path, run_after=triggered).endswith(
        "/crm_to_list_nightly/20261103T223000/accounts.plan.jsonl"
    )
    scheduled = datetime(2026, 11, 20, 2, tzinfo=timezone.utc)
    assert render(nightly, plan_path, logical_date=scheduled, run_after=scheduled).endswith(
        "/crm_to_list_nightly/20261120T020000/accounts.plan.jsonl"
    )


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The example warehouse in SQLite, and the dataset it holds."""
    generate_data = load_script("examples/generate_data.py")
    path = tmp_path_factory.mktemp("warehouse") / "warehouse.db"
    dataset = generate_data.generate()
    generate_data.load(dataset, f"sqlite:///{path}")
    return path, dataset


@pytest.fixture(scope="module")
def emulator_url() -> Iterator[str]:
    """The demo tenant on a service that shows writes late and keeps values in its own forms
    (the ``hosted`` profile, its lag shortened), which the example DAGs converge on as they are;
    on the wall clock, as the tasks' clients, for every test of the module."""
    with serve_emulator(clock=None, profile="hosted", dialect_overrides={"lag_seconds": 0.5}) as emulator:
        yield emulator.url


@pytest.fixture(scope="module")
def connections(
    warehouse: tuple[Path, Any],
    emulator_url: str,
    listsync_connection: Callable[..., str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Path]:
    """The DAG's connections and output folder, as the environment variables a deployment uses."""
    output = tmp_path_factory.mktemp("listsync_output")
    env = {
        "AIRFLOW_CONN_LISTSYNC_DEFAULT": listsync_connection(emulator_url, "sk_demo_listsync", "usr_demo"),
        "AIRFLOW_CONN_LISTSYNC_WAREHOUSE": json.dumps({"conn_type": "sqlite", "host": str(warehouse[0])}),
        "AIRFLOW_VAR_LISTSYNC_OUTPUT_DIR": str(output),
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        yield output


def repo_dag(dag_id: str) -> Any:
    """The DAG ``dag_id`` as parsed from its file in dags/."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS / f"{dag_id}.py")).dags[dag_id]


def list_updates(run_id: str) -> set[str]:
    """Tasks of the run that recorded an update of the List's Asset."""
    import sqlalchemy as sa
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = (
            sa.select(AssetEvent.source_task_id)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(
                AssetModel.uri == "listsync://api.example.com/tbl_accounts",
                AssetEvent.source_run_id == run_id,
            )
        )
        return {task_id for task_id in session.scalars(query) if task_id}


def emulator_json(url: str, path: str) -> Any:
    return httpx.get(f"{url}/_emulator/{path}").json()


def assert_reports(run_dir: Path, summary: dict[str, Any]) -> None:
    """Each sync of the run left its report in ``run_dir``, its counts those of its summary."""
    for name, part in (("accounts", summary["rows"]), ("people", summary["people"])):
        assert part["report_path"] == str(run_dir / f"{name}.report.html")
        html = (run_dir / f"{name}.report.html").read_text(encoding="utf-8")
        shown = dict(re.findall(r"<tr><td><code>(\w+)</code></td><td class=\"n\">([\d,]+)</td>", html))
        assert {key: int(value.replace(",", "")) for key, value in shown.items()} == {
            key: part[key] for key in shown
        }
        assert {"read", "added", "unchanged", "failed"} <= set(shown)


def write_requests(stats: dict[str, Any]) -> int:
    return sum(stats["endpoints"].get(endpoint, {}).get("requests", 0) for endpoint in WRITE_ENDPOINTS)


@pytest.mark.slow
def test_nightly_dag_fills_the_list_then_later_runs_write_nothing_however_started(
    connections, warehouse, emulator_url, run_dag
):
    from listsync.extract.contact_rules import normalize_domain

    _, dataset = warehouse
    first_night = datetime(2026, 11, 20, 2, tzinfo=timezone.utc)
    dag = repo_dag("crm_to_list_nightly")

    first = run_dag(dag, logical_date=first_night)

    assert first.state == "success"
    summary_file = connections / "crm_to_list_nightly" / "20261120T020000" / "summary.json"
    summary = json.loads(summary_file.read_text())
    rows = emulator_json(emulator_url, "state")["lists"][TABLE_ID]["rows"]
    by_domain = {row["cells"]["domain"]: row for row in rows}
    # One row per account however its website was written; unusable websites rejected.
    expected_domains = {
        normalize_domain(a["canonical_domain"]) for a in dataset.accounts if a["canonical_domain"]
    }
    assert set(by_domain) == expected_domains
    assert len(rows) == len(expected_domains) == summary["rows"]["added"]
    assert summary["rows"]["read"] == len(dataset.accounts)
    account_rejects = read_jsonl(summary["rows"]["rejects_path"])
    assert len(account_rejects) == summary["rows"]["rejected"]
    unusable = [r for r in account_rejects if r["reasons"][0].startswith("domain (column 'website')")]
    assert sorted(str(r["original"]["website"]) for r in unusable) == sorted(
        str(a["website"]) for a in dataset.accounts if not a["canonical_domain"]
    )
    acme = next(a for a in dataset.accounts if a["canonical_domain"] == "acme.com")
    assert by_domain["acme.com"]["cells"]["metadata"] == json.loads(acme["metadata"])
    assert by_domain["acme.com"]["cells"]["name"] == acme["company_name"].strip()
    assert "xn--bcher-haus-9db.de" in by_domain
    # People: every valid contact once, e-mails lower-cased, nobody twice in an account.
    people = [person for row in rows for person in row["people"]]
    assert len(people) == summary["people"]["added"] > 0
    emails = [p["email"] for p in people if p.get("email")]
    assert all(email == email.strip().lower() for email in emails)
    for row in rows:
        row_emails = [p["email"] for p in row["people"] if p.get("email")]
        assert len(row_emails) == len(set(row_emails)), row["cells"]["domain"]
    assert summary["people"]["rejected"] > 0
    rejects = read_jsonl(summary["people"]["rejects_path"])
    assert len(rejects) == summary["people"]["rejected"]
    assert all(reject["reasons"] for reject in rejects)
    writes_after_first = write_requests(emulator_json(emulator_url, "stats"))
    assert writes_after_first == summary["rows"]["requests"]["total"] + summary["people"]["requests"]["total"]

    assert list_updates(first.run_id) == {"upsert_account_rows", "sync_targetable_people"}
    # The service showed every write late and kept some values its own way: no drift, no failure.
    assert summary["people"]["drift"] == summary["people"]["unconfirmed"] == summary["rows"]["drift"] == 0
    # By default, each sync keeps its state in the List asset's state store.
    assert summary["people"]["state"].startswith(
        "the asset state store of listsync_tbl_accounts, key people-"
    )
    assert summary["rows"]["state"].startswith("the asset state store of listsync_tbl_accounts, key rows-")
    assert_reports(summary_file.parent, summary)

    second = run_dag(dag, logical_date=datetime(2026, 11, 21, 2, tzinfo=timezone.utc))

    assert second.state == "success"
    assert write_requests(emulator_json(emulator_url, "stats")) == writes_after_first
    again = json.loads((connections / "crm_to_list_nightly" / "20261121T020000" / "summary.json").read_text())
    assert again["rows"]["requests"]["total"] == again["people"]["requests"]["total"] == 0
    assert again["people"]["unchanged"] == len(people)
    assert_reports(connections / "crm_to_list_nightly" / "20261121T020000", again)

    # Triggered by hand without a logical date (`airflow dags trigger`): named after run_after.
    manual = run_dag(dag, logical_date=None, run_after=datetime(2026, 11, 21, 9, 15, 30, tzinfo=timezone.utc))

    assert manual.state == "success"
    assert manual.logical_date is None
    assert write_requests(emulator_json(emulator_url, "stats")) == writes_after_first
    by_hand = json.loads(
        (connections / "crm_to_list_nightly" / "20261121T091530" / "summary.json").read_text()
    )
    assert by_hand["people"]["unchanged"] == len(people)
    assert_reports(connections / "crm_to_list_nightly" / "20261121T091530", by_hand)
    # One report of each sync a run, in the run's folder.
    assert sorted(path.relative_to(connections).as_posix() for path in connections.rglob("*.html")) == [
        f"crm_to_list_nightly/{night}/{name}.report.html"
        for night in ("20261120T020000", "20261121T020000", "20261121T091530")
        for name in ("accounts", "people")
    ]


@pytest.mark.slow
def test_backfill_run_ingests_its_day_once_and_reports_the_unknown_slug(
    connections, warehouse, emulator_url, run_dag
):
    _, dataset = warehouse
    day = "2026-11-03"  # the day with an event of the unknown slug page_view
    accepted_before = len(emulator_json(emulator_url, "state")["events"])

    # A manual run covers the last whole day before its logical date.
    run_date = datetime.fromisoformat(day).replace(tzinfo=timezone.utc) + timedelta(days=1)
    run = run_dag(repo_dag("signal_backfill"), logical_date=run_date)

    assert run.state == "success"
    ingested = emulator_json(emulator_url, "state")["events"][accepted_before:]
    of_the_day = [e for e in dataset.events if e["occurred_at"].startswith(day)]
    known = {"page_visit", "seats_used", "deal_stage"}
    expected = {e["event_id"] for e in of_the_day if e["signal"] in known and e["object_id"]}
    references = [e["reference"] for e in ingested]
    assert sorted(references) == sorted(expected)
    summary = run.get_task_instance("ingest_signal_events").xcom_pull(task_ids="ingest_signal_events")
    assert summary["acknowledged"] == len(expected)
    assert summary["signals"]["page_view"]["rejected_reasons"] == {"Signals not found: page_view": 1}


@pytest.mark.slow
def test_backfill_run_without_a_logical_date_ingests_the_day_before_it_was_triggered(
    connections, warehouse, emulator_url, run_dag
):
    _, dataset = warehouse
    accepted_before = len(emulator_json(emulator_url, "state")["events"])

    run = run_dag(
        repo_dag("signal_backfill"),
        logical_date=None,
        run_after=datetime(2026, 11, 6, 7, tzinfo=timezone.utc),
    )

    assert run.state == "success"
    assert run.logical_date is None and run.data_interval_start is None
    ingested = emulator_json(emulator_url, "state")["events"][accepted_before:]
    known = {"page_visit", "seats_used", "deal_stage"}
    expected = {
        e["event_id"]
        for e in dataset.events
        if e["occurred_at"].startswith("2026-11-05") and e["signal"] in known and e["object_id"]
    }
    assert sorted(e["reference"] for e in ingested) == sorted(expected)
    summary = run.get_task_instance("ingest_signal_events").xcom_pull(task_ids="ingest_signal_events")
    assert summary["acknowledged"] == len(expected)
    assert "/signal_backfill/20261105/" in summary["rejects_path"]


@pytest.mark.slow
def test_upsert_rows_dag_writes_only_the_cells_of_its_columns_that_changed(
    connections, warehouse, emulator_url, run_dag
):
    import sqlalchemy as sa

    dag = repo_dag("upsert_rows")
    # Triggered without a logical date, as Airflow 3 triggers a manual run by default.
    assert run_dag(dag, logical_date=None).state == "success"
    names_before = {row["cells"]["domain"]: row["cells"].get("name") for row in list_rows(emulator_url)}
    engine = sa.create_engine(f"sqlite:///{warehouse[0]}")
    with engine.begin() as conn:
        # The CRM rescores one account and renames another; the name is not a column of this DAG.
        conn.execute(sa.text("UPDATE crm_accounts SET health_score = 12.5 WHERE website LIKE '%acme.com%'"))
        conn.execute(
            sa.text("UPDATE crm_accounts SET company_name = 'Renamed' WHERE website LIKE '%hooli.com%'")
        )
    engine.dispose()
    requests_before = emulator_json(emulator_url, "stats")["endpoints"]

    run = run_dag(dag, logical_date=datetime(2026, 11, 21, 10, tzinfo=timezone.utc))

    assert run.state == "success"
    requests_after = emulator_json(emulator_url, "stats")["endpoints"]
    sent = {
        endpoint: requests_after[endpoint]["requests"] - requests_before.get(endpoint, {}).get("requests", 0)
        for endpoint in WRITE_ENDPOINTS
        if endpoint in requests_after
    }
    assert {endpoint: n for endpoint, n in sent.items() if n} == {"PATCH /v1/lists/{tableId}/cells": 1}
    rows = {row["cells"]["domain"]: row["cells"] for row in list_rows(emulator_url)}
    assert rows["acme.com"]["health_score"] == 12.5
    assert {domain: cells.get("name") for domain, cells in rows.items()} == names_before


def list_rows(emulator_url: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = emulator_json(emulator_url, "state")["lists"][TABLE_ID]["rows"]
    return rows


# The segment_lists DAG's plans and their Lists, in map index order.
SEGMENT_LISTS = {
    "enterprise": "tbl_accounts_enterprise",
    "team": "tbl_accounts_team",
    "free": "tbl_accounts_free",
}


@pytest.fixture
def segment_emulator_url(
    live_emulator: Callable[..., LiveEmulator], connect_listsync: Callable[..., None]
) -> str:
    """A live emulator of the demo tenant, which holds the Lists of the segment_lists DAG, on the
    wall clock; listsync_default points at it for the test."""
    url = live_emulator(clock=None).url
    connect_listsync(url, "sk_demo_listsync", "usr_demo")
    return url


@pytest.mark.slow
def test_segment_lists_dag_fills_each_list_from_a_map_index_named_after_it(
    connections, warehouse, segment_emulator_url, run_dag
):
    from listsync.extract.contact_rules import normalize_domain

    _, dataset = warehouse

    run = run_dag(repo_dag("segment_lists"), logical_date=datetime(2026, 11, 21, 3, tzinfo=timezone.utc))

    assert run.state == "success"
    mapped = sorted(
        (ti for ti in run.get_task_instances() if ti.task_id == "upsert_segment_rows"),
        key=lambda ti: ti.map_index,
    )
    assert [ti.rendered_map_index for ti in mapped] == list(SEGMENT_LISTS.values())
    lists = emulator_json(segment_emulator_url, "state")["lists"]
    files = []
    for ti, (plan, table_id) in zip(mapped, SEGMENT_LISTS.items(), strict=True):
        summary = ti.xcom_pull(task_ids="upsert_segment_rows", map_indexes=ti.map_index)
        of_the_plan = [a for a in dataset.accounts if a["plan"] == plan]
        domains = {normalize_domain(a["canonical_domain"]) for a in of_the_plan if a["canonical_domain"]}
        assert {row["cells"]["domain"] for row in lists[table_id]["rows"]} == domains
        assert (summary["read"], summary["added"]) == (len(of_the_plan), len(domains))
        plan_file = Path(summary["plan_path"])
        assert plan_file.name == f"{table_id}.plan.jsonl"
        assert len(plan_file.read_text().splitlines()) == len(domains)
        files += [summary["plan_path"], summary["rejects_path"]]
    # Every map index wrote its own plan and rejects files, in the run's folder.
    assert len(set(files)) == len(files) == 2 * len(SEGMENT_LISTS)
    assert {Path(file).parent for file in files} == {connections / "segment_lists" / "20261121T030000"}


def test_the_sharded_dag_splits_once_then_syncs_each_shard_from_its_part():
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS / "sharded_people_sync.py")).dags["sharded_people_sync"]
    split, people, report = (dag.get_task(t) for t in ("split_people", "sync_targetable_people", "report"))

    assert split.upstream_task_ids == {"upsert_account_rows"}
    assert people.upstream_task_ids == {"split_people"}
    assert report.upstream_task_ids == {"split_people", "sync_targetable_people"}
    # The shards read the split's parts, not the extract; one at a time, each retried alone.
    assert people.partial_kwargs["parts_path"] == split.parts_path
    assert "sql" not in people.partial_kwargs and "source" not in people.partial_kwargs
    assert people.max_active_tis_per_dagrun == 1
    assert people.partial_kwargs.get("retries", dag.default_args["retries"]) > 0
    assert split.shards == len(people.expand_input.value["shard"])


@pytest.mark.slow
def test_sharded_people_sync_dag_mirrors_the_list_in_four_shards_that_add_up_to_the_nightly_sync(
    connections, warehouse, segment_emulator_url, run_dag
):
    sharded = repo_dag("sharded_people_sync")
    nightly = repo_dag("crm_to_list_nightly")
    split = sharded.get_task("split_people")
    # The same extract and column map as the nightly sync's people.
    assert split.sql == nightly.get_task("sync_targetable_people").sql
    assert split.column_map == nightly.get_task("sync_targetable_people").column_map
    assert (
        sharded.get_task("sync_targetable_people").partial_kwargs["column_map"]
        == nightly.get_task("sync_targetable_people").column_map
    )

    run = run_dag(sharded, logical_date=datetime(2026, 11, 22, 2, tzinfo=timezone.utc))

    assert run.state == "success"
    mapped = sorted(
        (ti for ti in run.get_task_instances() if ti.task_id == "sync_targetable_people"),
        key=lambda ti: ti.map_index,
    )
    assert [ti.rendered_map_index for ti in mapped] == [f"shard {index}/4" for index in range(4)]
    summaries = [ti.xcom_pull(task_ids="sync_targetable_people", map_indexes=ti.map_index) for ti in mapped]
    folder = connections / "sharded_people_sync" / "20261122T020000"
    assert [Path(summary["plan_path"]) for summary in summaries] == [
        folder / f"people.shard-{index}-of-4.plan.jsonl" for index in range(4)
    ]
    combined = next(ti for ti in run.get_task_instances() if ti.task_id == "report").xcom_pull(
        task_ids="report"
    )
    rows = emulator_json(segment_emulator_url, "state")["lists"][TABLE_ID]["rows"]
    listed = sum(len(row["people"]) for row in rows)
    assert combined["shards"] == [f"{index}/4" for index in range(4)]
    assert combined["added"] == listed > 0
    assert combined["added"] == sum(summary["added"] for summary in summaries)
    assert all(summary["added"] > 0 for summary in summaries)
    # The split read the extract once: every row was passed to one shard, rejected or collapsed.
    made = next(ti for ti in run.get_task_instances() if ti.task_id == "split_people").xcom_pull(
        task_ids="split_people"
    )
    assert made["passed"] == sum(summary["passed"] for summary in summaries)
    assert combined["passed"] + combined["rejected"] + combined["duplicates"] == made["read"]
    assert (combined["read"], combined["other_shards"]) == (made["read"], 0)
    assert made["parts_path"] == str(folder / "parts")

    # The unsharded nightly sync, run now on the same data, finds nothing left to write.
    nightly_run = run_dag(nightly, logical_date=datetime(2026, 11, 23, 2, tzinfo=timezone.utc))

    assert nightly_run.state == "success"
    summary = json.loads(
        (connections / "crm_to_list_nightly" / "20261123T020000" / "summary.json").read_text()
    )
    assert summary["people"]["requests"]["total"] == 0
    assert summary["people"]["unchanged"] == listed
    assert summary["people"]["rejected"] == combined["rejected"]


def test_the_approval_dag_says_what_it_needs_on_an_airflow_without_approvals(monkeypatch: pytest.MonkeyPatch):
    import sys

    from airflow.dag_processing.dagbag import DagBag

    # What an Airflow before 3.1 gives: no human-in-the-loop operators to import.
    monkeypatch.setitem(sys.modules, "airflow.providers.standard.operators.hitl", None)
    bag = DagBag(dag_folder=str(DAGS / "approve_large_delete.py"))

    assert bag.import_errors == {}
    (task,) = bag.dags["approve_large_delete"].tasks
    assert task.task_id == "needs_airflow_3_1"
    with pytest.raises(RuntimeError, match=r"needs Airflow 3\.1 or later"):
        task.python_callable()


def test_the_approval_dag_reviews_only_deletes_over_the_fraction() -> None:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS / "approve_large_delete.py")).dags["approve_large_delete"]
    decide = dag.get_task("decide").python_callable
    summary = {"planned": {"delete": 15, "add": 0, "patch": 0}, "list_people": 100}

    assert decide(summary, params={"max_delete_fraction": 0.1}) == "describe"
    assert decide(summary, params={"max_delete_fraction": 0.2}) == "apply"
    assert dag.get_task("apply").approved_plan == dag.get_task("plan").plan_path
    assert dag.get_task("approve").downstream_task_ids == {"apply"}


def test_the_approval_body_gives_the_gist_of_the_dry_runs_report(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS / "approve_large_delete.py")).dags["approve_large_delete"]
    plan = tmp_path / "people.plan.jsonl"
    plan.write_text(
        json.dumps({"action": "delete", "identity": "email:a@acme.com", "account_domain": "acme.com"}) + "\n"
    )
    reasons = {"email (column 'email'): email … must contain exactly one @": 3}
    summary = {
        "planned": {"delete": 1, "add": 0, "patch": 0},
        "list_people": 4,
        "plan_path": str(plan),
        "report_path": str(plan.with_suffix(".html")),
        "rejected": 3,
        "reject_reasons": reasons,
    }

    body = dag.get_task("describe").python_callable(summary)

    assert "- email:a@acme.com on acme.com" in body
    assert "3 rows of the CRM were rejected, and why:\n- 3 x email (column 'email'): email … must" in body
    assert f"to open in a browser: `{plan.with_suffix('.html')}`" in body
    assert dag.get_task("approve").body == "{{ ti.xcom_pull(task_ids='describe') }}"


def test_the_approval_tells_the_reviewers_of_the_params_as_it_starts_to_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    import airflow.providers.standard.operators.hitl as hitl
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import BaseNotifier
    from airflow.sdk.exceptions import TaskAwaitingInput

    class Recording(BaseNotifier):
        template_fields = ("subject", "body")

        def __init__(self) -> None:
            super().__init__()
            self.subject, self.body, self.sent = "{{ listsync.subject }}", "{{ listsync.message }}", []

        def notify(self, context: Any) -> None:
            self.sent.append((self.subject, self.body))

    dag = DagBag(dag_folder=str(DAGS / "approve_large_delete.py")).dags["approve_large_delete"]
    approve = dag.get_task("approve")
    [alerts] = approve.notifiers
    alerts.notifier = recording = Recording()
    requests: list[dict[str, Any]] = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **request: requests.append(request))
    approve.body = "Delete 30 of 100 people?"  # what describe would have said, rendered
    ti = SimpleNamespace(
        id="ti-1",
        dag_id=dag.dag_id,
        task_id="approve",
        map_index=-1,
        run_id="manual__1",
        try_number=1,
        state="running",
    )
    context = {
        "task_instance": ti,
        "ti": ti,
        "task": approve,
        "dag": dag,
        "params": {"reviewers": ["ann", "bo"]},
    }

    # The task asks, tells, then waits for the answer (Airflow 3.3 parks it awaiting input).
    with pytest.raises(TaskAwaitingInput):
        approve.execute(context)

    assert requests[0]["assigned_users"] == [{"id": "ann", "name": "ann"}, {"id": "bo", "name": "bo"}]
    [(subject, body)] = recording.sent
    assert subject == "[ListSync] approval waiting: approve_large_delete.approve"
    assert "waiting for approval: Apply a large delete to List tbl_accounts? (asked: ann, bo)" in body
    assert "task approve, run manual__1, try 1: waiting for a person's answer" in body
    assert body.endswith("Delete 30 of 100 people?")
