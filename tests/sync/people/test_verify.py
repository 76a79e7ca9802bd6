"""The people read back against the emulator: one read of the List for every write, as hashes,
and a read in full of the writes the hashes show other than written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pytest_mock import MockerFixture

from listsync.client import ListSyncClient
from listsync.extract.sources import read_extract
from listsync.sync.digests import key_hashes, mapping_digest_text, text_hashes
from listsync.sync.people import sync_people, verify
from listsync.sync.people.plan import PeoplePlan, PlannedAdd, PlannedDelete, PlannedWrites
from listsync.sync.people.read import (
    COPY_REMOVED,
    DELETED,
    SoughtPeople,
    TakenWrites,
    looked_up_keys,
)
from listsync.sync.people.verify import planned_writes
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


def sought(plan: PeoplePlan, pending: list[int] | None = None) -> SoughtPeople:
    """The plan's writes (those at ``pending``; default all) sought as the read back takes them:
    each kind as the columns it is made of."""
    chosen = np.zeros(plan.size, dtype=bool)
    chosen[range(plan.size) if pending is None else pending] = True
    taken, offset = [], 0
    for kind, writes in (
        ("add", plan.adds),
        ("patch", plan.patches),
        ("delete", plan.repairs),
        ("delete", plan.deletes),
    ):
        if len(writes):
            assert isinstance(writes, PlannedWrites) and writes.frame is not None
            rows = np.flatnonzero(chosen[offset : offset + len(writes)])
            taken.append(TakenWrites(kind, writes.frame, rows, offset))
            offset += len(writes)
    return SoughtPeople(taken, ["title"])


def entries(people: SoughtPeople) -> list[tuple[Any, ...]]:
    """Per entry: the write's position, the hash of (account domain, key), its list of fields (or
    what kind of delete), the digest of what it wrote."""
    lists = [people.field_lists[at] if at >= 0 else at for at in people.field_list.tolist()]
    hashes = people.keys[people.slot].tolist()
    return list(zip(people.position.tolist(), hashes, lists, people.expected.tolist(), strict=True))


def entries_of_objects(plan: PeoplePlan, pending: list[int] | None = None) -> list[tuple[Any, ...]]:
    """:func:`entries` as the planned writes say them one by one, as objects: looked up by the keys
    ``looked_up_keys`` gives, each with the fields it wrote and their digest."""
    rows = []
    for position, (_kind, item) in enumerate(planned_writes(plan)):
        if pending is not None and position not in pending:
            continue
        if isinstance(item, PlannedDelete):
            names: Any = COPY_REMOVED if item.copy else DELETED
            text = ""
        else:
            wrote = item.person if isinstance(item, PlannedAdd) else item.patch
            names = tuple(sorted(wrote))
            text = mapping_digest_text(wrote, names)
        for key in looked_up_keys(item):
            hashed = key_hashes(pa.array([item.account_domain]), pa.array([key]))
            rows.append((position, int(hashed[0]), names, int(text_hashes([text])[0])))
    return rows


@pytest.mark.parametrize("at_once", [100_000, 2])
def test_adds_sought_as_columns_are_sought_as_their_objects_are(at_once: int, mocker: MockerFixture) -> None:
    """The read back takes a plan's adds as the columns they are made of: each is looked up by the
    keys it is as an object (identity, e-mail, profile URL), and counts as shown as written exactly
    when its first person found shows every field it wrote."""
    from listsync.sync.people import plan_people_sync, read

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
    assert len(plan.adds) == 5
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
    mocker.patch.object(read, "COLUMNS_AT_ONCE", at_once)  # 2: rows 0 and 2 taken, then a span, 3 and 4
    pending = [0, 2, 3, 4]  # Bo's add is settled: the others are sought
    people = sought(plan, pending)
    people.read(listed)

    assert entries(people) == entries_of_objects(plan, pending)
    # Ann found by her e-mail in capitals (her identity and her e-mail are one key, looked up and
    # counted once), not as written; Cy with another title than written; Dee found by her profile
    # URL alone, without the e-mail written; Eve not found.
    assert [(found, shown) for found, shown, _seen in people.writes()] == [
        ([1], False),
        ([1], False),
        ([0, 1], False),
        ([0], False),
    ]
    bo = sought(plan, [1])
    bo.read(listed)
    # Bo as written: a title he was not written with is no difference.
    assert [(found, shown) for found, shown, _seen in bo.writes()] == [([1], True)]


def test_patches_and_deletes_sought_as_columns_are_sought_as_their_objects_are() -> None:
    """The read back takes a plan's patches, copies removed and deletes as the columns they are
    made of, as it takes the adds: each write is looked up by the same keys, in the same order, as
    its object is (a patch by the person's keys before and after it, a delete by its identity and
    the e-mail or profile URL it is, a copy by its identity alone), with the same fields written;
    a delete is shown once none of its keys finds anyone on its account, an extra copy removed
    never by the hashes alone, since one copy must be left (``delete_read_back``)."""
    from listsync.sync.people import plan_people_sync

    from .test_planner import listed, source, src

    ivy = {"first_name": "Ivy", "last_name": "Wu", "phone_number": "+14155550122"}
    extract = source(
        # given a profile URL: also found by it after the patch
        src(
            first_name="Ann",
            last_name="Lee",
            email="ann@acme.com",
            title="CTO",
            network_profile_url="https://in.com/ann",
        ),
        # found by the profile URL, given an e-mail: an identity of another kind after the patch
        src(first_name="Bo", last_name="Li", email="bo@acme.com", network_profile_url="https://in.com/bo"),
        src("beta.io", first_name="Cy", last_name="Doe", phone_number="+14155550100", title="VP"),
        src("beta.io", first_name="Dee", last_name="Fox", email="dee@beta.io", title="CFO"),
        src("beta.io", **ivy),
    )
    eve_url = "https://in.com/eve"
    current = [
        listed(first_name="Ann", last_name="Lee", email="ann@acme.com", title="VP"),
        listed(first_name="Bo", last_name="Li", network_profile_url="https://in.com/bo"),
        listed("beta.io", first_name="Cy", last_name="Doe", phone_number="+14155550100"),
        listed("beta.io", first_name="Dee", last_name="Fox", email=" DEE@beta.io", title="CEO"),
        listed(first_name="Eve", last_name="Ma", email="eve@acme.com", network_profile_url=eve_url),
        listed(first_name="Fay", last_name="Ng", network_profile_url="https://in.com/fay "),
        listed("beta.io", first_name="Gus", last_name="Ho", phone_number="+14155550111"),
        listed("beta.io", first_name="Hal", last_name="Ng"),
        listed("beta.io", **ivy),
        listed("beta.io", **ivy),
    ]
    fields = {*ivy, "email", "title", "network_profile_url"}
    plan = plan_people_sync(extract, current, fields=fields, mode="mirror")
    assert (len(plan.patches), len(plan.repairs), len(plan.deletes)) == (4, 1, 4)
    people = sought(plan)

    assert entries(people) == entries_of_objects(plan)
    # Ann and Bo also by the profile URL and the e-mail their patches give them; Eve by her identity
    # alone, as the e-mail it is (a delete finds no one by a key of another kind)
    assert [entry[0] for entry in entries(people)] == [0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8]
    after = [record.model_dump(exclude_none=True) for record in current[:4] + current[5:9]]
    after[1]["email"] = "bo@acme.com"
    after.append({"account_domain": "beta.io", "email": "eve@acme.com"})  # another account's: not Eve
    people.read(after)
    # The List after: Bo's e-mail patched, Eve and one copy of Ivy gone, the other writes not shown.
    assert [(found, shown) for found, shown, _seen in people.writes()] == [
        *(([1, 0], False), ([1, 1], True), ([1], False), ([1], False)),  # patches: Ann, Bo, Cy, Dee
        ([1], False),  # one copy of Ivy left: not shown by the hashes alone
        *(([0], True), ([1], False), ([1], False), ([1], False)),  # deletes: Eve, Fay, Gus, Hal
    ]
    positions, seen = people.shown()
    assert positions.tolist() == [1, 5]
    assert seen[1] == 0  # a delete shown has no person, and no digest
