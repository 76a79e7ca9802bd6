"""A sharded night that reads the List once: ``split_people``, then ``sync_people`` of each shard's
part (``parts_path``).

The List and the extract are test_shard's: twelve accounts, each with a person the extract keeps,
one it changes and one it no longer has; the extract adds one person per account and holds
duplicates and rejected rows.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from listsync.client import ListSyncClient
from listsync.emulator.faults import FaultRule
from listsync.extract.options import shard_number
from listsync.extract.sources import read_extract
from listsync.sync.lease import Lease, LeaseHeldError
from listsync.sync.people import sync_people
from listsync.sync.people.split import SplitError, split_people
from listsync.sync.settings import SyncSettings
from listsync.sync.state import FileStateStore
from listsync.sync.steps import SyncFailedError, combine_summaries

from ...support import LiveEmulator
from ...support.tenants import PEOPLE_TABLE as TABLE
from ...support.tenants import people_in_list
from .test_shard import COLUMN_MAP, DOMAINS, SHARDS, extract_text, lines, seed

#: Small pages for the reads of the whole List: its 36 people take 8. The shards read with pages of
#: 1,000, where paging the whole List would take one request, fewer than reading their accounts: they
#: read their accounts all the same.
PAGE = 5
WHOLE = f"people of {TABLE}"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "contacts.csv"
    path.write_text(extract_text(), encoding="utf-8")
    return path


def split(client: ListSyncClient, source: Path, parts: Path, **options: Any) -> dict[str, Any]:
    return split_people(
        client,
        TABLE,
        read_extract(source),
        options.pop("column_map", COLUMN_MAP),
        shards=options.pop("shards", SHARDS),
        parts_path=parts,
        page_size=PAGE,
        settings=SyncSettings(rejects_path=parts / "rejects.jsonl"),
        **options,
    )


def shard(
    client: ListSyncClient, parts: Path, index: int, count: int = SHARDS, **settings: Any
) -> dict[str, Any]:
    return sync_people(
        client,
        TABLE,
        (),
        settings.pop("column_map", COLUMN_MAP),
        mode="mirror",
        parts_path=parts,
        settings=SyncSettings(
            shard=f"{index}/{count}",
            max_delete_fraction=0.5,
            plan_path=parts / f"plan-{index}.jsonl",
            **settings,
        ),
    )


def planned(*paths: Path) -> Counter[tuple[str, str, str]]:
    return Counter(
        (entry["action"], entry["account_domain"], entry["identity"])
        for path in paths
        for entry in lines(path)
    )


def test_a_split_and_its_shards_do_what_the_whole_sync_does_reading_the_list_once(
    client: ListSyncClient, emulator: LiveEmulator, source: Path, tmp_path: Path
) -> None:
    seed(client, emulator)
    whole = sync_people(
        client,
        TABLE,
        read_extract(source),
        COLUMN_MAP,
        mode="mirror",
        page_size=PAGE,
        settings=SyncSettings(dry_run=True, max_delete_fraction=0.5, plan_path=tmp_path / "plan-whole.jsonl"),
    )
    one_read = emulator.stats.unfiltered_pages[WHOLE]
    emulator.stats.clear()
    parts = tmp_path / "parts"

    made = split(client, source, parts)
    shards = [shard(client, parts, index) for index in range(SHARDS)]

    # The List was paged once in the night, by the split, as the whole sync pages it; the shards
    # read only the accounts they write in, by the account filter.
    assert one_read > 1
    assert emulator.stats.unfiltered_pages == Counter({WHOLE: one_read})
    assert made["steady_read"] is True
    assert made["list_people"] == whole["list_people"] == 3 * len(DOMAINS)
    assert [part["list_people"] for part in made["parts"]] == [s["list_people"] for s in shards]
    assert all(summary["rechecked"] > 0 for summary in shards)
    # The extract was prepared once: its rejects and duplicates are the split's, as the whole's.
    assert (made["read"], made["rejected"], made["duplicates"]) == (
        whole["read"],
        whole["rejected"],
        whole["duplicates"],
    )
    assert len(lines(parts / "rejects.jsonl")) == whole["rejected"] == 3
    # Each planned write was made by exactly one shard, and the shards planned what the whole did.
    items = planned(*(parts / f"plan-{index}.jsonl" for index in range(SHARDS)))
    assert items == planned(tmp_path / "plan-whole.jsonl") and set(items.values()) == {1}
    written = {kind: sum(summary[kind] for summary in shards) for kind in ("added", "updated", "deleted")}
    assert written == {"added": len(DOMAINS), "updated": len(DOMAINS), "deleted": len(DOMAINS)}

    # The List is the extract: an unsharded sync has nothing left to write.
    after = sync_people(client, TABLE, read_extract(source), COLUMN_MAP, mode="mirror")
    assert (after["requests"]["total"], after["unchanged"]) == (0, 3 * len(DOMAINS))

    combined = combine_summaries(shards, split=made)
    assert combined["shards"] == [f"{index}/{SHARDS}" for index in range(SHARDS)]
    for name in ("read", "passed", "rejected", "duplicates", "list_people", "reject_reasons"):
        assert combined[name] == whole[name], name
    assert (combined["other_shards"], combined["rejects_path"]) == (0, str(parts / "rejects.jsonl"))
    assert (combined["added"], combined["updated"], combined["deleted"]) == (12, 12, 12)


def test_a_failed_shard_is_run_again_from_its_part_and_the_night_converges(
    client: ListSyncClient, emulator: LiveEmulator, source: Path, tmp_path: Path
) -> None:
    seed(client, emulator)
    parts = tmp_path / "parts"
    split(client, source, parts)
    one_read = emulator.stats.unfiltered_pages[WHOLE]
    first = shard(client, parts, 0)
    # Shard 1's adds fail (an answer the client does not retry, every time).
    emulator.faults.add([FaultRule(endpoint="POST /v1/lists/{tableId}/targetable-people", kind="error")])

    with pytest.raises(SyncFailedError) as caught:
        shard(client, parts, 1)

    assert caught.value.summary["added"] == 0 and caught.value.summary["failed"] > 0
    emulator.faults.clear()
    # Its retry reads its part where the split left it: the List is not paged again.
    retried = shard(client, parts, 1)
    rest = [shard(client, parts, index) for index in range(2, SHARDS)]

    assert emulator.stats.unfiltered_pages == Counter({WHOLE: one_read})
    assert retried["failed"] == 0 and retried["added"] == caught.value.summary["planned"]["add"]
    assert sum(s["added"] for s in (first, retried, *rest)) == len(DOMAINS)
    after = sync_people(client, TABLE, read_extract(source), COLUMN_MAP, mode="mirror")
    assert (after["requests"]["total"], after["unchanged"]) == (0, 3 * len(DOMAINS))


NAMED = {"Domain": "account_domain", "Email": "email", "First": "first_name", "Last": "last_name"}
ANN = {"first_name": "Ann", "last_name": "Lee"}  # known by name alone: the service merges no add of her
SOLO = {"first_name": "Solo"}  # no identity: left alone by every plan
KEEP = {"email": "keep@acme.com", "first_name": "Keep"}
GONE = {"email": "gone@acme.com", "first_name": "Gone"}


def test_people_another_writer_adds_or_deletes_after_the_split_are_not_added_twice_nor_deleted(
    client: ListSyncClient, emulator: LiveEmulator, tmp_path: Path
) -> None:
    source = tmp_path / "named.csv"
    source.write_text("Domain,Email,First,Last\nacme.com,keep@acme.com,Keep,\nacme.com,,Ann,Lee\n", "utf-8")
    client.add_people(TABLE, [{"accountDomain": "acme.com", "people": [KEEP, GONE]}])
    parts = tmp_path / "parts"
    index = shard_number("acme.com", 2)
    split(client, source, parts, column_map=NAMED, shards=2)
    # Between the split and the shard, someone else adds Ann and deletes Gone: the part says
    # neither, and a plan from it alone would add Ann a second time and delete Gone, gone already.
    client.add_people(TABLE, [{"accountDomain": "acme.com", "people": [ANN]}])
    client.delete_people(TABLE, [{"accountDomain": "acme.com", "people": [{"email": "gone@acme.com"}]}])
    emulator.stats.clear()

    summary = shard(client, parts, index, 2, column_map=NAMED)

    people = people_in_list(emulator)["acme.com"]
    assert sorted(person["first_name"] for person in people) == ["Ann", "Keep"]
    assert (summary["added"], summary["deleted"], summary["not_found"], summary["unchanged"]) == (0, 0, 0, 2)
    assert summary["rechecked"] == 1 and summary["requests"]["total"] == 0
    assert emulator.stats.unfiltered_pages == Counter()


def test_a_part_keeps_the_list_people_a_plan_leaves_alone_and_counts_them(
    client: ListSyncClient, emulator: LiveEmulator, tmp_path: Path
) -> None:
    """The split writes each shard's List people as columns: those without an identity (left
    alone, but counted) and the fields the extract does not carry go through the part as well."""
    source = tmp_path / "named.csv"
    source.write_text("Domain,Email,First,Last\nacme.com,keep@acme.com,Keep,\n", "utf-8")
    kept = {**KEEP, "personas": ["buyer"], "target": True}
    client.add_people(TABLE, [{"accountDomain": "acme.com", "people": [kept, SOLO]}])
    parts = tmp_path / "parts"
    split(client, source, parts, column_map=NAMED, shards=2)
    emulator.stats.clear()

    summary = shard(client, parts, shard_number("acme.com", 2), 2, column_map=NAMED)

    assert (summary["list_people"], summary["list_unidentified"], summary["unchanged"]) == (2, 1, 1)
    assert summary["requests"]["total"] == 0
    people = people_in_list(emulator)["acme.com"]
    assert sorted(person["first_name"] for person in people) == ["Keep", "Solo"]


def test_list_values_that_are_lists_and_flags_go_through_a_part_unchanged(
    client: ListSyncClient, emulator: LiveEmulator, tmp_path: Path
) -> None:
    """A part keeps personas and flags as JSON text, and each distinct text is read once: every
    person gets back their own value, lists of one length and of several alike. Only beta.io
    is written, so acme.com's people are planned from the part alone."""
    listed = {"a": (["buyer"], True), "b": (["buyer", "champion"], False), "c": (["champion"], True)}
    listed |= {"e": (None, True), "d": (["buyer"], False)}
    domains = {name: "beta.io" if name == "d" else "acme.com" for name in listed}
    for name, (personas, target) in listed.items():
        person = {"email": f"{name}@x.com", "first_name": name, "target": target}
        person |= {"personas": personas} if personas else {}
        client.add_people(TABLE, [{"accountDomain": domains[name], "people": [person]}])
    source = tmp_path / "valued.csv"  # as listed, in another order; but d's personas: champion
    rows = ["e,,true", "c,champion,true", "d,champion,false", 'b,"buyer,champion",false', "a,buyer,true"]
    lines = [f"{domains[row[0]]},{row[0]},{row[0]}@x.com{row[1:]}\n" for row in rows]
    source.write_text("Domain,First,Email,Personas,Target\n" + "".join(lines), "utf-8")
    columns = {"Domain": "account_domain", "First": "first_name", "Email": "email", "Personas": "personas"}
    columns |= {"Target": "target"}
    parts = tmp_path / "parts"
    split(client, source, parts, column_map=columns, shards=1)

    summary = shard(client, parts, 0, 1, column_map=columns)

    assert (summary["unchanged"], summary["updated"], summary["rechecked"]) == (4, 1, 1)
    held = [person for people in people_in_list(emulator).values() for person in people]
    assert {person["first_name"]: (person.get("personas"), person["target"]) for person in held} == {
        **listed,
        "d": (["champion"], False),
    }


def test_a_shard_of_a_split_holds_the_lists_lease_as_an_unsharded_sync_does(
    client: ListSyncClient, emulator: LiveEmulator, source: Path, tmp_path: Path
) -> None:
    seed(client, emulator)
    parts = tmp_path / "parts"
    state = FileStateStore(tmp_path / "state" / "people.state")
    split(client, source, parts)

    # An unsharded sync (or a shard of another split) is writing the List: the shard waits for it.
    with (
        Lease(state.lease(f"people-{TABLE}-all"), "the unsharded sync"),
        pytest.raises(LeaseHeldError, match="is being written by the unsharded sync"),
    ):
        shard(client, parts, 0, state_path=state, lock_timeout=0.2)

    done = shard(client, parts, 0, state_path=state, lock_timeout=0)
    assert done["added"] > 0


def test_a_shard_refuses_parts_of_another_list_mapping_or_number_of_shards(
    client: ListSyncClient, source: Path, tmp_path: Path
) -> None:
    parts = tmp_path / "parts"
    with pytest.raises(SplitError, match="no split in"):
        shard(client, parts, 0)
    split(client, source, parts)

    with pytest.raises(SplitError, match="give the shards the split's List, column map"):
        shard(client, parts, 0, 2)
    with pytest.raises(SplitError, match="was made for"):
        shard(client, parts, 0, column_map={**COLUMN_MAP, "Title": "first_name", "First": "title"})
    with pytest.raises(ValueError, match="give the shard"):
        sync_people(client, TABLE, (), COLUMN_MAP, parts_path=parts)
    # A part the split of this version did not write (an earlier version's, or a folder changed since).
    (parts / f"shard-0-of-{SHARDS}.list.parquet").unlink()
    with pytest.raises(SplitError, match=r"is missing: .* run the split again"):
        shard(client, parts, 0)


def test_accounts_read_by_the_filter_come_as_they_are_read(
    client: ListSyncClient, emulator: LiveEmulator
) -> None:
    """A shard reads the accounts it writes in by the account filter, before it writes and to read
    back: their people come as the accounts are read, and only the accounts in flight are held
    (a shard of 375,000 people that held every one it wrote in peaked at 1 GB)."""
    from listsync.sync.people.read import read_accounts

    domains = [f"a{number:03d}.example" for number in range(60)]
    client.add_rows(TABLE, [{"cells": {"domain": domain}} for domain in domains])
    client.add_people(
        TABLE,
        [
            {"accountDomain": domain, "people": [{"email": f"p@{domain}", "first_name": "P"}]}
            for domain in domains
        ],
    )
    reads = "GET /v1/lists/{tableId}/targetable-people"
    before = emulator.stats.requests[reads]

    people, how = read_accounts(client, TABLE, domains, PAGE, 60, may_page=False)
    first = next(iter(people))

    # The first account's person has come; at most a few accounts ahead of it have been asked for.
    assert first["email"] == f"p@{domains[0]}" and how == "service"
    assert emulator.stats.requests[reads] - before < 30
    assert [person["email"] for person in people] == [f"p@{domain}" for domain in domains[1:]]
