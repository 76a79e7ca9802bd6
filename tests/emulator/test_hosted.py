"""The ``hosted`` profile's knobs (A33), through HTTP: ``lag_seconds``, ``canonical_forms`` and
``refusal_wording``, and ``EmulatorConfig.dialect_overrides``, which changes single knobs of a profile.

Served on the fake clock (2027-01-15T08:00:00Z): ``fake_clock.sleep(s)`` moves the emulator's time, so
a lag passes without waiting. One test plays a short lag on the real clock.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from starlette.testclient import TestClient

from listsync.cli import main
from listsync.emulator import PROFILES, Dialect, EmulatorConfig, create_app, demo_config, load_config
from listsync.emulator.store import ListState

from .conftest import SECRET

LISTS = "/v1/lists"
LIST = "/v1/lists/tbl_accounts"
PEOPLE = "/v1/lists/tbl_accounts/targetable-people"
ROWS = "/v1/lists/tbl_accounts/rows"
CELLS = "/v1/lists/tbl_accounts/cells"

ANN = {"first_name": "Ann", "last_name": "Lee", "email": "ann@acme.com"}
BOB = {"first_name": "Bob", "network_profile_url": "https://network.example/in/bob"}


def forms_only(**overrides: Any) -> dict[str, Any]:
    """``hosted`` without its lag, so a write shows at once."""
    return {"dialect_overrides": {"lag_seconds": 0, **overrides}}


def add_rows(client: TestClient, *domains: str) -> None:
    response = client.post(ROWS, json={"rows": [{"cells": {"domain": d}} for d in domains]})
    assert response.status_code == 200, response.text


def people_body(domain: str, *people: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"accounts": [{"accountDomain": domain, "people": list(people)}], **extra}


def row_ids(client: TestClient, **params: Any) -> list[str]:
    return [row["id"] for row in client.get(ROWS, params=params).json()["data"]["rows"]]


def people(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    data = client.get(PEOPLE, params=params).json()["data"]
    found: list[dict[str, Any]] = data["people"]
    return found


def names(client: TestClient, **params: Any) -> list[str]:
    return [person["first_name"] for person in people(client, **params)]


def row_count(client: TestClient) -> tuple[int, int]:
    """``rowCount`` of the List in GET /v1/lists and in GET /v1/lists/{tableId}."""
    return client.get(LISTS).json()["data"][0]["rowCount"], client.get(LIST).json()["data"]["rowCount"]


def state_rows(client: TestClient) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = client.get("/_emulator/state").json()["lists"]["tbl_accounts"]["rows"]
    return rows


# ---- dialect_overrides -------------------------------------------------------------------------


def test_overrides_change_the_named_knobs_of_the_profile_only():
    config = EmulatorConfig(profile="hosted", dialect_overrides={"lag_seconds": 0.3})
    assert config.dialect == PROFILES["hosted"].model_copy(update={"lag_seconds": 0.3})
    assert config.dialect.canonical_forms == frozenset(("whitespace", "email_case", "url", "number"))


def test_without_overrides_the_dialect_is_the_profile_itself():
    assert EmulatorConfig(profile="hosted").dialect is PROFILES["hosted"]
    assert demo_config().dialect_overrides == {}


def test_an_override_of_a_dict_knob_is_merged_into_the_profiles():
    config = EmulatorConfig(profile="lean", dialect_overrides={"caps": {"rows": 7}})
    assert config.dialect.caps == {
        "accounts": 25,
        "people": 100,
        "rows": 7,
        "updates": 200,
        "row_deletes": 200,
    }


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"lag": 1}, "lag\n  Extra inputs are not permitted"),
        ({"lag_seconds": -0.5}, "greater than or equal to 0"),
        ({"canonical_forms": ["case"]}, "unknown canonical form 'case'"),
    ],
)
def test_overrides_are_checked_when_the_config_is(overrides, reason):
    with pytest.raises(ValidationError, match=reason):
        EmulatorConfig(profile="hosted", dialect_overrides=overrides)


def test_a_config_file_overrides_knobs_of_its_profile(tmp_path):
    path = tmp_path / "emulator.yaml"
    path.write_text(
        yaml.safe_dump({"profile": "hosted", "dialect_overrides": {"lag_seconds": 0.25}}),
    )
    assert load_config(path).dialect.lag_seconds == 0.25


def test_the_cli_serves_the_hosted_profile(monkeypatch):
    served: list[EmulatorConfig] = []
    monkeypatch.setattr("listsync.emulator.server.serve_forever", lambda config, *_: served.append(config))
    assert main(["emulator", "--profile", "hosted"]) == 0
    assert served[0].dialect is PROFILES["hosted"]


# ---- lag_seconds -------------------------------------------------------------------------------


def test_a_write_is_answered_at_once_and_read_only_after_the_lag(serve, fake_clock):
    client = serve("hosted")
    answer = client.post(
        ROWS, json={"rows": [{"cells": {"domain": "a.com"}}, {"cells": {"domain": "b.com"}}]}
    )

    assert answer.json() == {
        "success": True,
        "data": {
            "rows": [
                {"id": "row_1", "cells": {"domain": "a.com"}},
                {"id": "row_2", "cells": {"domain": "b.com"}},
            ],
            "added": 2,
        },
    }
    assert [row["id"] for row in state_rows(client)] == ["row_1", "row_2"]  # inspection: as it is
    assert (row_ids(client), row_ids(client, rowIds="row_1,row_2"), row_count(client)) == ([], [], (0, 0))
    fake_clock.sleep(1.999)
    assert row_ids(client, columnId="domain", operator="is_not_empty") == []
    fake_clock.sleep(0.001)
    assert row_ids(client) == ["row_1", "row_2"]
    assert row_ids(client, rowIds="row_2") == ["row_2"]
    assert row_count(client) == (2, 2)


def test_reads_show_each_write_lag_seconds_after_its_answer_in_turn(serve, fake_clock):
    client = serve("hosted")
    add_rows(client, "acme.com")
    fake_clock.sleep(2)
    assert client.post(PEOPLE, json=people_body("acme.com", ANN)).status_code == 200
    fake_clock.sleep(1)
    patched = client.patch(
        PEOPLE, json=people_body("acme.com", {"match": {"email": "ann@acme.com"}, "patch": {"title": "CTO"}})
    )
    assert patched.json()["data"] == {"updated": 1, "notFound": []}
    fake_clock.sleep(0.5)
    deleted = client.request("DELETE", PEOPLE, json=people_body("acme.com", {"email": "ann@acme.com"}))
    assert deleted.json()["data"] == {"deleted": 1, "notFound": []}

    assert people(client) == []  # the add was answered 1.5 s ago
    fake_clock.sleep(0.5)
    assert [(p["first_name"], p.get("title")) for p in people(client)] == [("Ann", None)]
    fake_clock.sleep(1)
    assert [(p["first_name"], p.get("title")) for p in people(client)] == [("Ann", "CTO")]
    assert names(client, search="cto") == ["Ann"]
    fake_clock.sleep(0.5)
    assert people(client) == []
    assert state_rows(client)[0]["people"] == []


def test_writes_are_checked_against_the_list_as_it_is_not_as_it_reads(serve, fake_clock, expect_error):
    client = serve("hosted")
    add_rows(client, "acme.com")
    row_id = "row_1"
    # Neither the row nor the person shows yet, but each write finds what the previous one made.
    assert client.post(PEOPLE, json=people_body("acme.com", ANN)).json()["data"]["added"] == 1
    dup = client.post(PEOPLE, json=people_body("acme.com", ANN, duplicateStrategy="skip"))
    assert dup.json()["data"] == {"added": 0, "updated": 0, "skipped": 1}
    cells = client.patch(CELLS, json={"updates": [{"rowId": row_id, "columnId": "name", "value": "Acme"}]})
    assert cells.json()["data"] == {"updated": 1}
    repeat = client.post(ROWS, json={"rows": [{"cells": {"domain": "acme.com"}}]})
    expect_error(repeat, 409, "Duplicate value for unique column domain: acme.com")
    gone = client.request("DELETE", ROWS, json={"rowIds": [row_id, "row_9"]})
    assert gone.json()["data"] == {"deleted": 1, "notFound": ["row_9"]}

    assert (row_ids(client), people(client)) == ([], [])
    fake_clock.sleep(2)
    assert (row_ids(client), people(client)) == ([], [])


def test_a_refused_write_shows_nothing_ever(serve, fake_clock, expect_error):
    client = serve("hosted")
    add_rows(client, "acme.com")
    fake_clock.sleep(5)
    body = people_body("acme.com", ANN, {"last_name": "Nameless"})
    expect_error(client.post(PEOPLE, json=body), 400, "accounts[0].people[1].first_name is required")
    assert (row_ids(client), people(client)) == (["row_1"], [])
    fake_clock.sleep(5)
    assert (row_ids(client), people(client)) == (["row_1"], [])


def test_a_reset_forgets_the_writes_not_yet_shown(serve, fake_clock):
    client = serve("hosted")
    add_rows(client, "acme.com")
    assert client.post("/_emulator/reset").status_code == 200
    fake_clock.sleep(3)
    assert (row_ids(client), row_count(client)) == ([], (0, 0))
    add_rows(client, "globex.com")
    fake_clock.sleep(2)
    assert row_ids(client) == ["row_1"]


def test_the_lag_is_set_per_config(serve, fake_clock):
    client = serve("hosted", dialect_overrides={"lag_seconds": 0.25})
    add_rows(client, "acme.com")
    assert row_ids(client) == []
    fake_clock.sleep(0.25)
    assert row_ids(client) == ["row_1"]
    # Any profile can be given a lag.
    lagging = serve("lean", dialect_overrides={"lag_seconds": 10})
    add_rows(lagging, "acme.com")
    fake_clock.sleep(9.5)
    assert row_ids(lagging) == []
    fake_clock.sleep(0.5)
    assert row_ids(lagging) == ["row_1"]


def test_a_short_lag_on_the_real_clock():
    overrides = {"profile": "hosted", "dialect_overrides": {"lag_seconds": 0.3}}
    config = EmulatorConfig.model_validate({**demo_config().model_dump(), **overrides})
    with TestClient(create_app(config), headers={"Authorization": f"Bearer {SECRET}"}) as client:
        add_rows(client, "acme.com")
        assert row_ids(client) == []
        time.sleep(0.35)
        assert row_ids(client) == ["row_1"]


def test_without_a_lag_no_write_or_read_copies_the_list(serve, monkeypatch):
    def refuse(self: ListState) -> ListState:
        raise AssertionError("a List was copied without a lag")

    monkeypatch.setattr(ListState, "copy", refuse)
    for profile in ("reference", "lean", "strict", "rolling"):
        client = serve(profile)
        add_rows(client, "acme.com")
        assert client.post(PEOPLE, json=people_body("acme.com", ANN)).status_code == 200
        client.patch(CELLS, json={"updates": [{"rowId": "row_1", "columnId": "name", "value": "Acme"}]})
        client.request("DELETE", PEOPLE, json=people_body("acme.com", {"email": "ann@acme.com"}))
        client.request("DELETE", ROWS, json={"rowIds": ["row_1"]})
        assert (client.get(ROWS).status_code, client.get(PEOPLE).status_code) == (200, 200)
        assert client.get(LISTS).status_code == 200


# ---- canonical_forms ---------------------------------------------------------------------------

MESSY = {
    "first_name": "  Ann \t Marie ",
    "last_name": "Lee\n",
    "email": " Ann.Lee@ACME.com ",
    "title": "Chief   Technology Officer",
    "network_profile_url": "HTTP://Network.Example/in/AnnLee/",
    "avatar_url": "cdn.example/Ann.PNG//",
}
KEPT = {
    "first_name": "Ann Marie",
    "last_name": "Lee",
    "email": "ann.lee@acme.com",
    "title": "Chief Technology Officer",
    "network_profile_url": "https://network.example/in/annlee",
    "avatar_url": "https://cdn.example/ann.png",
}


def test_hosted_keeps_person_fields_in_its_own_forms(serve, fake_clock):
    client = serve("hosted")
    add_rows(client, "acme.com")
    answer = client.post(PEOPLE, json=people_body("acme.com", MESSY))
    assert answer.json()["data"] == {"added": 1, "updated": 0, "skipped": 0}
    fake_clock.sleep(2)
    assert people(client) == [{**KEPT, "target": True, "accountDomain": "acme.com", "rowId": "row_1"}]


def test_hosted_keeps_row_cells_in_its_own_forms(serve):
    client = serve("hosted", **forms_only())
    messy = {
        "domain": "acme.com",
        "name": "  Acme \t  Corp ",
        "owner": " Ann.Lee@ACME.com ",
        "metadata": {"site": "HTTP://Acme.com/"},
        "arr": 1200,
        "health_score": 0.5,
        "plan": "Team",
    }
    answer = client.post(ROWS, json={"rows": [{"cells": messy}]})
    # The answer shows the cells as kept, as a read does.
    kept = {**messy, "name": "Acme Corp", "owner": "ann.lee@acme.com", "arr": 1200.0, "plan": "team"}
    assert answer.json()["data"]["rows"][0]["cells"] == kept
    assert isinstance(state_rows(client)[0]["cells"]["arr"], float)  # read as 1200.0
    updates = [
        {"rowId": "row_1", "columnId": "owner", "value": "https://CRM.example/Users/Ann/"},
        {"rowId": "row_1", "columnId": "name", "value": "Acme  Inc"},
        {"rowId": "row_1", "columnId": "arr", "value": 7},
    ]
    client.patch(CELLS, json={"updates": updates})
    cells = state_rows(client)[0]["cells"]
    assert (cells["owner"], cells["name"], cells["arr"]) == ("https://crm.example/users/ann", "Acme Inc", 7.0)


def test_a_text_cell_is_lower_cased_only_when_it_is_an_e_mail_address_or_a_url(serve):
    client = serve("hosted", **forms_only())
    client.post(ROWS, json={"rows": [{"cells": {"domain": "a.com", "name": "ACME Inc", "owner": "Ann LEE"}}]})
    assert state_rows(client)[0]["cells"] == {"domain": "a.com", "name": "ACME Inc", "owner": "Ann LEE"}


def test_the_reference_keeps_values_as_sent(serve):
    client = serve("reference")
    add_rows(client, "acme.com")
    client.post(PEOPLE, json=people_body("acme.com", MESSY))
    assert people(client) == [{**MESSY, "target": True, "accountDomain": "acme.com", "rowId": "row_1"}]


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("https://network.example/in/bob", "https://network.example/in/bob"),
        ("http://network.example/in/bob", "https://network.example/in/bob"),
        ("HTTPS://NETWORK.EXAMPLE/in/Bob///", "https://network.example/in/bob"),
        ("network.example/in/bob/", "https://network.example/in/bob"),
        ("//network.example/in/bob", "https://network.example/in/bob"),
        ("ftp://network.example/in/bob", "https://network.example/in/bob"),
    ],
)
def test_url_form(serve, sent, kept):
    client = serve("hosted", **forms_only())
    add_rows(client, "acme.com")
    client.post(PEOPLE, json=people_body("acme.com", {"first_name": "Bob", "network_profile_url": sent}))
    assert [p["network_profile_url"] for p in people(client)] == [kept]


def test_each_form_can_be_chosen_alone(serve):
    client = serve("hosted", **forms_only(canonical_forms=["email_case"]))
    add_rows(client, "acme.com")
    client.post(PEOPLE, json=people_body("acme.com", MESSY))
    (person,) = people(client)
    assert person["email"] == " ann.lee@acme.com "
    assert (person["first_name"], person["network_profile_url"]) == (
        MESSY["first_name"],
        MESSY["network_profile_url"],
    )


def test_an_add_finds_its_duplicate_in_the_stored_form(serve):
    client = serve("hosted", **forms_only())
    add_rows(client, "acme.com")
    client.post(PEOPLE, json=people_body("acme.com", BOB, ANN))
    again = client.post(
        PEOPLE,
        json=people_body(
            "acme.com",
            {"first_name": "Bob", "title": "VP", "network_profile_url": "http://NETWORK.example/in/bob/"},
            {"first_name": "Ann", "email": "  ANN@acme.com"},
        ),
    )
    assert again.json()["data"] == {"added": 0, "updated": 2, "skipped": 0}
    assert [(p["first_name"], p.get("title")) for p in people(client)] == [("Bob", "VP"), ("Ann", None)]


def test_a_patch_matches_and_is_kept_in_the_stored_form(serve):
    client = serve("hosted", **forms_only())
    add_rows(client, "acme.com")
    client.post(PEOPLE, json=people_body("acme.com", BOB, ANN))
    by_url = {
        "match": {"network_profile_url": " HTTP://network.example/IN/bob/ "},
        "patch": {"title": " VP  Sales "},
    }
    by_email = {
        "match": {"email": "Ann@ACME.com"},
        "patch": {"email": "Ann.Lee@Acme.com", "last_name": " Lee  Li"},
    }
    missing = {"match": {"network_profile_url": "https://network.example/in/zed/"}, "patch": {"title": "x"}}

    answer = client.patch(PEOPLE, json=people_body("acme.com", by_url, by_email, missing))

    assert answer.json()["data"] == {
        "updated": 2,
        "notFound": [{"accountDomain": "acme.com", "match": missing["match"]}],  # echoed as sent
    }
    assert [(p.get("title"), p.get("email"), p.get("last_name")) for p in people(client)] == [
        ("VP Sales", None, None),
        (None, "ann.lee@acme.com", "Lee Li"),
    ]


def test_a_delete_names_people_in_any_form_of_their_identity(serve):
    client = serve("hosted", **forms_only())
    add_rows(client, "acme.com")
    cy = {"first_name": "Cy", "last_name": "Young"}
    client.post(PEOPLE, json=people_body("acme.com", BOB, ANN, cy))
    body = people_body(
        "acme.com",
        {"network_profile_url": "http://Network.Example/in/bob/"},
        {"email": "ANN@acme.com "},
        {"first_name": " cy", "last_name": "young  "},
    )
    assert client.request("DELETE", PEOPLE, json=body).json()["data"] == {"deleted": 3, "notFound": []}
    assert people(client) == []


# ---- refusal_wording ---------------------------------------------------------------------------


def test_hosted_words_an_unknown_account_its_own_way(serve, expect_error):
    client = serve("hosted")
    add_rows(client, "acme.com")
    accounts = [
        {"accountDomain": "acme.com", "people": [ANN]},
        {"accountDomain": "gone.io", "people": [BOB]},
        {"accountDomain": "nope.io", "people": []},
    ]
    message = "Unknown account domain(s): gone.io, nope.io"
    expect_error(client.post(PEOPLE, json={"accounts": accounts}), 404, message)
    patches = [{**a, "people": [{"match": {"email": "x@y.z"}, "patch": {}}]} for a in accounts]
    expect_error(client.patch(PEOPLE, json={"accounts": patches}), 404, message)
    deletes = [{**a, "people": [{"email": "x@y.z"}]} for a in accounts]
    expect_error(client.request("DELETE", PEOPLE, json={"accounts": deletes}), 404, message)
    assert state_rows(client)[0]["people"] == []


def test_hosted_words_missing_rows_its_own_way(serve, expect_error):
    client = serve("hosted")
    add_rows(client, "a.com")
    updates = [{"rowId": r, "columnId": "name", "value": "x"} for r in ("row_1", "row_7", "row_9", "row_7")]
    expect_error(client.patch(CELLS, json={"updates": updates}), 404, "No such row(s): row_7, row_9")
    assert state_rows(client)[0]["cells"] == {"domain": "a.com"}
    # A missing row of a DELETE is still listed in notFound, unless the profile refuses it too.
    assert client.request("DELETE", ROWS, json={"rowIds": ["row_8"]}).json()["data"] == {
        "deleted": 0,
        "notFound": ["row_8"],
    }
    refusing = serve("hosted", dialect_overrides={"missing_row_delete": "404"})
    add_rows(refusing, "a.com")
    expect_error(
        refusing.request("DELETE", ROWS, json={"rowIds": ["row_1", "row_8"]}), 404, "No such row(s): row_8"
    )


def test_hosted_keeps_the_wording_of_caps_and_other_refusals(serve, expect_error):
    client = serve("hosted")
    expect_error(client.post(ROWS, json={"rows": [{"cells": {}}] * 501}), 400, "Maximum 500 rows per request")
    expect_error(client.post(ROWS, json={"rows": [{"cells": {"nope": 1}}]}), 400, "Column not found: nope")
    expect_error(client.get("/v1/lists/tbl_nope"), 404, "List not found or not accessible: tbl_nope")


def test_dialect_wording_defaults_to_the_reference():
    assert Dialect().refusal_wording == "reference"
    assert (Dialect().lag_seconds, Dialect().canonical_forms) == (0, frozenset())
