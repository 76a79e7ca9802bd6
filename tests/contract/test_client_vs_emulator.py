"""Contract: every ``ListSyncClient`` endpoint method against the live emulator.

Each test states what the client must make of the emulator's answer (docs/assumptions.md), and
where it matters, checks the emulator's state for what the request did.
"""

from __future__ import annotations

import pytest

from listsync.client import (
    AccountsNotFoundError,
    AuthenticationError,
    ConflictError,
    ListNotFoundError,
    OutcomeUnknownError,
    RateLimitedError,
    RowsNotFoundError,
    SignalsNotFoundError,
)
from listsync.emulator import FaultRule
from listsync.signals.sender import send_events

from ..support import LiveEmulator

TABLE = "tbl_accounts"
START = 1_800_000_000.0  # the fake clock's start: a window boundary


def event(signal="page_visit", **fields):
    body = {
        "signal": signal,
        "identity": {"type": "account", "id": "acme.com"},
        "data": {"seats": 1, "stage": "won"},
    }
    return {**body, **fields}


# ---- POST /v1/events ---------------------------------------------------------------------------


def test_ingest_event(client, emulator):
    ack = client.ingest_event(event("seats_used", reference="r1", version=1))
    assert (ack.signal_id, ack.schema_version, ack.status, ack.reference) == (
        "sig_seatsused01",
        1,
        "pending",
        "r1",
    )
    (stored,) = emulator.state.events
    assert (stored["id"], stored["reference"]) == (ack.id, "r1")


def test_a_timestamp_the_client_accepts_is_one_the_emulator_accepts(client, emulator):
    # RFC 3339 allows a lower-case "z"; the client takes it, so it must send a form both read.
    ack = client.ingest_event(event(reference="r1", timestamp="2026-11-21T06:00:00z"))
    assert ack.reference == "r1"
    assert emulator.state.events[0]["timestamp"] == "2026-11-21T06:00:00Z"


def test_ingest_event_unknown_or_inactive_signal(client):
    with pytest.raises(SignalsNotFoundError) as raised:
        client.ingest_event(event("legacy_score"))
    assert raised.value.slugs == ["legacy_score"]


def test_keys_refused(emulator):
    with pytest.raises(AuthenticationError) as invalid:
        emulator.client(api_key="sk_wrong").ingest_event(event())
    assert invalid.value.status == 401
    public = emulator.client(api_key="public_wk_demo_listsync")
    assert public.ingest_event(event()).status == "pending"
    with pytest.raises(AuthenticationError) as refused:
        public.list_lists()
    assert refused.value.status == 403


# ---- POST /v1/events/batch ---------------------------------------------------------------------


def test_ingest_batch_reads_acks_in_order_and_rate_limit_headers(client):
    result = client.ingest_batch([event("seats_used", reference="a"), event("deal_stage", reference="b")])
    assert [(a.signal_id, a.reference) for a in result.acks] == [
        ("sig_seatsused01", "a"),
        ("sig_dealstage01", "b"),
    ]
    assert result.rate_limited == []
    assert (result.rate_limit_limit, result.rate_limit_remaining, result.rate_limit_reset_at) == (
        1000,
        29,
        START + 60,
    )


def test_ingest_batch_partial_limiting(client, emulator):
    client.ingest_batch([event("deal_stage")] * 28)
    result = client.ingest_batch([event("deal_stage", reference=f"s{i}") for i in range(5)])
    assert [a.reference for a in result.acks] == ["s0", "s1"]
    assert [(e.signal_id, e.reference) for e in result.rate_limited] == [
        ("sig_dealstage01", "s2"),
        ("sig_dealstage01", "s3"),
        ("sig_dealstage01", "s4"),
    ]
    assert len(emulator.state.events) == 30


def test_ingest_batch_full_limiting_raises_with_the_reset(client, fake_clock):
    client.ingest_batch([event("deal_stage")] * 30)
    fake_clock.sleep(20)
    with pytest.raises(RateLimitedError) as raised:
        client.ingest_batch([event("deal_stage")], retry_rate_limited=False)
    assert (raised.value.reset_at, raised.value.retry_after) == (START + 60, 40)


def test_ingest_batch_waits_for_the_window_when_allowed(client, fake_clock, emulator):
    client.ingest_batch([event("deal_stage")] * 30)
    result = client.ingest_batch([event("deal_stage", reference="late")])
    assert [a.reference for a in result.acks] == ["late"]
    assert fake_clock.now >= START + 60
    assert emulator.stats.snapshot()["endpoints"]["POST /v1/events/batch"]["rate_limited"] == 1


def test_a_batch_dropped_after_it_was_applied_is_resent_and_flagged(client, emulator):
    emulator.faults.add([FaultRule(endpoint="POST /v1/events/batch", kind="drop_after", times=1)])
    result = client.ingest_batch([event(reference="once")])
    assert result.possibly_duplicated is True
    assert [e["reference"] for e in emulator.state.events] == ["once", "once"]


def test_send_events_paces_to_the_emulator_windows_without_a_429(client, fake_clock, emulator):
    events = [event("deal_stage", reference=f"d{i}") for i in range(100)]
    events += [event("page_visit", reference=f"p{i}") for i in range(150)]
    report = send_events(client, events, {"deal_stage": "State", "page_visit": "Event"})
    assert report.acknowledged == 250
    assert report.rejected == 0
    references = [e["reference"] for e in emulator.state.events]
    assert sorted(references) == sorted(e["reference"] for e in events)
    # 100 State events at 30 per window need four windows.
    assert fake_clock.now >= START + 180
    statuses = emulator.stats.snapshot()["endpoints"]["POST /v1/events/batch"]["statuses"]
    assert set(statuses) == {"200"}


# ---- GET /v1/lists -----------------------------------------------------------------------------


def test_list_lists(client):
    info, *segments = client.list_lists()
    assert (info.id, info.name) == (TABLE, "Accounts")
    assert [segment.id for segment in segments] == [
        "tbl_accounts_enterprise",
        "tbl_accounts_team",
        "tbl_accounts_free",
    ]


def test_unknown_list(client):
    with pytest.raises(ListNotFoundError) as raised:
        client.get_rows("tbl_nope")
    assert raised.value.table_id == "tbl_nope"


# ---- rows and cells ----------------------------------------------------------------------------


def test_add_rows_returns_new_ids_and_refuses_a_repeated_domain(client, emulator):
    result = client.add_rows(
        TABLE, [{"cells": {"domain": "acme.com", "plan": "team"}}, {"cells": {"domain": "b.io"}}]
    )
    assert (result.added, result.row_ids) == (2, ["row_1", "row_2"])
    with pytest.raises(ConflictError):
        client.add_rows(TABLE, [{"cells": {"domain": "www.acme.com"}}])
    assert list(emulator.state.lists[TABLE].rows) == ["row_1", "row_2"]


def test_add_rows_dropped_after_apply_is_not_resent(client, emulator):
    emulator.faults.add([FaultRule(endpoint="POST /v1/lists/{tableId}/rows", kind="drop_after", times=1)])
    with pytest.raises(OutcomeUnknownError):
        client.add_rows(TABLE, [{"cells": {"domain": "acme.com"}}])
    assert len(emulator.state.lists[TABLE].rows) == 1


def test_get_rows_modes(client):
    client.add_rows(
        TABLE, [{"cells": {"domain": d, "arr": n}} for d, n in (("a.com", 10), ("b.com", 20), ("c.com", 30))]
    )
    (row,) = client.get_rows(TABLE, row_ids=["row_2"]).rows
    assert (row.id, row.table_id, row.cells["arr"].value, row.cells["arr"].computed_value) == (
        "row_2",
        TABLE,
        20,
        20,
    )
    assert [r.id for r in client.get_rows(TABLE, index=2).rows] == ["row_3"]
    page = client.get_rows(TABLE, column_id="arr", operator="gte", query="20", limit=1)
    assert ([r.id for r in page.rows], page.total_matched, page.returned, page.truncated) == (
        ["row_2"],
        2,
        1,
        True,
    )


def test_iter_rows_pages_through_every_row(client):
    for start in range(0, 250, 100):
        client.add_rows(
            TABLE, [{"cells": {"domain": f"d{i}.com"}} for i in range(start, min(start + 100, 250))]
        )
    rows = list(client.iter_rows(TABLE, column_id="domain", operator="is_not_empty", page_size=100))
    assert [r.cells["domain"].value for r in rows] == [f"d{i}.com" for i in range(250)]
    # Without a filter: every row, in insertion order (A22).
    assert [r.id for r in client.iter_rows(TABLE, page_size=64)] == [f"row_{i}" for i in range(1, 251)]


def test_update_cells(client, emulator):
    client.add_rows(TABLE, [{"cells": {"domain": "a.com"}}])
    result = client.update_cells(TABLE, [{"rowId": "row_1", "columnId": "owner", "value": "kim"}])
    assert result.updated == 1
    assert emulator.state.lists[TABLE].rows["row_1"].cells == {"domain": "a.com", "owner": "kim"}
    with pytest.raises(RowsNotFoundError) as raised:
        client.update_cells(TABLE, [{"rowId": "row_9", "columnId": "owner", "value": "x"}])
    assert raised.value.row_ids == ["row_9"]


def test_update_cells_is_retried_after_a_503(client, emulator):
    client.add_rows(TABLE, [{"cells": {"domain": "a.com"}}])
    emulator.faults.add(
        [FaultRule(endpoint="PATCH /v1/lists/{tableId}/cells", kind="error", status=503, times=1)]
    )
    assert client.update_cells(TABLE, [{"rowId": "row_1", "columnId": "arr", "value": 5}]).updated == 1
    assert emulator.stats.snapshot()["endpoints"]["PATCH /v1/lists/{tableId}/cells"]["statuses"] == {
        "503": 1,
        "200": 1,
    }


def test_delete_rows(client, emulator):
    client.add_rows(TABLE, [{"cells": {"domain": "a.com"}}, {"cells": {"domain": "b.com"}}])
    result = client.delete_rows(TABLE, ["row_1", "row_9"])
    assert (result.deleted, result.not_found) == (1, ["row_9"])
    assert list(emulator.state.lists[TABLE].rows) == ["row_2"]


# ---- targetable people -------------------------------------------------------------------------


ANN = {"first_name": "Ann", "last_name": "Lee", "email": "ann@acme.com", "personas": ["champion"]}
BOB = {"first_name": "Bob", "network_profile_url": "https://network.example/in/bob"}


@pytest.fixture
def acme(client):
    client.add_rows(TABLE, [{"cells": {"domain": "acme.com"}}])


@pytest.mark.usefixtures("acme")
def test_add_people_counts_added_updated_and_skipped(client, emulator):
    assert client.add_people(TABLE, [{"accountDomain": "acme.com", "people": [ANN, BOB]}]).added == 2
    again = client.add_people(TABLE, [{"accountDomain": "www.acme.com", "people": [{**ANN, "title": "CTO"}]}])
    assert (again.added, again.updated) == (0, 1)
    skipped = client.add_people(
        TABLE, [{"accountDomain": "acme.com", "people": [BOB]}], duplicate_strategy="skip"
    )
    assert skipped.skipped == 1
    people = emulator.state.lists[TABLE].row_for_domain("acme.com").people
    assert [(p["first_name"], p.get("title")) for p in people] == [("Ann", "CTO"), ("Bob", None)]


@pytest.mark.usefixtures("acme")
def test_add_people_to_unknown_accounts(client, emulator):
    accounts = [{"accountDomain": "acme.com", "people": [ANN]}, {"accountDomain": "gone.io", "people": [BOB]}]
    with pytest.raises(AccountsNotFoundError) as raised:
        client.add_people(TABLE, accounts)
    assert raised.value.domains == ["gone.io"]
    assert emulator.state.lists[TABLE].row_for_domain("acme.com").people == []


@pytest.mark.usefixtures("acme")
def test_update_people(client, emulator):
    client.add_people(TABLE, [{"accountDomain": "acme.com", "people": [ANN]}])
    result = client.update_people(
        TABLE,
        [
            {
                "accountDomain": "acme.com",
                "people": [
                    {"match": {"email": "ann@acme.com"}, "patch": {"title": "CEO"}},
                    {"match": {"email": "zed@acme.com"}, "patch": {"title": "x"}},
                ],
            }
        ],
    )
    assert result.updated == 1
    assert [entry["match"] for entry in result.not_found] == [{"email": "zed@acme.com"}]
    assert emulator.state.lists[TABLE].row_for_domain("acme.com").people[0]["title"] == "CEO"


@pytest.mark.usefixtures("acme")
def test_delete_people(client, emulator):
    client.add_people(TABLE, [{"accountDomain": "acme.com", "people": [ANN, BOB]}])
    result = client.delete_people(
        TABLE,
        [
            {
                "accountDomain": "acme.com",
                "people": [{"network_profile_url": BOB["network_profile_url"]}, {"email": "x@y.z"}],
            }
        ],
    )
    assert (result.deleted, len(result.not_found)) == (1, 1)
    assert [p["first_name"] for p in emulator.state.lists[TABLE].row_for_domain("acme.com").people] == ["Ann"]


@pytest.mark.usefixtures("acme")
def test_get_targetable_people_filters(client):
    client.add_people(TABLE, [{"accountDomain": "acme.com", "people": [ANN, BOB]}])
    page = client.get_targetable_people(TABLE, target=True, personas=["champion", "economic_buyer"])
    (ann,) = page.people
    assert (ann.first_name, ann.account_domain, ann.row_id, ann.target) == ("Ann", "acme.com", "row_1", True)
    assert (page.total, page.has_more) == (1, False)
    assert [p.first_name for p in client.get_targetable_people(TABLE, contactable=False).people] == ["Bob"]
    assert [p.first_name for p in client.get_targetable_people(TABLE, search="lee").people] == ["Ann"]
    assert (
        client.get_targetable_people(TABLE, account_domain="acme.com", limit=1, offset=1).people[0].first_name
        == "Bob"
    )


def test_iter_targetable_people_pages_in_order(client):
    client.add_rows(TABLE, [{"cells": {"domain": f"d{i}.com"}} for i in range(5)])
    for i in range(5):
        people = [{"first_name": f"P{i}-{j}", "email": f"p{j}@d{i}.com"} for j in range(50)]
        client.add_people(TABLE, [{"accountDomain": f"d{i}.com", "people": people}])
    names = [p.first_name for p in client.iter_targetable_people(TABLE, page_size=100)]
    assert names == [f"P{i}-{j}" for i in range(5) for j in range(50)]


def test_the_clients_of_a_contract_test_keep_its_requests_in_flight(
    emulator: LiveEmulator, in_flight: int
) -> None:
    with emulator.client() as client:
        assert client.in_flight.ceiling == in_flight
