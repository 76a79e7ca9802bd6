"""Contract: a reviewed plan is applied exactly, on every emulator profile.

A CRM clean-up removes a quarter of a List's people, more than ``max_delete_fraction`` allows:
the sync refuses it. Its dry run's plan, approved, is applied: the writes are the plan's lines and
the List is the extract. A plan whose List changed since it was made, or that is too old, is
refused before any write.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from listsync.client import ListSyncClient
from listsync.emulator import PROFILES
from listsync.sync.approved import PlanChangedError, StalePlanError
from listsync.sync.settings import SyncSettings
from listsync.sync.steps import UnsafeDeleteError

from ..support import SOLE_WRITER_PROFILES, LiveEmulator, read_jsonl
from .test_jobs_every_profile import (
    ACCOUNTS,
    PEOPLE_TABLE,
    PEOPLE_WRITES,
    ROW_WRITES,
    ROWS_TABLE,
    account_of,
    account_row,
    extract_people_view,
    extract_rows_view,
    in_service_form,
    list_people_view,
    list_rows_view,
    people_frame,
    person_row,
    requests_since,
    rows_frame,
    run_people,
    run_rows,
    start_people_list,
    tenant,
)

FULL = people_frame(person_row(n) for n in range(200))
CLEANED = people_frame(person_row(n) for n in range(200) if n % 4)  # 50 of 200 people leave: 25%


def reviewed_plan(live: LiveEmulator, path: Path) -> list[dict[str, Any]]:
    """The dry run of the clean-up (its delete limit lifted, as a reviewer's run does), with the
    sync's state beside the plan file: its plan."""
    settings = SyncSettings(
        dry_run=True, plan_path=path, max_delete_fraction=1, state_path=path.with_name("state")
    )
    summary = run_people(live, CLEANED, mode="mirror", settings=settings)
    assert summary["planned"]["delete"] == 50
    return read_jsonl(path)


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_an_approved_large_delete_is_applied_exactly_as_planned(
    live_emulator: Callable[..., LiveEmulator], profile: str, tmp_path: Path
) -> None:
    live = live_emulator(tenant(profile))
    start_people_list(live, ACCOUNTS)
    state = SyncSettings(state_path=tmp_path / "state")
    run_people(live, FULL, settings=state)
    counters = live.stats.requests.copy()
    with pytest.raises(UnsafeDeleteError, match="Refusing to delete 50 of 200 people"):
        run_people(live, CLEANED, mode="mirror", settings=state)
    plan = reviewed_plan(live, tmp_path / "plan.jsonl")
    assert requests_since(live, counters, PEOPLE_WRITES) == dict.fromkeys(PEOPLE_WRITES, 0)

    approved = SyncSettings(approved_plan=tmp_path / "plan.jsonl", state_path=tmp_path / "state")
    summary = run_people(live, CLEANED, mode="mirror", settings=approved)

    # With the state, the service's own forms of values are no change: the plan is the deletes.
    assert Counter(entry["action"] for entry in plan) == {"delete": 50}
    assert (summary["deleted"], summary["added"], summary["updated"]) == (50, 0, 0)
    assert list_people_view(live) == in_service_form(extract_people_view(CLEANED), profile)


def add_by_hand(account: str) -> Callable[[ListSyncClient, list[dict[str, Any]]], None]:
    """Someone adds a person to ``account`` by hand: the mirror would now delete them too, which no
    one approved."""

    def edit(client: ListSyncClient, _plan: list[dict[str, Any]]) -> None:
        person = {"first_name": "Hand", "email": "hand@x.io"}
        client.add_people(PEOPLE_TABLE, [{"accountDomain": account, "people": [person]}])

    return edit


def delete_the_last_planned_by_hand(client: ListSyncClient, plan: list[dict[str, Any]]) -> None:
    """Someone deletes by hand the last person the plan deletes: the plan made now ends a line before."""
    last = plan[-1]
    assert last["identity"].startswith("email:")
    person = {"email": last["identity"].removeprefix("email:")}
    client.delete_people(PEOPLE_TABLE, [{"accountDomain": last["account_domain"], "people": [person]}])


# (the edit after the review, where the plan made now first differs from the approved one)
LIST_EDITS = {
    # The List is read account by account: a person added on the first account is a delete among
    # the others; on the last account of the extract, a delete after them all.
    "added-in-the-middle": (add_by_hand(ACCOUNTS[0]), r"at line \d+: approved \{"),
    "added-at-the-end": (
        add_by_hand(account_of(199)),
        r"at line 51: approved nothing \(the plan ends before\)",
    ),
    "one-delete-less": (delete_the_last_planned_by_hand, r"at line 50: approved \{.*\}, now nothing"),
}


@pytest.mark.parametrize("edit", sorted(LIST_EDITS))
@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_a_plan_whose_list_changed_since_the_review_is_refused_before_any_write(
    live_emulator: Callable[..., LiveEmulator], profile: str, edit: str, tmp_path: Path, fake_clock: Any
) -> None:
    live = live_emulator(tenant(profile))
    start_people_list(live, ACCOUNTS)
    run_people(live, FULL, settings=SyncSettings(state_path=tmp_path / "state"))
    plan = reviewed_plan(live, tmp_path / "plan.jsonl")
    change_list, where = LIST_EDITS[edit]
    with live.client() as client:
        change_list(client, plan)
    fake_clock.sleep(PROFILES[profile].lag_seconds + 0.5)  # the List shows the edit
    before = list_people_view(live)
    counters = live.stats.requests.copy()
    # The new plan is to go to the approved file itself: it is held to the review first.
    approved = SyncSettings(
        approved_plan=tmp_path / "plan.jsonl",
        plan_path=tmp_path / "plan.jsonl",
        state_path=tmp_path / "state",
    )

    with pytest.raises(PlanChangedError, match=r"differs from the approved plan \S+ " + where):
        run_people(live, CLEANED, mode="mirror", settings=approved)

    assert requests_since(live, counters, PEOPLE_WRITES) == dict.fromkeys(PEOPLE_WRITES, 0)
    assert list_people_view(live) == before


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_a_stale_plan_is_refused_and_a_rows_plan_applies_like_a_people_plan(
    live_emulator: Callable[..., LiveEmulator], profile: str, tmp_path: Path
) -> None:
    live = live_emulator(tenant(profile))
    first = rows_frame(account_row(n) for n in range(40))
    cleaned = rows_frame(account_row(n) for n in range(30))
    run_rows(live, first)
    path = tmp_path / "rows.plan.jsonl"
    run_rows(
        live,
        cleaned,
        delete_missing=True,
        settings=SyncSettings(dry_run=True, plan_path=path, max_delete_fraction=1),
    )
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(path, (two_days_ago, two_days_ago))
    counters = live.stats.requests.copy()

    with pytest.raises(StalePlanError, match=r"written 48\.0 hours ago, more than max_plan_age"):
        run_rows(live, cleaned, delete_missing=True, settings=SyncSettings(approved_plan=path))
    assert requests_since(live, counters, ROW_WRITES) == dict.fromkeys(ROW_WRITES, 0)

    summary = run_rows(
        live,
        cleaned,
        delete_missing=True,
        settings=SyncSettings(approved_plan=path, max_plan_age=3 * 24 * 3600),
    )
    assert summary["deleted"] == len(read_jsonl(path)) == 10
    assert list_rows_view(live) == extract_rows_view(cleaned)
    assert ROWS_TABLE in live.state.lists
