"""Contract: ``update_only`` and ``insert_only`` against every emulator profile.

A List is filled, then synced in ``update_only`` mode (changes applied, new people or rows left
out and counted), then in ``insert_only`` mode (new ones added, changes left alone and counted),
then in ``upsert`` mode, which must still see and write what the two modes left: the state kept
across the runs records only what was written. Each expectation is worked out from the extracts
with the views of :mod:`tests.contract.test_jobs_every_profile`, and checked against what the
emulator holds and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from listsync.sync.settings import SyncSettings

from ..support import SOLE_WRITER_PROFILES, LiveEmulator
from .test_jobs_every_profile import (
    ACCOUNTS,
    PEOPLE_WRITES,
    ROW_WRITES,
    PeopleView,
    RowsView,
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


def retitled(numbers: range, changed: Callable[[int], bool], title: str) -> list[dict[str, Any]]:
    """Extract rows of people ``numbers``, those ``changed`` picks with a new title."""
    return [{**person_row(n), **({"Title": f"{title} {n}"} if changed(n) else {})} for n in numbers]


def merged(old: PeopleView | RowsView, new: PeopleView | RowsView, keys: Any) -> dict[Any, Any]:
    """``keys`` with their values in ``new`` where it has them, else in ``old``."""
    return {key: new.get(key, old.get(key)) for key in keys}


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_people_update_only_adds_no_one_and_insert_only_changes_no_one(
    live_emulator: Callable[..., LiveEmulator], profile: str, fake_clock: Any, tmp_path: Path
) -> None:
    live = live_emulator(tenant(profile))
    start_people_list(live, ACCOUNTS)
    settings = SyncSettings(state_path=tmp_path / "people.state")
    first = people_frame(person_row(n) for n in range(400))
    # Titles change for some, 20 people are new, and some are gone (no mode here deletes).
    second = people_frame(
        [row for n, row in enumerate(retitled(range(400), lambda n: n % 7 == 1, "Director")) if n % 50 != 3]
        + [person_row(n) for n in range(400, 420)]
    )
    third = people_frame(
        retitled(range(400), lambda n: n % 7 in (1, 2), "Director") + [person_row(n) for n in range(400, 430)]
    )
    views = [in_service_form(extract_people_view(frame), profile) for frame in (first, second, third)]
    run_people(live, first, settings=settings)
    filled = list_people_view(live)
    assert filled == views[0]

    fake_clock.sleep(0.5)
    counters = live.stats.requests.copy()
    summary = run_people(live, second, mode="update_only", settings=settings)
    updated = list_people_view(live)
    assert updated == merged(filled, views[1], filled)
    changed = sum(filled[key] != updated[key] for key in filled)
    assert changed == sum(n % 50 != 3 for n in range(1, 400, 7))  # the extract changes what it means to
    # A service that refuses patches by phone or name has them replaced (delete, then add).
    writes = requests_since(live, counters, PEOPLE_WRITES)
    assert writes["add"] == (writes["delete"] if summary["replaced"] else 0)
    assert (summary["added"], summary["updated"], summary["deleted"]) == (0, changed, 0)
    assert (summary["not_added"], summary["not_updated"], summary["failed"]) == (20, 0, 0)

    fake_clock.sleep(0.5)
    counters = live.stats.requests.copy()
    summary = run_people(live, third, mode="insert_only", settings=settings)
    inserted = list_people_view(live)
    assert inserted == {**updated, **{key: views[2][key] for key in views[2].keys() - updated.keys()}}
    assert requests_since(live, counters, PEOPLE_WRITES)["patch"] == 0
    differing = sum(updated[key] != views[2][key] for key in updated.keys() & views[2].keys())
    # Retitled now, or retitled before while out of the extract.
    assert differing == sum(n % 7 == 2 or (n % 7 == 1 and n % 50 == 3) for n in range(400))
    assert (summary["added"], summary["updated"], summary["deleted"]) == (30, 0, 0)
    assert (summary["not_added"], summary["not_updated"]) == (0, differing)

    # What insert_only left is still seen: an upsert writes it.
    fake_clock.sleep(0.5)
    summary = run_people(live, third, settings=settings)
    assert list_people_view(live) == {**inserted, **views[2]}
    assert (summary["added"], summary["updated"], summary["not_updated"]) == (0, differing, 0)


@pytest.mark.parametrize("profile", SOLE_WRITER_PROFILES)
def test_rows_update_only_adds_no_row_and_insert_only_changes_no_row(
    live_emulator: Callable[..., LiveEmulator], profile: str, fake_clock: Any, tmp_path: Path
) -> None:
    live = live_emulator(tenant(profile))
    settings = SyncSettings(state_path=tmp_path / "rows.state")
    first = rows_frame(account_row(n) for n in range(100))
    second = rows_frame(
        [account_row(n, variant=1) for n in range(100)] + [account_row(n) for n in range(100, 110)]
    )
    third = rows_frame(
        [
            {**account_row(n, variant=1), **({"Name": f"Renamed {n}"} if n % 5 == 0 else {})}
            for n in range(100)
        ]
        + [account_row(n) for n in range(100, 115)]
    )
    views = [extract_rows_view(frame) for frame in (first, second, third)]
    run_rows(live, first, settings=settings)
    filled = list_rows_view(live)
    assert filled == views[0]

    fake_clock.sleep(0.5)
    counters = live.stats.requests.copy()
    summary = run_rows(live, second, mode="update_only", settings=settings)
    updated = list_rows_view(live)
    assert updated == merged(filled, views[1], filled)
    changed = sum(filled[key] != updated[key] for key in filled)
    assert changed > 10
    assert requests_since(live, counters, ROW_WRITES)["add_rows"] == 0
    assert (summary["added"], summary["updated"], summary["not_added"]) == (0, changed, 10)

    fake_clock.sleep(0.5)
    counters = live.stats.requests.copy()
    summary = run_rows(live, third, mode="insert_only", settings=settings)
    inserted = list_rows_view(live)
    assert inserted == {**updated, **{key: views[2][key] for key in views[2].keys() - updated.keys()}}
    assert requests_since(live, counters, ROW_WRITES)["update_cells"] == 0
    assert (summary["added"], summary["updated"], summary["not_updated"]) == (15, 0, 20)

    fake_clock.sleep(0.5)
    summary = run_rows(live, third, settings=settings)
    assert list_rows_view(live) == views[2]
    assert (summary["added"], summary["updated"], summary["not_updated"]) == (0, 20, 0)
