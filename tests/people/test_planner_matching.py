"""The columnar planner decides who is whom exactly as deciding one extract person at a time would.

The reference below is that rule written plainly: the List indexed per account under every key a
person is found by (identity, e-mail, profile URL; the first List person with a key owns it),
List people sharing a key marked as duplicates, and each extract person, in extract order, taking
the first of their keys (identity, e-mail, profile URL, then phone and name) whose List person is
a duplicate (a conflict) or not yet taken. Random Lists and extracts drawn from small pools of
e-mails, phones, names and profile URLs make people collide in every way those rules know.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from listsync.client.models import ListedPerson, is_merged_on_add, person_identity
from listsync.sync.people import plan as planning
from listsync.sync.people import plan_people_sync
from listsync.sync.people.plan import list_domain, normalised_list_fields, person_fields, person_keys

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


def reference(source: dict[str, dict[str, dict[str, Any]]], current: list[ListedPerson], mirror: bool):
    index: dict[str, dict[str, int]] = {}
    listed = []
    for record in current:
        fields = person_fields(record)
        normalised = normalised_list_fields(fields)
        identity = person_identity(normalised)
        if identity is None:
            continue
        domain = list_domain(record.account_domain)
        keys = list(dict.fromkeys(person_keys(identity, normalised)))
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
            if person["dup"] and person["domain"] in source and not is_merged_on_add(person["fields"]):
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
            keys = [*person_keys(identity, fields)]
            keys += [
                key
                for key in (
                    person_identity({"phone_number": fields.get("phone_number")}),
                    person_identity(
                        {"first_name": fields.get("first_name"), "last_name": fields.get("last_name")}
                    ),
                )
                if key is not None
            ]
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
    deletes = [
        (person["domain"], person["identity"])
        for person in listed
        if mirror and not (person["taken"] or person["dup"]) and person["domain"] in source
    ]
    return adds, patched, conflicts, deletes, repairs


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
        identity = person_identity(person)
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

    monkeypatch.setattr(planning, "KEYS_AT_ONCE", 3)
    monkeypatch.setattr(planning, "PAIRS_AT_ONCE", 2)
    monkeypatch.setattr(planning.PlannedWrites, "BATCH", 3)
    pieces = plan_people_sync(source, current, mode=mode, overwrite_with_null=True)

    assert list(pieces.entries()) == list(whole.entries())
    assert [patch.current for patch in pieces.patches] == [patch.current for patch in whole.patches]
    assert (pieces.unchanged, pieces.conflicts, pieces.list_duplicates) == (
        whole.unchanged,
        whole.conflicts,
        whole.list_duplicates,
    )
    assert pieces.size == whole.size
