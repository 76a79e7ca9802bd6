"""Contract: a sync's state against a hosted service, one that shows writes late and keeps values in
its own forms (the ``hosted`` profile, its lag set per test).

What the state is for is checked from the emulator's side: the writes it answered, the people it
holds. Without a state (a first run, a deleted one) the sync is a live diff, as before states.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from listsync.emulator import EmulatorConfig
from listsync.sync.people import sync_people
from listsync.sync.settings import SyncSettings
from listsync.sync.state import StateMismatchError

from ..support import LiveEmulator
from .test_jobs_every_profile import (
    ACCOUNTS,
    PEOPLE_TABLE,
    PEOPLE_WRITES,
    PERSON_COLUMNS,
    extract_people_view,
    in_service_form,
    list_people_view,
    people_frame,
    person_row,
    requests_since,
    start_people_list,
    tenant,
)

NO_WRITES = dict.fromkeys(PEOPLE_WRITES, 0)


def hosted(lag_seconds: float) -> EmulatorConfig:
    config = tenant("hosted")
    return config.model_copy(update={"dialect_overrides": {"lag_seconds": lag_seconds}})


def people(count: int = 200) -> pd.DataFrame:
    return people_frame(person_row(number) for number in range(count))


def run(live: LiveEmulator, frame: pd.DataFrame, **settings: Any) -> tuple[dict[str, Any], dict[str, int]]:
    """Sync ``frame`` in mirror mode with ``settings`` (:class:`SyncSettings`); the summary and the
    writes the emulator answered."""
    counters = live.stats.requests.copy()
    with live.client() as client:
        summary = sync_people(
            client, PEOPLE_TABLE, [frame], PERSON_COLUMNS, mode="mirror", settings=SyncSettings(**settings)
        )
    return summary, requests_since(live, counters, PEOPLE_WRITES)


def test_with_its_state_deleted_a_sync_is_a_live_diff_again(
    live_emulator: Callable[..., LiveEmulator],
    fake_clock: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    live = live_emulator(hosted(2.0))
    start_people_list(live, ACCOUNTS[:8])
    state = tmp_path / "people.state"
    run(live, people(), state_path=state)
    fake_clock.sleep(0.5)
    assert run(live, people(), state_path=state)[1] == NO_WRITES

    # Without its state, the sync diffs against the live List alone, as a sync without a state
    # does: the values the service keeps in its own form (double spaces, URL case) look changed.
    state.unlink()
    caplog.set_level(logging.INFO, logger="listsync.sync.state")
    fake_clock.sleep(0.5)
    stateless, writes = run(live, people(), state_path=state)
    assert f"No sync state at {state} yet: diffing against the live List alone" in caplog.messages
    fake_clock.sleep(0.5)
    never_kept, same_writes = run(live, people())
    assert writes == same_writes and writes["patch"] > 0
    counts = ("added", "updated", "deleted", "unchanged", "service_forms")
    assert [stateless[name] for name in counts] == [never_kept[name] for name in counts]
    assert stateless["updated"] > 0 and stateless["service_forms"] == stateless["updated"]

    # The run without a state kept a new one: the next run is quiet again.
    fake_clock.sleep(0.5)
    assert run(live, people(), state_path=state)[1] == NO_WRITES
    assert list_people_view(live) == in_service_form(extract_people_view(people()), "hosted")


def people_by_url_or_name() -> pd.DataFrame:
    """People known only by a profile URL whose slug has capitals, or only by a name with a double
    space: keys the hosted service keeps in its own forms (the URL in lower case, the space one)."""
    rows = []
    for number in range(40):
        row = dict.fromkeys(PERSON_COLUMNS)
        row.update(Company=ACCOUNTS[number % 4], First="Ann", Last=f"Lee{number:04d}")
        if number % 2:
            row["Profile"] = f"https://network.example/in/Ann-Lee{number:04d}"
        else:
            row["First"] = "Mary  Ann"
        rows.append(row)
    return people_frame(rows)


def test_people_known_by_profile_url_or_name_are_found_in_the_forms_the_state_keeps(
    live_emulator: Callable[..., LiveEmulator], fake_clock: Any, tmp_path: Path
) -> None:
    live = live_emulator(hosted(2.0))
    start_people_list(live, ACCOUNTS[:4])
    state = tmp_path / "people.state"
    extract = people_by_url_or_name()

    first, writes = run(live, extract, state_path=state)
    assert (first["added"], first["service_forms"], first["drift"]) == (40, 40, 0)

    # The List holds them under keys in its own forms: only the forms learned on the first run,
    # kept with the state from run to run, match them to the extract's people. Two runs, so that
    # a run that learns nothing new keeps the forms it was given.
    for _ in range(2):
        fake_clock.sleep(0.5)
        again, writes = run(live, extract, state_path=state)
        assert writes == NO_WRITES
        counts = ("unchanged", "added", "deleted", "edited_in_list")
        assert [again[name] for name in counts] == [40, 0, 0, 0]
    assert list_people_view(live) == in_service_form(extract_people_view(extract), "hosted")


def test_a_state_of_another_list_or_mapping_is_refused_naming_it(
    live_emulator: Callable[..., LiveEmulator], tmp_path: Path
) -> None:
    live = live_emulator(tenant("reference"))
    start_people_list(live, ACCOUNTS[:8])
    state = tmp_path / "people.state"
    run(live, people(50), state_path=state)
    kept = state.read_bytes()

    with live.client() as client, pytest.raises(StateMismatchError, match="List tbl_people, not tbl_rows"):
        sync_people(client, "tbl_rows", [people(50)], PERSON_COLUMNS, settings=SyncSettings(state_path=state))
    other_map = {**PERSON_COLUMNS, "Title": "bio"}
    with (
        live.client() as client,
        pytest.raises(StateMismatchError, match=r"the mapping \{.*\"Title\": \"title\""),
    ):
        sync_people(client, PEOPLE_TABLE, [people(50)], other_map, settings=SyncSettings(state_path=state))
    with live.client() as client, pytest.raises(StateMismatchError, match="shard none, not 0/2"):
        sync_people(
            client,
            PEOPLE_TABLE,
            [people(50)],
            PERSON_COLUMNS,
            settings=SyncSettings(state_path=state, shard="0/2"),
        )
    # Refused before anything was read or written: the state is as it was.
    assert state.read_bytes() == kept
    # fresh_state starts afresh, and keeps a state of its own scope.
    with live.client() as client:
        summary = sync_people(
            client,
            PEOPLE_TABLE,
            [people(50)],
            other_map,
            settings=SyncSettings(state_path=state, fresh_state=True),
        )
    assert summary["failed"] == 0 and state.read_bytes() != kept


def test_writes_shown_later_than_the_read_back_waits_are_not_sent_twice(
    live_emulator: Callable[..., LiveEmulator], fake_clock: Any, tmp_path: Path
) -> None:
    live = live_emulator(hosted(120.0))
    start_people_list(live, ACCOUNTS[:8])
    state = tmp_path / "people.state"
    wanted = in_service_form(extract_people_view(people()), "hosted")

    first, writes = run(live, people(), state_path=state, verify_timeout=10)
    assert writes["add"] > 0
    assert (first["added"], first["unconfirmed"], first["drift"], first["failed"]) == (200, 200, 0, 0)
    assert first["unconfirmed_reasons"][0].endswith("not in the List after 10 s")

    # Half a second later the List still shows none of them: nothing is sent again.
    fake_clock.sleep(0.5)
    second, writes = run(live, people(), state_path=state, verify_timeout=10)
    assert writes == NO_WRITES
    assert (second["awaiting"], second["added"], second["unconfirmed"]) == (200, 0, 0)
    assert list_people_view(live) == wanted  # no one twice

    # Once the List shows them, the sync converges; no one is ever added twice.
    fake_clock.sleep(120)
    run(live, people(), state_path=state, verify_timeout=10)
    fake_clock.sleep(120)
    last, writes = run(live, people(), state_path=state, verify_timeout=10)
    assert writes == NO_WRITES and last["unchanged"] == 200
    assert list_people_view(live) == wanted


def test_a_write_still_not_shown_after_the_visibility_window_is_sent_again(
    live_emulator: Callable[..., LiveEmulator], fake_clock: Any, tmp_path: Path
) -> None:
    # A service that shows nothing for days: its acknowledged adds are waited for an hour at most.
    live = live_emulator(hosted(10 * 86400.0))
    start_people_list(live, ACCOUNTS[:2])
    state = tmp_path / "people.state"
    by_email = people_frame(person_row(number) for number in (1, 2, 3))
    options: dict[str, Any] = {"state_path": state, "verify_timeout": 1, "visibility_window": 3600}

    assert run(live, by_email, **options)[0]["unconfirmed"] == 3
    fake_clock.sleep(3000)
    within, writes = run(live, by_email, **options)
    assert writes == NO_WRITES and within["awaiting"] == 3

    fake_clock.sleep(700)  # the first adds are now older than the window
    after, writes = run(live, by_email, **options)
    assert writes["add"] == 1 and (after["awaiting"], after["added"], after["unconfirmed"]) == (0, 3, 3)


@pytest.mark.parametrize("profile", ["reference", "hosted"])
def test_a_person_in_step_is_unchanged_though_the_list_shows_another_value_than_was_sent(
    profile: str, live_emulator: Callable[..., LiveEmulator], fake_clock: Any, tmp_path: Path
) -> None:
    # An empty target, sent with overwrite_with_null, is a cleared target, which the service gives
    # its default again (true with an e-mail or a phone, A27): the List never shows what was sent,
    # and no form explains it. Only the state's rule for an item in step (extract as last sent,
    # List as last seen) tells these people unchanged.
    live = live_emulator(hosted(0.0) if profile == "hosted" else tenant(profile))
    start_people_list(live, ACCOUNTS[:8])
    columns = {**PERSON_COLUMNS, "Target": "target"}
    rows = [{**person_row(number), "Target": None} for number in range(40)]

    def sync() -> tuple[dict[str, Any], dict[str, int]]:
        counters = live.stats.requests.copy()
        settings = SyncSettings(
            state_path=tmp_path / "people.state", overwrite_with_null=True, verify_timeout=1
        )
        with live.client() as client:
            frame = pd.DataFrame(rows, columns=list(columns), dtype=object)
            summary = sync_people(client, PEOPLE_TABLE, [frame], columns, mode="mirror", settings=settings)
        return summary, requests_since(live, counters, PEOPLE_WRITES)

    first, _ = sync()
    assert (first["added"], first["drift"], first["unconfirmed"]) == (40, 0, 0)
    fake_clock.sleep(0.5)

    for _night in range(2):
        again, writes = sync()
        assert writes == NO_WRITES
        assert (again["unchanged"], again["unconfirmed"], again["edited_in_list"]) == (40, 0, 0)
