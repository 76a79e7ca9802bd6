"""The people sync's outcomes file against the emulator: every person whose write did not end as
planned, failed (permanently or not), drifted or unconfirmed, named with the service's answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from listsync.client import ListSyncClient
from listsync.sync.people import sync_people
from listsync.sync.people.apply import PeopleApplyResult
from listsync.sync.people.outcomes import people_outcomes
from listsync.sync.people.plan import PeoplePlan, PlannedAdd
from listsync.sync.people.verify import PeopleVerification
from listsync.sync.settings import SyncSettings
from listsync.sync.steps import SyncFailedError

from ...support import LiveEmulator, read_jsonl
from ...support.tenants import PEOPLE_API_KEY as API_KEY
from ...support.tenants import PEOPLE_TABLE as TABLE
from ...support.tenants import people_in_list

COLUMN_MAP = {"Domain": "account_domain", "Email": "email", "First": "first_name", "Title": "title"}
ANN = {"Domain": "acme.com", "Email": "ann@acme.com", "First": "Ann", "Title": "CTO"}
BOB = {"Domain": "acme.com", "Email": "bob@acme.com", "First": "Bob", "Title": "CFO"}
CY = {"Domain": "beta.io", "Email": "cy@beta.io", "First": "Cy", "Title": "VP"}
EVE = {"Domain": "gamma.org", "Email": "eve@gamma.org", "First": "Eve", "Title": "Analyst"}
# Two people of an account the List has no row for.
ZED = {"Domain": "nowhere.example", "Email": "zed@nowhere.example", "First": "Zed", "Title": None}
YAN = {"Domain": "nowhere.example", "Email": "yan@nowhere.example", "First": "Yan", "Title": None}


def frames(*people: dict[str, Any]) -> list[pd.DataFrame]:
    return [pd.DataFrame(list(people), columns=list(COLUMN_MAP), dtype=object)]


def emails(request: httpx.Request) -> list[str]:
    body = json.loads(request.content)
    return [
        (person.get("match") or person).get("email", "")
        for account in body["accounts"]
        for person in account["people"]
    ]


def test_each_person_not_written_as_planned_is_in_the_outcomes_file_with_its_answer(
    emulator: LiveEmulator,
    client: ListSyncClient,
    tmp_path: Path,
    intercepting: Callable[..., httpx.BaseTransport],
) -> None:
    sync_people(client, TABLE, frames(ANN, BOB, CY, EVE), COLUMN_MAP)
    before = people_in_list(emulator)

    def service(request: httpx.Request) -> httpx.Response | None:
        """Ann's patch is applied with another title, Bob's answered 500 and never applied, and
        Cy's delete acknowledged and never applied."""
        if request.method == "PATCH" and emails(request) == ["bob@acme.com"]:
            return httpx.Response(500, json={"success": False, "error": "Internal error"})
        if request.method == "PATCH" and emails(request) == ["ann@acme.com"]:
            body = json.loads(request.content)
            body["accounts"][0]["people"][0]["patch"]["title"] = "COO"
            headers = {name: value for name, value in request.headers.items() if name != "content-length"}
            with httpx.Client() as direct:
                return direct.request(request.method, request.url, headers=headers, json=body)
        if request.method == "DELETE":
            return httpx.Response(200, json={"success": True, "data": {"deleted": 1, "notFound": []}})
        return None

    outcomes_path, plan_path = tmp_path / "outcomes.jsonl", tmp_path / "plan.jsonl"
    extract = [{**ANN, "Title": "CEO"}, {**BOB, "Title": "CTO"}, EVE, ZED, YAN]
    settings = SyncSettings(
        outcomes_path=outcomes_path, plan_path=plan_path, verify_timeout=0, max_delete_fraction=1.0
    )
    with (
        ListSyncClient(emulator.url, API_KEY, "usr_people", transport=intercepting(service)) as odd,
        pytest.raises(SyncFailedError) as raised,
    ):
        sync_people(
            odd,
            TABLE,
            frames(*extract),
            COLUMN_MAP,
            mode="mirror",
            delete_scope="list",
            chunk_size=1,
            settings=settings,
        )

    # What each person's write should have left, against what the List holds now.
    after = people_in_list(emulator)
    shown = {(domain, p["email"]): p for domain, people in after.items() for p in people}
    was = {(domain, p["email"]): p for domain, people in before.items() for p in people}
    expected = set()
    for person in extract:
        place = (person["Domain"], person["Email"].lower())
        if person["Domain"] not in after:
            expected.add(("failed", "add", *place, 404, False))
        elif shown[place].get("title") == was[place].get("title") != person["Title"]:
            expected.add(("failed", "patch", *place, 500, True))
        elif shown[place].get("title") != person["Title"]:
            expected.add(("drifted", "patch", *place, None, False))
    extract_places = {(person["Domain"], person["Email"].lower()) for person in extract}
    expected.update(
        ("unconfirmed", "delete", *place, None, True) for place in shown if place not in extract_places
    )
    lines = read_jsonl(outcomes_path)
    found = {
        (
            line["outcome"],
            line["action"],
            line["account_domain"],
            line["identity"].removeprefix("email:"),
            line["status"],
            line["curable"],
        )
        for line in lines
    }
    assert found == expected and len(lines) == len(expected) == 5
    # Each line names its write's line in the plan file, and says what happened.
    plan = read_jsonl(plan_path)
    for line in lines:
        planned = plan[line["plan_line"] - 1]
        assert (planned["action"], planned["account_domain"], planned["identity"]) == (
            line["action"],
            line["account_domain"],
            line["identity"],
        )
    messages = {line["identity"]: line["message"] for line in lines}
    assert "Account not found" in messages["email:zed@nowhere.example"]
    assert "-> 500: Internal error" in messages["email:bob@acme.com"]
    assert messages["email:ann@acme.com"] == "title is 'COO', expected 'CEO'"
    assert messages["email:cy@beta.io"] == "not shown by the List after 0 s"

    summary = raised.value.summary
    assert (summary["failed"], summary["failed_permanent"], summary["failed_curable"]) == (3, 2, 1)
    assert (summary["drift"], summary["unconfirmed"], summary["outcomes_path"]) == (1, 1, str(outcomes_path))
    message = str(raised.value)
    assert "2 failed permanently (2 x Account not found: nowhere.example" in message
    assert "write the account rows first" in message
    assert "1 failed on transient errors (1 x outcome unknown (PATCH" in message
    assert "re-run to retry them" in message and str(outcomes_path) in message


def test_a_run_that_wrote_everything_as_planned_leaves_no_outcomes_file_unless_asked(
    client: ListSyncClient, tmp_path: Path
) -> None:
    summary = sync_people(client, TABLE, frames(ANN, BOB), COLUMN_MAP)
    asked = tmp_path / "outcomes.jsonl"
    again = sync_people(
        client, TABLE, frames({**ANN, "Title": "CEO"}), COLUMN_MAP, settings=SyncSettings(outcomes_path=asked)
    )

    assert (summary["added"], summary["outcomes_path"]) == (2, None)
    assert (again["updated"], again["outcomes_path"], asked.read_text()) == (1, str(asked), "")


def test_a_failure_under_no_planned_write_is_named_all_the_same() -> None:
    ann = PlannedAdd("acme.com", "email:ann@acme.com", {"email": "ann@acme.com"})
    plan = PeoplePlan(adds=[ann])
    result = PeopleApplyResult(
        failed={"acme.com email:ann@acme.com": "invalid person: email", "b.io name:x y": "gone"}
    )

    lines = list(people_outcomes(plan, result, PeopleVerification(), numbered=False, verify_timeout=0))

    assert [
        (line["action"], line["account_domain"], line["identity"], line["curable"]) for line in lines
    ] == [
        ("add", "acme.com", "email:ann@acme.com", False),
        ("write", "b.io", "name:x y", True),
    ]
