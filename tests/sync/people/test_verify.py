"""The people read back against the emulator: one read of the List for every write, as hashes,
and a read in full of the writes the hashes show other than written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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
