"""Every rule of the spec's models: a bad value, and the error it gives."""

from __future__ import annotations

from datetime import datetime

import pytest

from listsync.client import (
    CellUpdate,
    DeleteRowsRequest,
    EventBatchRequest,
    InvalidRecordError,
    Person,
    SignalEvent,
    person_identity,
    person_match,
    validate_cell_update,
    validate_event,
    validate_person,
    validate_person_match,
    validate_person_patch,
    validate_record,
    validate_row,
)
from listsync.client.models import AccountPeople, AddPeopleRequest

PERSON = {"first_name": "Ada"}
EVENT = {"signal": "visit", "identity": {"type": "account", "id": "acc-1"}}
PATH = {"userId": "usr_1", "source": "network", "degree": "1st"}


def violation(validate, data) -> dict[str, str]:
    with pytest.raises(InvalidRecordError) as error:
        validate(data)
    return dict(error.value.violations)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({}, "first_name", "Field required"),
        ({"first_name": ""}, "first_name", "String should have at least 1 character"),
        ({"first_name": "   "}, "first_name", "String should have at least 1 character"),
        ({**PERSON, "phone_number": "4155550123"}, "phone_number", "must be E.164"),
        ({**PERSON, "phone_number": "+1 415 555 0123"}, "phone_number", "must be E.164"),
        ({**PERSON, "phone_number": "+0123"}, "phone_number", "must be E.164"),
        ({**PERSON, "phone_number": "+1234567890123456"}, "phone_number", "must be E.164"),
        ({**PERSON, "target": "maybe"}, "target", "Input should be a valid boolean"),
        ({**PERSON, "personas": "champion"}, "personas", "Input should be a valid list"),
        ({**PERSON, "email": 42}, "email", "Input should be a valid string"),
        (
            {**PERSON, "connection_paths": [{**PATH, "source": "email"}]},
            "connection_paths.0.source",
            "Input should be 'network' or 'relation'",
        ),
        (
            {**PERSON, "connection_paths": [{**PATH, "degree": "3rd"}]},
            "connection_paths.0.degree",
            "Input should be '1st' or '2nd'",
        ),
        (
            {**PERSON, "connection_paths": [{"source": "network", "degree": "1st"}]},
            "connection_paths.0.userId",
            "Field required",
        ),
        ({**PERSON, "nickname": "A"}, "nickname", "Extra inputs are not permitted"),
    ],
)
def test_person_rules(data, field, message):
    assert message in violation(validate_person, data)[field]


def test_every_violation_of_a_record_is_reported_at_once():
    error = violation(
        validate_person,
        {"phone_number": "123", "connection_paths": [{"userId": "u", "source": "x", "degree": "9th"}]},
    )
    assert set(error) == {
        "first_name",
        "phone_number",
        "connection_paths.0.source",
        "connection_paths.0.degree",
    }


def test_invalid_record_error_message_lists_fields():
    with pytest.raises(InvalidRecordError, match=r"invalid person: first_name: Field required"):
        validate_person({})


def test_unknown_persona_keys_are_accepted():
    person = validate_person({**PERSON, "personas": ["champion", "procurement_gatekeeper"]})
    assert person.personas == ["champion", "procurement_gatekeeper"]


def test_a_valid_person_serialises_in_spec_casing_without_none():
    person = validate_person(
        {
            **PERSON,
            "last_name": None,
            "phone_number": "+14155550123",
            "connection_paths": [
                {"user_id": "usr_1", "source": "relation", "degree": "2nd", "context": None}
            ],
        }
    )
    assert person.to_wire() == {
        "first_name": "Ada",
        "phone_number": "+14155550123",
        "connection_paths": [{"userId": "usr_1", "source": "relation", "degree": "2nd"}],
    }


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"identity": EVENT["identity"]}, "signal", "Field required"),
        ({**EVENT, "signal": ""}, "signal", "at least 1 character"),
        ({"signal": "visit"}, "identity", "Field required"),
        ({**EVENT, "identity": {"id": "1"}}, "identity.type", "Field required"),
        ({**EVENT, "identity": {"type": "account"}}, "identity.id", "Field required"),
        ({**EVENT, "identity": {"type": "", "id": "1"}}, "identity.type", "at least 1 character"),
        ({**EVENT, "version": "newest"}, "version", "must be a number or the string 'latest'"),
        ({**EVENT, "version": "2"}, "version", "must be a number or the string 'latest'"),
        ({**EVENT, "version": True}, "version", "must be a number or the string 'latest'"),
        ({**EVENT, "timestamp": "yesterday"}, "timestamp", "must be an ISO 8601 date-time"),
        ({**EVENT, "timestamp": "2026-13-01T00:00:00Z"}, "timestamp", "must be an ISO 8601 date-time"),
        ({**EVENT, "data": [1, 2]}, "data", "Input should be a valid dictionary"),
        ({**EVENT, "reference": ""}, "reference", "at least 1 character"),
    ],
)
def test_event_rules(data, field, message):
    assert message in violation(validate_event, data)[field]


@pytest.mark.parametrize("version", [1, 2.5, "latest", None])
def test_event_versions_accepted(version):
    assert validate_event({**EVENT, "version": version}).version == version


@pytest.mark.parametrize(
    ("timestamp", "wire"),
    [
        ("2026-11-21T06:12:00Z", "2026-11-21T06:12:00Z"),
        ("2026-11-21T06:12:00.123+02:00", "2026-11-21T06:12:00.123+02:00"),
        (datetime(2026, 11, 21, 6, 12), "2026-11-21T06:12:00+00:00"),
    ],
)
def test_event_timestamps(timestamp, wire):
    assert validate_event({**EVENT, "timestamp": timestamp}).to_wire()["timestamp"] == wire


def test_batch_must_hold_one_to_a_hundred_events():
    event = SignalEvent.model_validate(EVENT)
    assert (
        "at least 1 item"
        in violation(lambda d: validate_record(EventBatchRequest, d), {"events": []})["events"]
    )
    too_many = {"events": [event] * 101}
    assert (
        "at most 100 items" in violation(lambda d: validate_record(EventBatchRequest, d), too_many)["events"]
    )
    assert len(validate_record(EventBatchRequest, {"events": [event] * 100}).events) == 100


def test_batch_reports_the_index_of_a_bad_event():
    error = violation(lambda d: validate_record(EventBatchRequest, d), {"events": [EVENT, {"signal": "x"}]})
    assert "events.1.identity" in error


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({}, "cells", "Field required"),
        ({"cells": []}, "cells", "Input should be a valid dictionary"),
        ({"cells": {"": 1}}, "cells.", "at least 1 character"),
    ],
)
def test_row_rules(data, field, message):
    errors = violation(validate_row, data)
    assert any(key.startswith(field) and message in text for key, text in errors.items()), errors


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"columnId": "c", "value": 1}, "rowId"),
        ({"rowId": "r", "value": 1}, "columnId"),
        ({"rowId": "r", "columnId": "c"}, "value"),
        ({"rowId": "", "columnId": "c", "value": 1}, "rowId"),
    ],
)
def test_cell_update_rules(data, field):
    assert field in violation(validate_cell_update, data)


def test_cell_update_accepts_either_casing_and_structured_values():
    update = validate_cell_update({"row_id": "r", "column_id": "c", "value": {"a": [1, 2]}})
    assert update.to_wire() == {"rowId": "r", "columnId": "c", "value": {"a": [1, 2]}}
    assert CellUpdate(rowId="r", columnId="c", value=None).to_wire()["value"] is None


def test_row_delete_needs_ids():
    assert "rowIds" in violation(lambda d: validate_record(DeleteRowsRequest, d), {"rowIds": []})


@pytest.mark.parametrize(
    "data",
    [{}, {"first_name": "Ada"}, {"last_name": "Lovelace"}, {"email": ""}, {"phone_number": "0123"}],
)
def test_person_match_needs_an_identity(data):
    assert violation(validate_person_match, data)


def test_person_patch_rules():
    errors = violation(validate_person_patch, {"match": {}, "patch": {}})
    assert set(errors) == {"match", "patch"}
    assert "must change at least one field" in errors["patch"]
    bad_phone = violation(
        validate_person_patch, {"match": {"email": "a@x.io"}, "patch": {"phone_number": "1"}}
    )
    assert "patch.phone_number" in bad_phone


def test_person_patch_sends_explicit_nulls_and_leaves_out_unset_fields():
    patch = validate_person_patch({"match": {"email": "a@x.io"}, "patch": {"title": None, "bio": "New"}})
    assert patch.to_wire() == {"match": {"email": "a@x.io"}, "patch": {"title": None, "bio": "New"}}
    errors = violation(validate_person_patch, {"match": {"email": "a@x.io"}, "patch": {"first_name": None}})
    assert errors["patch"] == "first_name is required and cannot be cleared"


def test_account_entries_need_a_domain_and_people():
    errors = violation(lambda d: validate_record(AccountPeople, d), {"accountDomain": "", "people": []})
    assert set(errors) == {"accountDomain", "people"}
    add = validate_record(AddPeopleRequest, {"accounts": [{"accountDomain": "x.io", "people": [PERSON]}]})
    assert add.to_wire() == {"accounts": [{"accountDomain": "x.io", "people": [{"first_name": "Ada"}]}]}


@pytest.mark.parametrize(
    ("person", "identity", "match"),
    [
        (
            {"first_name": "A", "email": " Ada@X.io ", "network_profile_url": "u"},
            "email:ada@x.io",
            {"email": "Ada@X.io"},
        ),
        (
            {"first_name": "A", "network_profile_url": "https://n/ada", "phone_number": "+1415"},
            "url:https://n/ada",
            {"network_profile_url": "https://n/ada"},
        ),
        (
            {"first_name": "A", "phone_number": "+14155550123"},
            "phone:+14155550123",
            {"phone_number": "+14155550123"},
        ),
        (
            {"first_name": "Ada", "last_name": "Lovelace"},
            "name:Ada Lovelace",
            {"first_name": "Ada", "last_name": "Lovelace"},
        ),
        ({"first_name": "Ada"}, None, None),
    ],
)
def test_person_identity_and_match_follow_the_service_order(person, identity, match):
    assert person_identity(person) == identity
    assert person_identity(Person.model_validate(person)) == identity
    if match is None:
        with pytest.raises(InvalidRecordError):
            person_match(person)
    else:
        assert person_match(person).to_wire() == match


def test_validate_returns_the_same_instance_for_a_model():
    person = Person(first_name="Ada")
    assert validate_person(person) is person
