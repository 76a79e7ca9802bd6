"""sync_people with ``shard="i/n"``: the n shards, run one after another, do what the whole sync does.

The List holds twelve accounts, each with a person the extract keeps as is, one it changes and one
it no longer has; the extract adds one person per account and holds duplicates and rows rejected
for their domain (unreadable, empty) or another field. Four shards in mirror mode must leave the
List as the unsharded sync would, write each planned item once, and account for every row once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from listsync.cli import main
from listsync.client import ListSyncClient
from listsync.extract.options import Shard
from listsync.extract.sources import read_extract
from listsync.operators.people import SyncTargetablePeopleOperator
from listsync.sync.lease import Lease, LeaseHeldError
from listsync.sync.people import sync_people
from listsync.sync.people.match import account_domain_of, list_domain
from listsync.sync.people.read import PEOPLE_AT_ONCE, people_in_shard
from listsync.sync.settings import SyncSettings
from listsync.sync.state import FileStateStore
from listsync.sync.steps import combine_summaries

from ...support import LiveEmulator, read_jsonl
from ...support.tenants import PEOPLE_API_KEY as API_KEY
from ...support.tenants import PEOPLE_TABLE as TABLE

COLUMN_MAP = {"Domain": "account_domain", "Email": "email", "First": "first_name", "Title": "title"}
# Accounts the conftest's List holds, and more, so that each of four shards has some.
DOMAINS = ("acme.com", "beta.io", "gamma.org", *(f"d{number:02d}.example" for number in range(9)))
SHARDS = 4
COUNTS = ("passed", "rejected", "duplicates", "list_people")


def extract_text() -> str:
    lines = ["Domain,Email,First,Title"]
    for domain in DOMAINS:
        lines += [
            f"{domain},keep@{domain},Keep,CEO",
            f"https://www.{domain.upper()}/,old@{domain},Old,CTO",  # a patch, the domain messy
            f"{domain},new@{domain},New,",
            f"{domain},KEEP@{domain},Keep,CEO",  # a duplicate of the first
        ]
    lines += [
        "not a domain!,x@nowhere.com,Bad,",  # a domain no shard can normalise
        ",nobody@nowhere.com,Empty,",  # no domain at all
        "acme.com,not-an-email,Broken,",  # a bad e-mail on an account of one shard
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def seeded(client: ListSyncClient, emulator: LiveEmulator) -> ListSyncClient:
    return seed(client, emulator)


def seed(client: ListSyncClient, emulator: LiveEmulator) -> ListSyncClient:
    """Fill the List with the accounts of :data:`DOMAINS` and three people each, then clear the
    emulator's counters."""
    client.add_rows(TABLE, [{"cells": {"domain": domain}} for domain in DOMAINS[3:]])
    client.add_people(
        TABLE,
        [
            {
                "accountDomain": domain,
                "people": [
                    {"email": f"keep@{domain}", "first_name": "Keep", "title": "CEO"},
                    {"email": f"old@{domain}", "first_name": "Old", "title": "Intern"},
                    {"email": f"gone@{domain}", "first_name": "Gone"},
                ],
            }
            for domain in DOMAINS
        ],
    )
    emulator.stats.clear()
    return client


def run(client: ListSyncClient, source: Path, folder: Path, name: str, **settings: Any) -> dict[str, Any]:
    return sync_people(
        client,
        TABLE,
        read_extract(source),
        COLUMN_MAP,
        mode="mirror",
        settings=SyncSettings(
            max_delete_fraction=0.5,
            rejects_path=folder / f"rejects-{name}.jsonl",
            plan_path=folder / f"plan-{name}.jsonl",
            **settings,
        ),
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path) if path.exists() else []


def test_four_shards_one_after_another_do_what_the_whole_sync_does(
    seeded: ListSyncClient, emulator: LiveEmulator, tmp_path: Path
) -> None:
    source = tmp_path / "contacts.csv"
    source.write_text(extract_text(), encoding="utf-8")
    whole = run(seeded, source, tmp_path, "whole", dry_run=True)
    rows = len(extract_text().splitlines()) - 1

    shards = [run(seeded, source, tmp_path, str(index), shard=f"{index}/{SHARDS}") for index in range(SHARDS)]

    # Every shard reads the whole extract and accounts for every row, its own or another's.
    for index, summary in enumerate(shards):
        assert summary["shard"] == f"{index}/{SHARDS}"
        assert summary["read"] == rows
        assert summary["read"] == sum(
            summary[name] for name in ("passed", "rejected", "duplicates", "other_shards")
        )
        assert summary["planned"]["add"] > 0  # each shard had accounts of its own
    assert whole["shard"] is None and whole["other_shards"] == 0
    # Across the shards each row went to one place, and each List person to one shard.
    for name in COUNTS:
        assert sum(summary[name] for summary in shards) == whole[name], name
    rejected = Counter(
        entry["row"] for index in range(SHARDS) for entry in lines(tmp_path / f"rejects-{index}.jsonl")
    )
    assert rejected == Counter(entry["row"] for entry in lines(tmp_path / "rejects-whole.jsonl"))
    assert set(rejected.values()) == {1} and len(rejected) == 3
    # Each planned item was written by exactly one shard, and the shards wrote what the whole planned.
    items = Counter(
        (entry["action"], entry["account_domain"], entry["identity"])
        for index in range(SHARDS)
        for entry in lines(tmp_path / f"plan-{index}.jsonl")
    )
    planned = Counter(
        (entry["action"], entry["account_domain"], entry["identity"])
        for entry in lines(tmp_path / "plan-whole.jsonl")
    )
    assert items == planned and set(items.values()) == {1}
    written = {kind: sum(summary[kind] for summary in shards) for kind in ("added", "updated", "deleted")}
    assert written == {
        "added": whole["planned"]["add"],
        "updated": whole["planned"]["patch"],
        "deleted": whole["planned"]["delete"],
    }
    assert written == {"added": len(DOMAINS), "updated": len(DOMAINS), "deleted": len(DOMAINS)}

    # The List is the whole sync's: run unsharded now, it has nothing left to write.
    after = run(seeded, source, tmp_path, "after")
    assert (after["requests"]["total"], after["unchanged"]) == (0, 3 * len(DOMAINS))

    combined = combine_summaries(reversed(shards))
    assert combined["shards"] == [f"{index}/{SHARDS}" for index in range(SHARDS)]
    assert "shard" not in combined
    assert (combined["added"], combined["updated"], combined["deleted"]) == (12, 12, 12)
    assert combined["list_people"] == whole["list_people"]
    assert combined["requests"] == {
        kind: sum(summary["requests"][kind] for summary in shards)
        for kind in ("add", "patch", "delete", "total")
    }
    assert combined["plan_path"] == [str(tmp_path / f"plan-{index}.jsonl") for index in range(SHARDS)]
    assert combined["mode"] == "mirror"
    # The extract is read once, and every row of it is in one of the shards combined.
    assert (combined["read"], combined["other_shards"]) == (whole["read"], 0)
    assert combined["passed"] + combined["rejected"] + combined["duplicates"] == whole["read"]
    # Combining only some shards leaves the rows of the others in other_shards.
    some = combine_summaries(shards[:2])
    left = sum(s["passed"] + s["rejected"] + s["duplicates"] for s in shards[2:])
    assert (some["read"], some["other_shards"]) == (whole["read"], left)


LIST_DOMAINS = (
    "acme.com",
    "https://www.ACME.com/",
    " Beta.IO ",
    "bücher.de",
    "xn--bcher-kva.de",
    "not a domain!",
    "\ud800.com",
    "",
    None,
)


def test_each_shard_takes_a_lease_of_its_own(seeded: ListSyncClient, tmp_path: Path) -> None:
    source = tmp_path / "contacts.csv"
    source.write_text(extract_text(), encoding="utf-8")
    state = FileStateStore(tmp_path / "state" / "people.state")

    # Shard 1 is being written: shard 0 goes on at once, another run of shard 1 is refused.
    with Lease(state.lease(f"people-{TABLE}-1-of-2"), "the run of shard 1"):
        other = run(seeded, source, tmp_path, "0", shard="0/2", state_path=state, lock_timeout=0)
        with pytest.raises(
            LeaseHeldError, match="the people sync of tbl_people, shard 1/2 is being written by"
        ):
            run(seeded, source, tmp_path, "1", shard="1/2", state_path=state, lock_timeout=0.2)

    assert other["lease_waited_for"] is None and other["added"] > 0


def test_list_people_go_to_the_shard_of_their_domain_normalised_as_one_at_a_time() -> None:
    """The List side sorts people a batch at a time as columns; each lands where the scalar rule
    puts them (messy, unreadable and missing domains included), in List order, none lost."""
    people = [
        {"accountDomain": LIST_DOMAINS[number % len(LIST_DOMAINS)], "email": f"p{number}@example.com"}
        for number in range(2 * PEOPLE_AT_ONCE + 7)
    ]
    shards = [Shard(index, SHARDS) for index in range(SHARDS)]

    kept = [list(people_in_shard(iter(people), shard)) for shard in shards]

    for shard, theirs in zip(shards, kept, strict=True):
        assert theirs == [person for person in people if shard.holds(list_domain(account_domain_of(person)))]
    assert sorted(person["email"] for theirs in kept for person in theirs) == sorted(
        person["email"] for person in people
    )
    assert sum(1 for theirs in kept if theirs) > 1


def test_combining_summaries_of_different_syncs_is_refused() -> None:
    first = {"shard": "0/2", "table_id": "tbl_a", "added": 1}
    with pytest.raises(ValueError, match="distinct shards of one sync"):
        combine_summaries([first, {**first, "shard": "0/3"}])
    with pytest.raises(ValueError, match="distinct shards of one sync"):
        combine_summaries([first, first])
    with pytest.raises(ValueError, match="shards of one List"):
        combine_summaries([first, {**first, "shard": "1/2", "table_id": "tbl_b"}])
    with pytest.raises(ValueError, match="sharded runs"):
        combine_summaries([first, {**first, "shard": None}])
    with pytest.raises(ValueError, match="read one extract"):
        combine_summaries([{**first, "read": 10}, {**first, "shard": "1/2", "read": 11}])


@pytest.mark.parametrize("shard", ["4/4", "-1/4", "1/0", "one/four", "2", "1/2/3"])
def test_a_bad_shard_fails_before_anything_is_read_or_sent(
    client: ListSyncClient, emulator: LiveEmulator, tmp_path: Path, shard: str
) -> None:
    source = tmp_path / "contacts.csv"
    source.write_text(extract_text(), encoding="utf-8")

    with pytest.raises(ValueError, match=r'shard must be "i/n" with 0 <= i < n'):
        run(client, source, tmp_path, "bad", shard=shard)

    assert sum(emulator.stats.requests.values()) == 0


def test_the_operator_checks_a_shard_at_parse_time_unless_it_is_templated() -> None:
    options: dict[str, Any] = {"task_id": "t", "table_id": TABLE, "column_map": COLUMN_MAP, "source": "x.csv"}
    with pytest.raises(ValueError, match=r'shard must be "i/n".*got \'4/4\''):
        SyncTargetablePeopleOperator(shard="4/4", **options)

    operator = SyncTargetablePeopleOperator(shard="{{ params.shard }}", **options)

    assert "shard" in operator.template_fields
    assert operator.shard == "{{ params.shard }}"


def test_the_command_runs_one_shard_and_refuses_a_bad_one_with_exit_status_2(
    seeded: ListSyncClient,
    emulator: LiveEmulator,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "contacts.csv"
    source.write_text(extract_text(), encoding="utf-8")
    maps = [option for column, field in COLUMN_MAP.items() for option in ("--map", f"{column}={field}")]
    command = [
        "sync-people",
        "--base-url",
        emulator.url,
        "--api-key",
        API_KEY,
        "--table-id",
        TABLE,
        "--source",
        str(source),
        *maps,
    ]

    assert main([*command, "--shard", "0/1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["shard"], summary["other_shards"], summary["added"]) == ("0/1", 0, len(DOMAINS))

    assert main([*command, "--shard", "1/1"]) == 2
    assert '--shard: shard must be "i/n" with 0 <= i < n' in capsys.readouterr().err


def test_a_templated_shard_is_checked_as_the_task_runs_and_fails_it_without_retries(
    client: ListSyncClient,
    emulator: LiveEmulator,
    connect_listsync: Callable[..., None],
    tmp_path: Path,
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    connect_listsync(emulator.url, API_KEY)
    source = tmp_path / "contacts.csv"
    source.write_text(extract_text(), encoding="utf-8")
    operator = SyncTargetablePeopleOperator(
        task_id="t", table_id=TABLE, column_map=COLUMN_MAP, source=str(source), shard="{{ params.shard }}"
    )
    operator.shard = "4/4"  # what the template rendered

    with pytest.raises(AirflowFailException, match=r"shard must be \"i/n\" with 0 <= i < n.*got '4/4'"):
        operator.execute({})  # type: ignore[arg-type]

    assert sum(emulator.stats.requests.values()) == 0
