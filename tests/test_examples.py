"""The example data, emulator config and connection definitions the DAGs and the demo rely on."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType

import pytest

from .support import load_script

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return load_script("examples/generate_data.py")


def test_the_same_seed_generates_the_same_rows_and_another_seed_others(gen):
    assert gen.generate(7) == gen.generate(7)
    assert gen.generate(7).contacts != gen.generate(8).contacts


def test_accounts_are_messy_the_way_crm_extracts_are(gen):
    accounts = gen.generate().accounts
    websites = [a["website"] for a in accounts if a["website"]]

    assert any(w.startswith("https://www.") for w in websites)
    assert any(w.endswith(".") and w.isupper() for w in websites)
    assert any(":443/" in w for w in websites)
    assert any(not w.isascii() for w in websites)
    assert any(w != w.strip() for w in websites)
    # Duplicated accounts (same domain, other spelling) and rows without a usable website.
    domains = [a["canonical_domain"] for a in accounts if a["canonical_domain"]]
    assert len(domains) - len(set(domains)) == 3
    assert sum(1 for a in accounts if a["canonical_domain"] is None) == len(gen.UNUSABLE_WEBSITES)
    assert all(json.loads(a["metadata"])["hq"] for a in accounts if a["metadata"])


def test_contacts_are_messy_the_way_crm_extracts_are(gen):
    contacts = gen.generate().contacts
    emails = [c["email"] for c in contacts if c["email"]]

    assert any(e != e.lower() for e in emails)
    assert any(e != e.strip() for e in emails)
    assert len({e.strip().lower() for e in emails}) < len(emails)  # duplicates by case
    assert any(c["first_name"] is None for c in contacts)
    assert any(c["phone"] and re.match(r"^\(\d{3}\) ", c["phone"]) for c in contacts)  # national format
    assert any(c["personas"] and "," in c["personas"] for c in contacts)
    assert any(c["email"] and "@@" in c["email"] for c in contacts)


def test_a_week_of_changes_separates_the_two_snapshots(gen):
    previous, current = gen.generate(snapshot="previous"), gen.generate(snapshot="current")
    previous_accounts = {a["account_id"]: a for a in previous.accounts}
    current_accounts = {a["account_id"]: a for a in current.accounts}
    previous_contacts = {c["contact_id"]: c for c in previous.contacts}
    current_contacts = {c["contact_id"]: c for c in current.contacts}

    assert set(previous_accounts) < set(current_accounts)
    new_domains = {
        current_accounts[i]["canonical_domain"] for i in set(current_accounts) - set(previous_accounts)
    }
    assert new_domains == {domain for domain, _, _ in gen.NEW_COMPANIES}
    changed = [i for i in previous_accounts if previous_accounts[i] != current_accounts[i]]
    assert 1 <= len(changed) <= 6
    left = set(previous_contacts) - set(current_contacts)
    assert len(left) == 6
    retitled = [
        i
        for i in set(previous_contacts) & set(current_contacts)
        if previous_contacts[i] != current_contacts[i]
    ]
    assert retitled
    with pytest.raises(ValueError, match="snapshot"):
        gen.generate(snapshot="tomorrow")


def test_events_cover_the_history_with_the_demo_signals_and_a_few_bad_rows(gen):
    from listsync.emulator import demo_config

    events = gen.generate().events
    signals = {s.slug: s for s in demo_config().signals}
    start = datetime.combine(gen.HISTORY_START, datetime.min.time(), tzinfo=timezone.utc)
    end = start + timedelta(days=gen.HISTORY_DAYS)

    assert all(start <= datetime.fromisoformat(e["occurred_at"]) < end for e in events)
    assert {e["signal"] for e in events} - set(signals) == {"page_view"}
    assert {s for s in signals if signals[s].active} <= {e["signal"] for e in events}
    assert sum(1 for e in events if e["object_id"] is None) == 1
    assert sum(1 for e in events if not e["payload"].startswith('{"')) == 1  # not JSON
    for event in events:
        signal = signals.get(event["signal"])
        if signal is not None and signal.required_data_keys and event["object_id"] is not None:
            assert set(signal.required_data_keys) <= set(json.loads(event["payload"]))
    assert len({e["event_id"] for e in events}) == len(events)


def interval_counts(url: str, days: list[str]) -> list[int]:
    """Rows of signal_events per day, selected as the backfill DAG's templated query does."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    counts = []
    with engine.connect() as conn:
        for day in days:
            start = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
            # str() of an aware datetime is how Airflow renders {{ data_interval_start }}.
            query = (
                f"SELECT count(*) FROM signal_events WHERE occurred_at >= '{start}' "
                f"AND occurred_at < '{start + timedelta(days=1)}'"
            )
            counts.append(conn.execute(sa.text(query)).scalar_one())
    engine.dispose()
    return counts


def expected_counts(dataset, days: list[str]) -> list[int]:
    return [sum(1 for e in dataset.events if e["occurred_at"].startswith(day)) for day in days]


def test_sqlite_warehouse_answers_the_backfill_interval_query(gen, tmp_path):
    dataset = gen.generate()
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    days = [(gen.HISTORY_START + timedelta(days=i)).isoformat() for i in range(gen.HISTORY_DAYS)]

    gen.load(dataset, url)
    gen.load(dataset, url)  # loading again replaces the tables

    assert interval_counts(url, days) == expected_counts(dataset, days)
    assert sum(interval_counts(url, days)) == len(dataset.events)


@pytest.mark.postgres
def test_postgres_warehouse_answers_the_backfill_interval_query(gen, postgres_url):
    dataset = gen.generate()
    days = [(gen.HISTORY_START + timedelta(days=i)).isoformat() for i in range(gen.HISTORY_DAYS)]

    gen.main(["--no-sqlite", "--postgres-url", postgres_url])

    assert interval_counts(postgres_url, days) == expected_counts(dataset, days)


def test_the_cli_refuses_to_write_nothing(gen):
    with pytest.raises(SystemExit):
        gen.main(["--no-sqlite"])


def test_example_emulator_config_is_the_built_in_demo_tenant():
    from listsync.emulator import demo_config
    from listsync.emulator.config import load_config

    assert load_config(REPO / "examples" / "emulator.yaml") == demo_config()


def test_connection_definitions_parse_as_airflow_connections():
    from airflow.sdk import Connection

    env = load_script("examples/demo.py").read_env_file(REPO / "examples" / "connections.env")

    assert set(env) == {"AIRFLOW_CONN_LISTSYNC_DEFAULT", "AIRFLOW_CONN_LISTSYNC_WAREHOUSE"}
    service = Connection.from_json(env["AIRFLOW_CONN_LISTSYNC_DEFAULT"], conn_id="listsync_default")
    assert (service.conn_type, service.host, service.password) == (
        "listsync",
        "http://127.0.0.1:8080",
        "sk_demo_listsync",
    )
    assert service.extra_dejson == {"user_id": "usr_demo"}
    warehouse = Connection.from_json(env["AIRFLOW_CONN_LISTSYNC_WAREHOUSE"], conn_id="listsync_warehouse")
    assert (warehouse.conn_type, warehouse.host) == ("sqlite", ".demo/warehouse.db")


def emulator_snapshot(rows: int, people_per_row: int, writes: int) -> tuple[dict, dict]:
    state = {"lists": {"tbl_accounts": {"rows": [{"people": [{}] * people_per_row} for _ in range(rows)]}}}
    stats = {"endpoints": {"POST /v1/lists/{tableId}/rows": {"requests": writes}}}
    return state, stats


def run_summary(rows_added: int, people_added: int, requests: int) -> dict:
    return {
        "rows": {"added": rows_added, "deleted": 0, "requests": {"total": requests}},
        "people": {"added": people_added, "deleted": 0, "requests": {"total": 0}},
    }


def test_demo_report_is_checked_against_the_emulator():
    demo = load_script("examples/demo.py")
    before = emulator_snapshot(rows=0, people_per_row=0, writes=0)
    after = emulator_snapshot(rows=3, people_per_row=2, writes=1)

    assert "holds 3 rows and 6 people" in demo.check_against_emulator(run_summary(3, 6, 1), before, after)[0]
    with pytest.raises(demo.DemoError, match="holds 3 rows, the summary implies 4"):
        demo.check_against_emulator(run_summary(4, 6, 1), before, after)
    with pytest.raises(demo.DemoError, match="counted 1 write requests, the summaries 2"):
        demo.check_against_emulator(run_summary(3, 6, 2), before, after)


def test_demo_lists_rejects_by_reason_and_where_the_reports_are():
    demo = load_script("examples/demo.py")
    summary = run_summary(3, 6, 1)
    for part, name in ((summary["rows"], "accounts"), (summary["people"], "people")):
        part.update(
            rejected=2,
            reject_reasons={
                "a rule broken once": 1,
                "email (column 'email'): email … must contain exactly one @": 2,
            },
            plan_path=str(demo.OUTPUT_DIR / f"{name}.plan.jsonl"),
            report_path=str(demo.OUTPUT_DIR / f"{name}.report.html"),
            read=5,
            passed=3,
            duplicates=0,
            updated=0,
            unchanged=0,
            failed=0,
            cells_updated=0,
        )

    lines = demo.describe_run(summary, with_reasons=True)

    # The most frequent reason first, though the summary file sorts its keys.
    at = lines.index("     2 x email (column 'email'): email … must contain exactly one @")
    assert lines[at + 1] == "     1 x a rule broken once"
    assert lines[-2:] == [
        "  Plan, rejects and summary files: .demo/output/",
        "  Reports to open in a browser, in that folder: accounts.report.html, people.report.html",
    ]
