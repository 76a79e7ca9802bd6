"""Targetable people (spec §4.3–4.6) as assumptions A9–A19 and A21 decide."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from listsync.emulator import Emulator, demo_config

PEOPLE = "/v1/lists/tbl_accounts/targetable-people"


def people_of(emulator, domain):
    lst = emulator.state.lists["tbl_accounts"]
    return lst.row_for_domain(domain).people


def add(client, domain, *people, **extra):
    body = {"userId": "usr_demo", "accounts": [{"accountDomain": domain, "people": list(people)}], **extra}
    return client.post(PEOPLE, json=body)


ANN = {"first_name": "Ann", "last_name": "Lee", "email": "ann@acme.com", "title": "CTO"}
NAMES_AN_IDENTITY = "must name email, network_profile_url, phone_number, or first_name and last_name"
BOB = {"first_name": "Bob", "network_profile_url": "https://network.example/in/bob"}


# ---- POST: add, duplicates, duplicateStrategy --------------------------------------------------


def test_add_attaches_people_to_the_row_found_by_normalised_domain(client, add_accounts, emulator):
    (row_id,) = add_accounts("acme.com")
    response = add(client, "WWW.Acme.com", ANN, BOB)
    assert response.status_code == 200
    assert response.json() == {"success": True, "data": {"added": 2, "updated": 0, "skipped": 0}}
    people = people_of(emulator, "acme.com")
    assert [p["first_name"] for p in people] == ["Ann", "Bob"]
    assert emulator.state.lists["tbl_accounts"].rows[row_id].people is people


def test_target_defaults_to_true_only_with_a_contact_channel(client, add_accounts, emulator):
    add_accounts("acme.com")
    phone = {"first_name": "Cy", "phone_number": "+14155550100"}
    chosen = {"first_name": "Di", "email": "di@acme.com", "target": False}
    add(client, "acme.com", ANN, BOB, phone, chosen)
    assert [p["target"] for p in people_of(emulator, "acme.com")] == [True, False, True, False]


def test_duplicate_by_email_updates_sent_fields_and_keeps_the_rest(client, add_accounts, emulator):
    add_accounts("acme.com")
    add(client, "acme.com", ANN)
    response = add(client, "acme.com", {"first_name": "Annie", "email": "ANN@acme.com", "bio": "new"})
    assert response.json()["data"] == {"added": 0, "updated": 1, "skipped": 0}
    (person,) = people_of(emulator, "acme.com")
    assert person == {
        "first_name": "Annie",
        "last_name": "Lee",
        "email": "ANN@acme.com",
        "title": "CTO",
        "bio": "new",
        "target": True,
    }


def test_duplicate_by_profile_url(client, add_accounts, emulator):
    add_accounts("acme.com")
    add(client, "acme.com", BOB)
    response = add(client, "acme.com", {**BOB, "title": "VP"})
    assert response.json()["data"]["updated"] == 1
    assert people_of(emulator, "acme.com")[0]["title"] == "VP"


def test_duplicates_match_only_within_the_account(client, add_accounts, emulator):
    add_accounts("acme.com", "globex.com")
    add(client, "acme.com", ANN)
    assert add(client, "globex.com", ANN).json()["data"]["added"] == 1


def test_skip_strategy_leaves_the_match_alone(client, add_accounts, emulator):
    add_accounts("acme.com")
    add(client, "acme.com", ANN)
    response = add(client, "acme.com", {**ANN, "title": "CEO"}, duplicateStrategy="skip")
    assert response.json()["data"] == {"added": 0, "updated": 0, "skipped": 1}
    assert people_of(emulator, "acme.com")[0]["title"] == "CTO"


def test_unknown_duplicate_strategy_is_400(client, add_accounts, expect_error):
    add_accounts("acme.com")
    expect_error(
        add(client, "acme.com", ANN, duplicateStrategy="merge"), 400, "Invalid duplicateStrategy: merge"
    )


def test_unknown_accounts_refuse_the_whole_request(client, add_accounts, emulator, expect_error):
    add_accounts("acme.com")
    body = {
        "accounts": [
            {"accountDomain": "nope.io", "people": [BOB]},
            {"accountDomain": "acme.com", "people": [ANN]},
            {"accountDomain": "gone.io", "people": [BOB]},
        ]
    }
    expect_error(client.post(PEOPLE, json=body), 404, "Account not found: nope.io, gone.io")
    assert people_of(emulator, "acme.com") == []


@pytest.mark.parametrize(
    ("person", "message"),
    [
        ({"last_name": "Lee"}, "accounts[0].people[1].first_name is required"),
        (
            {"first_name": "A", "phone_number": "0044 20"},
            "accounts[0].people[1].phone_number must be E.164: a plus sign followed by digits",
        ),
        ({"first_name": "A", "firstName": "A"}, "accounts[0].people[1]: unknown field firstName"),
        ({"first_name": "A", "target": "yes"}, "accounts[0].people[1].target must be a boolean"),
        (
            {"first_name": "A", "personas": "champion"},
            "accounts[0].people[1].personas must be an array of strings",
        ),
        (
            {
                "first_name": "A",
                "connection_paths": [{"userId": "usr_demo", "source": "email", "degree": "1st"}],
            },
            "accounts[0].people[1].connection_paths[0].source must be network or relation",
        ),
        (
            {
                "first_name": "A",
                "connection_paths": [{"userId": "usr_demo", "source": "network", "degree": "3rd"}],
            },
            "accounts[0].people[1].connection_paths[0].degree must be 1st or 2nd",
        ),
    ],
)
def test_invalid_people_are_400_and_nothing_is_added(
    client, add_accounts, emulator, expect_error, person, message
):
    add_accounts("acme.com")
    expect_error(add(client, "acme.com", ANN, person), 400, message)
    assert people_of(emulator, "acme.com") == []


def test_any_persona_key_and_connection_paths_are_kept(client, add_accounts, emulator):
    add_accounts("acme.com")
    person = {
        **ANN,
        "personas": ["champion", "procurement"],
        "connection_paths": [
            {"userId": "usr_demo", "source": "relation", "degree": "2nd", "context": "ex-colleague"}
        ],
    }
    assert add(client, "acme.com", person).status_code == 200
    stored = people_of(emulator, "acme.com")[0]
    assert stored["personas"] == ["champion", "procurement"]
    assert stored["connection_paths"][0]["context"] == "ex-colleague"


def test_request_caps(client, add_accounts, expect_error):
    add_accounts("acme.com")
    many = [{"first_name": f"P{i}"} for i in range(501)]
    expect_error(add(client, "acme.com", *many), 400, "Maximum 500 people per request")
    accounts = [{"accountDomain": "acme.com", "people": []}] * 101
    expect_error(client.post(PEOPLE, json={"accounts": accounts}), 400, "Maximum 100 accounts per request")
    expect_error(client.post(PEOPLE, json={"accounts": []}), 400, "accounts must be a non-empty array")


# ---- PATCH -------------------------------------------------------------------------------------


def patch(client, domain, *entries):
    return client.patch(
        PEOPLE, json={"userId": "usr_demo", "accounts": [{"accountDomain": domain, "people": list(entries)}]}
    )


def test_patch_by_email_changes_only_the_patched_fields(client, add_accounts, emulator):
    add_accounts("acme.com")
    add(client, "acme.com", ANN, BOB)
    response = patch(
        client, "acme.com", {"match": {"email": "Ann@Acme.com"}, "patch": {"title": "CEO", "target": False}}
    )
    assert response.json() == {"success": True, "data": {"updated": 1, "notFound": []}}
    ann, bob = people_of(emulator, "acme.com")
    assert (ann["title"], ann["target"], ann["last_name"]) == ("CEO", False, "Lee")
    assert bob == {**BOB, "target": False}


@pytest.mark.parametrize(
    "match",
    [
        {"network_profile_url": "https://network.example/in/bob"},
        {"phone_number": "+14155550100"},
        {"first_name": "bob", "last_name": "MARLEY"},
    ],
)
def test_patch_matches_by_any_identity_of_a17(client, add_accounts, emulator, match):
    add_accounts("acme.com")
    add(client, "acme.com", ANN, {**BOB, "last_name": "Marley", "phone_number": "+14155550100"})
    assert (
        patch(client, "acme.com", {"match": match, "patch": {"bio": "found"}}).json()["data"]["updated"] == 1
    )
    assert people_of(emulator, "acme.com")[1]["bio"] == "found"


def test_patch_null_clears_a_field_and_unmatched_people_are_listed(client, add_accounts, emulator):
    add_accounts("acme.com")
    add(client, "acme.com", ANN)
    response = patch(
        client,
        "acme.com",
        {"match": {"email": "ann@acme.com"}, "patch": {"title": None}},
        {"match": {"email": "zed@acme.com"}, "patch": {"title": "x"}},
    )
    assert response.json()["data"] == {
        "updated": 1,
        "notFound": [{"accountDomain": "acme.com", "match": {"email": "zed@acme.com"}}],
    }
    assert "title" not in people_of(emulator, "acme.com")[0]


def test_patch_null_target_puts_back_its_default_so_the_target_filter_still_finds_the_person(
    client, add_accounts, emulator
):
    add_accounts("acme.com")
    add(client, "acme.com", ANN, BOB)
    patch(client, "acme.com", {"match": {"email": "ann@acme.com"}, "patch": {"target": False}})
    patch(
        client,
        "acme.com",
        {"match": {"email": "ann@acme.com"}, "patch": {"target": None}},
        {"match": {"network_profile_url": BOB["network_profile_url"]}, "patch": {"target": None}},
    )

    ann, bob = people_of(emulator, "acme.com")
    assert (ann["target"], bob["target"]) == (True, False)  # §2.1: true with a contact channel
    listed = {
        flag: [p["first_name"] for p in client.get(PEOPLE, params={"target": flag}).json()["data"]["people"]]
        for flag in ("true", "false")
    }
    assert listed == {"true": ["Ann"], "false": ["Bob"]}


def test_patch_needs_an_identity_and_a_valid_patch(client, add_accounts, expect_error):
    add_accounts("acme.com")
    expect_error(
        patch(client, "acme.com", {"match": {"title": "CTO"}, "patch": {}}),
        400,
        "accounts[0].people[0].match " + NAMES_AN_IDENTITY,
    )
    expect_error(
        patch(client, "acme.com", {"match": {"email": "a@b.c"}, "patch": {"first_name": ""}}),
        400,
        "accounts[0].people[0].patch.first_name is required",
    )
    expect_error(
        patch(client, "nope.io", {"match": {"email": "a@b.c"}, "patch": {}}),
        404,
        "Account not found: nope.io",
    )


# ---- DELETE ------------------------------------------------------------------------------------


def delete(client, domain, *identities, **query):
    body = {"accounts": [{"accountDomain": domain, "people": list(identities)}]}
    return client.request("DELETE", PEOPLE, json=body, params=query)


def test_delete_by_each_identity_and_missing_ones_are_not_errors(client, add_accounts, emulator):
    add_accounts("acme.com")
    cy = {"first_name": "Cy", "last_name": "Young", "phone_number": "+14155550100"}
    di = {"first_name": "Di", "last_name": "Ng"}
    add(client, "acme.com", ANN, BOB, cy, di)
    response = delete(
        client,
        "acme.com",
        {"email": "ANN@acme.com"},
        {"network_profile_url": BOB["network_profile_url"]},
        {"phone_number": "+14155550100"},
        {"first_name": "di", "last_name": "ng"},
        {"email": "ghost@acme.com"},
        userId="usr_demo",
    )
    assert response.json() == {
        "success": True,
        "data": {
            "deleted": 4,
            "notFound": [{"accountDomain": "acme.com", "match": {"email": "ghost@acme.com"}}],
        },
    }
    assert people_of(emulator, "acme.com") == []


def test_delete_needs_an_identity(client, add_accounts, expect_error):
    add_accounts("acme.com")
    expect_error(
        delete(client, "acme.com", {"first_name": "Ann"}),
        400,
        "accounts[0].people[0] " + NAMES_AN_IDENTITY,
    )


# ---- GET: filters and paging (A12, A13) --------------------------------------------------------


@pytest.fixture
def crowd(client, add_accounts):
    add_accounts("acme.com", "globex.com")
    add(
        client,
        "acme.com",
        {**ANN, "personas": ["champion"]},
        {"first_name": "Cy", "phone_number": "+14155550100", "personas": ["decision_maker"], "target": False},
        {"first_name": "Eve", "title": "Engineer"},
    )
    add(
        client, "globex.com", {"first_name": "Gus", "email": "gus@globex.com", "personas": ["economic_buyer"]}
    )


def names(response):
    assert response.status_code == 200, response.text
    return [p["first_name"] for p in response.json()["data"]["people"]]


@pytest.mark.usefixtures("crowd")
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, ["Ann", "Cy", "Eve", "Gus"]),
        ({"target": "true"}, ["Ann", "Gus"]),
        ({"target": "false"}, ["Cy", "Eve"]),
        ({"personas": "champion,economic_buyer"}, ["Ann", "Gus"]),
        ({"contactable": "true"}, ["Ann", "Cy", "Gus"]),
        ({"contactable": "false"}, ["Eve"]),
        ({"search": "ENGIN"}, ["Eve"]),
        ({"search": "globex"}, ["Gus"]),
        ({"accountDomain": "www.acme.com"}, ["Ann", "Cy", "Eve"]),
        ({"target": "true", "personas": "champion"}, ["Ann"]),
    ],
)
def test_get_filters(client, query, expected):
    assert names(client.get(PEOPLE, params=query)) == expected


@pytest.mark.usefixtures("crowd")
def test_get_pages_with_totals_and_account_fields(client):
    body = client.get(PEOPLE, params={"limit": 2, "offset": 1, "userId": "usr_demo"}).json()["data"]
    assert [p["first_name"] for p in body["people"]] == ["Cy", "Eve"]
    assert (body["total"], body["limit"], body["offset"], body["hasMore"]) == (4, 2, 1, True)
    assert {(p["accountDomain"], p["rowId"]) for p in body["people"]} == {("acme.com", "row_1")}
    last = client.get(PEOPLE, params={"limit": 2, "offset": 2}).json()["data"]
    assert (names_of(last), last["hasMore"]) == (["Eve", "Gus"], False)
    assert client.get(PEOPLE, params={"offset": 10}).json()["data"]["people"] == []


def names_of(data):
    return [p["first_name"] for p in data["people"]]


@pytest.mark.usefixtures("crowd")
def test_get_pages_see_writes_made_between_them(client):
    assert names(client.get(PEOPLE, params={"target": "true"})) == ["Ann", "Gus"]
    add(client, "acme.com", {"first_name": "Hal", "email": "hal@acme.com"})
    assert names(client.get(PEOPLE, params={"target": "true"})) == ["Ann", "Hal", "Gus"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"limit": "0"}, "limit must be an integer between 1 and 1000"),
        ({"limit": "1001"}, "limit must be an integer between 1 and 1000"),
        ({"offset": "-1"}, "offset must be an integer at least 0"),
        ({"target": "yes"}, "target must be true or false"),
        ({"userId": "usr_nobody"}, "User not found: usr_nobody"),
    ],
)
def test_get_rejects_bad_parameters(client, expect_error, query, message):
    expect_error(client.get(PEOPLE, params=query), 400, message)


# ---- List-level refusals (A3, A9, A10) ---------------------------------------------------------


LIST_REQUESTS = [
    ("GET", "/v1/lists", None),
    ("GET", "/v1/lists/tbl_accounts", None),
    ("GET", PEOPLE, None),
    ("POST", PEOPLE, {"accounts": [{"accountDomain": "a.com", "people": []}]}),
    ("PATCH", PEOPLE, {"accounts": [{"accountDomain": "a.com", "people": []}]}),
    ("DELETE", PEOPLE, {"accounts": [{"accountDomain": "a.com", "people": []}]}),
    ("GET", "/v1/lists/tbl_accounts/rows", None),
    ("POST", "/v1/lists/tbl_accounts/rows", {"rows": [{"cells": {}}]}),
    (
        "PATCH",
        "/v1/lists/tbl_accounts/cells",
        {"updates": [{"rowId": "row_1", "columnId": "name", "value": "x"}]},
    ),
    ("DELETE", "/v1/lists/tbl_accounts/rows", {"rowIds": ["row_1"]}),
]


@pytest.mark.parametrize(("method", "path", "body"), LIST_REQUESTS)
def test_public_keys_are_refused_on_list_endpoints(app, emulator, expect_error, method, path, body):
    with TestClient(app, headers={"Authorization": "Bearer public_wk_demo_listsync"}) as browser:
        response = browser.request(method, path, json=body)
    expect_error(response, 403, "Public keys may only call POST /v1/events and POST /v1/events/batch")
    assert emulator.state.lists["tbl_accounts"].rows == {}


@pytest.mark.parametrize(("method", "path", "body"), LIST_REQUESTS)
def test_list_endpoints_need_a_key(app, expect_error, method, path, body):
    with TestClient(app) as anonymous:
        expect_error(anonymous.request(method, path, json=body), 401, "Missing API key")


@pytest.mark.parametrize(("method", "path", "body"), [r for r in LIST_REQUESTS if r[1] != "/v1/lists"])
def test_unknown_list_is_404(client, expect_error, method, path, body):
    response = client.request(method, path.replace("tbl_accounts", "tbl_nope"), json=body)
    expect_error(response, 404, "List not found or not accessible: tbl_nope")


def test_unknown_user_in_a_write_body_is_400(client, expect_error):
    body = {"userId": "usr_x", "accounts": [{"accountDomain": "a.com", "people": []}]}
    expect_error(client.post(PEOPLE, json=body), 400, "User not found: usr_x")


def test_list_descriptions(client):
    every = client.get("/v1/lists").json()["data"]
    assert [table["id"] for table in every] == [table.id for table in demo_config().lists]
    listed = every[0]
    assert listed == client.get("/v1/lists/tbl_accounts").json()["data"]
    assert listed["id"] == "tbl_accounts"
    assert listed["targetableAccountColumn"] == "domain"
    assert listed["uniqueDomains"] is True
    assert [c["columnId"] for c in listed["columns"]] == [
        "domain", "name", "arr", "plan", "owner", "health_score", "metadata", "renewal_date"
    ]  # fmt: skip
    plan = next(c for c in listed["columns"] if c["columnId"] == "plan")
    assert [o["key"] for o in plan["options"]] == ["free", "team", "enterprise"]


person_strategy = st.fixed_dictionaries(
    {"first_name": st.sampled_from(["Ann", "Bob", "Cy"])},
    optional={
        "email": st.sampled_from(["a@x.io", "b@x.io", "c@x.io", "d@x.io"]),
        "phone_number": st.just("+14155550100"),
        "target": st.booleans(),
        "personas": st.lists(st.sampled_from(["champion", "decision_maker", "economic_buyer"]), max_size=2),
    },
)


@settings(max_examples=40, deadline=None)
@given(
    accounts=st.lists(st.lists(person_strategy, max_size=8), min_size=1, max_size=4),
    query=st.fixed_dictionaries(
        {},
        optional={
            "target": st.sampled_from(["true", "false"]),
            "contactable": st.sampled_from(["true", "false"]),
            "personas": st.sampled_from(["champion", "decision_maker,economic_buyer"]),
            "search": st.sampled_from(["ann", "X.IO", "d1.com"]),
        },
    ),
    page_size=st.integers(min_value=1, max_value=7),
)
def test_pages_of_any_query_add_up_to_the_whole_answer(accounts, query, page_size):
    """Paging never loses, repeats or reorders a person, and total/hasMore agree with the pages."""
    emulator = Emulator(demo_config(), time.time, asyncio.sleep)
    ops = emulator.people
    table = emulator.lists.table("tbl_accounts")
    emulator.rows.add_rows(
        table, {"rows": [{"cells": {"domain": f"d{i}.com"}} for i in range(len(accounts))]}
    )
    for index, people in enumerate(accounts):
        if people:
            ops.add_people(table, {"accounts": [{"accountDomain": f"d{index}.com", "people": people}]})
    whole = ops.query_people(table, {**query, "limit": "1000"})
    pages, offset = [], 0
    while True:
        page = ops.query_people(table, {**query, "limit": str(page_size), "offset": str(offset)})
        assert page["total"] == whole["total"]
        pages += page["people"]
        offset += len(page["people"])
        if not page["hasMore"]:
            break
        assert len(page["people"]) == page_size
    assert pages == whole["people"]
    assert len(pages) == whole["total"]
