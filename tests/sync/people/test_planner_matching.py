"""The columnar planner decides who is whom exactly as deciding one extract person at a time would.

The reference below is that rule written plainly, with none of the planner's own helpers, so that
it cannot share their mistakes: a person's identity is their e-mail (lower case), else profile
URL, else phone, else first and last name (spec §4.6); the List is indexed per account under every
key a person is found by (identity, e-mail, profile URL; the first List person with a key owns
it), List people sharing a key are marked as duplicates, and each extract person, in extract
order, takes the first of their keys (identity, e-mail, profile URL, then phone and name) whose
List person is a duplicate (a conflict) or not yet taken. Random Lists and extracts drawn from
small pools of e-mails, phones, names and profile URLs (all already in the forms the extract's
rules give) make people collide in every way those rules know.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from listsync.client.models import ListedPerson
from listsync.sync.people import diff as people_diff
from listsync.sync.people import match as people_match
from listsync.sync.people import plan as people_plan
from listsync.sync.people import plan_people_sync

DOMAINS = ["acme.com", "globex.com"]


def random_person(rng: random.Random) -> dict[str, Any]:
    person: dict[str, Any] = {"first_name": rng.choice(["Ann", "Bob", "Cy"])}
    if rng.random() < 0.5:
        person["email"] = rng.choice(["ann@x.com", "bob@x.com", "cy@x.com", "dee@x.com"])
    if rng.random() < 0.3:
        person["network_profile_url"] = rng.choice(["https://example.com/in/a", "https://example.com/in/b"])
    if rng.random() < 0.5:
        person["phone_number"] = rng.choice(["+14155550001", "+14155550002"])
    if rng.random() < 0.6:
        person["last_name"] = rng.choice(["Lee", "Ray"])
    person["title"] = rng.choice(["CTO", "CEO"])
    return person


FIELDS = ("first_name", "last_name", "email", "phone_number", "network_profile_url", "title")


def identity_of(person: dict[str, Any]) -> str | None:
    if person.get("email"):
        return "email:" + person["email"].lower()
    if person.get("network_profile_url"):
        return "url:" + person["network_profile_url"]
    if person.get("phone_number"):
        return "phone:" + person["phone_number"]
    if person.get("first_name") and person.get("last_name"):
        return f"name:{person['first_name']} {person['last_name']}"
    return None


def keys_of(identity: str, person: dict[str, Any]) -> list[str]:
    """The identity, then the e-mail and the profile URL: what the service merges by (§4.4)."""
    keys = [identity]
    if person.get("email"):
        keys.append("email:" + person["email"].lower())
    if person.get("network_profile_url"):
        keys.append("url:" + person["network_profile_url"])
    return list(dict.fromkeys(keys))


def reference(source: dict[str, dict[str, dict[str, Any]]], current: list[ListedPerson], mirror: bool):
    index: dict[str, dict[str, int]] = {}
    listed = []
    for record in current:
        fields = {name: getattr(record, name) for name in FIELDS if getattr(record, name) is not None}
        identity = identity_of(fields)
        if identity is None:
            continue
        domain = record.account_domain
        keys = keys_of(identity, fields)
        position = len(listed)
        listed.append(
            {"domain": domain, "identity": identity, "fields": fields, "dup": False, "taken": False}
        )
        people = index.setdefault(domain, {})
        for key in keys:
            if key in people:
                listed[people[key]]["dup"] = True
                listed[position]["dup"] = True
            people.setdefault(key, position)
    repairs = []
    if mirror:
        groups: dict[tuple[str, str], list[int]] = {}
        for position, person in enumerate(listed):
            merged = person["fields"].get("email") or person["fields"].get("network_profile_url")
            if person["dup"] and person["domain"] in source and not merged:
                groups.setdefault((person["domain"], person["identity"]), []).append(position)
        for (domain, identity), copies in groups.items():
            for number, position in enumerate(copies):
                listed[position]["dup"] = False
                if number:
                    listed[position]["taken"] = True
                    repairs.append((domain, identity, number))
    adds, patched, conflicts = [], [], []
    for domain, people in source.items():
        for identity, fields in people.items():
            keys = keys_of(identity, fields)
            if fields.get("phone_number"):
                keys.append("phone:" + fields["phone_number"])
            if fields.get("first_name") and fields.get("last_name"):
                keys.append(f"name:{fields['first_name']} {fields['last_name']}")
            found = None
            for key in keys:
                position = index.get(domain, {}).get(key)
                if position is not None and (listed[position]["dup"] or not listed[position]["taken"]):
                    found = position
                    break
            if found is None:
                adds.append((domain, identity))
            elif listed[found]["dup"]:
                conflicts.append((domain, identity))
            else:
                listed[found]["taken"] = True
                patched.append((domain, identity, listed[found]["identity"]))
    going = [
        position
        for position, person in enumerate(listed)
        if mirror and not (person["taken"] or person["dup"]) and person["domain"] in source
    ]
    copied = {(domain, identity) for domain, identity, _ in repairs}
    meant = set(going) | {n for n, p in enumerate(listed) if (p["domain"], p["identity"]) in copied}
    # A delete by phone or name reaches everyone of the account who has it (A38): held back when
    # it would reach someone not meant to go.
    held = {n for n in meant if any(m not in meant for m in reached_by(listed, n))}
    deletes = [(listed[n]["domain"], listed[n]["identity"]) for n in going if n not in held]
    repairs = [
        repair
        for repair in repairs
        if (repair[0], repair[1]) not in {(listed[n]["domain"], listed[n]["identity"]) for n in held}
    ]
    return adds, patched, conflicts, deletes, repairs


def reached_by(listed: list[dict[str, Any]], position: int) -> list[int]:
    """The List people of the account a delete by the person's identity at ``position`` reaches:
    by phone, all with that phone number; by name, all with that first and last name, case aside."""
    person = listed[position]
    kind = person["identity"].partition(":")[0]
    if kind not in ("phone", "name"):
        return [position]

    def key(fields: dict[str, Any]) -> object:
        if kind == "phone":
            return fields.get("phone_number")
        first, last = fields.get("first_name"), fields.get("last_name")
        return None if first is None or last is None else (first.lower(), last.lower())

    wanted = key(person["fields"])
    return [
        n
        for n, other in enumerate(listed)
        if other["domain"] == person["domain"] and key(other["fields"]) == wanted
    ]


def random_sync(
    seed: int, people: int = 12
) -> tuple[dict[str, dict[str, dict[str, Any]]], list[ListedPerson], bool]:
    """A random extract (account domain -> identity -> person), List and mode (mirror or not)."""
    rng = random.Random(seed)
    current = [
        ListedPerson.model_validate(
            {"accountDomain": rng.choice(DOMAINS), "rowId": f"row_{n}", **random_person(rng)}
        )
        for n in range(rng.randint(0, people))
    ]
    source: dict[str, dict[str, dict[str, Any]]] = {}
    for _ in range(rng.randint(0, people)):
        person = random_person(rng)
        identity = identity_of(person)
        if identity is None:  # prepare_people rejects such a row
            continue
        source.setdefault(rng.choice(DOMAINS), {}).setdefault(identity, person)
    return source, current, rng.random() < 0.5


@pytest.mark.parametrize("seed", range(100))
def test_the_plan_matches_people_as_one_at_a_time_would(seed: int) -> None:
    source, current, mirror = random_sync(seed)

    plan = plan_people_sync(source, current, mode="mirror" if mirror else "upsert", overwrite_with_null=True)

    adds, matched, conflicts, deletes, repairs = reference(source, current, mirror)
    assert [(add.account_domain, add.identity) for add in plan.adds] == adds
    patched = {(domain, identity) for domain, _, identity in matched}
    assert {(patch.account_domain, patch.identity) for patch in plan.patches} <= patched
    assert len(plan.patches) + plan.unchanged == len(matched)
    assert plan.conflicts == len(conflicts)
    assert [(delete.account_domain, delete.identity) for delete in plan.deletes] == deletes
    assert [(repair.account_domain, repair.identity, repair.copy) for repair in plan.repairs] == repairs


@pytest.mark.parametrize("seed", range(30))
def test_a_plan_made_a_few_keys_pairs_and_writes_at_a_time_is_the_plan_made_at_once(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Large Lists are numbered, compared and made into writes in pieces; tiny pieces must change nothing.
    source, current, mirror = random_sync(seed, people=40)
    mode = "mirror" if mirror else "upsert"
    whole = plan_people_sync(source, current, mode=mode, overwrite_with_null=True)

    monkeypatch.setattr(people_match, "KEYS_AT_ONCE", 3)
    monkeypatch.setattr(people_diff, "PAIRS_AT_ONCE", 2)
    monkeypatch.setattr(people_plan.PlannedWrites, "BATCH", 3)
    pieces = plan_people_sync(source, current, mode=mode, overwrite_with_null=True)

    assert list(pieces.entries()) == list(whole.entries())
    assert [patch.current for patch in pieces.patches] == [patch.current for patch in whole.patches]
    assert (pieces.unchanged, pieces.conflicts, pieces.list_duplicates) == (
        whole.unchanged,
        whole.conflicts,
        whole.list_duplicates,
    )
    assert pieces.size == whole.size
