"""Profiles: each knob of ``Dialect``, shown through HTTP on the preset that turns it.

The reference profile is what every other emulator test runs on; here each alternative reading is
served on the fake clock (2027-01-15T08:00:00Z) and shown to differ where its knob says.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from starlette.testclient import TestClient

from listsync.cli import main
from listsync.emulator import (
    PROFILES,
    Dialect,
    EmulatorConfig,
    FaultRule,
    demo_config,
    load_config,
)
from listsync.emulator.windows import FirstEventWindowLimiter

EVENTS = "/v1/events"
BATCH = "/v1/events/batch"
PEOPLE = "/v1/lists/tbl_accounts/targetable-people"
ROWS = "/v1/lists/tbl_accounts/rows"
CELLS = "/v1/lists/tbl_accounts/cells"

ANN = {"first_name": "Ann", "last_name": "Lee", "email": "ann@acme.com", "title": "CTO"}
BOB = {"first_name": "Bob", "network_profile_url": "https://network.example/in/bob"}
CY = {"first_name": "Cy", "phone_number": "+14155550100"}
EVE = {"first_name": "Eve", "title": "Engineer"}
GUS = {"first_name": "Gus", "email": "gus@globex.com"}


def add_rows(client: TestClient, *domains: str) -> None:
    response = client.post(ROWS, json={"rows": [{"cells": {"domain": d}} for d in domains]})
    assert response.status_code == 200, response.text


def add_people(client: TestClient, domain: str, *people: dict[str, Any]) -> None:
    response = client.post(PEOPLE, json={"accounts": [{"accountDomain": domain, "people": list(people)}]})
    assert response.status_code == 200, response.text


def patch_people(client: TestClient, domain: str, *entries: dict[str, Any]) -> Any:
    return client.patch(PEOPLE, json={"accounts": [{"accountDomain": domain, "people": list(entries)}]})


def delete_people(client: TestClient, domain: str, *identities: dict[str, Any]) -> Any:
    body = {"accounts": [{"accountDomain": domain, "people": list(identities)}]}
    return client.request("DELETE", PEOPLE, json=body)


def rows_in_state(client: TestClient) -> list[tuple[str, dict[str, Any], list[str]]]:
    rows = client.get("/_emulator/state").json()["lists"]["tbl_accounts"]["rows"]
    return [(r["id"], r["cells"], [p["first_name"] for p in r["people"]]) for r in rows]


def event(signal: str = "page_visit", **fields: Any) -> dict[str, Any]:
    return {"signal": signal, "identity": {"type": "account", "id": "a"}, "data": {"stage": "won"}, **fields}


# ---- the presets and how they are chosen -------------------------------------------------------


def test_reference_is_the_default_dialect_and_the_default_profile():
    assert PROFILES["reference"] == Dialect()
    assert demo_config().profile == "reference"
    assert demo_config().dialect is PROFILES["reference"]
    assert list(PROFILES) == ["reference", "lean", "strict", "rolling", "hosted", "busy"]


@pytest.mark.parametrize(
    ("name", "changed"),
    [
        (
            "lean",
            {
                "page_cap": 50,
                "page_cap_refuses": False,
                "people_paging": "beside",
                "people_more_flag": None,
                "write_counts": "none",
                "caps": {"accounts": 25, "people": 100, "rows": 100, "updates": 200, "row_deletes": 200},
                "missing_row_delete": "404",
                "invalid_key_status": 403,
                "list_not_found_status": 403,
            },
        ),
        (
            "strict",
            {
                "patch_match_keys": "email",
                "filter_names": {"contactable": "isContactable", "search": "q", "account_domain": "domain"},
                "list_id_field": "tableId",
                "single_ingest_status": 202,
                "write_counts": "renamed",
                "rate_limited_reference": False,
                "reset_format": "epoch",
            },
        ),
        (
            "rolling",
            {
                "windows": "first_event",
                "people_key": "items",
                "people_more_flag": "truncated",
                "unknown_accounts": "create",
                "page_cap": 200,
                "page_cap_refuses": False,
            },
        ),
        (
            "hosted",
            {
                "lag_seconds": 2.0,
                "canonical_forms": frozenset(("whitespace", "email_case", "url", "number")),
                "refusal_wording": "other",
            },
        ),
        ("busy", {"delete_reach": "all", "other_writer_share": 0.04}),
    ],
)
def test_each_preset_differs_from_the_reference_in_its_knobs_only(name, changed):
    dialect, reference = PROFILES[name], Dialect()
    differing = {
        field: getattr(dialect, field)
        for field in Dialect.model_fields
        if getattr(dialect, field) != getattr(reference, field)
    }
    assert differing == changed


def test_an_unknown_profile_is_refused_with_the_names():
    with pytest.raises(
        ValidationError, match="unknown profile 'nope'; one of reference, lean, strict, rolling, hosted, busy"
    ):
        EmulatorConfig(profile="nope")


def test_a_config_file_names_its_profile(tmp_path):
    path = tmp_path / "emulator.yaml"
    path.write_text(yaml.safe_dump({"secret_keys": ["sk_x"], "profile": "rolling"}))
    assert load_config(path).dialect is PROFILES["rolling"]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"filter_names": {"search": "target"}}, "target is a query parameter of the spec"),
        ({"filter_names": {"search": "contactable"}}, "filters share a name"),
        ({"filter_names": {"email": "e"}}, "unknown filter 'email'"),
        ({"caps": {"events": 5}}, "unknown cap 'events'"),
        ({"caps": {"rows": 0}}, "caps must be at least 1"),
        ({"lag_seconds": -1}, "greater than or equal to 0"),
        ({"canonical_forms": {"url", "phone"}}, "unknown canonical form 'phone'"),
        ({"refusal_wording": "terse"}, "refusal_wording"),
    ],
)
def test_dialects_refuse_knobs_that_cannot_be_served(fields, reason):
    with pytest.raises(ValidationError, match=reason):
        Dialect(**fields)


def test_unnamed_filters_and_caps_keep_the_reference_values():
    dialect = Dialect(filter_names={"search": "q"}, caps={"rows": 7})
    assert dialect.filter_names == {
        "contactable": "contactable",
        "search": "q",
        "account_domain": "accountDomain",
    }
    assert dialect.caps == {"accounts": 100, "people": 500, "rows": 7, "updates": 1000, "row_deletes": 1000}


def test_cli_refuses_an_unknown_profile_with_the_names(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["emulator", "--profile", "nope"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "argument --profile: invalid choice: 'nope'" in error
    # Python versions differ on quoting the choices; each name is listed either way.
    offered = error.partition("choose from")[2]
    assert [name for name in PROFILES if name in offered] == [
        "reference",
        "lean",
        "strict",
        "rolling",
        "hosted",
        "busy",
    ]


def test_cli_help_lists_the_profiles(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["emulator", "--help"])
    assert exited.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "one of reference, lean, strict, rolling, hosted, busy" in help_text


def test_cli_profile_overrides_the_configs(monkeypatch, tmp_path):
    served: list[EmulatorConfig] = []
    monkeypatch.setattr("listsync.emulator.server.serve_forever", lambda config, *_: served.append(config))
    path = tmp_path / "emulator.yaml"
    path.write_text(yaml.safe_dump({**demo_config().model_dump(), "profile": "lean"}))
    assert main(["emulator", "--config", str(path), "--profile", "strict"]) == 0
    assert main(["emulator", "--config", str(path)]) == 0
    assert main(["emulator"]) == 0
    assert [config.profile for config in served] == ["strict", "lean", "reference"]


# ---- page_cap, page_cap_refuses (A12, A22) -----------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "cap", "people_of"),
    [("lean", 50, lambda body: body["data"]), ("rolling", 200, lambda body: body["data"]["items"])],
)
def test_a_limit_above_the_cap_is_served_at_the_cap_without_an_error(serve, profile, cap, people_of):
    client = serve(profile)
    add_rows(client, "acme.com")
    add_people(client, "acme.com", *({"first_name": f"P{i}"} for i in range(cap // 2)))
    add_people(client, "acme.com", *({"first_name": f"Q{i}"} for i in range(cap // 2 + 10)))

    response = client.get(PEOPLE, params={"limit": 5000, "offset": 3})

    assert response.status_code == 200, response.text
    body = response.json()
    paging = body if profile == "lean" else body["data"]
    assert len(people_of(body)) == cap
    assert people_of(body)[0]["first_name"] == "P3"
    assert (paging["total"], paging["limit"], paging["offset"]) == (cap + 10, cap, 3)


def test_lean_pages_rows_at_its_cap_in_both_paged_modes(serve):
    client = serve("lean")
    add_rows(client, *(f"d{i}.com" for i in range(60)))
    for params in ({"limit": 100}, {"columnId": "domain", "operator": "is_not_empty", "limit": 1001}, {}):
        data = client.get(ROWS, params=params).json()["data"]
        assert (data["returned"], data["totalMatched"], data["truncated"]) == (50, 60, True)
        assert data["rows"][49]["id"] == "row_50"


def test_lean_default_page_is_its_cap(serve):
    client = serve("lean")
    add_rows(client, "acme.com")
    add_people(client, "acme.com", *({"first_name": f"P{i}"} for i in range(60)))
    body = client.get(PEOPLE).json()
    assert (len(body["data"]), body["limit"]) == (50, 50)


def test_a_refusing_cap_below_the_default_page_also_bounds_the_default(serve, monkeypatch, expect_error):
    monkeypatch.setitem(PROFILES, "tiny", Dialect(page_cap=10))
    client = serve("tiny")
    add_rows(client, *(f"d{i}.com" for i in range(12)))
    assert client.get(ROWS).json()["data"]["returned"] == 10
    expect_error(client.get(ROWS, params={"limit": 11}), 400, "limit must be an integer between 1 and 10")


# ---- people_paging, people_key, people_more_flag (A13) -----------------------------------------


def test_lean_puts_paging_beside_a_bare_array_without_a_more_flag(serve):
    client = serve("lean")
    add_rows(client, "acme.com")
    add_people(client, "acme.com", ANN, BOB, CY)

    body = client.get(PEOPLE, params={"limit": 2, "offset": 1}).json()

    assert body == {
        "success": True,
        "data": [
            {**BOB, "target": False, "accountDomain": "acme.com", "rowId": "row_1"},
            {**CY, "target": True, "accountDomain": "acme.com", "rowId": "row_1"},
        ],
        "total": 3,
        "offset": 1,
        "limit": 2,
    }


def test_rolling_names_the_array_items_and_the_more_flag_truncated(serve):
    client = serve("rolling")
    add_rows(client, "acme.com")
    add_people(client, "acme.com", ANN, BOB, CY)

    first = client.get(PEOPLE, params={"limit": 2}).json()["data"]
    last = client.get(PEOPLE, params={"limit": 2, "offset": 2}).json()["data"]

    assert set(first) == {"items", "total", "limit", "offset", "truncated"}
    assert ([p["first_name"] for p in first["items"]], first["truncated"]) == (["Ann", "Bob"], True)
    assert ([p["first_name"] for p in last["items"]], last["truncated"]) == (["Cy"], False)


# ---- filter_names (A12) ------------------------------------------------------------------------


@pytest.fixture
def strict_crowd(serve):
    client = serve("strict")
    add_rows(client, "acme.com", "globex.com")
    add_people(client, "acme.com", ANN, {**CY, "target": False}, EVE)
    add_people(client, "globex.com", GUS)
    return client


EVERYONE = ["Ann", "Cy", "Eve", "Gus"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"isContactable": "true"}, ["Ann", "Cy", "Gus"]),
        ({"isContactable": "false"}, ["Eve"]),
        ({"q": "ENGIN"}, ["Eve"]),
        ({"q": "globex"}, ["Gus"]),
        ({"domain": "www.acme.com"}, ["Ann", "Cy", "Eve"]),
        ({"target": "false"}, ["Cy", "Eve"]),
        ({"personas": "champion"}, []),
        # The reference names mean nothing to this server: ignored, so everyone comes back.
        ({"contactable": "false"}, EVERYONE),
        ({"search": "globex"}, EVERYONE),
        ({"accountDomain": "acme.com"}, EVERYONE),
    ],
)
def test_strict_honours_its_filter_names_and_ignores_others(strict_crowd, query, expected):
    response = strict_crowd.get(PEOPLE, params=query)
    assert [p["first_name"] for p in response.json()["data"]["people"]] == expected


def test_strict_names_its_own_parameter_in_a_refusal(strict_crowd, expect_error):
    expect_error(
        strict_crowd.get(PEOPLE, params={"isContactable": "yes"}), 400, "isContactable must be true or false"
    )


# ---- patch_match_keys (A17) --------------------------------------------------------------------


def test_strict_patch_refuses_a_match_without_email_and_changes_nothing(serve, expect_error):
    client = serve("strict")
    add_rows(client, "acme.com")
    add_people(client, "acme.com", ANN, {**BOB, "last_name": "Marley"})
    by_email = {"match": {"email": "ann@acme.com"}, "patch": {"title": "CEO"}}

    for match, key in (
        ({"network_profile_url": BOB["network_profile_url"]}, "network_profile_url"),
        ({"first_name": "Bob", "last_name": "Marley"}, "first_name"),
        ({"email": "", "phone_number": "+14155550100"}, "phone_number"),
    ):
        expect_error(
            patch_people(client, "acme.com", by_email, {"match": match, "patch": {"title": "VP"}}),
            400,
            f"accounts[0].people[1].match: unsupported key {key}; only email is supported",
        )
    expect_error(
        patch_people(client, "acme.com", {"match": {}, "patch": {}}),
        400,
        "accounts[0].people[0].match.email is required",
    )
    assert (
        client.get("/_emulator/state").json()["lists"]["tbl_accounts"]["rows"][0]["people"][0]["title"]
        == "CTO"
    )

    assert (
        patch_people(client, "acme.com", {**by_email, "match": {"email": "ANN@acme.com"}}).status_code == 200
    )
    assert (
        client.get("/_emulator/state").json()["lists"]["tbl_accounts"]["rows"][0]["people"][0]["title"]
        == "CEO"
    )


def test_strict_delete_still_takes_every_identity_of_the_spec(serve):
    client = serve("strict")
    add_rows(client, "acme.com")
    add_people(client, "acme.com", ANN, BOB, CY)
    response = delete_people(
        client,
        "acme.com",
        {"network_profile_url": BOB["network_profile_url"]},
        {"phone_number": CY["phone_number"]},
    )
    assert response.json()["data"]["removed"] == 2
    assert rows_in_state(client) == [("row_1", {"domain": "acme.com"}, ["Ann"])]


# ---- delete_reach (A38) and the other writer (A39) of busy -----------------------------------

ANN_TOO = {"first_name": "Ann", "last_name": "Lee", "phone_number": "+14155550101"}
CY_TOO = {"first_name": "Cyrus", "phone_number": CY["phone_number"]}


# The first match by name is Ann of the e-mail: a delete by name or phone may remove someone else.
@pytest.mark.parametrize(("profile", "left"), [("reference", ["Ann", "Cyrus"]), ("busy", [])])
def test_a_delete_by_phone_or_name_reaches_one_match_or_every_match(serve, profile, left):
    client = serve(profile)
    add_rows(client, "acme.com")
    # Ann (by e-mail) and another Ann Lee share a name; Cy and Cyrus a phone number.
    add_people(client, "acme.com", ANN, ANN_TOO, CY, CY_TOO)
    response = delete_people(
        client,
        "acme.com",
        {"first_name": "ann", "last_name": "LEE"},
        {"phone_number": CY["phone_number"]},
    )
    assert response.json()["data"]["deleted"] == 4 - len(left)
    assert rows_in_state(client) == [("row_1", {"domain": "acme.com"}, left)]


def people_page(client: TestClient, offset: int, limit: int = 10) -> dict[str, Any]:
    response = client.get(PEOPLE, params={"limit": limit, "offset": offset})
    return response.json()["data"]


def test_busy_moves_the_people_between_the_pages_of_a_read_at_most_once_an_interval(serve, fake_clock):
    client = serve("busy", dialect_overrides={"other_writer_share": 0.1, "other_writer_every": 60})
    add_rows(client, "acme.com", "globex.com")
    people = [{"first_name": f"P{n}", "email": f"p{n}@acme.com", "title": "T"} for n in range(20)]
    add_people(client, "acme.com", *people[:10])
    others = [{**p, "email": p["email"].replace("acme", "globex")} for p in people[10:]]
    add_people(client, "globex.com", *others)
    before = [(row[0], row[2]) for row in rows_in_state(client)]

    last_page = people_page(client, 10)  # no more to come: nothing moves
    assert not last_page["hasMore"] and [(r[0], r[2]) for r in rows_in_state(client)] == before

    first = people_page(client, 0)
    assert first["hasMore"] and first["total"] == 20
    state = client.get("/_emulator/state").json()["lists"]["tbl_accounts"]["rows"]
    held = [person for row in state for person in row["people"]]
    emails = {person["email"] for person in held}
    # 10% of 20: two deleted, two added (by e-mail, on existing accounts), two others edited.
    assert len(held) == 20
    assert len(emails - {p["email"] for p in [*people[:10], *others]}) == 2
    assert sum(person.get("title") == "Edited elsewhere" for person in held) == 2
    moved = client.get("/_emulator/state").json()

    people_page(client, 0)  # within the interval: the List stays as it is
    fake_clock.sleep(30)
    people_page(client, 0)
    assert client.get("/_emulator/state").json() == moved
    fake_clock.sleep(30)
    people_page(client, 0)
    assert client.get("/_emulator/state").json() != moved


def test_busy_moves_the_rows_between_the_pages_of_a_rows_read(serve):
    client = serve("busy", dialect_overrides={"other_writer_share": 0.1})
    add_rows(client, *(f"d{n}.com" for n in range(20)))
    response = client.get(ROWS, params={"columnId": "domain", "operator": "is_not_empty", "limit": 10})
    assert response.json()["data"]["truncated"]
    rows = client.get("/_emulator/state").json()["lists"]["tbl_accounts"]["rows"]
    domains = [row["cells"]["domain"] for row in rows]
    assert len(domains) == 20
    assert len(set(domains) - {f"d{n}.com" for n in range(20)}) == 2  # two added, two deleted
    assert sum("Edited elsewhere" in row["cells"].values() for row in rows) == 2


def test_no_other_writer_moves_a_list_on_the_reference_profile(serve):
    client = serve("reference")
    add_rows(client, *(f"d{n}.com" for n in range(20)))
    before = client.get("/_emulator/state").json()
    client.get(ROWS, params={"columnId": "domain", "operator": "is_not_empty", "limit": 10})
    assert client.get("/_emulator/state").json() == before


# ---- unknown_accounts (A14) --------------------------------------------------------------------


def test_rolling_post_creates_the_rows_of_unknown_accounts_once_per_domain(serve, fake_clock):
    client = serve("rolling")
    add_rows(client, "acme.com")
    fake_clock.sleep(30)
    accounts = [
        {"accountDomain": "WWW.New.io", "people": [ANN]},
        {"accountDomain": "acme.com", "people": [BOB]},
        {"accountDomain": "new.io", "people": [CY]},
    ]

    response = client.post(PEOPLE, json={"accounts": accounts})

    assert response.json() == {"success": True, "data": {"added": 3, "updated": 0, "skipped": 0}}
    assert rows_in_state(client) == [
        ("row_1", {"domain": "acme.com"}, ["Bob"]),
        ("row_2", {"domain": "WWW.New.io"}, ["Ann", "Cy"]),
    ]
    state = client.get("/_emulator/state").json()["lists"]["tbl_accounts"]["rows"]
    assert state[1]["updated_at"] == "2027-01-15T08:00:30.000Z"
    # The created row holds the domain like any other: the List's unique domains still hold.
    repeat = client.post(ROWS, json={"rows": [{"cells": {"domain": "new.io"}}]})
    assert (repeat.status_code, repeat.json()["error"]) == (
        409,
        "Duplicate value for unique column domain: new.io",
    )


def test_rolling_creates_no_row_when_the_request_is_refused(serve, expect_error):
    client = serve("rolling")
    body = {"accounts": [{"accountDomain": "new.io", "people": [ANN, {"last_name": "Lee"}]}]}
    expect_error(client.post(PEOPLE, json=body), 400, "accounts[0].people[1].first_name is required")
    assert rows_in_state(client) == []


def test_rolling_patch_and_delete_list_entries_of_unknown_accounts_as_not_found(serve):
    client = serve("rolling")
    add_rows(client, "acme.com")
    add_people(client, "acme.com", ANN)
    body = {
        "accounts": [
            {
                "accountDomain": "gone.io",
                "people": [{"match": {"email": "ann@acme.com"}, "patch": {"title": "x"}}],
            },
            {
                "accountDomain": "acme.com",
                "people": [{"match": {"email": "ann@acme.com"}, "patch": {"title": "CEO"}}],
            },
        ]
    }

    patched = client.patch(PEOPLE, json=body)
    deleted = delete_people(
        client, "Gone.io", {"email": "ann@acme.com"}, {"first_name": "A", "last_name": "B"}
    )

    assert patched.json()["data"] == {
        "updated": 1,
        "notFound": [{"accountDomain": "gone.io", "match": {"email": "ann@acme.com"}}],
    }
    assert deleted.json()["data"] == {
        "deleted": 0,
        "notFound": [
            {"accountDomain": "Gone.io", "match": {"email": "ann@acme.com"}},
            {"accountDomain": "Gone.io", "match": {"first_name": "A", "last_name": "B"}},
        ],
    }
    assert rows_in_state(client) == [("row_1", {"domain": "acme.com"}, ["Ann"])]


def test_rolling_still_validates_entries_of_unknown_accounts(serve, expect_error):
    client = serve("rolling")
    expect_error(
        delete_people(client, "gone.io", {"first_name": "Ann"}),
        400,
        "accounts[0].people[0] must name email, network_profile_url, phone_number, or first_name and "
        "last_name",
    )


# ---- windows (A5) ------------------------------------------------------------------------------


def reset_of(response: Any) -> tuple[str, str]:
    return response.headers["X-RateLimit-Remaining"], response.headers["X-RateLimit-Reset"]


def test_rolling_windows_open_at_a_signals_first_event_and_last_window_seconds(serve, fake_clock):
    client = serve("rolling")
    fake_clock.sleep(15.25)
    first = client.post(EVENTS, json=event("deal_stage"))
    assert reset_of(first) == ("29", "2027-01-15T08:01:15.250Z")  # first event + 60 s
    fake_clock.sleep(30)
    # Another signal's window opens at its own first event.
    assert reset_of(client.post(EVENTS, json=event("page_visit"))) == ("99", "2027-01-15T08:01:45.250Z")
    for _ in range(29):
        assert client.post(EVENTS, json=event("deal_stage")).status_code == 200

    fake_clock.sleep(20)  # 08:01:05.25: past the minute an aligned window would end at, not past this one
    limited = client.post(EVENTS, json=event("deal_stage"))
    assert limited.status_code == 429
    assert reset_of(limited) == ("0", "2027-01-15T08:01:15.250Z")
    assert limited.headers["Retry-After"] == "10"

    fake_clock.sleep(14.5)  # 08:01:19.75: the window has ended, and the next event opens a new one
    fresh = client.post(EVENTS, json=event("deal_stage"))
    assert fresh.status_code == 200
    assert reset_of(fresh) == ("29", "2027-01-15T08:02:19.750Z")


def test_rolling_batch_headers_give_the_earliest_window_end_and_the_lowest_remaining(serve, fake_clock):
    client = serve("rolling")
    fake_clock.sleep(10)
    client.post(EVENTS, json=event("deal_stage"))  # its window ends at 08:01:10
    fake_clock.sleep(20)
    response = client.post(BATCH, json={"events": [event("page_visit")] * 3 + [event("deal_stage")] * 2})
    assert response.status_code == 200
    assert (response.headers["X-RateLimit-Limit"], *reset_of(response)) == (
        "100",
        "27",
        "2027-01-15T08:01:10.000Z",
    )
    # page_visit's window opened with this batch.
    assert reset_of(client.post(EVENTS, json=event("page_visit"))) == ("96", "2027-01-15T08:01:30.000Z")


def test_first_event_limiter_reports_the_window_an_event_would_open():
    limiter = FirstEventWindowLimiter(60, clock=lambda: 0.0)
    assert limiter.window("sig", 10, 100.0).reset_at == 160.0
    limiter.take("sig", 10, 100.0)
    assert (limiter.window("sig", 10, 159.9).remaining, limiter.window("sig", 10, 159.9).reset_at) == (
        0,
        160.0,
    )
    assert (limiter.window("sig", 10, 160.0).remaining, limiter.window("sig", 10, 160.0).reset_at) == (
        10,
        220.0,
    )


# ---- reset_format (A6), single_ingest_status (A1), rate_limited_reference (A7) ----------------


def test_strict_sends_the_reset_as_whole_epoch_seconds_rounded_up(serve, fake_clock):
    client = serve("strict", window_seconds=2.5)
    response = client.post(EVENTS, json=event())
    assert response.headers["X-RateLimit-Reset"] == "1800000003"  # 1800000002.5, rounded up
    client.app.state.emulator.faults.add(
        [FaultRule(endpoint="*", kind="rate_limit", times=1, retry_after_seconds=7)]
    )
    fake_clock.sleep(0.25)
    forced = client.post(BATCH, json={"events": [event()]})
    assert (forced.status_code, forced.headers["X-RateLimit-Reset"]) == (429, "1800000008")


def test_strict_answers_a_single_ingestion_202_and_a_batch_200(serve):
    client = serve("strict")
    single = client.post(EVENTS, json=event(reference="r"))
    assert (single.status_code, single.json()["data"]["reference"]) == (202, "r")
    assert client.post(BATCH, json={"events": [event()]}).status_code == 200


def test_strict_rate_limited_entries_carry_no_reference(serve):
    client = serve("strict")
    client.post(BATCH, json={"events": [event("deal_stage")] * 29})
    events = [event("deal_stage", reference=f"s{i}") for i in range(3)]
    body = client.post(BATCH, json={"events": events}).json()
    assert [ack["reference"] for ack in body["data"]] == ["s0"]
    assert body["rate_limited"] == [{"signal_id": "sig_dealstage01"}] * 2


# ---- list_id_field (A27) -----------------------------------------------------------------------


def test_strict_names_a_lists_id_table_id(serve):
    client = serve("strict")
    listed = client.get("/v1/lists").json()["data"][0]
    described = client.get("/v1/lists/tbl_accounts").json()["data"]
    assert listed == described
    assert (listed["tableId"], "id" in listed, listed["targetableAccountColumn"]) == (
        "tbl_accounts",
        False,
        "domain",
    )


# ---- write_counts (A18) ------------------------------------------------------------------------


def every_write(client: TestClient) -> list[Any]:
    """One of each List write, in an order where each finds what the previous ones made."""
    return [
        client.post(ROWS, json={"rows": [{"cells": {"domain": "a.com"}}, {"cells": {"domain": "b.com"}}]}),
        client.patch(CELLS, json={"updates": [{"rowId": "row_1", "columnId": "name", "value": "A"}]}),
        client.post(PEOPLE, json={"accounts": [{"accountDomain": "a.com", "people": [ANN, BOB]}]}),
        client.post(
            PEOPLE,
            json={"accounts": [{"accountDomain": "a.com", "people": [ANN]}], "duplicateStrategy": "skip"},
        ),
        patch_people(client, "a.com", {"match": {"email": "ann@acme.com"}, "patch": {"title": "CEO"}}),
        patch_people(client, "a.com", {"match": {"email": "zed@acme.com"}, "patch": {"title": "x"}}),
        delete_people(client, "a.com", {"email": "ann@acme.com"}, {"email": "zed@acme.com"}),
        client.request("DELETE", ROWS, json={"rowIds": ["row_2"]}),
    ]


ZED_MISSING = {"accountDomain": "a.com", "match": {"email": "zed@acme.com"}}


def test_strict_renames_the_counts_and_returns_new_row_ids(serve):
    answers = every_write(serve("strict"))
    assert [a.json() for a in answers] == [
        {"success": True, "data": {"rowIds": ["row_1", "row_2"], "created": 2}},
        {"success": True, "data": {"modified": 1}},
        {"success": True, "data": {"created": 2, "modified": 0, "unchanged": 0}},
        {"success": True, "data": {"created": 0, "modified": 0, "unchanged": 1}},
        {"success": True, "data": {"modified": 1, "missing": []}},
        {"success": True, "data": {"modified": 0, "missing": [ZED_MISSING]}},
        {"success": True, "data": {"removed": 1, "missing": [ZED_MISSING]}},
        {"success": True, "data": {"removed": 1, "missing": []}},
    ]


def test_lean_answers_every_write_with_success_alone(serve):
    client = serve("lean")
    answers = every_write(client)
    assert [(a.status_code, a.json()) for a in answers] == [(200, {"success": True})] * len(answers)
    assert rows_in_state(client) == [("row_1", {"domain": "a.com", "name": "A"}, ["Bob"])]


# ---- invalid_key_status (A2), list_not_found_status (A10) -------------------------------------


def test_lean_refuses_an_invalid_key_403_and_a_missing_one_401(serve, expect_error):
    client = serve("lean")
    wrong = {"Authorization": "Bearer sk_wrong"}
    expect_error(client.post(EVENTS, json=event(), headers=wrong), 403, "Invalid API key")
    expect_error(client.get("/v1/lists", headers=wrong), 403, "Invalid API key")
    expect_error(client.get("/v1/lists", headers={"Authorization": ""}), 401, "Missing API key")


def test_lean_answers_an_unknown_list_403(serve, expect_error):
    client = serve("lean")
    message = "List not found or not accessible: tbl_nope"
    expect_error(client.get("/v1/lists/tbl_nope/targetable-people"), 403, message)
    expect_error(client.post("/v1/lists/tbl_nope/rows", json={"rows": [{"cells": {}}]}), 403, message)


# ---- missing_row_delete (A19) ------------------------------------------------------------------


def test_lean_refuses_a_row_delete_naming_a_missing_row_and_deletes_nothing(serve, expect_error):
    client = serve("lean")
    add_rows(client, "a.com", "b.com")
    response = client.request("DELETE", ROWS, json={"rowIds": ["row_1", "row_7", "row_9", "row_7"]})
    expect_error(response, 404, "Rows not found: row_7, row_9")
    assert [row_id for row_id, _, _ in rows_in_state(client)] == ["row_1", "row_2"]
    assert client.request("DELETE", ROWS, json={"rowIds": ["row_1"]}).status_code == 200
    assert [row_id for row_id, _, _ in rows_in_state(client)] == ["row_2"]


# ---- caps (A21) --------------------------------------------------------------------------------


ACCOUNT = {"accountDomain": "a.com", "people": []}
UPDATE = {"rowId": "row_1", "columnId": "name", "value": "x"}


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("POST", PEOPLE, {"accounts": [ACCOUNT] * 26}, "Maximum 25 accounts per request"),
        (
            "POST",
            PEOPLE,
            {"accounts": [{**ACCOUNT, "people": [ANN] * 101}]},
            "Maximum 100 people per request",
        ),
        ("POST", ROWS, {"rows": [{"cells": {}}] * 101}, "Maximum 100 rows per request"),
        ("PATCH", CELLS, {"updates": [UPDATE] * 201}, "Maximum 200 updates per request"),
        ("DELETE", ROWS, {"rowIds": ["row_1"] * 201}, "Maximum 200 rowIds per request"),
    ],
)
def test_lean_caps_are_smaller(serve, expect_error, method, path, body, message):
    client = serve("lean")
    add_rows(client, "a.com")
    expect_error(client.request(method, path, json=body), 400, message)
    assert rows_in_state(client) == [("row_1", {"domain": "a.com"}, [])]


def test_lean_accepts_a_request_at_its_caps(serve):
    client = serve("lean")
    assert client.post(ROWS, json={"rows": [{"cells": {}}] * 100}).status_code == 200
    assert client.patch(CELLS, json={"updates": [UPDATE] * 200}).status_code == 200
