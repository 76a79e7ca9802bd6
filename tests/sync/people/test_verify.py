"""The people read back against the emulator: one read of the List for every write, as hashes,
and a read in full of the writes the hashes show other than written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_mock import MockerFixture

from listsync.client import ListSyncClient
from listsync.extract.sources import read_extract
from listsync.sync.people import sync_people, verify
from listsync.sync.settings import SyncSettings

from ...support import LiveEmulator
from ...support.tenants import ACCOUNTS, people_config
from ...support.tenants import PEOPLE_TABLE as TABLE
from .test_sync import COLUMN_MAP, MESSY, NORMALISED


def sync(client: ListSyncClient, folder: Path, text: str = MESSY) -> dict[str, Any]:
    """A people sync of the CSV ``text`` that keeps its state and rejects in ``folder``."""
    path = folder / "contacts.csv"
    path.write_text(text, encoding="utf-8")
    settings = SyncSettings(rejects_path=folder / "rejects.jsonl", state_path=folder / "state")
    return sync_people(client, TABLE, read_extract(path), COLUMN_MAP, settings=settings)


def test_a_read_back_reads_the_list_once_for_every_write_and_keeps_the_state(
    client: ListSyncClient,
    write_requests: Callable[[], dict[str, int]],
    tmp_path: Path,
    mocker: MockerFixture,
) -> None:
    mocker.patch.object(verify, "READ_BACK_AT_ONCE", 2)  # 4 adds: two slices, were they read in full
    reads = mocker.spy(verify, "read_accounts")

    first = sync(client, tmp_path)

    assert (first["added"], first["verified"], first["drift"], first["unconfirmed"]) == (4, 4, 0, 0)
    assert [set(call.args[2]) for call in reads.call_args_list] == [set(NORMALISED)]
    before = write_requests()
    second = sync(client, tmp_path)
    assert write_requests() == before
    assert (second["unchanged"], second["edited_in_list"], second["requests"]["total"]) == (4, 0, 0)


def test_writes_shown_in_a_form_of_the_lists_own_are_read_back_in_full_by_slices(
    live_emulator: Callable[..., LiveEmulator], tmp_path: Path, mocker: MockerFixture
) -> None:
    emulator = live_emulator(people_config(), dialect_overrides={"canonical_forms": ["whitespace"]})
    emulator.seed(TABLE, *({"domain": domain} for domain in ACCOUNTS))
    mocker.patch.object(verify, "READ_BACK_AT_ONCE", 1)
    reads = mocker.spy(verify, "read_accounts")
    spaced = MESSY.replace("Ann,Lee,CTO", "Ann,Lee,Chief  Technology Officer").replace(
        "Eve,Gold,Analyst", "Eve,Gold,Senior  Analyst"
    )

    summary = sync(emulator.client(), tmp_path, spaced)

    assert (summary["added"], summary["verified"], summary["service_forms"], summary["drift"]) == (4, 4, 2, 0)
    # One read for every write, then one for each write the List shows in its own form.
    assert [set(call.args[2]) for call in reads.call_args_list] == [
        set(NORMALISED),
        {"acme.com"},
        {"gamma.org"},
    ]


def test_a_read_back_of_the_whole_list_sees_no_one_on_an_account_it_did_not_write(
    live_emulator: Callable[..., LiveEmulator], tmp_path: Path, mocker: MockerFixture
) -> None:
    """The whole List is read back as it comes, people of every account: one on an account the
    sync did not write, with the e-mail of a person it deleted, is not that person (who would
    be still in the List, and read again)."""
    emulator = live_emulator(people_config())
    emulator.seed(TABLE, *({"domain": domain} for domain in (*ACCOUNTS, "other.net")))
    client = emulator.client()
    client.add_people(
        TABLE, [{"account_domain": "other.net", "people": [{"email": "bob@acme.com", "first_name": "Bob"}]}]
    )
    settings = SyncSettings(state_path=tmp_path / "state", max_delete_fraction=0.5)
    extract = tmp_path / "contacts.csv"
    extract.write_text(MESSY, encoding="utf-8")
    sync_people(client, TABLE, read_extract(extract), COLUMN_MAP, settings=settings)
    # Bob removed, and a title changed on each of the other accounts: more accounts written than
    # the List has pages, so the whole List is read back.
    changed = MESSY.replace("acme.com,bob@acme.com,Bob,Ray,,\n", "").replace("VP Sales", "CEO")
    extract.write_text(changed.replace("CTO", "CFO").replace("Analyst", "Lead"), encoding="utf-8")

    reads = mocker.spy(verify, "read_accounts")
    summary = sync_people(client, TABLE, read_extract(extract), COLUMN_MAP, mode="mirror", settings=settings)

    assert (summary["deleted"], summary["updated"], summary["unconfirmed"], summary["drift"]) == (1, 3, 0, 0)
    assert [reads.spy_return_list[0][1], len(reads.call_args_list)] == ["client", 1]
    assert [person.email for person in client.iter_targetable_people(TABLE)].count("bob@acme.com") == 1


LISTED = [
    # e-mail in capitals and spaces; a profile URL the rules normalise; a domain with a scheme
    {
        "account_domain": "https://WWW.Acme.com/",
        "email": "  Ann@Acme.COM ",
        "first_name": "Ann",
        "network_profile_url": "http://linkedin.com/in/ann/",
        "title": "VP  Sales",
    },
    # a phone alone; a blank e-mail is no key
    {"account_domain": "acme.com", "phone_number": "+1 415 555 0100", "email": "  "},
    # a name alone, its spaces folded
    {"account_domain": "beta.io", "first_name": "Bo ", "last_name": " Li"},
    # no identity: found by nothing
    {"account_domain": "beta.io", "title": "CTO"},
    # a profile URL and an e-mail: found by both, the e-mail its identity
    {"account_domain": "beta.io", "email": "cy@beta.io", "network_profile_url": "linkedin.com/in/cy"},
    # a domain the rules refuse, kept trimmed and in lower case
    {"account_domain": " Not A Domain ", "email": "dee@x.org"},
    # no account domain, and a blank one: both the domain ""
    {"email": "eve@y.org"},
    {"account_domain": "  ", "email": "fay@y.org"},
]


def test_a_read_back_finds_each_list_person_by_the_keys_a_person_is_found_by() -> None:
    """The read back's keys, made as columns from a batch of the List, are those each person is
    found by one at a time (``found_by``), in List order, each person's identity first."""
    from listsync.sync.people.frames import list_batch
    from listsync.sync.people.read import found_by, keys_found_by

    expected = []
    for person in (found_by(record) for record in LISTED):
        if person is not None:
            domain, _fields, keys = person
            assert len(set(keys)) == len(keys)  # an identity is also an e-mail or URL key: once
            expected += [(domain, key) for key in keys]
    owner, domains, keys = keys_found_by(list_batch(LISTED))

    assert list(zip(domains.to_pylist(), keys.to_pylist(), strict=True)) == expected
    assert len({key for _, key in expected if key.startswith("url:")}) == 2
    assert owner.tolist() == sorted(owner.tolist())


@pytest.mark.parametrize("models", [False, True])
@pytest.mark.parametrize(
    "accounts",
    [set(), {"acme.com"}, {"beta.io", "not a domain"}, {""}, {"acme.com", "beta.io", "", "other.org"}],
)
def test_a_list_batch_of_some_accounts_is_the_batch_of_everyone_but_for_the_others(
    accounts: set[str], models: bool
) -> None:
    """A read back makes columns of the people of the accounts written only: the frame of every
    person but for those whose account, normalised like the extract's, is another."""
    import pandas as pd

    from listsync.client.models import ListedPerson
    from listsync.sync.people.frames import list_batch

    batch: list[Any] = [ListedPerson.model_validate(record) for record in LISTED] if models else LISTED
    everyone = list_batch(batch)
    expected = everyone[everyone["domain"].isin(accounts)].reset_index(drop=True)

    pd.testing.assert_frame_equal(list_batch(batch, accounts), expected)
    identified = {"acme.com": 2, "beta.io": 2, "not a domain": 1, "": 2}
    assert len(expected) == sum(identified.get(account, 0) for account in accounts)


@pytest.mark.parametrize("at_once", [100_000, 2])
def test_adds_sought_as_columns_are_sought_as_their_objects_are(at_once: int, mocker: MockerFixture) -> None:
    """The read back takes a plan's adds as the columns they are made of: each is looked up by the
    keys it is as an object (identity, e-mail, profile URL), and counts as shown as written exactly
    when its first person found shows every field it wrote, as the objects would say."""
    import numpy as np

    from listsync.sync.people import plan_people_sync, read
    from listsync.sync.people.read import SoughtPeople

    from .test_planner import source, src

    extract = source(
        src("acme.com", first_name="Ann", last_name="Lee", email="ann@acme.com", title="CTO"),
        src("acme.com", first_name="Bo", last_name="Li", network_profile_url="https://linkedin.com/in/bo"),
        src("beta.io", first_name="Cy", last_name="Doe", phone_number="+14155550100", title="VP"),
        src(
            "beta.io",
            first_name="Dee",
            last_name="Fox",
            email="dee@beta.io",
            network_profile_url="https://x.io/d",
        ),
        src("gamma.org", first_name="Eve", last_name="Gold"),
    )
    plan = plan_people_sync(
        extract,
        [],
        fields={"first_name", "last_name", "email", "title", "phone_number", "network_profile_url"},
    )
    assert plan.adds.frame is not None and len(plan.adds) == 5
    listed = [
        {
            "account_domain": "acme.com",
            "first_name": "Ann",
            "last_name": "Lee",
            "email": "ANN@acme.com",
            "title": "CTO",
        },
        {
            "account_domain": "acme.com",
            "first_name": "Bo",
            "last_name": "Li",
            "network_profile_url": "https://linkedin.com/in/bo",
            "title": "new",
        },
        {
            "account_domain": "beta.io",
            "first_name": "Cy",
            "last_name": "Doe",
            "phone_number": "+14155550100",
            "title": "CEO",
        },
        {
            "account_domain": "beta.io",
            "first_name": "Dee",
            "last_name": "Fox",
            "network_profile_url": "https://x.io/d",
        },
    ]
    mocker.patch.object(read, "ADDS_AT_ONCE", at_once)  # 2: rows 0 and 2 taken, then a span, 3 and 4
    sought = [0, 2, 3, 4]  # Bo's add is settled: the others are sought
    by_objects = SoughtPeople(((row, plan.adds[row]) for row in sought), ["title"])
    by_columns = SoughtPeople((), ["title"], (plan.adds.frame, np.array(sought)))
    for people in (by_objects, by_columns):
        people.read(listed)

    assert list(by_columns.writes()) == list(by_objects.writes())
    assert by_columns.position.tolist() == by_objects.position.tolist()
    # Ann found by her e-mail in capitals (her identity and her e-mail are one key, looked up and
    # counted once), not as written; Cy with another title than written; Dee found by her profile
    # URL alone, without the e-mail written; Eve not found.
    assert [(found, shown) for found, shown, _seen in by_columns.writes()] == [
        ([1], False),
        ([1], False),
        ([0, 1], False),
        ([0], False),
    ]
    bo = SoughtPeople((), ["title"], (plan.adds.frame, np.array([1])))
    bo.read(listed)
    # Bo as written: a title he was not written with is no difference.
    assert [(found, shown) for found, shown, _seen in bo.writes()] == [([1], True)]


def test_hashes_show_a_delete_of_a_person_none_of_whose_keys_finds_anyone() -> None:
    """A person deleted is shown once none of their keys finds anyone on their account; an extra
    copy removed never by the hashes alone, since one copy must be left (``delete_read_back``)."""
    from listsync.sync.people.plan import PlannedDelete
    from listsync.sync.people.read import SoughtPeople

    ann = PlannedDelete("acme.com", "email:ann@acme.com", {"email": "ann@acme.com"})
    bo = PlannedDelete("acme.com", "email:bo@acme.com", {"email": "bo@acme.com"})
    cy_url = "https://linkedin.com/in/cy"
    cy = PlannedDelete("beta.io", "email:cy@beta.io", {"email": "cy@beta.io", "network_profile_url": cy_url})
    dee = PlannedDelete("beta.io", "phone:+14155550100", {"phone_number": "+14155550100"}, copy=1)
    listed = [
        {"account_domain": "acme.com", "email": "BO@acme.com", "title": "CTO"},  # Bo is still there
        # found by Cy's profile URL
        {"account_domain": "beta.io", "email": "new@beta.io", "network_profile_url": cy_url},
        {"account_domain": "gamma.org", "email": "ann@acme.com"},  # another account's: not Ann
    ]
    sought = SoughtPeople(enumerate([bo, ann, cy, dee], start=10), ["title"])
    sought.read(listed)

    assert [(found, shown) for found, shown, _seen in sought.writes()] == [
        ([1], False),  # an identity by e-mail and the e-mail are one key, which finds Bo once
        ([0], True),
        ([0, 1], False),
        ([0], False),  # no copy of Dee left: lost, not shown
    ]
    positions, seen = sought.shown()
    assert (positions.tolist(), seen.tolist()) == ([11], [0])  # no one's digest: no one is found
