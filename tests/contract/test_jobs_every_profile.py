"""Contract: the three jobs end to end against every emulator profile.

``sync_people``, ``upsert_rows`` and ``ingest_events`` run against a fresh emulator of each of
:data:`listsync.emulator.PROFILES` on which the test's writes are the List's only ones
(``SOLE_WRITER_PROFILES``: a new profile is picked up here without a change; ``busy``, whose List
another writer moves, has ``test_shared_list.py``). Every test
states its expectations from the extract it built and checks them against what the emulator
holds and counted, never against what the job says about itself:

- the List after a run holds exactly the extract (the extract normalised by small view functions
  written here, the List as it holds it), and no account ever holds one person twice;
- the summary's counts equal the differences between the emulator's state before and after the
  run, and its request counts equal the requests the emulator answered;
- a re-run of the same extract sends no write at all;
- a refused item fails alone, with the service's reason, and the rest of its request is written.

The last two tests go beyond a clean run: a people write whose answer is lost on the way back.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import pytest

from listsync.emulator import PROFILES, EmulatorConfig, FaultRule, ListConfig, SignalConfig
from listsync.extract.rejects import Rejects
from listsync.signals.columns import EventMapping
from listsync.signals.ingest import ingest_events
from listsync.sync.people import sync_people
from listsync.sync.rows import upsert_rows
from listsync.sync.settings import SyncSettings
from listsync.sync.steps import SyncFailedError

from ..support import SOLE_WRITER_PROFILES, LiveEmulator

API_KEY = "sk_contract_jobs"
USER = "usr_contract"
PEOPLE_TABLE = "tbl_people"
ROWS_TABLE = "tbl_rows"
PLAN_OPTIONS = ("free", "team", "enterprise")
SIGNALS = {"page_visit": "Event", "seats_used": "Metric", "deal_stage": "State"}

PEOPLE_WRITES = {
    "add": "POST /v1/lists/{tableId}/targetable-people",
    "patch": "PATCH /v1/lists/{tableId}/targetable-people",
    "delete": "DELETE /v1/lists/{tableId}/targetable-people",
}
ROW_WRITES = {
    "add_rows": "POST /v1/lists/{tableId}/rows",
    "update_cells": "PATCH /v1/lists/{tableId}/cells",
    "delete_rows": "DELETE /v1/lists/{tableId}/rows",
}
EVENT_ENDPOINTS = ("POST /v1/events", "POST /v1/events/batch")


def tenant(profile: str) -> EmulatorConfig:
    """One tenant for every test: a people List keyed by account domain, a typed rows List, and
    one signal of each type."""
    return EmulatorConfig(
        profile=profile,
        secret_keys=[API_KEY],
        users=[USER],
        signals=[
            SignalConfig(slug=slug, id=f"sig_{slug}", type=kind)  # type: ignore[arg-type]
            for slug, kind in SIGNALS.items()
        ],
        lists=[
            ListConfig.model_validate(
                {
                    "id": PEOPLE_TABLE,
                    "account_column": "domain",
                    "unique_domains": True,
                    "columns": [{"id": "domain"}, {"id": "name"}],
                }
            ),
            ListConfig.model_validate(
                {
                    "id": ROWS_TABLE,
                    "account_column": "domain",
                    "unique_domains": True,
                    "columns": [
                        {"id": "domain", "type": "text"},
                        {"id": "name", "type": "text"},
                        {"id": "arr", "type": "number"},
                        {
                            "id": "plan",
                            "type": "enum",
                            "options": [{"key": key, "label": key.title()} for key in PLAN_OPTIONS],
                        },
                        {"id": "seats", "type": "number"},
                        {"id": "active", "type": "boolean"},
                        {"id": "renewal", "type": "date"},
                        {"id": "meta", "type": "json"},
                        {"id": "contact", "type": "text"},
                        {"id": "website", "type": "text"},
                    ],
                }
            ),
        ],
    )


def requests_since(live: LiveEmulator, before: Counter[str], endpoints: Mapping[str, str]) -> dict[str, int]:
    """Requests the emulator answered on each endpoint since ``before`` (a copy of its counters)."""
    now = live.stats.requests
    return {kind: now[endpoint] - before[endpoint] for kind, endpoint in endpoints.items()}


def sent(summary: Mapping[str, Any], kinds: Iterable[str]) -> dict[str, int]:
    return {kind: summary["requests"][kind] for kind in kinds}


# ---- views: both sides normalised the same way, by these rules and not the job's ---------------


def bare_domain(value: str) -> str:
    host = re.sub(r"^[a-z]+://", "", value.strip().lower()).split("/", 1)[0]
    return host.removeprefix("www.")


def profile_url(value: str) -> str:
    parts = urlsplit(value.strip())
    return f"https://{(parts.hostname or '').lower()}{parts.path.rstrip('/')}"


def phone(value: str) -> str:
    digits = re.sub(r"\D", "", value)
    return "+" + digits if value.strip().startswith("+") else "+1" + digits


def identity(person: Mapping[str, Any]) -> str:
    """Email, else profile URL, else phone, else first + last name (spec §4.6)."""
    if person.get("email"):
        return "email:" + person["email"].lower()
    if person.get("network_profile_url"):
        return "url:" + person["network_profile_url"]
    if person.get("phone_number"):
        return "phone:" + person["phone_number"]
    return f"name:{person['first_name'].lower()} {(person.get('last_name') or '').lower()}"


PERSON_COLUMNS = {
    "Company": "account_domain",
    "Email": "email",
    "First": "first_name",
    "Last": "last_name",
    "Title": "title",
    "Phone": "phone_number",
    "Profile": "network_profile_url",
}
PERSON_FIELDS = [field for field in PERSON_COLUMNS.values() if field != "account_domain"]

PeopleView = dict[tuple[str, str], dict[str, Any]]


def normalised_person(person: Mapping[str, Any]) -> dict[str, Any]:
    """The mapped fields of a person, normalised: e-mail lower-cased, phone E.164, canonical URL."""
    view = {name: person[name] for name in PERSON_FIELDS if person.get(name) not in (None, "")}
    if "email" in view:
        view["email"] = view["email"].strip().lower()
    if "phone_number" in view:
        view["phone_number"] = phone(view["phone_number"])
    if "network_profile_url" in view:
        view["network_profile_url"] = profile_url(view["network_profile_url"])
    return view


def in_service_form(view: PeopleView, profile: str) -> PeopleView:
    """A people view with its values as the profile's service keeps them (its canonical forms),
    by this test's own rules: white space folded, e-mails and URLs in lower case, URLs over https
    without a trailing slash."""
    forms = PROFILES[profile].canonical_forms

    def kept(name: str, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if "whitespace" in forms:
            value = " ".join(value.split())
        if name == "email" and "email_case" in forms:
            value = value.lower()
        if name == "network_profile_url" and "url" in forms:
            value = re.sub(r"^http://", "https://", value.lower()).rstrip("/")
        return value

    kept_view: PeopleView = {}
    for (domain, _), person in view.items():
        in_form = {name: kept(name, value) for name, value in person.items()}
        kept_view[domain, identity(in_form)] = in_form
    return kept_view


def extract_people_view(frame: pd.DataFrame) -> PeopleView:
    view: PeopleView = {}
    for raw in frame.to_dict("records"):
        person = normalised_person({PERSON_COLUMNS[str(column)]: value for column, value in raw.items()})
        key = (bare_domain(raw["Company"]), identity(person))
        assert key not in view, f"the test's extract repeats {key}"
        view[key] = person
    return view


def people_in(live: LiveEmulator) -> list[tuple[str, dict[str, Any]]]:
    """(account domain, mapped fields) of every person the emulator holds, as it holds them: the
    job sends normalised values (A26), so they are compared with the normalised extract as is."""
    rows = live.state.snapshot()["lists"][PEOPLE_TABLE]["rows"]
    return [
        (bare_domain(row["accountDomain"]), {name: p[name] for name in PERSON_FIELDS if name in p})
        for row in rows
        for p in row["people"]
    ]


def list_people_view(live: LiveEmulator) -> PeopleView:
    """The List's people by (domain, identity); fails when an account holds one identity twice."""
    people = people_in(live)
    keys = Counter((domain, identity(person)) for domain, person in people)
    repeated = {key: count for key, count in keys.items() if count > 1}
    assert not repeated, f"duplicate people in the List: {repeated}"
    return {(domain, identity(person)): person for domain, person in people}


# ---- the people extract ----------------------------------------------------------------------

ACCOUNTS = [f"company{index:03d}.com" for index in range(100)]
FIRST_NAMES = ("Ann", "Bob", "Cy", "Dee", "Eve", "Finn", "Gus", "Hal", "Ida", "Jo")


def account_of(number: int) -> str:
    """25 people of every kind per account."""
    return ACCOUNTS[number // 25 % len(ACCOUNTS)]


def person_row(number: int, *, variant: int = 0) -> dict[str, Any]:
    """Extract row of person ``number``: 20% are known by phone or name only, the rest by e-mail.

    Written messily on purpose (domain forms, e-mail case, local phone formats, URL schemes and
    slashes); the views normalise them. ``variant`` changes some people for the second extract.
    """
    account = account_of(number)
    first, last = FIRST_NAMES[number % len(FIRST_NAMES)], f"Lee{number:04d}"
    row: dict[str, Any] = dict.fromkeys(PERSON_COLUMNS)
    row.update(
        Company=f"https://www.{account.upper()}/" if number % 9 == 0 else account,
        First=first,
        Last=last,
        # Some titles carry a double space, which a service may keep as one.
        Title=(f"Title  {number % 7}" if number % 13 == 0 else f"Title {number % 7}") if number % 4 else None,
    )
    if number % 10 == 0:  # phone only; half of them without a last name
        row.update(Phone=f"(415) 200-{number:04d}", Last=None if number % 20 == 0 else last)
    elif number % 10 == 5:  # name only
        pass
    else:
        email = f"{first}.{last}@{account}"
        row["Email"] = email.lower() if number % 2 else f"{first}.{last}@{account.title()}"
        if number % 3 == 0:
            row["Phone"] = f"+1 415 300 {number:04d}"
        if number % 40 == 1:
            scheme = "http" if number % 80 == 1 else "https"
            row["Profile"] = f"{scheme}://WWW.Network.example/in/{first}-{last}/"
    if variant:
        row = changed_person_row(number, row)
    return row


def changed_person_row(number: int, row: dict[str, Any]) -> dict[str, Any]:
    """The second extract's version of a person (the caller leaves out the removed ones)."""
    bare = number % 10 in (0, 5)
    if bare and number % 100 in (10, 15):  # an e-mail appears: a new identity
        row["Email"] = f"new.{number:04d}@{account_of(number)}"
    if number % 10 == 0 and number % 100 == 20:  # a phone-only person's number changes
        row["Phone"] = f"(415) 201-{number:04d}"
    if bare and number % 100 in (30, 35):  # a title changes: patched by phone / by name
        row["Title"] = f"Head of {number}"
    if number % 10 == 0 and number % 100 == 50:  # phone-only with a last name: it changes
        row["Last"] = f"Changed{number}"
    if not bare and number % 20 == 1:  # e-mail people: title changes
        row["Title"] = f"Chief {number}"
    if not bare and number % 100 == 2 and row["Phone"] is None:  # e-mail people: a phone appears
        row["Phone"] = f"(415) 400-{number:04d}"
    return row


def removed(number: int) -> bool:
    """People left out of the second extract: some by e-mail, some known only by phone or name."""
    return number % 50 == 3 or number % 100 in (0, 5)


def people_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    first = [person_row(number) for number in range(2500)]
    second = [person_row(number, variant=1) for number in range(2500) if not removed(number)]
    # New people: most by e-mail, some by phone or name only.
    for number in range(2500, 2530):
        second.append(person_row(number))
    return people_frame(first), people_frame(second)


def people_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    # dtype=object, as read_extract gives: values keep their Python types, None stays None.
    return pd.DataFrame(list(rows), columns=list(PERSON_COLUMNS), dtype=object)


def start_people_list(live: LiveEmulator, domains: Iterable[str]) -> None:
    """Add the account rows of ``domains`` to the people List, then clear the counters."""
    live.seed(PEOPLE_TABLE, *({"domain": domain} for domain in domains))


def run_people(live: LiveEmulator, frame: pd.DataFrame, **options: Any) -> dict[str, Any]:
    with live.client() as client:
        return sync_people(client, PEOPLE_TABLE, [frame], PERSON_COLUMNS, **options)


def check_people_run(
    summary: Mapping[str, Any], before: PeopleView, after: PeopleView, writes: Mapping[str, int]
) -> None:
    """The summary agrees with what the emulator's state and counters show of the run.

    A person the List knew only by phone or name who gains an e-mail changes identity, so the
    views key them differently before and after; the sync patches them (see :func:`same_person`).
    """
    added, gone = after.keys() - before.keys(), before.keys() - after.keys()
    changed = {key for key in after.keys() & before.keys() if after[key] != before[key]}
    renamed = renamed_people(before, after)
    added -= {new for _, new in renamed}
    gone -= {old for old, _ in renamed}
    assert {name: summary[name] for name in ("added", "updated", "deleted", "failed", "drift")} == {
        "added": len(added),
        "updated": len(changed) + len(renamed),
        "deleted": len(gone),
        "failed": 0,
        "drift": 0,
    }, summary
    assert summary["unchanged"] == len(after.keys() & before.keys()) - len(changed)
    assert sent(summary, PEOPLE_WRITES) == writes
    assert summary["verified"] == len(added) + len(changed) + len(renamed) + len(gone)


def renamed_people(before: PeopleView, after: PeopleView) -> set[tuple[Any, Any]]:
    """(old key, new key) of the people whose identity changed, by :func:`same_person`."""
    added, gone = after.keys() - before.keys(), before.keys() - after.keys()
    return {
        (old, new)
        for old in gone
        for new in added
        if old[0] == new[0] and same_person(before[old], after[new])
    }


def same_person(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a List person known only by phone (else by name) is ``new``: the sync's rule."""
    if old.get("email") or old.get("network_profile_url"):
        return False
    if old.get("phone_number"):
        return old["phone_number"] == new.get("phone_number")
    return (old.get("first_name"), old.get("last_name")) == (new.get("first_name"), new.get("last_name"))


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_people_mirror_sync_fills_converges_and_reruns_without_writes(
    live_emulator: Callable[..., LiveEmulator], profile: str, fake_clock: Any, tmp_path: Path
) -> None:
    live = live_emulator(tenant(profile))
    start_people_list(live, ACCOUNTS)
    first, second = people_frames()
    wanted = in_service_form(extract_people_view(first), profile)
    changed = in_service_form(extract_people_view(second), profile)
    bare = [key for key in wanted if not key[1].startswith(("email:", "url:"))]
    assert len(wanted) == 2500 and len(bare) == 500  # the extract is what the case asks for
    settings = SyncSettings(state_path=tmp_path / "people.state")

    # First run: fills the List, and waits for its writes to show.
    counters = live.stats.requests.copy()
    summary = run_people(live, first, mode="mirror", settings=settings)
    filled = list_people_view(live)
    assert filled == wanted
    check_people_run(summary, {}, filled, requests_since(live, counters, PEOPLE_WRITES))
    assert summary["unconfirmed"] == 0
    assert (
        summary["service_forms"] > 0 if PROFILES[profile].canonical_forms else summary["service_forms"] == 0
    )

    # Second and third runs, half a second apart: nothing to write.
    for _ in range(2):
        fake_clock.sleep(0.5)
        counters = live.stats.requests.copy()
        again = run_people(live, first, mode="mirror", settings=settings)
        assert requests_since(live, counters, PEOPLE_WRITES) == dict.fromkeys(PEOPLE_WRITES, 0)
        assert (again["unchanged"], again["added"], again["updated"], again["deleted"]) == (2500, 0, 0, 0)
        assert list_people_view(live) == wanted

    # A changed extract: removals, changes of every kind of person, new e-mails, new people.
    counters = live.stats.requests.copy()
    summary = run_people(live, second, mode="mirror", settings=settings)
    converged = list_people_view(live)
    assert converged == changed
    check_people_run(summary, filled, converged, requests_since(live, counters, PEOPLE_WRITES))
    patched = {key for key in filled.keys() & converged.keys() if filled[key] != converged[key]}
    by_other_keys = {key for key in patched if key[1].startswith(("phone:", "name:"))}
    by_other_keys |= {old for old, _ in renamed_people(filled, converged)}  # all bare, by construction
    assert by_other_keys, "people known by phone or name only were patched"
    # Patches by phone or name are replaced (delete + add) exactly where the service refuses them.
    refuses = PROFILES[profile].patch_match_keys == "email"
    assert summary["replaced"] == (len(by_other_keys) if refuses else 0)
    gone = filled.keys() - changed.keys()
    assert {key for key in gone if key[1].startswith(("phone:", "name:"))}, "bare people were removed"
    assert not gone & converged.keys()  # mirror deletes happened

    # Next run: nothing to write again.
    fake_clock.sleep(0.5)
    counters = live.stats.requests.copy()
    last = run_people(live, second, mode="mirror", settings=settings)
    assert requests_since(live, counters, PEOPLE_WRITES) == dict.fromkeys(PEOPLE_WRITES, 0)
    assert (last["unchanged"], last["requests"]["total"], last["edited_in_list"]) == (len(changed), 0, 0)
    assert list_people_view(live) == changed

    # Someone edits a person in the List by hand: the next mirror run puts the extract back.
    domain, key = next(key for key in changed if key[1].startswith("email:"))
    with live.client() as client:
        client.update_people(
            PEOPLE_TABLE,
            [
                {
                    "accountDomain": domain,
                    "people": [{"match": {"email": key[6:]}, "patch": {"title": "Edited"}}],
                }
            ],
        )
    fake_clock.sleep(PROFILES[profile].lag_seconds + 0.5)
    counters = live.stats.requests.copy()
    repaired = run_people(live, second, mode="mirror", settings=settings)
    assert requests_since(live, counters, PEOPLE_WRITES) == {"add": 0, "patch": 1, "delete": 0}
    assert (repaired["edited_in_list"], repaired["updated"], repaired["drift"]) == (1, 1, 0)
    assert list_people_view(live) == changed


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_a_patch_matched_by_phone_is_applied_and_fails_nothing_else(
    live_emulator: Callable[..., LiveEmulator], profile: str
) -> None:
    live = live_emulator(tenant(profile))
    accounts = ACCOUNTS[:3]
    start_people_list(live, accounts)
    numbers = [0, 1, 2, 10, 11, 12, 21, 22, 31, 32, 13]  # phone-only people: 0 and 10; the rest by e-mail
    first = people_frame({**person_row(n), "Company": accounts[n % 3]} for n in numbers)
    run_people(live, first)
    # One person known by phone only and several known by e-mail change their title, all on one
    # account (so the job re-reads it through the account filter, which some profiles ignore).
    changes = {10: "Head of Ops", 1: "VP One", 13: "VP Two", 22: "VP Three", 31: "VP Four"}
    second = first.copy()
    for position, number in enumerate(numbers):
        if number in changes:
            second.at[position, "Title"] = changes[number]
    before = list_people_view(live)
    counters = live.stats.requests.copy()
    statuses = dict(live.stats.statuses[PEOPLE_WRITES["patch"]])

    summary = run_people(live, second)

    after = list_people_view(live)
    assert after == in_service_form(extract_people_view(second), profile)
    phone_key = (accounts[10 % 3], "phone:+14152000010")
    assert after[phone_key]["title"] == "Head of Ops"
    check_people_run(summary, before, after, requests_since(live, counters, PEOPLE_WRITES))
    # The service refuses a match by phone exactly when it takes e-mail matches only.
    refuses = PROFILES[profile].patch_match_keys == "email"
    refused = live.stats.statuses[PEOPLE_WRITES["patch"]]["400"] - statuses.get("400", 0)
    assert refused == (1 if refuses else 0)
    assert summary["replaced"] == (1 if refuses else 0)
    assert summary["failure_reasons"] == {}


# ---- rows ------------------------------------------------------------------------------------

ROW_COLUMNS = {
    "Domain": "domain",
    "Name": "name",
    "ARR": "arr",
    "Plan": "plan",
    "Seats": "seats",
    "Active": "active",
    "Renewal": "renewal",
    "Meta": "meta",
}
RowsView = dict[str, dict[str, Any]]


def account_row(number: int, *, variant: int = 0) -> dict[str, Any]:
    """Extract row ``number`` of the rows List, typed as a warehouse gives it (ints, decimals,
    booleans, dates or ISO text, JSON objects, None for a missing value); ``variant`` changes some
    cells for the second extract."""
    domain = f"row{number:03d}.io"
    renewal = dt.date(2027, number % 12 + 1, number % 28 + 1)
    row = {
        "Domain": f"https://www.{domain.upper()}/" if number % 9 == 0 else domain,
        "Name": f"Row {number}",
        "ARR": (number * 100, Decimal(number) * Decimal("1.5"), None)[number % 3],
        "Plan": PLAN_OPTIONS[number % 3],
        "Seats": number % 50 + 1,
        "Active": None if number % 7 == 0 else number % 2 == 0,
        "Renewal": None if number % 5 == 0 else renewal if number % 2 else renewal.isoformat(),
        "Meta": {"tier": number % 4, "tags": ["a", f"t{number % 5}"]} if number % 4 else None,
    }
    if variant:
        if number % 7 == 0:
            row["Name"] = f"Row {number} renamed"
        if number % 11 == 0:
            row["Plan"] = PLAN_OPTIONS[(number + 1) % 3]
        if number % 13 == 0:
            row["ARR"] = number * 10 + 1  # a value where there was none, or another value
        if number % 17 == 0:
            row["Active"] = row["Active"] is not True  # None or False becomes True
        if number % 19 == 0:
            row["Meta"] = {"tier": 9, "tags": []}
    return row


def rows_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    # dtype=object, as read_extract gives: values keep their Python types, None stays None.
    return pd.DataFrame(list(rows), columns=list(ROW_COLUMNS), dtype=object)


def extract_rows_view(frame: pd.DataFrame) -> RowsView:
    view: RowsView = {}
    for raw in frame.to_dict("records"):
        cells = {ROW_COLUMNS[str(column)]: value for column, value in raw.items() if value is not None}
        cells["domain"] = bare_domain(cells["domain"])
        if isinstance(cells.get("renewal"), dt.date):
            cells["renewal"] = cells["renewal"].isoformat()
        assert cells["domain"] not in view, f"the test's extract repeats {cells['domain']}"
        view[cells["domain"]] = cells
    return view


def list_rows_view(live: LiveEmulator) -> RowsView:
    """The List's rows by domain, null cells left out; fails when a domain is held twice."""
    rows = live.state.snapshot()["lists"][ROWS_TABLE]["rows"]
    domains = Counter(row["cells"].get("domain") for row in rows)
    assert all(count == 1 for count in domains.values()), f"duplicate rows: {domains}"
    return {
        row["cells"]["domain"]: {column: value for column, value in row["cells"].items() if value is not None}
        for row in rows
    }


def run_rows(
    live: LiveEmulator, frame: pd.DataFrame, column_map: Mapping[str, str] = ROW_COLUMNS, **options: Any
) -> dict[str, Any]:
    with live.client() as client:
        return upsert_rows(client, ROWS_TABLE, [frame], key_column="domain", column_map=column_map, **options)


def check_rows_run(
    summary: Mapping[str, Any], before: RowsView, after: RowsView, writes: Mapping[str, int]
) -> None:
    """The summary agrees with what the emulator's state and counters show of the run."""
    added, gone = after.keys() - before.keys(), before.keys() - after.keys()
    common = after.keys() & before.keys()
    cells = {
        (key, column)
        for key in common
        for column in before[key].keys() | after[key].keys()
        if before[key].get(column) != after[key].get(column)
    }
    changed_rows = {key for key, _ in cells}
    counts = ("added", "updated", "cells_updated", "deleted", "unchanged", "failed", "drift")
    assert {name: summary[name] for name in counts} == {
        "added": len(added),
        "updated": len(changed_rows),
        "cells_updated": len(cells),
        "deleted": len(gone),
        "unchanged": len(common) - len(changed_rows),
        "failed": 0,
        "drift": 0,
    }, summary
    assert sent(summary, ROW_WRITES) == writes
    assert summary["verified"] == len(added) + len(cells) + len(gone)


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_people_of_an_account_the_service_does_not_hold_fail_alone(
    live_emulator: Callable[..., LiveEmulator], profile: str
) -> None:
    live = live_emulator(tenant(profile))
    accounts = ACCOUNTS[:60]
    start_people_list(live, accounts)
    held = [{**person_row(number), "Company": accounts[number % 60]} for number in range(300)]
    ghosts = [{**person_row(number), "Company": "ghost-account.com"} for number in range(300, 305)]
    # The ghosts stand in the middle of the extract, so that they share requests with others.
    extract = people_frame([*held[:150], *ghosts, *held[150:]])

    summary = run_people(live, extract, settings=SyncSettings(fail_on_error=False))

    creates = PROFILES[profile].unknown_accounts == "create"
    wanted = extract_people_view(people_frame(held + (ghosts if creates else [])))
    assert list_people_view(live) == in_service_form(wanted, profile)
    assert (summary["added"], summary["failed"]) == ((305, 0) if creates else (300, 5))
    if not creates:
        # Each ghost fails with the service's own words, whatever they are.
        (reason,) = summary["failure_reasons"]
        assert "ghost-account.com" in reason and summary["failure_reasons"][reason] == 5


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_rows_upsert_fills_converges_and_reruns_without_writes(
    live_emulator: Callable[..., LiveEmulator], profile: str, fake_clock: Any, tmp_path: Path
) -> None:
    live = live_emulator(tenant(profile))
    first = rows_frame(account_row(number) for number in range(300))
    second = rows_frame(
        [account_row(number, variant=1) for number in range(300) if number % 20 != 7]
        + [account_row(number) for number in range(300, 320)]
    )
    wanted, changed = extract_rows_view(first), extract_rows_view(second)
    settings = SyncSettings(state_path=tmp_path / "rows.state")

    counters = live.stats.requests.copy()
    summary = run_rows(live, first, delete_missing=True, settings=settings)
    filled = list_rows_view(live)
    assert filled == wanted
    check_rows_run(summary, {}, filled, requests_since(live, counters, ROW_WRITES))
    assert summary["unconfirmed"] == 0

    # Two runs half a second apart: nothing to write.
    for _ in range(2):
        fake_clock.sleep(0.5)
        counters = live.stats.requests.copy()
        again = run_rows(live, first, delete_missing=True, settings=settings)
        assert requests_since(live, counters, ROW_WRITES) == dict.fromkeys(ROW_WRITES, 0)
        assert (again["unchanged"], again["requests"]["total"]) == (300, 0)
        assert list_rows_view(live) == wanted

    counters = live.stats.requests.copy()
    summary = run_rows(live, second, delete_missing=True, settings=settings)
    converged = list_rows_view(live)
    assert converged == changed
    check_rows_run(summary, filled, converged, requests_since(live, counters, ROW_WRITES))
    assert summary["added"] and summary["cells_updated"] and summary["deleted"]

    fake_clock.sleep(0.5)
    counters = live.stats.requests.copy()
    last = run_rows(live, second, delete_missing=True, settings=settings)
    assert requests_since(live, counters, ROW_WRITES) == dict.fromkeys(ROW_WRITES, 0)
    assert (last["unchanged"], last["requests"]["total"], last["edited_in_list"]) == (len(changed), 0, 0)

    # A cell edited in the List by hand: the next run puts the extract's value back.
    rows = live.state.snapshot()["lists"][ROWS_TABLE]["rows"]
    edited = next(row for row in rows if row["cells"]["domain"] == "row001.io")
    with live.client() as client:
        client.update_cells(ROWS_TABLE, [{"rowId": edited["id"], "columnId": "name", "value": "Edited"}])
    fake_clock.sleep(PROFILES[profile].lag_seconds + 0.5)
    counters = live.stats.requests.copy()
    repaired = run_rows(live, second, delete_missing=True, settings=settings)
    assert requests_since(live, counters, ROW_WRITES) == {"add_rows": 0, "update_cells": 1, "delete_rows": 0}
    assert (repaired["edited_in_list"], repaired["cells_updated"], repaired["drift"]) == (1, 1, 0)
    assert list_rows_view(live) == changed


# Rows whose text a service may keep in a form of its own.
FORMED_COLUMNS = {
    "Domain": "domain",
    "Name": "name",
    "Contact": "contact",
    "Website": "website",
    "Plan": "plan",
    "Seats": "seats",
}


def formed_row(number: int, *, seats: int = 0) -> dict[str, Any]:
    """A row of :data:`FORMED_COLUMNS`: runs of spaces in half the names, e-mail addresses in mixed
    case, URLs over http with a trailing slash, an enum's label where its key is meant (every
    fifth row), whole numbers; ``seats`` added to the row's seats."""
    return {
        "Domain": f"form{number:03d}.io",
        "Name": f"Form  {number}  Inc" if number % 2 else f"Form {number}",
        "Contact": f"Owner.{number}@Form{number:03d}.IO" if number % 3 else None,
        "Website": f"http://Form{number:03d}.io/About/" if number % 4 == 1 else None,
        "Plan": PLAN_OPTIONS[number % 3].title() if number % 5 == 0 else PLAN_OPTIONS[number % 3],
        "Seats": number + 1 + seats,
    }


def formed_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(FORMED_COLUMNS), dtype=object)


def rows_in_service_form(frame: pd.DataFrame, profile: str) -> RowsView:
    """The rows of a :data:`FORMED_COLUMNS` extract as the profile's service keeps them, by this
    test's own rules: an enum's label as its key (every profile); white space folded, e-mail
    addresses in lower case, URLs in lower case over https without a trailing slash."""
    forms = PROFILES[profile].canonical_forms
    view: RowsView = {}
    for raw in frame.to_dict("records"):
        cells = {FORMED_COLUMNS[str(column)]: value for column, value in raw.items() if value is not None}
        cells["plan"] = cells["plan"].lower()
        if "whitespace" in forms:
            cells["name"] = " ".join(cells["name"].split())
        if "email_case" in forms and "contact" in cells:
            cells["contact"] = cells["contact"].lower()
        if "url" in forms and "website" in cells:
            cells["website"] = re.sub(r"^http://", "https://", cells["website"].lower()).rstrip("/")
        view[cells["domain"]] = cells
    return view


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_rows_a_service_keeps_in_its_own_forms_are_no_drift_and_not_written_again(
    live_emulator: Callable[..., LiveEmulator], profile: str, fake_clock: Any, tmp_path: Path
) -> None:
    live = live_emulator(tenant(profile))
    extract = formed_frame(formed_row(number) for number in range(60))
    settings = SyncSettings(state_path=tmp_path / "rows.state")

    # No drift, or the run would raise SyncFailedError.
    first = run_rows(live, extract, FORMED_COLUMNS, settings=settings)

    assert list_rows_view(live) == rows_in_service_form(extract, profile)
    assert (first["added"], first["verified"], first["drift"], first["failed"]) == (60, 60, 0, 0)
    # Every row on a service keeping numbers its own way (10.0 for 10); else those given a label.
    forms = PROFILES[profile].canonical_forms
    assert first["service_forms"] == (60 if "number" in forms else 12)

    # The next runs write nothing: the rows are as last sent and seen, whatever the forms. (An
    # enum's label the List keeps as its key still differs from it: only the state's rule for
    # an item in step tells those rows unchanged, on every profile.)
    for _ in range(2):
        fake_clock.sleep(0.5)
        counters = live.stats.requests.copy()
        again = run_rows(live, extract, FORMED_COLUMNS, settings=settings)
        assert requests_since(live, counters, ROW_WRITES) == dict.fromkeys(ROW_WRITES, 0)
        assert (again["unchanged"], again["requests"]["total"]) == (60, 0)

    # Rows whose seats change are compared cell by cell: their text, in the forms the state
    # learned, is no change, so only the seats are sent.
    changed = {1, 3, 7, 11}
    second = formed_frame(formed_row(number, seats=100 * (number in changed)) for number in range(60))
    fake_clock.sleep(0.5)
    counters = live.stats.requests.copy()
    summary = run_rows(live, second, FORMED_COLUMNS, settings=settings)
    assert requests_since(live, counters, ROW_WRITES) == {"add_rows": 0, "update_cells": 1, "delete_rows": 0}
    assert (summary["cells_updated"], summary["updated"], summary["drift"]) == (4, 4, 0)
    assert list_rows_view(live) == rows_in_service_form(second, profile)


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_a_refused_row_and_a_refused_cell_update_fail_alone(
    live_emulator: Callable[..., LiveEmulator], profile: str
) -> None:
    live = live_emulator(tenant(profile))
    rows = [account_row(number) for number in range(160)]
    rows[117]["ARR"] = "lots"  # text in a number column: only the service knows the column's type

    counters = live.stats.requests.copy()
    with pytest.raises(SyncFailedError) as raised:
        run_rows(live, rows_frame(rows))

    summary = raised.value.summary
    good = rows_frame(row for number, row in enumerate(rows) if number != 117)
    assert list_rows_view(live) == extract_rows_view(good)  # the rest of the chunk is written
    assert (summary["added"], summary["failed"]) == (159, 1)
    [(reason, count)] = summary["failure_reasons"].items()
    assert count == 1 and re.search(r"rows\[\d+\]\.cells\.arr must be a number", reason), reason
    assert summary["isolation_requests"] > 0
    assert sent(summary, ROW_WRITES) == requests_since(live, counters, ROW_WRITES)

    # Cell updates: 220 cells of 110 rows change (more than one request holds on some profiles),
    # and one plan, on another row, names an option the List does not have.
    before = list_rows_view(live)
    changed = good.copy()
    renamed = [number for number in range(160) if number not in (23, 117)][:110]
    for position, number in enumerate(number for number in range(160) if number != 117):
        if number in renamed:
            changed.at[position, "Name"] = f"Renamed {number}"
            changed.at[position, "Seats"] = 1000 + number
        if number == 23:
            changed.at[position, "Plan"] = "platinum"
    counters = live.stats.requests.copy()
    with pytest.raises(SyncFailedError) as raised:
        run_rows(live, changed)

    summary = raised.value.summary
    expected = extract_rows_view(changed)
    expected["row023.io"]["plan"] = before["row023.io"]["plan"]  # refused: left as it was
    assert list_rows_view(live) == expected
    assert (summary["cells_updated"], summary["updated"], summary["failed"]) == (220, 110, 1)
    [(reason, count)] = summary["failure_reasons"].items()
    assert count == 1, summary["failure_reasons"]
    assert re.search(r"updates\[\d+\]\.value must be one of free, team, enterprise", reason), reason
    assert summary["isolation_requests"] > 0
    assert sent(summary, ROW_WRITES) == requests_since(live, counters, ROW_WRITES)


# ---- ingestion ---------------------------------------------------------------------------------

EVENT_MAPPING = EventMapping(
    signal_column="signal",
    identity_type_column="object_type",
    identity_id_column="object_id",
    data_column="payload",
    timestamp_column="occurred_at",
    reference_column="event_id",
)


def event_rows() -> list[dict[str, Any]]:
    """150 Event, 100 Metric and 45 State events, each with its own reference, interleaved."""
    counts = {"page_visit": 150, "seats_used": 100, "deal_stage": 45}
    kinds = {"page_visit": "account", "seats_used": "account", "deal_stage": "deal"}
    rows: list[dict[str, Any]] = []
    for signal, count in counts.items():
        for index in range(count):
            rows.append(
                {
                    "event_id": f"ev-{signal}-{index:04d}",
                    "signal": signal,
                    "object_type": kinds[signal],
                    "object_id": f"{kinds[signal]}-{index % 23}",
                    "payload": json.dumps({"n": index, "signal": signal}),
                    "occurred_at": f"2026-11-01T{index % 24:02d}:{index % 60:02d}:{len(rows) % 60:02d}Z",
                }
            )
    # Not in signal order: the job orders the events itself.
    return rows[::3] + rows[1::3] + rows[2::3]


@pytest.mark.parametrize("variant", ["types known", "types probed", "budget shared"])
@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_ingestion_acknowledges_every_event_exactly_once(
    live_emulator: Callable[..., LiveEmulator], fake_clock: Any, profile: str, variant: str
) -> None:
    live = live_emulator(tenant(profile))
    rows = event_rows()
    frames = [pd.DataFrame(rows[start : start + 64], dtype=object) for start in range(0, len(rows), 64)]
    fake_clock.sleep(37)  # the task starts in the middle of a minute
    others: list[str] = []
    if variant == "budget shared":
        # Another sender spent part of the State and Event budgets of this window just before.
        others = [f"other-{n}" for n in range(20)]
        with live.client() as other:
            other.ingest_batch(
                [
                    {"signal": signal, "identity": {"type": "deal", "id": "d"}, "reference": reference}
                    for signal, reference in zip(["deal_stage", "page_visit"] * 10, others, strict=True)
                ]
            )
        fake_clock.sleep(5)

    with live.client() as client:
        summary = ingest_events(
            client,
            frames,
            EVENT_MAPPING,
            rejects=Rejects(),
            signal_types=None if variant == "types probed" else SIGNALS,
        )

    stored = live.state.snapshot()["events"]
    references = Counter(event["reference"] for event in stored)
    # 0 lost, 0 duplicated.
    assert references == dict.fromkeys([*others, *(row["event_id"] for row in rows)], 1)
    by_reference = {event["reference"]: event for event in stored}
    for row in rows:
        event = by_reference[row["event_id"]]
        assert (event["signal"], event["identity"]["id"], event["data"]) == (
            row["signal"],
            row["object_id"],
            json.loads(row["payload"]),
        )
    accepted = Counter(event["signal"] for event in stored if event["reference"] not in others)
    assert summary["acknowledged"] == sum(accepted.values()) == len(rows)
    assert {signal: s["acknowledged"] for signal, s in summary["signals"].items()} == dict(accepted)
    assert (summary["pending"], summary["rejected_by_service"], summary["possibly_duplicated"]) == (0, 0, 0)
    statuses = [live.stats.statuses[endpoint] for endpoint in EVENT_ENDPOINTS]
    requests = sum(live.stats.requests[endpoint] for endpoint in EVENT_ENDPOINTS)
    assert summary["requests"] == requests - (1 if others else 0)
    assert summary["rate_limited_responses"] == sum(status["429"] for status in statuses)
    assert summary["rate_limited_resends"] == sum(live.stats.events_rate_limited.values())


# ---- beyond the four cases: a lost answer on a people write ------------------------------------
#
# The connection drops after the service applied a people add or delete. The List must still end
# up as the extract, with no one added twice and no one else removed.


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_a_people_add_whose_answer_is_lost_duplicates_no_one(
    live_emulator: Callable[..., LiveEmulator], profile: str
) -> None:
    live = live_emulator(tenant(profile))
    start_people_list(live, ACCOUNTS[:4])
    extract = people_frame(person_row(number) for number in range(100))  # 20 known by phone or name
    live.faults.add([FaultRule(endpoint=PEOPLE_WRITES["add"], kind="drop_after", times=1)])

    summary = run_people(live, extract, settings=SyncSettings(fail_on_error=False))

    assert list_people_view(live) == in_service_form(
        extract_people_view(extract), profile
    )  # fails on a duplicate person
    assert (summary["added"], summary["failed"], summary["drift"]) == (100, 0, 0)


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_a_people_delete_whose_answer_is_lost_removes_no_one_else(
    live_emulator: Callable[..., LiveEmulator], profile: str, tmp_path: Path
) -> None:
    live = live_emulator(tenant(profile))
    start_people_list(live, ACCOUNTS[:4])
    numbers = range(100)
    state = tmp_path / "people.state"
    run_people(
        live, people_frame(person_row(number) for number in numbers), settings=SyncSettings(state_path=state)
    )
    # Every person known by phone or name only gains an e-mail: a new identity for each of them.
    rows = [person_row(number) for number in numbers]
    for number, row in zip(numbers, rows, strict=True):
        if row["Email"] is None:
            row["Email"] = f"new.{number:04d}@{account_of(number)}"
    extract = people_frame(rows)
    live.faults.add([FaultRule(endpoint=PEOPLE_WRITES["delete"], kind="drop_after", times=1)])

    summary = run_people(
        live,
        extract,
        mode="mirror",
        settings=SyncSettings(max_delete_fraction=0.5, fail_on_error=False, state_path=state),
    )

    # They are patched (on a service that matches patches by e-mail only: deleted by phone or name,
    # then added whole, so a resent delete finds no one else to remove).
    assert list_people_view(live) == in_service_form(extract_people_view(extract), profile)
    counts = ("added", "updated", "deleted", "failed", "drift")
    assert tuple(summary[name] for name in counts) == (0, 20, 0, 0, 0)
    assert summary["replaced"] == (20 if PROFILES[profile].patch_match_keys == "email" else 0)
