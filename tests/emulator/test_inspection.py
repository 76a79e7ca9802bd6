"""Inspection endpoints, persistence to a state file, config loading and the live server."""

from __future__ import annotations

import json

import httpx
import pytest
import yaml
from pydantic import ValidationError

from listsync.emulator import EmulatorConfig, create_app, demo_config, load_config, serve_in_thread

PEOPLE = "/v1/lists/tbl_accounts/targetable-people"


@pytest.fixture
def filled(client, add_accounts, make_event):
    add_accounts("acme.com", "globex.com")
    client.post(PEOPLE, json={"accounts": [{"accountDomain": "acme.com", "people": [{"first_name": "Ann"}]}]})
    client.post("/v1/events", json=make_event("page_visit", reference="r1"))


@pytest.mark.usefixtures("filled")
def test_state_shows_rows_people_and_events(client):
    state = client.get("/_emulator/state").json()
    rows = state["lists"]["tbl_accounts"]["rows"]
    assert [(r["id"], r["accountDomain"], r["cells"]) for r in rows] == [
        ("row_1", "acme.com", {"domain": "acme.com"}),
        ("row_2", "globex.com", {"domain": "globex.com"}),
    ]
    assert rows[0]["people"] == [{"first_name": "Ann", "target": False}]
    (event,) = state["events"]
    assert (event["signal"], event["signal_id"], event["reference"], event["identity"]["id"]) == (
        "page_visit",
        "sig_pagevisit01",
        "r1",
        "acct_1",
    )
    assert event["id"]


@pytest.mark.usefixtures("filled")
def test_stats_count_requests_statuses_and_events(client):
    client.post("/v1/events", json={"signal": "nope", "identity": {"type": "a", "id": "1"}})
    stats = client.get("/_emulator/stats").json()
    assert stats["endpoints"]["POST /v1/events"] == {
        "requests": 2,
        "statuses": {"200": 1, "404": 1},
        "rate_limited": 0,
    }
    assert stats["endpoints"]["POST /v1/lists/{tableId}/rows"]["requests"] == 1
    assert stats["events_accepted"] == {"page_visit": 1}


@pytest.mark.usefixtures("filled")
def test_reset_empties_state_windows_and_counters(client, make_event):
    assert client.post("/_emulator/reset").json() == {"success": True}
    assert client.get("/_emulator/state").json() == {
        "lists": {table.id: {"id": table.id, "rows": []} for table in demo_config().lists},
        "events": [],
        "next_row_number": 1,
    }
    assert client.get("/_emulator/stats").json()["endpoints"] == {}
    response = client.post("/v1/events", json=make_event("page_visit"))
    assert response.headers["X-RateLimit-Remaining"] == "99"


def test_state_survives_a_restart_through_the_state_file(tmp_path, fake_clock, client_for, make_event):
    path = tmp_path / "state.json"
    config = demo_config().model_copy(update={"state_file": str(path)})
    first = client_for(config)
    first.post("/v1/lists/tbl_accounts/rows", json={"rows": [{"cells": {"domain": "acme.com"}}]})
    first.post(PEOPLE, json={"accounts": [{"accountDomain": "acme.com", "people": [{"first_name": "Ann"}]}]})
    first.post("/v1/events", json=make_event())
    assert json.loads(path.read_text())["next_row_number"] == 2

    second = client_for(config)
    people = second.get(PEOPLE).json()["data"]["people"]
    assert [(p["first_name"], p["rowId"]) for p in people] == [("Ann", "row_1")]
    assert len(second.get("/_emulator/state").json()["events"]) == 1
    # Row ids continue, and the unique-domain index was rebuilt from the file.
    added = second.post("/v1/lists/tbl_accounts/rows", json={"rows": [{"cells": {"domain": "b.com"}}]})
    assert added.json()["data"]["rows"][0]["id"] == "row_2"
    repeat = second.post("/v1/lists/tbl_accounts/rows", json={"rows": [{"cells": {"domain": "acme.com"}}]})
    assert repeat.status_code == 409


def test_demo_config_has_the_agreed_names():
    config = demo_config()
    assert (config.secret_keys, config.public_keys, config.users) == (
        ["sk_demo_listsync"],
        ["public_wk_demo_listsync"],
        ["usr_demo"],
    )
    signals = {
        s.slug: (s.id, s.type, s.active, s.schema_versions, s.required_data_keys) for s in config.signals
    }
    assert signals == {
        "page_visit": ("sig_pagevisit01", "Event", True, [], []),
        "seats_used": ("sig_seatsused01", "Metric", True, [1, 2], ["seats"]),
        "deal_stage": ("sig_dealstage01", "State", True, [1], ["stage"]),
        "legacy_score": ("sig_legacy0001", "Event", False, [], []),
    }
    # tbl_accounts for the nightly sync and the upserts; one List per plan for dags/segment_lists.py.
    lists = {table.id: (table.account_column, table.unique_domains) for table in config.lists}
    assert lists == dict.fromkeys(
        ["tbl_accounts", "tbl_accounts_enterprise", "tbl_accounts_team", "tbl_accounts_free"],
        ("domain", True),
    )
    assert config.window_seconds == 60
    assert config.faults.rules == []


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_load_config_reads_yaml_and_json(tmp_path, suffix):
    data = {
        "secret_keys": ["sk_x"],
        "window_seconds": 2,
        "signals": [{"slug": "s", "id": "sig_s", "type": "State"}],
        "lists": [{"id": "tbl_x", "columns": [{"id": "d"}], "account_column": "d"}],
        "faults": {"rules": [{"endpoint": "POST /v1/events", "kind": "drop_after", "times": 1}]},
    }
    path = tmp_path / f"config.{suffix}"
    path.write_text(json.dumps(data) if suffix == "json" else yaml.safe_dump(data))
    config = load_config(path)
    assert config.window_seconds == 2
    assert config.lists[0].columns[0].type == "text"
    assert config.faults.rules[0].kind == "drop_after"


@pytest.mark.parametrize(
    "bad",
    [
        {"signals": [{"slug": "s", "id": "i", "type": "Counter"}]},
        {"lists": [{"id": "t", "columns": [{"id": "a"}], "account_column": "b"}]},
        {"faults": {"rules": [{"endpoint": "GET /v2/x", "kind": "error"}]}},
        {"window_seconds": 0},
        {"unknown_setting": 1},
        {"signals": [{"slug": "s", "id": "a", "type": "Event"}, {"slug": "s", "id": "b", "type": "State"}]},
        {"signals": [{"slug": "s", "id": "a", "type": "Event"}, {"slug": "t", "id": "a", "type": "State"}]},
        {"lists": [{"id": "t", "columns": [{"id": "a"}]}, {"id": "t", "columns": [{"id": "b"}]}]},
        {"lists": [{"id": "t", "columns": [{"id": "a"}, {"id": "a", "type": "number"}]}]},
    ],
)
def test_invalid_configs_are_refused(bad):
    with pytest.raises(ValidationError):
        EmulatorConfig.model_validate(bad)


def test_serve_in_thread_serves_and_stops(fake_clock):
    app = create_app(demo_config(), clock=fake_clock)
    with serve_in_thread(app) as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        response = httpx.post(
            f"{base_url}/v1/events",
            json={"signal": "page_visit", "identity": {"type": "account", "id": "1"}},
            headers={"Authorization": "Bearer sk_demo_listsync"},
        )
        assert response.status_code == 200
        assert response.headers["X-RateLimit-Reset"] == "2027-01-15T08:01:00.000Z"
        assert len(app.state.emulator.state.events) == 1
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base_url}/_emulator/stats")


def test_serve_in_thread_accepts_a_config():
    with serve_in_thread(demo_config()) as base_url:
        assert httpx.get(f"{base_url}/_emulator/stats").status_code == 200


def test_people_queries_after_a_reset_see_the_new_people(client, add_accounts):
    def first_names() -> list[str]:
        return [p["first_name"] for p in client.get(PEOPLE).json()["data"]["people"]]

    # The same sequence of writes before and after the reset, with other people.
    for name in ("Old", "New"):
        add_accounts("acme.com")
        client.post(
            PEOPLE, json={"accounts": [{"accountDomain": "acme.com", "people": [{"first_name": name}]}]}
        )
        assert first_names() == [name]
        client.post("/_emulator/reset")


def test_rate_limits_not_named_keep_the_spec_values():
    assert EmulatorConfig.model_validate({"rate_limits": {"State": 2}}).rate_limits == {
        "Event": 100,
        "Metric": 1000,
        "State": 2,
    }
