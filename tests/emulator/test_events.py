"""Signal ingestion: every row of spec §7, the A4 validation order, acknowledgements, auth."""

from __future__ import annotations

import uuid

import pytest
from starlette.testclient import TestClient

EVENTS = "/v1/events"
BATCH = "/v1/events/batch"
ACCOUNT = {"type": "account", "id": "acct_1"}


# ---- spec §7, row by row -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [{"identity": ACCOUNT}, {"signal": "", "identity": ACCOUNT}, {"signal": None, "identity": ACCOUNT}],
)
def test_single_without_signal_is_400(client, expect_error, body):
    expect_error(client.post(EVENTS, json=body), 400, "signal is required")


@pytest.mark.parametrize(
    "identity",
    [None, {}, {"type": "account"}, {"id": "acct_1"}, {"type": "", "id": "acct_1"}, "acct_1"],
)
def test_single_without_identity_type_or_id_is_400(client, expect_error, identity):
    body = {"signal": "page_visit", "identity": identity}
    expect_error(client.post(EVENTS, json=body), 400, "identity.type and identity.id are required")


@pytest.mark.parametrize("body", [{}, {"events": []}, {"events": None}, {"events": {"signal": "x"}}])
def test_batch_without_events_is_400(client, expect_error, body):
    expect_error(client.post(BATCH, json=body), 400, "events array is required and must not be empty")


def test_batch_of_101_is_400_and_100_is_accepted(client, expect_error, make_event):
    expect_error(
        client.post(BATCH, json={"events": [make_event("seats_used")] * 101}),
        400,
        "Maximum 100 events per batch",
    )
    assert client.post(BATCH, json={"events": [make_event("seats_used")] * 100}).status_code == 200


def test_single_unknown_slug_is_404(client, expect_error, make_event):
    expect_error(client.post(EVENTS, json=make_event("nope")), 404, "Signal not found: nope")


def test_batch_unknown_slugs_are_listed_once_in_order_of_appearance(client, expect_error, make_event):
    events = [make_event("zeta"), make_event("page_visit"), make_event("alpha"), make_event("zeta")]
    expect_error(client.post(BATCH, json={"events": events}), 404, "Signals not found: zeta, alpha")


def test_inactive_signal_is_treated_as_unknown(client, expect_error, make_event, emulator):
    expect_error(client.post(EVENTS, json=make_event("legacy_score")), 404, "Signal not found: legacy_score")
    expect_error(
        client.post(BATCH, json={"events": [make_event("page_visit"), make_event("legacy_score")]}),
        404,
        "Signals not found: legacy_score",
    )
    assert emulator.state.events == []


def test_single_429_and_batch_all_limited_429_messages(client, expect_error, make_event):
    for _ in range(30):
        assert client.post(EVENTS, json=make_event("deal_stage")).status_code == 200
    expect_error(client.post(EVENTS, json=make_event("deal_stage")), 429, "Rate limit exceeded")
    expect_error(
        client.post(BATCH, json={"events": [make_event("deal_stage")]}),
        429,
        "Rate limit exceeded for all events in batch",
    )


# ---- the A4 validation order -------------------------------------------------------------------


def test_batch_field_errors_name_the_event(client, expect_error, make_event):
    events = [make_event(), {"identity": ACCOUNT}]
    expect_error(client.post(BATCH, json={"events": events}), 400, "events[1]: signal is required")
    events = [make_event(), make_event(identity={"type": "account"})]
    expect_error(
        client.post(BATCH, json={"events": events}),
        400,
        "events[1]: identity.type and identity.id are required",
    )


def test_required_fields_are_checked_before_slugs(client, expect_error, make_event):
    events = [make_event("unknown"), {"identity": ACCOUNT}]
    expect_error(client.post(BATCH, json={"events": events}), 400, "events[1]: signal is required")


def test_invalid_json_body_is_400(client, expect_error):
    response = client.post(EVENTS, content=b"{not json", headers={"Content-Type": "application/json"})
    expect_error(response, 400, "Invalid JSON body")
    expect_error(client.post(EVENTS, json=[1, 2]), 400, "Invalid JSON body")


def test_bad_timestamp_is_400_and_checked_before_slugs(client, expect_error, make_event):
    expect_error(
        client.post(EVENTS, json=make_event("unknown", timestamp="yesterday")),
        400,
        "timestamp must be an ISO 8601 string",
    )
    accepted = client.post(EVENTS, json=make_event(timestamp="2026-11-20T10:00:00Z"))
    assert accepted.status_code == 200


def test_unknown_schema_version_is_400(client, expect_error, make_event):
    expect_error(
        client.post(EVENTS, json=make_event("seats_used", version=3)),
        400,
        "Schema version 3 not found for signal seats_used",
    )
    expect_error(
        client.post(BATCH, json={"events": [make_event("seats_used"), make_event("deal_stage", version=2)]}),
        400,
        "events[1]: Schema version 2 not found for signal deal_stage",
    )


@pytest.mark.parametrize(("version", "shown"), [(1.5, "1.5"), ("v2", "v2"), (True, "True")])
def test_schema_version_must_be_latest_or_an_existing_number(
    client, expect_error, make_event, version, shown
):
    expect_error(
        client.post(EVENTS, json=make_event("seats_used", version=version)),
        400,
        f"Schema version {shown} not found for signal seats_used",
    )


def test_a_whole_float_schema_version_is_that_version(client, make_event):
    response = client.post(EVENTS, json=make_event("seats_used", version=2.0))
    assert response.json()["data"]["schema_version"] == 2


@pytest.mark.parametrize("constant", [b"Infinity", b"-Infinity", b"NaN"])
def test_non_json_number_constants_are_an_invalid_body(client, expect_error, constant):
    body = (
        b'{"signal": "seats_used", "identity": {"type": "a", "id": "1"}, "data": {"seats": '
        + constant
        + b"}}"
    )
    response = client.post(EVENTS, content=body, headers={"Content-Type": "application/json"})
    expect_error(response, 400, "Invalid JSON body")


def test_missing_required_data_keys_is_400(client, expect_error, make_event):
    expect_error(
        client.post(EVENTS, json=make_event("seats_used", data={"other": 1})),
        400,
        "Missing required data keys for signal seats_used: seats",
    )
    expect_error(
        client.post(EVENTS, json=make_event("deal_stage", data=None)),
        400,
        "Missing required data keys for signal deal_stage: stage",
    )


def test_an_invalid_batch_counts_nothing_against_the_limit(client, make_event, emulator):
    bad = {"events": [make_event("deal_stage"), make_event("deal_stage", data={})]}
    assert client.post(BATCH, json=bad).status_code == 400
    response = client.post(EVENTS, json=make_event("deal_stage"))
    assert response.headers["X-RateLimit-Remaining"] == "29"
    assert len(emulator.state.events) == 1


# ---- acknowledgements --------------------------------------------------------------------------


def test_single_ack_has_uuid_signal_id_null_schema_pending_and_reference(client, make_event):
    response = client.post(EVENTS, json=make_event("page_visit", reference="ref-1"))
    assert response.status_code == 200
    body = response.json()
    assert body["success"] is True
    ack = body["data"]
    assert uuid.UUID(ack["id"]).version == 4
    assert ack == {
        "id": ack["id"],
        "signal_id": "sig_pagevisit01",
        "schema_version": None,
        "status": "pending",
        "reference": "ref-1",
    }


def test_schema_version_defaults_to_latest_and_honours_a_number(client, make_event):
    latest = client.post(EVENTS, json=make_event("seats_used")).json()["data"]
    explicit_latest = client.post(EVENTS, json=make_event("seats_used", version="latest")).json()["data"]
    null = client.post(EVENTS, json=make_event("seats_used", version=None)).json()["data"]
    first = client.post(EVENTS, json=make_event("seats_used", version=1)).json()["data"]
    versions = [ack["schema_version"] for ack in (latest, explicit_latest, null, first)]
    assert versions == [2, 2, 2, 1]
    assert "reference" not in latest


def test_batch_acks_are_in_request_order_with_references(client, make_event, emulator):
    events = [
        make_event(s, reference=f"r{i}") for i, s in enumerate(["seats_used", "page_visit", "deal_stage"])
    ]
    body = client.post(BATCH, json={"events": events}).json()
    assert body["success"] is True
    assert "rate_limited" not in body
    assert [(a["signal_id"], a["reference"]) for a in body["data"]] == [
        ("sig_seatsused01", "r0"),
        ("sig_pagevisit01", "r1"),
        ("sig_dealstage01", "r2"),
    ]
    assert len({a["id"] for a in body["data"]}) == 3
    stored = emulator.state.events
    assert [(e["signal"], e["reference"], e["identity"]) for e in stored] == [
        ("seats_used", "r0", ACCOUNT),
        ("page_visit", "r1", ACCOUNT),
        ("deal_stage", "r2", ACCOUNT),
    ]
    assert [e["id"] for e in stored] == [a["id"] for a in body["data"]]


def test_event_timestamp_defaults_to_now(client, make_event, emulator):
    client.post(EVENTS, json=make_event())
    client.post(EVENTS, json=make_event(timestamp="2026-01-02T03:04:05Z"))
    assert [e["timestamp"] for e in emulator.state.events] == [
        "2027-01-15T08:00:00.000Z",
        "2026-01-02T03:04:05Z",
    ]


# ---- authentication (A2, A3) -------------------------------------------------------------------


def test_missing_and_invalid_keys_are_401(app, expect_error, make_event):
    with TestClient(app) as anonymous:
        expect_error(anonymous.post(EVENTS, json=make_event()), 401, "Missing API key")
        wrong = anonymous.post(EVENTS, json=make_event(), headers={"Authorization": "Bearer sk_wrong"})
        expect_error(wrong, 401, "Invalid API key")
        basic = anonymous.post(EVENTS, json=make_event(), headers={"Authorization": "Basic sk_demo_listsync"})
        expect_error(basic, 401, "Missing API key")


def test_auth_is_checked_before_the_body(app, expect_error):
    with TestClient(app) as anonymous:
        expect_error(anonymous.post(BATCH, json={}), 401, "Missing API key")


def test_public_key_may_ingest(app, make_event):
    with TestClient(app, headers={"Authorization": "Bearer public_wk_demo_listsync"}) as browser:
        assert browser.post(EVENTS, json=make_event()).status_code == 200
        assert browser.post(BATCH, json={"events": [make_event()]}).status_code == 200
