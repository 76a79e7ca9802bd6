"""sync_people against the emulator: convergence, modes, safety, nulls, dry run, failures."""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from pytest_mock import MockerFixture

import listsync.sync.people.sync as people_sync
from listsync.client import ListSyncClient
from listsync.emulator import FaultRule
from listsync.extract.sources import read_extract
from listsync.sync.people import sync_people
from listsync.sync.settings import SyncSettings
from listsync.sync.steps import SyncFailedError, UnsafeDeleteError

from ...support import LiveEmulator, read_jsonl
from ...support.tenants import PEOPLE_API_KEY as API_KEY
from ...support.tenants import PEOPLE_TABLE as TABLE

COLUMN_MAP = {
    "Company Domain": "account_domain",
    "Email": "email",
    "First": "first_name",
    "Last": "last_name",
    "Title": "title",
    "Phone": "phone_number",
}
# Messy on purpose: domain forms, e-mail case and spaces, local phone formats, an identical
# duplicate after normalisation, a bad e-mail, a person known only by name.
MESSY = """Company Domain,Email,First,Last,Title,Phone
https://www.ACME.com/,Ann@Acme.com ,Ann,Lee,CTO,(415) 555-0100
acme.com,bob@acme.com,Bob,Ray,,
beta.io,cy@beta.io,Cy,Doe,VP Sales,+44 20 7946 0958
BETA.IO,CY@beta.io,Cy,Doe,VP Sales,+44 20 7946 0958
gamma.org,not-an-email,Dee,Fox,,
gamma.org,,Eve,Gold,Analyst,
"""
NORMALISED = {
    "acme.com": [
        {
            "email": "ann@acme.com",
            "first_name": "Ann",
            "last_name": "Lee",
            "title": "CTO",
            "phone_number": "+14155550100",
        },
        {"email": "bob@acme.com", "first_name": "Bob", "last_name": "Ray"},
    ],
    "beta.io": [
        {
            "email": "cy@beta.io",
            "first_name": "Cy",
            "last_name": "Doe",
            "title": "VP Sales",
            "phone_number": "+442079460958",
        },
    ],
    "gamma.org": [{"first_name": "Eve", "last_name": "Gold", "title": "Analyst"}],
}
SyncFn = Callable[..., dict[str, Any]]


@pytest.fixture
def extract(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str) -> Path:
        path = tmp_path / "contacts.csv"
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def sync(client: ListSyncClient, extract: Callable[[str], Path], tmp_path: Path) -> SyncFn:
    """Run sync_people on a CSV text with the test's options and settings (rejects kept in the
    test's folder unless they say otherwise)."""

    def run(text: str = MESSY, settings: SyncSettings = SyncSettings(), **options: Any) -> dict[str, Any]:
        if settings.rejects_path is None:
            settings = replace(settings, rejects_path=tmp_path / "rejects.jsonl")
        return sync_people(
            client, TABLE, read_extract(extract(text)), COLUMN_MAP, settings=settings, **options
        )

    return run


def extract_view(people: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The List's people reduced to the extract's fields, to compare with NORMALISED."""
    fields = set(COLUMN_MAP.values())
    return {
        domain: sorted(
            ({k: v for k, v in person.items() if k in fields} for person in members),
            key=lambda person: (person.get("email") or "", person["first_name"]),
        )
        for domain, members in people.items()
    }


def test_first_sync_adds_the_normalised_extract_and_a_second_writes_nothing(
    sync: SyncFn, list_people: Callable[[], Any], write_requests: Callable[[], dict[str, int]], tmp_path: Path
) -> None:
    first = sync()

    assert extract_view(list_people()) == NORMALISED
    assert {
        k: first[k] for k in ("read", "rejected", "duplicates", "added", "updated", "deleted", "failed")
    } == {"read": 6, "rejected": 1, "duplicates": 1, "added": 4, "updated": 0, "deleted": 0, "failed": 0}
    # Four people on three accounts fit one request.
    assert first["requests"] == {"add": 1, "patch": 0, "delete": 0, "total": 1}
    assert first["normalization_version"]
    rejects = read_jsonl(first["rejects_path"])
    assert [(r["row"], r["original"]["Email"]) for r in rejects] == [(5, "not-an-email")]

    before = write_requests()
    second = sync()

    assert write_requests() == before
    assert (second["unchanged"], second["added"], second["requests"]["total"]) == (4, 0, 0)


def test_changed_fields_are_patched_and_nothing_else(
    sync: SyncFn, list_people: Callable[[], Any], write_requests: Callable[[], dict[str, int]]
) -> None:
    sync()
    changed = MESSY.replace("Ann,Lee,CTO", "Ann,Lee,CEO")

    summary = sync(changed)

    assert (summary["updated"], summary["unchanged"], summary["requests"]["patch"]) == (1, 3, 1)
    [ann] = [p for p in list_people()["acme.com"] if p["first_name"] == "Ann"]
    assert ann["title"] == "CEO"
    assert ann["phone_number"] == "+14155550100"


def test_upsert_keeps_people_missing_from_the_extract(sync: SyncFn, list_people: Callable[[], Any]) -> None:
    sync()
    without_bob = MESSY.replace("acme.com,bob@acme.com,Bob,Ray,,\n", "")

    summary = sync(without_bob)

    assert summary["deleted"] == 0
    assert extract_view(list_people()) == NORMALISED


def test_mirror_deletes_people_missing_from_the_extract_within_its_accounts(
    sync: SyncFn, client: ListSyncClient, list_people: Callable[[], Any]
) -> None:
    client.add_rows(TABLE, [{"cells": {"domain": "delta.net"}}])
    sync()
    client.add_people(
        TABLE, [{"accountDomain": "delta.net", "people": [{"first_name": "Out", "last_name": "Side"}]}]
    )
    without_bob = MESSY.replace("acme.com,bob@acme.com,Bob,Ray,,\n", "")

    summary = sync(without_bob, mode="mirror", settings=SyncSettings(max_delete_fraction=0.5))

    assert (summary["deleted"], summary["requests"]["delete"]) == (1, 1)
    people = extract_view(list_people())
    expected = {
        **NORMALISED,
        "acme.com": NORMALISED["acme.com"][:1],
        "delta.net": [{"first_name": "Out", "last_name": "Side"}],
    }
    assert people == expected


def test_mirror_with_list_scope_deletes_outside_the_extracts_accounts(
    sync: SyncFn, client: ListSyncClient, list_people: Callable[[], Any]
) -> None:
    client.add_rows(TABLE, [{"cells": {"domain": "delta.net"}}])
    client.add_people(
        TABLE, [{"accountDomain": "delta.net", "people": [{"first_name": "Out", "last_name": "Side"}]}]
    )

    summary = sync(mode="mirror", delete_scope="list", settings=SyncSettings(max_delete_fraction=1.0))

    assert summary["deleted"] == 1
    assert extract_view(list_people()) == {**NORMALISED, "delta.net": []}


def test_deletes_above_the_fraction_are_refused_before_any_write(
    sync: SyncFn, write_requests: Callable[[], dict[str, int]], list_people: Callable[[], Any]
) -> None:
    sync()
    only_ann = "\n".join(MESSY.splitlines()[:2]) + "\n"
    before = write_requests()

    with pytest.raises(UnsafeDeleteError) as caught:
        sync(only_ann.replace("CTO", "CEO"), mode="mirror")

    assert "Refusing to delete 1 of 4 people (25.0%)" in str(caught.value)
    assert "max_delete_fraction=0.1" in str(caught.value)
    assert write_requests() == before  # not even the patch of Ann was sent
    assert extract_view(list_people()) == NORMALISED


@pytest.mark.parametrize(
    "text",
    [
        "Company Domain,Email,First,Last,Title,Phone\n",  # header only
        "Company Domain,Email,First,Last,Title,Phone\nacme.com,broken,Ann,Lee,,\n",  # every row rejected
    ],
)
def test_an_empty_extract_never_wipes_the_list(
    sync: SyncFn, text: str, write_requests: Callable[[], dict[str, int]], list_people: Callable[[], Any]
) -> None:
    sync()
    before = write_requests()

    with pytest.raises(UnsafeDeleteError, match="no valid rows"):
        sync(text, mode="mirror", delete_scope="list", settings=SyncSettings(max_delete_fraction=1.0))

    assert write_requests() == before
    assert extract_view(list_people()) == NORMALISED


def test_a_null_in_the_extract_keeps_the_list_value(sync: SyncFn, list_people: Callable[[], Any]) -> None:
    sync()

    summary = sync(MESSY.replace("Ann,Lee,CTO", "Ann,Lee,"))

    assert summary["updated"] == 0
    [ann] = [p for p in list_people()["acme.com"] if p["first_name"] == "Ann"]
    assert ann["title"] == "CTO"


def test_overwrite_with_null_erases_the_list_value(sync: SyncFn, list_people: Callable[[], Any]) -> None:
    sync()

    summary = sync(MESSY.replace("Ann,Lee,CTO", "Ann,Lee,"), settings=SyncSettings(overwrite_with_null=True))

    assert summary["updated"] == 1
    [ann] = [p for p in list_people()["acme.com"] if p["first_name"] == "Ann"]
    assert "title" not in ann


def test_dry_run_writes_the_plan_file_and_sends_no_write(
    sync: SyncFn, write_requests: Callable[[], dict[str, int]], list_people: Callable[[], Any], tmp_path: Path
) -> None:
    summary = sync(settings=SyncSettings(dry_run=True, plan_path=tmp_path / "plan.jsonl"))

    assert write_requests() == {"add": 0, "patch": 0, "delete": 0}
    assert list_people() == {"acme.com": [], "beta.io": [], "gamma.org": []}
    assert summary["dry_run"] is True
    assert summary["planned"] == {"add": 4, "patch": 0, "delete": 0, "remove_copy": 0}
    assert (summary["added"], summary["requests"]["total"]) == (0, 0)
    entries = read_jsonl(tmp_path / "plan.jsonl")
    assert summary["plan_path"] == str(tmp_path / "plan.jsonl")
    assert [(e["action"], e["account_domain"], e["identity"]) for e in entries] == [
        ("add", "acme.com", "email:ann@acme.com"),
        ("add", "acme.com", "email:bob@acme.com"),
        ("add", "beta.io", "email:cy@beta.io"),
        ("add", "gamma.org", "name:Eve Gold"),
    ]
    assert entries[0]["changes"]["title"] == {"before": None, "after": "CTO"}


def test_dry_run_without_a_plan_path_still_writes_a_plan_file(sync: SyncFn) -> None:
    summary = sync(settings=SyncSettings(dry_run=True))

    plan = Path(summary["plan_path"])
    try:
        assert len(plan.read_text().splitlines()) == 4
    finally:
        plan.unlink()


def test_people_of_a_missing_account_fail_with_the_services_reason_after_the_rest_is_written(
    sync: SyncFn, list_people: Callable[[], Any]
) -> None:
    text = MESSY + "unknown.example,zed@unknown.example,Zed,Orr,,\n"

    with pytest.raises(SyncFailedError, match="1 item") as caught:
        sync(text)

    summary = caught.value.summary
    assert (summary["added"], summary["failed"]) == (4, 1)
    # The reason says what to do: write the account rows before their people.
    assert summary["failure_reasons"] == {
        "Account not found: unknown.example (a person is written under their account's row: write the "
        "account rows first, then the people)": 1
    }
    assert extract_view(list_people()) == NORMALISED


def test_fail_on_error_false_returns_the_summary_with_failures(sync: SyncFn) -> None:
    summary = sync(
        MESSY + "unknown.example,zed@unknown.example,Zed,Orr,,\n", settings=SyncSettings(fail_on_error=False)
    )

    assert summary["failed"] == 1


def test_a_failing_chunk_is_counted_and_a_rerun_converges(
    sync: SyncFn,
    emulator: LiveEmulator,
    list_people: Callable[[], Any],
    write_requests: Callable[[], dict[str, int]],
) -> None:
    # One person per request, each answered with a 500 the client does not retry: the job re-reads
    # the accounts, finds no one, and sends each person twice more (12 requests), in vain.
    emulator.faults.add(
        [FaultRule(endpoint="POST /v1/lists/{tableId}/targetable-people", kind="error", times=12)]
    )

    with pytest.raises(SyncFailedError) as caught:
        sync(chunk_size=1)

    failed = caught.value.summary
    assert (failed["added"], failed["failed"], failed["resent"], failed["requests"]["add"]) == (0, 4, 8, 12)
    assert sum(len(people) for people in list_people().values()) == 0

    rerun = sync(chunk_size=1)

    assert (rerun["added"], rerun["unchanged"], rerun["failed"]) == (4, 0, 0)
    assert extract_view(list_people()) == NORMALISED


def test_an_add_whose_answer_is_lost_is_retried_without_duplicates(
    sync: SyncFn, emulator: LiveEmulator, list_people: Callable[[], Any]
) -> None:
    # The service applies the add, then the connection drops: the client sends it again, and
    # the service's duplicate matching (A16: e-mail or profile URL) keeps one copy of each person.
    # (People known only by name or phone have no such protection; the extract here has none.)
    emulator.faults.add(
        [FaultRule(endpoint="POST /v1/lists/{tableId}/targetable-people", kind="drop_after", times=1)]
    )

    summary = sync(MESSY.replace("gamma.org,,Eve,Gold,Analyst,\n", ""))

    assert (summary["added"], summary["failed"]) == (3, 0)
    assert extract_view(list_people()) == {**NORMALISED, "gamma.org": []}


def test_requests_are_the_minimum_the_chunk_size_allows(
    sync: SyncFn, write_requests: Callable[[], dict[str, int]]
) -> None:
    summary = sync(chunk_size={"add": 2})

    assert summary["requests"]["add"] == 2 == write_requests()["add"]


def test_progress_is_logged_as_chunks_complete(sync: SyncFn, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="listsync.sync.people"):
        sync(chunk_size=1)

    progress = [r.getMessage() for r in caplog.records if "applied" in r.getMessage()]
    assert progress == [
        f"people sync of {TABLE}: {n} of 4 applied ({n * 25}%), failed 0" for n in (1, 2, 3, 4)
    ]


@pytest.mark.parametrize(
    ("chunk_size", "message"),
    [(0, "between 1 and 500"), (501, "between 1 and 500"), ({"upsert": 5}, "keys must be among")],
)
def test_a_bad_chunk_size_fails_before_anything_is_read(
    sync: SyncFn, chunk_size: Any, message: str, write_requests: Callable[[], dict[str, int]]
) -> None:
    with pytest.raises(ValueError, match=message):
        sync(chunk_size=chunk_size)
    assert write_requests() == {"add": 0, "patch": 0, "delete": 0}


def test_the_api_key_appears_in_no_log_line_summary_or_error(
    sync: SyncFn, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        summary = sync(
            MESSY + "unknown.example,zed@unknown.example,Zed,Orr,,\n",
            settings=SyncSettings(fail_on_error=False),
        )
        with pytest.raises(UnsafeDeleteError) as caught:
            sync("Company Domain,Email,First,Last,Title,Phone\n", mode="mirror", delete_scope="list")

    assert summary["failed"] == 1
    for text in (caplog.text, json.dumps(summary), str(caught.value)):
        assert API_KEY not in text


def test_plan_and_rejects_can_go_to_object_storage(sync: SyncFn, tmp_path: Path) -> None:
    from listsync.operators.extract import storage_path

    summary = sync(
        settings=SyncSettings(
            dry_run=True,
            plan_path=storage_path(f"file://{tmp_path}/plan.jsonl"),
            rejects_path=storage_path(f"file://{tmp_path}/rejects.jsonl"),
        )
    )

    assert summary["plan_path"] == f"file://{tmp_path}/plan.jsonl"
    assert summary["rejects_path"] == f"file://{tmp_path}/rejects.jsonl"
    assert len((tmp_path / "plan.jsonl").read_text().splitlines()) == 4
    [reject] = read_jsonl(tmp_path / "rejects.jsonl")
    assert reject["row"] == 5


def test_too_many_rejects_fail_before_any_write_and_leave_the_rejects_to_read(
    sync: SyncFn, tmp_path: Path, write_requests: Callable[[], dict[str, int]]
) -> None:
    from listsync.extract.rejects import TooManyRejectsError
    from listsync.operators.extract import storage_path

    with pytest.raises(TooManyRejectsError):
        sync(
            settings=SyncSettings(
                max_reject_fraction=0.1, rejects_path=storage_path(f"file://{tmp_path}/rejects.jsonl")
            )
        )

    assert write_requests() == {"add": 0, "patch": 0, "delete": 0}
    assert len((tmp_path / "rejects.jsonl").read_text().splitlines()) == 1


def test_people_blocked_by_duplicates_in_the_list_fail_after_the_rest_is_written(
    sync: SyncFn, client: ListSyncClient, list_people: Callable[[], Any]
) -> None:
    # Known by name only, the service does not merge them (A16): two List people share one identity.
    eve = {"first_name": "Eve", "last_name": "Gold"}
    client.add_people(TABLE, [{"accountDomain": "gamma.org", "people": [eve, eve]}])

    assert sync(settings=SyncSettings(dry_run=True))["failed"] == 1  # counted, but a dry run does not fail
    with pytest.raises(SyncFailedError, match="1 item") as caught:
        sync()

    summary = caught.value.summary
    assert (summary["added"], summary["conflicts"], summary["failed"]) == (3, 1, 1)
    assert summary["failure_reasons"] == {
        "name:Eve Gold on account gamma.org matches several List people; remove the duplicates": 1
    }
    assert extract_view(list_people())["acme.com"] == NORMALISED["acme.com"]
    assert sync(settings=SyncSettings(fail_on_error=False))["failed"] == 1


def test_an_acknowledged_write_the_list_never_shows_is_unconfirmed_not_a_failure(
    emulator: LiveEmulator,
    client: ListSyncClient,
    extract: Callable[[str], Path],
    tmp_path: Path,
    intercepting: Callable[..., httpx.BaseTransport],
) -> None:
    sync_people(
        client,
        TABLE,
        read_extract(extract(MESSY)),
        COLUMN_MAP,
        settings=SyncSettings(rejects_path=tmp_path / "r.jsonl"),
    )
    changed = MESSY.replace("Bob,Ray,,", "Bob,Ray,CFO,")
    acknowledged = httpx.Response(200, json={"success": True, "data": {"updated": 1, "notFound": []}})
    forgetful = intercepting(lambda request: acknowledged if request.method == "PATCH" else None)
    with ListSyncClient(emulator.url, API_KEY, "usr_people", transport=forgetful) as lying:
        summary = sync_people(
            lying,
            TABLE,
            read_extract(extract(changed)),
            COLUMN_MAP,
            settings=SyncSettings(rejects_path=tmp_path / "r.jsonl", verify_timeout=0.3),
        )

    assert (summary["updated"], summary["verified"], summary["drift"], summary["failed"]) == (1, 0, 0, 0)
    assert summary["unconfirmed"] == 1
    assert summary["unconfirmed_reasons"] == [
        "patch of acme.com email:bob@acme.com: title is still None, expected 'CFO' after 0.3 s"
    ]
    # Without a state, the next run is a live diff: it writes the patch again.
    rerun = sync_people(
        client,
        TABLE,
        read_extract(extract(changed)),
        COLUMN_MAP,
        settings=SyncSettings(rejects_path=tmp_path / "r.jsonl"),
    )
    assert (rerun["updated"], rerun["verified"], rerun["drift"], rerun["unconfirmed"]) == (1, 1, 0, 0)


def test_an_acknowledged_write_the_list_contradicts_is_drift_and_fails_the_task(
    emulator: LiveEmulator,
    client: ListSyncClient,
    extract: Callable[[str], Path],
    tmp_path: Path,
    intercepting: Callable[..., httpx.BaseTransport],
) -> None:
    sync_people(
        client,
        TABLE,
        read_extract(extract(MESSY)),
        COLUMN_MAP,
        settings=SyncSettings(rejects_path=tmp_path / "r.jsonl"),
    )
    changed = MESSY.replace("Bob,Ray,,", "Bob,Ray,CFO,")
    acknowledged = httpx.Response(200, json={"success": True, "data": {"updated": 1, "notFound": []}})

    def something_else(request: httpx.Request) -> httpx.Response | None:
        if request.method != "PATCH":
            return None
        # The service applies another value than the one sent.
        client.update_people(
            TABLE,
            [
                {
                    "accountDomain": "acme.com",
                    "people": [{"match": {"email": "bob@acme.com"}, "patch": {"title": "COO"}}],
                }
            ],
        )
        return acknowledged

    with (
        ListSyncClient(emulator.url, API_KEY, "usr_people", transport=intercepting(something_else)) as lying,
        pytest.raises(SyncFailedError, match="1 written item") as raised,
    ):
        sync_people(
            lying,
            TABLE,
            read_extract(extract(changed)),
            COLUMN_MAP,
            settings=SyncSettings(rejects_path=tmp_path / "r.jsonl"),
        )

    summary = raised.value.summary
    assert (summary["updated"], summary["verified"], summary["drift"], summary["failed"]) == (1, 0, 1, 0)
    assert summary["drift_reasons"] == [
        "patch of acme.com email:bob@acme.com: title is 'COO', expected 'CFO'"
    ]
    assert summary["unconfirmed"] == 0


def test_an_add_answered_with_a_5xx_is_reread_and_sent_again_only_when_absent(
    sync: SyncFn, emulator: LiveEmulator, list_people: Callable[[], Any]
) -> None:
    emulator.faults.add(
        [FaultRule(endpoint="POST /v1/lists/{tableId}/targetable-people", kind="error", times=1)]
    )

    summary = sync(chunk_size=1)

    assert (summary["added"], summary["resent"], summary["failed"]) == (4, 1, 0)
    assert extract_view(list_people()) == NORMALISED


def test_a_write_of_unknown_outcome_is_settled_by_the_read_back(
    sync: SyncFn, emulator: LiveEmulator, list_people: Callable[[], Any]
) -> None:
    # The patch is applied, then its answer is lost on every attempt: the read back shows it.
    sync()
    emulator.faults.add(
        [FaultRule(endpoint="PATCH /v1/lists/{tableId}/targetable-people", kind="drop_after", times=5)]
    )

    summary = sync(MESSY.replace("Bob,Ray,,", "Bob,Ray,CFO,"))

    assert (summary["updated"], summary["failed"], summary["verified"], summary["drift"]) == (1, 0, 1, 0)
    assert {p["email"]: p.get("title") for p in list_people()["acme.com"]}["bob@acme.com"] == "CFO"


def test_mirror_removes_extra_copies_of_people_known_by_phone_or_name(
    sync: SyncFn, client: ListSyncClient, list_people: Callable[[], Any], write_requests: Callable[[], Any]
) -> None:
    # Copies a lost add could leave: the service does not merge people without e-mail or URL.
    client.add_people(
        TABLE,
        [
            {"accountDomain": "gamma.org", "people": [{"first_name": "Eve", "last_name": "Gold"}] * 3},
            {
                "accountDomain": "acme.com",
                "people": [{"first_name": "Kim", "phone_number": "+14155550177"}] * 2,
            },
        ],
    )
    extract = MESSY + "acme.com,,Kim,,,+1 415 555 0177\n"

    summary = sync(extract, mode="mirror", settings=SyncSettings(max_delete_fraction=0.5))

    assert (summary["copies_removed"], summary["failed"], summary["conflicts"], summary["drift"]) == (
        3,
        0,
        0,
        0,
    )
    assert summary["planned"]["remove_copy"] == 3
    people = list_people()
    assert [p["first_name"] for p in people["gamma.org"]].count("Eve") == 1
    assert [p["first_name"] for p in people["acme.com"]].count("Kim") == 1
    again = sync(extract, mode="mirror")
    assert again["requests"]["total"] == 0


def test_upsert_leaves_extra_copies_alone_and_reports_them(sync: SyncFn, client: ListSyncClient) -> None:
    client.add_people(
        TABLE, [{"accountDomain": "gamma.org", "people": [{"first_name": "Eve", "last_name": "Gold"}] * 2}]
    )

    summary = sync(settings=SyncSettings(fail_on_error=False))

    assert (summary["copies_removed"], summary["conflicts"], summary["list_duplicates"]) == (0, 1, 2)


def test_the_extracts_people_are_let_go_before_the_plan_is_applied(
    sync: SyncFn, list_people: Callable[[], Any], mocker: MockerFixture
) -> None:
    """A sync holds the extract's people (as large as the List's) only until it has planned: the
    apply and the read back run without them."""
    frames: list[weakref.ref[pd.DataFrame]] = []
    alive_when_applied: list[bool] = []
    prepare, apply = people_sync.prepare_people, people_sync.apply_people_plan

    def prepare_and_watch(*args: Any, **kwargs: Any) -> Any:
        prepared = prepare(*args, **kwargs)
        frames.append(weakref.ref(prepared.frame))
        return prepared

    def watch_and_apply(*args: Any, **kwargs: Any) -> Any:
        alive_when_applied.append(frames[0]() is not None)
        return apply(*args, **kwargs)

    mocker.patch.object(people_sync, "prepare_people", prepare_and_watch)
    mocker.patch.object(people_sync, "apply_people_plan", watch_and_apply)

    summary = sync()

    assert alive_when_applied == [False]
    assert (summary["added"], summary["verified"], summary["passed"]) == (4, 4, 4)
    assert extract_view(list_people()) == NORMALISED


LIST_READS = "GET /v1/lists/{tableId}/targetable-people"


def test_the_list_is_read_while_the_extract_is_prepared(
    client: ListSyncClient, emulator: LiveEmulator, extract: Callable[[str], Path], tmp_path: Path
) -> None:
    # The extract's first chunk is held back until the List has been asked for a page (10 s at
    # most): a sync that read the List only once the extract was prepared would ask for none.
    asked_before_the_extract: list[int] = []

    def frames() -> Iterator[pd.DataFrame]:
        deadline = time.monotonic() + 10
        while not emulator.stats.requests[LIST_READS] and time.monotonic() < deadline:
            time.sleep(0.01)
        asked_before_the_extract.append(emulator.stats.requests[LIST_READS])
        yield from read_extract(extract(MESSY))

    summary = sync_people(
        client, TABLE, frames(), COLUMN_MAP, settings=SyncSettings(rejects_path=tmp_path / "rejects.jsonl")
    )

    assert asked_before_the_extract[0] >= 1
    assert summary["added"] == sum(len(people) for people in NORMALISED.values())


def test_an_extract_that_fails_stops_the_list_read_begun_beside_it(
    client: ListSyncClient, emulator: LiveEmulator, extract: Callable[[str], Path], tmp_path: Path
) -> None:
    for first in range(0, 3000, 500):
        people = [
            {"email": f"p{n}@acme.com", "first_name": "P", "last_name": str(n)}
            for n in range(first, first + 500)
        ]
        client.add_people(TABLE, [{"accountDomain": "acme.com", "people": people}])

    def frames() -> Iterator[pd.DataFrame]:
        yield from read_extract(extract(MESSY))
        deadline = time.monotonic() + 10
        while not emulator.stats.requests[LIST_READS] and time.monotonic() < deadline:
            time.sleep(0.001)
        raise OSError("the extract's connection was reset")

    # The List is read a person a page: 3,000 pages, of which the read has asked for one or two.
    with pytest.raises(OSError, match="connection was reset"):
        sync_people(client, TABLE, frames(), COLUMN_MAP, settings=SyncSettings(), page_size=1)

    deadline = time.monotonic() + 10
    while any(thread.name.startswith("read the people") for thread in threading.enumerate()):
        assert time.monotonic() < deadline, "the List read begun beside the extract is still running"
        time.sleep(0.01)
    # The reader stopped at its next person, far from the end of the List.
    assert emulator.stats.requests[LIST_READS] < 1_000
