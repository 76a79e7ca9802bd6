"""Contract: the people and rows jobs on a List other people use (the ``busy`` profile).

On ``busy`` another writer moves the List while a sync reads it: between the pages of a read it
deletes 4% of the people (or rows), adds as many and edits as many others, at most once an hour
per List; and a DELETE of people by phone or by name removes every person who shares it. Pages
are capped at 100 here, so that the reads of a few hundred people or rows have pages to tear.

Each test runs three nights, a day apart, and checks after each what the List holds, by the
views of ``test_jobs_every_profile`` (its own rules, not the job's), and that the summary and the
night's exit status tell what the other writer did and the List shows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from listsync.emulator import FaultRule
from listsync.sync.forms import DELETE_REACH
from listsync.sync.settings import SyncSettings
from listsync.sync.state import SyncState
from listsync.sync.steps import SyncFailedError

from ..support import LiveEmulator
from .test_jobs_every_profile import (
    PEOPLE_TABLE,
    PeopleView,
    account_of,
    account_row,
    bare_domain,
    extract_people_view,
    extract_rows_view,
    identity,
    list_rows_view,
    people_frame,
    people_in,
    person_row,
    rows_frame,
    run_people,
    run_rows,
    start_people_list,
    tenant,
)

NIGHT = 86_400.0
SHORT_PAGES = {"page_cap": 100, "page_cap_refuses": False}


def busy(live_emulator: Callable[..., LiveEmulator]) -> LiveEmulator:
    config = tenant("busy").model_copy(update={"seed": 34, "dialect_overrides": SHORT_PAGES})
    return live_emulator(config)


def people_counts(live: LiveEmulator) -> Counter[tuple[str, str]]:
    return Counter((domain, identity(person)) for domain, person in people_in(live))


def seed_people(live: LiveEmulator, view: PeopleView) -> None:
    """The List as someone filled it before the sync was set up: every CRM person once."""
    lst = live.state.lists[PEOPLE_TABLE]
    for (domain, _), person in view.items():
        row = lst.row_for_domain(domain)
        assert row is not None
        row.people.append({**person, "target": bool(person.get("email") or person.get("phone_number"))})
    lst.people_changed()


def check_people_night(live: LiveEmulator, crm: PeopleView, summary: Mapping[str, Any], night: int) -> None:
    """Every CRM person is in the List exactly once with the CRM's values, no one else is, and the
    summary counts what the other writer did this night, as the List shows it."""
    counts = people_counts(live)
    assert {key: count for key, count in counts.items() if count > 1} == {}, "duplicates"
    assert set(counts) == set(crm), "lost people, or people the CRM does not hold"
    by_key = {(domain, identity(person)): person for domain, person in people_in(live)}
    for key, person in crm.items():
        assert {name: by_key[key].get(name) for name in person} == person, key

    (move,) = [move for move in live.other_writer.moves if move["list"] == PEOPLE_TABLE][night:]
    deleted = [(bare_domain(p["accountDomain"]), identity(p)) for p in move["deleted"]]
    edited = [(bare_domain(p["accountDomain"]), identity(p)) for p in move["edited"]]
    titled = [key for key in edited if crm[key].get("title")]
    assert deleted and move["added"] and edited
    assert {name: summary[name] for name in ("added", "updated", "deleted", "failed", "drift", "lost")} == {
        "added": len(deleted),  # the people the other writer deleted, added again
        "updated": len(titled),  # its edits of CRM values put back (a title the CRM lacks stays)
        "deleted": len(move["added"]),  # the people it added, whom the CRM does not hold (mirror)
        "failed": 0,
        "drift": 0,
        "lost": 0,
    }, summary
    assert summary["rereads"] >= 1 and summary["steady_read"] is True
    assert summary["turned_up"] == 0
    # From the second night on the state knows whom it applied: an absence is confirmed, then
    # repaired and counted as an edit made in the List.
    assert summary["edited_in_list"] == (0 if night == 0 else len(deleted) + len(titled))


def test_three_nights_of_the_people_mirror_sync_on_a_busy_list(
    live_emulator: Callable[..., LiveEmulator], fake_clock: Any, tmp_path: Path
) -> None:
    live = busy(live_emulator)
    frame = people_frame(person_row(number) for number in range(400))  # 16 accounts, 80 bare people
    crm = extract_people_view(frame)
    start_people_list(live, {account_of(number) for number in range(400)})
    seed_people(live, crm)
    settings = SyncSettings(state_path=tmp_path / "people.state")

    for night in range(3):
        fake_clock.sleep(NIGHT)
        # Returns: exit status 0, every night (fail_on_error would raise on a failure or drift).
        summary = run_people(
            live, frame, mode="mirror", delete_scope="list", page_size=100, settings=settings
        )
        check_people_night(live, crm, summary, night)


def test_three_nights_of_the_rows_upsert_on_a_busy_list(
    live_emulator: Callable[..., LiveEmulator], fake_clock: Any, tmp_path: Path
) -> None:
    live = busy(live_emulator)
    frame = rows_frame(account_row(number) for number in range(300))
    crm = extract_rows_view(frame)
    settings = SyncSettings(state_path=tmp_path / "rows.state")

    for night in range(3):
        fake_clock.sleep(NIGHT)
        summary = run_rows(live, frame, settings=settings)
        listed = list_rows_view(live)  # fails on a duplicate domain
        assert {domain: listed.get(domain) for domain in crm} == crm
        moves = [move for move in live.other_writer.moves if move["list"] == "tbl_rows"]
        if night == 0:  # the List was empty: its read had no page to tear
            assert (moves, summary["added"], summary["rereads"]) == ([], 300, 0)
            continue
        (move,) = moves[night - 1 :]
        others = {cells["domain"] for cells in move["added"]}
        assert set(listed) == set(crm) | others | {
            cells["domain"] for m in moves[: night - 1] for cells in m["added"]
        }  # the upsert leaves the rows the CRM does not name
        deleted = [bare_domain(cells["domain"]) for cells in move["deleted"]]
        edited = [bare_domain(cells["domain"]) for cells in move["edited"] if cells["domain"] in crm]
        assert deleted and edited
        counts = ("added", "updated", "deleted", "failed", "drift", "turned_up")
        assert {name: summary[name] for name in counts} == {
            "added": len([domain for domain in deleted if domain in crm]),
            "updated": len(edited),
            "deleted": 0,
            "failed": 0,
            "drift": 0,
            "turned_up": 0,
        }, summary
        assert summary["rereads"] >= 1 and summary["steady_read"] is True
        assert summary["edited_in_list"] == summary["added"] + len(edited)


def test_a_read_never_steady_plans_no_delete(
    live_emulator: Callable[..., LiveEmulator], tmp_path: Path
) -> None:
    """The other writer moves the List at every read here, the read backs' too: no read is steady,
    and the writes of the night are read back moved (counted, not failing: not what is tested)."""
    live = live_emulator(
        tenant("busy").model_copy(
            update={"seed": 34, "dialect_overrides": {**SHORT_PAGES, "other_writer_every": 0}}
        )
    )
    frame = people_frame(person_row(number) for number in range(400))
    crm = extract_people_view(frame)
    start_people_list(live, {account_of(number) for number in range(400)})
    seed_people(live, crm)
    settings = SyncSettings(state_path=tmp_path / "people.state", fail_on_error=False)
    counters = live.stats.requests.copy()

    summary = run_people(live, frame, mode="mirror", delete_scope="list", page_size=100, settings=settings)

    assert summary["steady_read"] is False and summary["rereads"] == 3
    assert summary["torn_reasons"] and summary["deleted"] == 0
    assert (
        live.stats.requests["DELETE /v1/lists/{tableId}/targetable-people"]
        == counters["DELETE /v1/lists/{tableId}/targetable-people"]
    )


@pytest.mark.parametrize("reach", ["all", "one"])
def test_extra_copies_are_removed_down_to_one_however_far_a_delete_reaches(
    live_emulator: Callable[..., LiveEmulator], fake_clock: Any, tmp_path: Path, reach: str
) -> None:
    live = live_emulator(
        tenant("reference").model_copy(update={"dialect_overrides": {"delete_reach": reach}})
    )
    frame = people_frame(person_row(number) for number in range(100))
    crm = extract_people_view(frame)
    start_people_list(live, {account_of(number) for number in range(100)})
    seed_people(live, crm)
    # A lost add left copies of people known by phone or by name alone: 2 or 3 of each of ten.
    bare = [key for key in crm if key[1].startswith(("phone:", "name:"))][:10]
    lst = live.state.lists[PEOPLE_TABLE]
    for number, key in enumerate(bare):
        row = lst.row_for_domain(key[0])
        assert row is not None
        row.people.extend(dict(crm[key]) for _ in range(1 + number % 2))
    lst.people_changed()
    extra = sum(1 + number % 2 for number in range(len(bare)))
    settings = SyncSettings(state_path=tmp_path / "people.state")

    summary = run_people(live, frame, mode="mirror", settings=settings)

    counts = people_counts(live)
    assert set(counts) == set(crm) and set(counts.values()) == {1}  # one copy of each, no one lost
    assert (summary["copies_removed"], summary["lost"], summary["drift"], summary["failed"]) == (
        extra,
        0,
        0,
        0,
    )
    assert (summary["added"], summary["deleted"], summary["updated"]) == (0, 0, 0)
    assert summary["verified"] == extra
    # How far deletes reach is kept with the state: the next run knows it without a probe.
    fake_clock.sleep(NIGHT)
    again = run_people(live, frame, mode="mirror", settings=settings)
    assert (again["requests"]["total"], again["copies_removed"]) == (0, 0)
    state = SyncState.from_bytes((tmp_path / "people.state").read_bytes(), "here")
    assert state.forms[DELETE_REACH] == [reach]


def test_copies_removed_with_the_one_meant_to_stay_are_a_loss_repaired_the_next_night(
    live_emulator: Callable[..., LiveEmulator], fake_clock: Any, tmp_path: Path
) -> None:
    live = live_emulator(
        tenant("reference").model_copy(update={"dialect_overrides": {"delete_reach": "all"}})
    )
    frame = people_frame(person_row(number) for number in range(50))
    crm = extract_people_view(frame)
    start_people_list(live, {account_of(number) for number in range(50)})
    seed_people(live, crm)
    copied = next(key for key in crm if key[1].startswith("phone:"))
    lst = live.state.lists[PEOPLE_TABLE]
    row = lst.row_for_domain(copied[0])
    assert row is not None
    row.people.append(dict(crm[copied]))
    lst.people_changed()
    # Every copy goes with the delete; the add of one again is refused.
    live.faults.add(
        [FaultRule(endpoint="POST /v1/lists/{tableId}/targetable-people", kind="error", status=500)]
    )
    settings = SyncSettings(state_path=tmp_path / "people.state", verify_timeout=0)

    with pytest.raises(SyncFailedError) as failed:
        run_people(live, frame, mode="mirror", settings=settings)

    summary = failed.value.summary
    assert copied not in people_counts(live)
    assert (summary["lost"], summary["copies_removed"], summary["verified"]) == (1, 0, 0)
    assert summary["drift"] >= 1 and "no copy is left" in " ".join(summary["drift_reasons"])

    live.faults.clear()
    fake_clock.sleep(NIGHT)
    repaired = run_people(live, frame, mode="mirror", settings=settings)
    assert people_counts(live)[copied] == 1 and set(people_counts(live)) == set(crm)
    assert (repaired["added"], repaired["edited_in_list"], repaired["lost"]) == (1, 1, 0)


@pytest.mark.parametrize("reach", ["all", "one"])
def test_no_delete_by_a_phone_or_name_another_person_of_the_account_shares(
    live_emulator: Callable[..., LiveEmulator], reach: str
) -> None:
    live = live_emulator(
        tenant("reference").model_copy(update={"dialect_overrides": {"delete_reach": reach}})
    )
    start_people_list(live, ["shared.com", "other.com"])
    ann = {"first_name": "Ann", "last_name": "Lee", "email": "ann@shared.com", "phone_number": "+14155550100"}
    bob = {"first_name": "Bob", "phone_number": "+14155550100"}  # Ann's phone: a delete by it reaches her
    cy = {"first_name": "Cy", "last_name": "Ng"}
    cy_too = {"first_name": "cy", "last_name": "NG", "email": "cy@shared.com"}  # Cy's name, case aside
    dee = {"first_name": "Dee", "email": "dee@other.com"}
    seed_people(
        live,
        {
            (domain, identity(p)): p
            for domain, p in [*((("shared.com"), p) for p in (ann, bob, cy, cy_too)), ("other.com", dee)]
        },
    )
    columns = {
        "Company": None,
        "First": "first_name",
        "Last": "last_name",
        "Email": "email",
        "Phone": "phone_number",
    }

    def extract(*people: tuple[str, dict[str, str]]) -> pd.DataFrame:
        return people_frame(
            {column: domain if field is None else person.get(field) for column, field in columns.items()}
            for domain, person in people
        )

    settings = SyncSettings(fail_on_error=False, max_delete_fraction=1.0)
    summary = run_people(
        live,
        extract(("shared.com", ann), ("shared.com", cy_too), ("other.com", dee)),
        mode="mirror",
        delete_scope="list",
        settings=settings,
    )

    # Bob and Cy are not deleted: a delete by Bob's phone or Cy's name could remove Ann or cy@.
    assert {identity(person) for _, person in people_in(live)} == {
        identity(p) for p in (ann, bob, cy, cy_too, dee)
    }
    assert (summary["deletes_held"], summary["failed"], summary["deleted"]) == (2, 2, 0)
    assert all("shares that phone number or name" in reason for reason in summary["failure_reasons"])
    # Once every one who shares them is meant to go, they go.
    summary = run_people(
        live, extract(("other.com", dee)), mode="mirror", delete_scope="list", settings=settings
    )
    assert [person for _, person in people_in(live)] == [dee]
    assert (summary["deletes_held"], summary["deleted"]) == (0, 4)
