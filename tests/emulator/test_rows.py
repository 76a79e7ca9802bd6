"""Rows and cells (spec §4.7–4.9) and GET rows (public docs) as assumptions A18–A23 decide."""

from __future__ import annotations

import pytest

from listsync.emulator import demo_config

ROWS = "/v1/lists/tbl_accounts/rows"
CELLS = "/v1/lists/tbl_accounts/cells"
PEOPLE = "/v1/lists/tbl_accounts/targetable-people"


def rows_of(emulator):
    return emulator.state.lists["tbl_accounts"].rows


def add_rows(client, *cells):
    return client.post(ROWS, json={"userId": "usr_demo", "rows": [{"cells": c} for c in cells]})


# ---- POST rows ---------------------------------------------------------------------------------


def test_add_rows_returns_ids_in_request_order_and_stores_cells(client, emulator, fake_clock):
    response = add_rows(
        client,
        {"domain": "acme.com", "arr": 1200.5, "plan": "Team", "metadata": {"tier": [1, 2]}},
        {"domain": "globex.com", "renewal_date": "2027-03-01", "owner": None},
    )
    assert response.status_code == 200
    assert response.json() == {
        "success": True,
        "data": {
            "rows": [
                {
                    "id": "row_1",
                    "cells": {
                        "domain": "acme.com",
                        "arr": 1200.5,
                        "plan": "team",
                        "metadata": {"tier": [1, 2]},
                    },
                },
                {
                    "id": "row_2",
                    "cells": {"domain": "globex.com", "renewal_date": "2027-03-01", "owner": None},
                },
            ],
            "added": 2,
        },
    }
    assert list(rows_of(emulator)) == ["row_1", "row_2"]
    assert rows_of(emulator)["row_1"].updated_at == "2027-01-15T08:00:00.000Z"
    assert add_rows(client, {"name": "no domain"}).json()["data"]["rows"][0]["id"] == "row_3"


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ({"bogus": 1}, "Column not found: bogus"),
        ({"arr": "1200"}, "rows[1].cells.arr must be a number"),
        ({"arr": True}, "rows[1].cells.arr must be a number"),
        ({"name": 5}, "rows[1].cells.name must be a string"),
        ({"plan": "gold"}, "rows[1].cells.plan must be one of free, team, enterprise"),
        ({"renewal_date": "next week"}, "rows[1].cells.renewal_date must be an ISO 8601 date"),
    ],
)
def test_invalid_cells_refuse_the_whole_request(client, emulator, expect_error, cells, message):
    expect_error(add_rows(client, {"domain": "ok.com"}, cells), 400, message)
    assert rows_of(emulator) == {}


def test_rows_shape_and_cap(client, expect_error):
    expect_error(client.post(ROWS, json={"rows": []}), 400, "rows must be a non-empty array")
    expect_error(client.post(ROWS, json={"rows": [{"cells": []}]}), 400, "rows[0].cells must be an object")
    expect_error(client.post(ROWS, json={"rows": [{"cells": {}}] * 501}), 400, "Maximum 500 rows per request")


def test_unique_domains_refuse_a_repeat_in_the_list_or_the_request(client, emulator, expect_error):
    add_rows(client, {"domain": "acme.com"})
    expect_error(
        add_rows(client, {"domain": "new.com"}, {"domain": "www.ACME.com"}),
        409,
        "Duplicate value for unique column domain: www.ACME.com",
    )
    expect_error(
        add_rows(client, {"domain": "b.com"}, {"domain": "B.com"}),
        409,
        "Duplicate value for unique column domain: B.com",
    )
    assert list(rows_of(emulator)) == ["row_1"]


def test_domains_may_repeat_when_the_list_does_not_enforce_uniqueness(client_for):
    config = demo_config()
    config.lists[0].unique_domains = False
    with client_for(config) as c:
        assert add_rows(c, {"domain": "a.com"}, {"domain": "a.com"}).status_code == 200
        add_body = {"accounts": [{"accountDomain": "a.com", "people": [{"first_name": "A"}]}]}
        c.post(PEOPLE, json=add_body)
        rows = c.get("/_emulator/state").json()["lists"]["tbl_accounts"]["rows"]
        # People attach to the first row holding the domain.
        assert [len(r["people"]) for r in rows] == [1, 0]


# ---- PATCH cells -------------------------------------------------------------------------------


def test_patch_cells_updates_values_and_timestamps(client, emulator, fake_clock):
    add_rows(client, {"domain": "acme.com", "arr": 1}, {"domain": "globex.com"})
    fake_clock.sleep(90)
    updates = [
        {"rowId": "row_1", "columnId": "arr", "value": 99},
        {"rowId": "row_1", "columnId": "plan", "value": "enterprise"},
        {"rowId": "row_2", "columnId": "metadata", "value": [1, {"a": None}]},
    ]
    response = client.patch(CELLS, json={"userId": "usr_demo", "updates": updates})
    assert response.json() == {"success": True, "data": {"updated": 3}}
    row_1, row_2 = rows_of(emulator).values()
    assert row_1.cells == {"domain": "acme.com", "arr": 99, "plan": "enterprise"}
    assert row_2.cells == {"domain": "globex.com", "metadata": [1, {"a": None}]}
    assert row_1.updated_at == "2027-01-15T08:01:30.000Z"


def test_patch_cells_is_all_or_nothing(client, emulator, expect_error):
    add_rows(client, {"domain": "acme.com", "arr": 1})
    good = {"rowId": "row_1", "columnId": "arr", "value": 2}
    expect_error(
        client.patch(CELLS, json={"updates": [good, {"rowId": "row_9", "columnId": "arr", "value": 1}]}),
        404,
        "Rows not found: row_9",
    )
    expect_error(
        client.patch(CELLS, json={"updates": [good, {"rowId": "row_1", "columnId": "nope", "value": 1}]}),
        400,
        "Column not found: nope",
    )
    expect_error(
        client.patch(CELLS, json={"updates": [good, {"rowId": "row_1", "columnId": "arr", "value": "x"}]}),
        400,
        "updates[1].value must be a number",
    )
    expect_error(
        client.patch(CELLS, json={"updates": [{"rowId": "row_1", "columnId": "arr"}]}),
        400,
        "updates[0].value is required",
    )
    assert rows_of(emulator)["row_1"].cells["arr"] == 1


def test_patch_cells_enforces_unique_domains_and_allows_swaps(client, emulator, expect_error):
    add_rows(client, {"domain": "a.com"}, {"domain": "b.com"})
    expect_error(
        client.patch(CELLS, json={"updates": [{"rowId": "row_2", "columnId": "domain", "value": "A.com"}]}),
        409,
        "Duplicate value for unique column domain: A.com",
    )
    swap = [
        {"rowId": "row_1", "columnId": "domain", "value": "b.com"},
        {"rowId": "row_2", "columnId": "domain", "value": "a.com"},
    ]
    assert client.patch(CELLS, json={"updates": swap}).status_code == 200
    assert emulator.state.lists["tbl_accounts"].row_for_domain("b.com").id == "row_1"


def test_people_follow_their_row_when_its_domain_changes(client, emulator):
    add_rows(client, {"domain": "old.com"})
    client.post(PEOPLE, json={"accounts": [{"accountDomain": "old.com", "people": [{"first_name": "A"}]}]})
    client.patch(CELLS, json={"updates": [{"rowId": "row_1", "columnId": "domain", "value": "new.com"}]})
    people = client.get(PEOPLE).json()["data"]["people"]
    assert [(p["first_name"], p["accountDomain"]) for p in people] == [("A", "new.com")]


# ---- DELETE rows -------------------------------------------------------------------------------


def test_delete_rows_removes_rows_and_their_people_and_lists_missing_ids(client, emulator):
    add_rows(client, {"domain": "a.com"}, {"domain": "b.com"})
    client.post(PEOPLE, json={"accounts": [{"accountDomain": "a.com", "people": [{"first_name": "A"}]}]})
    response = client.request(
        "DELETE", ROWS, json={"userId": "usr_demo", "rowIds": ["row_1", "row_7", "row_1"]}
    )
    assert response.json() == {"success": True, "data": {"deleted": 1, "notFound": ["row_7"]}}
    assert list(rows_of(emulator)) == ["row_2"]
    assert client.get(PEOPLE).json()["data"]["total"] == 0
    # The domain is free again, and a repeat of the delete is harmless.
    assert add_rows(client, {"domain": "a.com"}).status_code == 200
    again = client.request("DELETE", ROWS, json={"rowIds": ["row_1"]})
    assert again.json()["data"] == {"deleted": 0, "notFound": ["row_1"]}


def test_delete_rows_shape(client, expect_error):
    expect_error(
        client.request("DELETE", ROWS, json={"rowIds": [1]}), 400, "rowIds must be an array of strings"
    )
    expect_error(
        client.request("DELETE", ROWS, json={"rowIds": ["r"] * 1001}), 400, "Maximum 1000 rowIds per request"
    )


# ---- GET rows ----------------------------------------------------------------------------------


@pytest.fixture
def table(client):
    add_rows(
        client,
        {"domain": "acme.com", "name": "Acme Corp", "arr": 5000, "plan": "team"},
        {"domain": "globex.com", "name": "Globex", "arr": 120, "plan": "enterprise"},
        {"domain": "initech.io", "name": "Initech_x", "arr": 999.5},
        {"name": ""},
    )


def ids(response):
    assert response.status_code == 200, response.text
    return [row["id"] for row in response.json()["data"]["rows"]]


def test_get_rows_by_ids_answers_every_row_found_not_a_first_page(client):
    add_rows(client, *({"name": f"n{i}"} for i in range(150)))
    wanted = [f"row_{i}" for i in range(150, 0, -1)]

    body = client.get(ROWS, params={"rowIds": ",".join(wanted)}).json()["data"]

    assert [row["id"] for row in body["rows"]] == wanted
    assert (body["totalMatched"], body["returned"], body["truncated"]) == (150, 150, False)


@pytest.mark.usefixtures("table")
def test_get_rows_read_cells_are_objects(client):
    body = client.get(ROWS, params={"rowIds": "row_1"}).json()["data"]
    (row,) = body["rows"]
    assert row["id"] == "row_1"
    assert row["tableId"] == "tbl_accounts"
    assert row["updated_at"] == "2027-01-15T08:00:00.000Z"
    assert row["cells"]["plan"] == {
        "columnId": "plan",
        "rowId": "row_1",
        "value": "team",
        "computedValue": "Team",
        "status": "completed",
    }
    assert (body["totalMatched"], body["returned"], body["truncated"]) == (1, 1, False)


@pytest.mark.usefixtures("table")
@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"rowIds": "row_3,row_9,row_1"}, ["row_3", "row_1"]),
        ({"index": "1"}, ["row_2"]),
        ({"index": "9"}, []),
        ({}, ["row_1", "row_2", "row_3", "row_4"]),
        ({"columnId": "domain", "operator": "eq", "query": "ACME.com"}, ["row_1"]),
        ({"columnId": "domain", "operator": "not_eq", "query": "acme.com"}, ["row_2", "row_3", "row_4"]),
        ({"columnId": "name", "operator": "contains", "query": "corp"}, ["row_1"]),
        ({"columnId": "name", "operator": "not_contains", "query": "corp"}, ["row_2", "row_3", "row_4"]),
        ({"columnId": "name", "operator": "like", "query": "G%"}, ["row_2"]),
        ({"columnId": "name", "operator": "like", "query": "Initech_x"}, ["row_3"]),
        ({"columnId": "name", "operator": "like", "query": "Initech__"}, ["row_3"]),
        ({"columnId": "name", "operator": "like", "query": "Globe"}, []),
        ({"columnId": "domain", "operator": "starts_with", "query": "glo"}, ["row_2"]),
        ({"columnId": "domain", "operator": "ends_with", "query": ".io"}, ["row_3"]),
        ({"columnId": "arr", "operator": "gt", "query": "999.5"}, ["row_1"]),
        ({"columnId": "arr", "operator": "gte", "query": "999.5"}, ["row_1", "row_3"]),
        ({"columnId": "arr", "operator": "lt", "query": "999.5"}, ["row_2"]),
        ({"columnId": "arr", "operator": "lte", "query": "999.5"}, ["row_2", "row_3"]),
        ({"columnId": "arr", "operator": "eq", "query": "120"}, ["row_2"]),
        ({"columnId": "plan", "operator": "eq", "query": "Enterprise"}, ["row_2"]),
        ({"columnId": "plan", "operator": "eq", "query": "team"}, ["row_1"]),
        ({"columnId": "name", "operator": "is_empty"}, ["row_4"]),
        ({"columnId": "domain", "operator": "is_not_empty"}, ["row_1", "row_2", "row_3"]),
    ],
)
def test_get_rows_modes_and_operators(client, params, expected):
    assert ids(client.get(ROWS, params=params)) == expected


@pytest.mark.usefixtures("table")
def test_get_rows_pages_by_limit_and_offset(client):
    params = {"columnId": "domain", "operator": "is_not_empty", "limit": 2}
    body = client.get(ROWS, params=params).json()["data"]
    assert ([r["id"] for r in body["rows"]], body["totalMatched"], body["returned"], body["truncated"]) == (
        ["row_1", "row_2"],
        3,
        2,
        True,
    )
    tail = client.get(ROWS, params={"limit": 2, "offset": 2}).json()["data"]
    assert ([r["id"] for r in tail["rows"]], tail["truncated"]) == (["row_3", "row_4"], False)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"columnId": "nope", "operator": "eq", "query": "x"}, "Column not found: nope"),
        ({"columnId": "name", "operator": "eq"}, "query is required for operator eq"),
        ({"columnId": "arr", "operator": "gt", "query": "lots"}, "query must be a number for column arr"),
        ({"limit": "5000"}, "limit must be an integer between 1 and 1000"),
    ],
)
def test_get_rows_rejects_bad_parameters(client, expect_error, params, message):
    expect_error(client.get(ROWS, params=params), 400, message)


def test_get_rows_rejects_an_unknown_operator(client):
    response = client.get(ROWS, params={"columnId": "name", "operator": "regex", "query": "x"})
    assert response.status_code == 400
    assert response.json()["error"].startswith("operator must be one of contains, ends_with, eq,")
