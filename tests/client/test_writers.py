"""Chunked writers: chunking, per-key reports, refusals naming accounts or rows, unknown outcomes."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from listsync.client import AccountKeyed, Keyed, RetryPolicy
from listsync.client.errors import AccountsNotFoundError
from listsync.client.writers import (
    chunk_by_account,
    write_cell_updates,
    write_people_adds,
    write_people_deletes,
    write_people_patches,
    write_row_adds,
    write_row_deletes,
)


class Service:
    """Answers List writes from a function of the JSON body; records bodies."""

    def __init__(self, answer=None) -> None:
        self.bodies: list[dict] = []
        self.answer = answer or (lambda body: httpx.Response(200, json={"success": True, "data": {}}))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        return self.answer(body)


def people(domains_and_counts: list[tuple[str, int]]) -> list[AccountKeyed]:
    return [
        AccountKeyed(f"{domain}#{i}", domain, {"first_name": f"P{i}", "email": f"p{i}@{domain}"})
        for domain, count in domains_and_counts
        for i in range(count)
    ]


def test_chunk_by_account_respects_people_and_account_caps_and_splits_big_accounts():
    items = [(f"k{i}", "big.io", i) for i in range(7)] + [(f"s{i}", f"d{i}.io", i) for i in range(5)]
    chunks = list(chunk_by_account(items, max_people=4, max_accounts=3))

    assert [[(domain, len(members)) for domain, members in chunk] for chunk in chunks] == [
        [("big.io", 4)],
        [("big.io", 3), ("d0.io", 1)],
        [("d1.io", 1), ("d2.io", 1), ("d3.io", 1)],
        [("d4.io", 1)],
    ]


@given(
    st.lists(st.tuples(st.sampled_from(["a.io", "B.io", "b.io", "c.io"]), st.integers()), max_size=60),
    st.integers(1, 7),
    st.integers(1, 4),
)
def test_chunk_by_account_keeps_every_item_once_within_caps(pairs, max_people, max_accounts):
    items = [(f"k{i}", domain, value) for i, (domain, value) in enumerate(pairs)]

    chunks = list(chunk_by_account(items, max_people=max_people, max_accounts=max_accounts))

    flat = [key for chunk in chunks for _, members in chunk for key, _ in members]
    assert sorted(flat) == sorted(key for key, _, _ in items)
    for chunk in chunks:
        assert 0 < sum(len(members) for _, members in chunk) <= max_people
        assert len(chunk) <= max_accounts
    for domain in {d.lower() for _, d, _ in items}:
        in_order = [key for key, d, _ in items if d.lower() == domain]
        assert [key for key in flat if key in in_order] == in_order


def test_chunk_by_account_groups_domains_case_insensitively_in_first_seen_order():
    items = [("a", "X.io", 1), ("b", "y.io", 2), ("c", "x.IO", 3)]
    assert list(chunk_by_account(items, max_people=10, max_accounts=10)) == [
        [("X.io", [("a", 1), ("c", 3)]), ("y.io", [("b", 2)])]
    ]


def test_people_adds_default_to_the_caps_of_a21(make_client):
    service = Service()
    report = write_people_adds(make_client(service), "tbl_1", people([(f"d{i}.io", 3) for i in range(150)]))

    assert [len(body["accounts"]) for body in service.bodies] == [100, 50]
    assert all(sum(len(a["people"]) for a in body["accounts"]) <= 500 for body in service.bodies)
    assert report.requests == 2
    assert len(report.written) == 450
    assert service.bodies[0]["userId"] == "usr_123"


def test_unknown_accounts_are_dropped_recorded_and_the_rest_resent(make_client):
    def answer(body):
        domains = [a["accountDomain"] for a in body["accounts"]]
        missing = [d for d in domains if d.lower().startswith("ghost")]
        if missing:
            return httpx.Response(
                404, json={"success": False, "error": f"Account not found: {', '.join(missing)}"}
            )
        return httpx.Response(200, json={"success": True, "data": {"added": 3, "updated": 1, "skipped": 0}})

    service = Service(answer)
    report = write_people_adds(
        make_client(service), "tbl_1", people([("a.io", 2), ("ghost1.io", 1), ("b.io", 2), ("GHOST2.io", 1)])
    )

    assert [[a["accountDomain"] for a in body["accounts"]] for body in service.bodies] == [
        ["a.io", "ghost1.io", "b.io", "GHOST2.io"],
        ["a.io", "b.io"],
    ]
    assert report.failed == {
        "ghost1.io#0": f"Account not found: ghost1.io, GHOST2.io ({AccountsNotFoundError.ADVICE})",
        "GHOST2.io#0": f"Account not found: ghost1.io, GHOST2.io ({AccountsNotFoundError.ADVICE})",
    }
    assert report.written == ["a.io#0", "a.io#1", "b.io#0", "b.io#1"]
    assert report.counts == {"added": 3, "updated": 1, "skipped": 0}
    assert report.requests == 2


def test_a_chunk_failing_after_retries_leaves_its_items_unknown_and_the_next_chunk_goes_on(make_client):
    calls = []

    def answer(body):
        calls.append(body)
        if len(calls) <= 2:
            return httpx.Response(503, json={"success": False, "error": "Service unavailable"})
        return httpx.Response(200, json={"success": True, "data": {"updated": 1}})

    client = make_client(Service(answer), retry_policy=RetryPolicy(max_attempts=2))
    items = [
        AccountKeyed(f"k{i}", f"d{i}.io", {"match": {"email": f"p@d{i}.io"}, "patch": {"title": "CTO"}})
        for i in range(2)
    ]

    report = write_people_patches(client, "tbl_1", items, chunk_size=1)

    # A 5xx does not say whether the patch was applied: the caller re-reads before trusting either.
    assert report.outcome_unknown == {
        "k0": "PATCH /v1/lists/tbl_1/targetable-people -> 503: Service unavailable"
    }
    assert report.failed == {}
    assert report.written == ["k1"]


def test_invalid_items_fail_alone(make_client):
    service = Service()
    items = [
        AccountKeyed("ok", "a.io", {"email": "p@a.io"}),
        AccountKeyed("bad", "a.io", {"first_name": "Ada"}),
    ]

    report = write_people_deletes(make_client(service), "tbl_1", items)

    assert report.written == ["ok"]
    assert (
        "needs email, network_profile_url, phone_number, or first_name and last_name" in report.failed["bad"]
    )
    assert service.bodies[0]["accounts"] == [{"accountDomain": "a.io", "people": [{"email": "p@a.io"}]}]


@pytest.mark.parametrize("domain", ["", "   "])
def test_an_item_without_an_account_domain_fails_alone(make_client, domain):
    service = Service()
    items = [
        AccountKeyed("ok", "a.io", {"first_name": "Ada", "email": "ada@a.io"}),
        AccountKeyed("no-domain", domain, {"first_name": "Bob", "email": "bob@b.io"}),
    ]

    report = write_people_adds(make_client(service), "tbl_1", items)

    assert report.written == ["ok"]
    assert "accountDomain" in report.failed["no-domain"]
    assert service.bodies[0]["accounts"] == [
        {"accountDomain": "a.io", "people": [{"first_name": "Ada", "email": "ada@a.io"}]}
    ]


def test_row_adds_map_keys_to_new_row_ids(make_client):
    def answer(body):
        rows = [{"id": f"row_{row['cells']['n']}", "cells": row["cells"]} for row in body["rows"]]
        return httpx.Response(200, json={"success": True, "data": {"rows": rows, "added": len(rows)}})

    items = [Keyed(f"k{n}", {"cells": {"n": n}}) for n in range(5)]
    report = write_row_adds(make_client(Service(answer)), "tbl_1", items, chunk_size=2)

    assert report.requests == 3
    assert report.row_ids == {f"k{n}": f"row_{n}" for n in range(5)}
    assert report.counts == {"added": 5}


@pytest.mark.parametrize(
    "failure",
    [httpx.ReadTimeout("slow"), httpx.Response(503), httpx.Response(500)],
    ids=["timeout", "503", "500"],
)
def test_row_adds_with_an_unknown_outcome_are_reported_not_resent(make_client, failure):
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append(body)
        if body["rows"][0]["cells"]["n"] == 0 and isinstance(failure, Exception):
            raise failure
        if body["rows"][0]["cells"]["n"] == 0:
            return failure
        return httpx.Response(200, json={"success": True, "data": {"rows": [{"id": "row_x"}], "added": 1}})

    items = [Keyed("first", {"cells": {"n": 0}}), Keyed("second", {"cells": {"n": 1}})]
    report = write_row_adds(make_client(handler), "tbl_1", items, chunk_size=1)

    assert len(sent) == 2  # each chunk once: the unknown one was not repeated
    assert list(report.outcome_unknown) == ["first"]
    assert report.written == ["second"]
    assert report.failed == {}


def test_row_adds_refused_by_the_service_are_failed(make_client):
    answer = Service(
        lambda body: httpx.Response(
            409, json={"success": False, "error": "Duplicate value for unique column domain: x.io"}
        )
    )

    report = write_row_adds(make_client(answer), "tbl_1", [Keyed("k", {"cells": {"domain": "x.io"}})])

    assert report.failed == {
        "k": "POST /v1/lists/tbl_1/rows -> 409: Duplicate value for unique column domain: x.io"
    }
    assert report.outcome_unknown == {}


def test_cell_updates_on_missing_rows_fail_and_the_rest_are_resent(make_client):
    def answer(body):
        if any(u["rowId"] == "row_gone" for u in body["updates"]):
            return httpx.Response(404, json={"success": False, "error": "Rows not found: row_gone"})
        return httpx.Response(200, json={"success": True, "data": {"updated": len(body["updates"])}})

    service = Service(answer)
    items = [
        Keyed(k, {"rowId": r, "columnId": "status", "value": "done"})
        for k, r in [("a", "row_1"), ("b", "row_gone"), ("c", "row_2")]
    ]

    report = write_cell_updates(make_client(service), "tbl_1", items)

    assert report.failed == {"b": "Rows not found: row_gone"}
    assert report.written == ["a", "c"]
    assert [u["rowId"] for u in service.bodies[1]["updates"]] == ["row_1", "row_2"]


def test_row_deletes_treat_missing_rows_as_already_deleted(make_client):
    def answer(body):
        if "row_gone" in body["rowIds"]:
            return httpx.Response(404, json={"success": False, "error": "Rows not found: row_gone"})
        return httpx.Response(
            200, json={"success": True, "data": {"deleted": len(body["rowIds"]), "notFound": []}}
        )

    items = [Keyed("a", "row_1"), Keyed("b", "row_gone"), Keyed("c", " "), Keyed("d", "row_2")]
    report = write_row_deletes(make_client(Service(answer)), "tbl_1", items, chunk_size=1000)

    assert sorted(report.written) == ["a", "b", "d"]
    assert report.not_found == ["row_gone"]
    assert report.counts == {"deleted": 2}
    assert "rowId: must be a non-empty string" in report.failed["c"]


def test_report_to_dict_is_json(make_client):
    report = write_row_deletes(make_client(Service()), "tbl_1", [Keyed("a", "row_1")])
    assert json.loads(json.dumps(report.to_dict()))["written"] == ["a"]


def refuse(message: str, status: int = 400) -> httpx.Response:
    return httpx.Response(status, json={"success": False, "error": message})


def test_a_refused_chunk_is_bisected_until_the_bad_row_fails_alone(make_client):
    # The service names nothing: halves are sent until the one bad row stands alone.
    def answer(body):
        if any(row["cells"].get("arr") == "lots" for row in body["rows"]):
            return refuse("arr must be a number")
        return httpx.Response(200, json={"success": True, "data": {"added": len(body["rows"])}})

    service = Service(answer)
    rows = [Keyed(f"k{i}", {"cells": {"arr": "lots" if i == 5 else i}}) for i in range(8)]

    report = write_row_adds(make_client(service), "tbl_1", rows)

    assert report.failed == {"k5": "POST /v1/lists/tbl_1/rows -> 400: arr must be a number"}
    assert sorted(report.written) == sorted(f"k{i}" for i in range(8) if i != 5)
    assert report.outcome_unknown == {}
    # 8 refused; 0-3 written, 4-7 refused; 4-5 refused, 6-7 written; 4 written, 5 refused.
    assert (report.requests, report.isolation_requests) == (7, 6)


def test_a_refusal_naming_the_item_sends_the_rest_at_once(make_client):
    def answer(body):
        bad = [i for i, update in enumerate(body["updates"]) if update["value"] == "platinum"]
        if bad:
            return refuse(f"updates[{bad[0]}].value must be one of free, team, enterprise")
        return httpx.Response(200, json={"success": True, "data": {"updated": len(body["updates"])}})

    service = Service(answer)
    updates = [
        Keyed(str(i), {"rowId": f"row_{i}", "columnId": "plan", "value": "platinum" if i == 30 else "team"})
        for i in range(100)
    ]

    report = write_cell_updates(make_client(service), "tbl_1", updates)

    # The named update is confirmed alone (its own request names it updates[0]).
    assert list(report.failed) == ["30"]
    assert "value must be one of free, team, enterprise" in report.failed["30"]
    assert len(report.written) == 99
    assert (report.requests, report.isolation_requests) == (3, 2)
    assert [len(body["updates"]) for body in service.bodies] == [100, 99, 1]


def test_a_refusal_naming_a_person_in_an_account_isolates_that_person(make_client):
    def answer(body):
        for a, account in enumerate(body["accounts"]):
            for p, person in enumerate(account["people"]):
                if "phone_number" in person["match"]:
                    return refuse(f"accounts[{a}].people[{p}].match: unsupported key phone_number")
        return httpx.Response(200, json={"success": True, "data": {"updated": 1}})

    service = Service(answer)
    items = [
        AccountKeyed(f"{d}#{i}", d, {"match": {"email": f"p{i}@{d}"}, "patch": {"title": "CTO"}})
        for d in ("a.io", "b.io")
        for i in range(3)
    ]
    items.insert(
        4,
        AccountKeyed(
            "b.io#phone", "b.io", {"match": {"phone_number": "+14155550100"}, "patch": {"title": "VP"}}
        ),
    )

    report = write_people_patches(make_client(service), "tbl_1", items)

    assert list(report.failed) == ["b.io#phone"]
    assert "unsupported key phone_number" in report.failed["b.io#phone"]
    assert len(report.written) == 6
    assert [sum(len(a["people"]) for a in body["accounts"]) for body in service.bodies] == [7, 6, 1]


def test_a_stated_cap_recuts_the_chunk_and_is_remembered(make_client):
    def answer(body):
        if len(body["rows"]) > 40:
            return refuse("Maximum 40 rows per request")
        return httpx.Response(200, json={"success": True, "data": {"added": len(body["rows"])}})

    service = Service(answer)
    client = make_client(service)
    rows = [Keyed(f"k{i}", {"cells": {"n": i}}) for i in range(100)]

    first = write_row_adds(client, "tbl_1", rows)
    second = write_row_adds(client, "tbl_1", rows)

    assert len(first.written) == 100 and first.failed == {}
    assert [len(body["rows"]) for body in service.bodies[:4]] == [100, 40, 40, 20]
    assert client.learned_caps == {"rows": 40}
    # The next call starts at the learned cap: no refusal.
    assert [len(body["rows"]) for body in service.bodies[4:]] == [40, 40, 20]
    assert (second.requests, second.isolation_requests) == (3, 0)


def test_an_unreadable_success_leaves_the_chunk_unknown(make_client):
    service = Service(lambda body: httpx.Response(200, content=b""))

    report = write_people_deletes(make_client(service), "tbl_1", people([("a.io", 2)]))

    assert sorted(report.outcome_unknown) == ["a.io#0", "a.io#1"]
    assert report.written == [] and report.failed == {}


# -- refusals in words the client does not know --------------------------------------------------

HELD = [f"acct{i}.com" for i in range(60)]


class PeopleList:
    """A people List holding the accounts of ``HELD``: a people add naming any other account is
    refused whole with ``refusal(domains)``; GET targetable-people answers (the List is there)."""

    def __init__(self, refusal, *, list_there: bool = True) -> None:
        self.refusal = refusal
        self.list_there = list_there
        self.people: list[tuple[str, str]] = []
        self.writes: list[int] = []  # people per write request, in order
        self.reads = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            self.reads += 1
            if not self.list_there:
                return refuse("Not found", 404)
            return httpx.Response(200, json={"success": True, "data": {"people": [], "hasMore": False}})
        accounts = json.loads(request.content)["accounts"]
        self.writes.append(sum(len(a["people"]) for a in accounts))
        unknown = [a["accountDomain"] for a in accounts if a["accountDomain"].lower() not in HELD]
        if unknown:
            return self.refusal(unknown)
        self.people += [(a["accountDomain"], p["email"]) for a in accounts for p in a["people"]]
        return httpx.Response(200, json={"success": True, "data": {"added": self.writes[-1]}})


def good_and_ghost_people(ghost_after: int) -> list[AccountKeyed]:
    """300 people on the 60 held accounts and 5 on ghost-account.com, after ``ghost_after`` accounts."""
    counts = [(domain, 5) for domain in HELD]
    return people([*counts[:ghost_after], ("ghost-account.com", 5), *counts[ghost_after:]])


GHOSTS = [f"ghost-account.com#{i}" for i in range(5)]


def test_a_404_in_other_words_naming_an_account_fails_only_its_people(make_client):
    service = PeopleList(lambda unknown: refuse(f"Unknown account domain(s): {', '.join(unknown)}", 404))

    report = write_people_adds(make_client(service), "tbl_1", good_and_ghost_people(ghost_after=30))

    assert len(service.people) == 300
    assert len(report.written) == 300 and "ghost-account.com#0" not in report.written
    assert sorted(report.failed) == GHOSTS
    assert all("Unknown account domain(s): ghost-account.com" in r for r in report.failed.values())
    # All 305 refused, the 300 others sent again at once.
    assert service.writes == [305, 300]
    assert (report.requests, report.isolation_requests) == (2, 1)
    assert service.reads == 0


@pytest.mark.parametrize("ghost_after", [0, 30, 60], ids=["first", "straddling-the-halves", "last"])
def test_a_404_naming_nothing_is_bisected_until_the_refused_account_stands_alone(make_client, ghost_after):
    service = PeopleList(lambda unknown: refuse("Not found", 404))

    report = write_people_adds(make_client(service), "tbl_1", good_and_ghost_people(ghost_after))

    assert len(service.people) == 300
    assert sorted(report.failed) == GHOSTS
    assert set(report.failed.values()) == {"POST /v1/lists/tbl_1/targetable-people -> 404: Not found"}
    assert report.outcome_unknown == {}
    # Two requests per halving, down to each refused person on either side of a cut: some 40,
    # not one per person.
    assert report.requests <= 40
    # Only halves that were both refused ask whether the List is there, and only once.
    assert service.reads == (1 if ghost_after == 30 else 0)


def test_a_404_naming_an_email_is_not_a_refusal_of_the_whole_account(make_client):
    def answer(body):
        if any(p["match"]["email"] == "p1@b.io" for a in body["accounts"] for p in a["people"]):
            return refuse("No such person: p1@b.io", 404)
        return httpx.Response(200, json={"success": True, "data": {"updated": 1}})

    items = [
        AccountKeyed(f"{d}#{i}", d, {"match": {"email": f"p{i}@{d}"}, "patch": {"title": "CTO"}})
        for d in ("a.io", "b.io")
        for i in range(4)
    ]

    report = write_people_patches(make_client(Service(answer)), "tbl_1", items)

    assert list(report.failed) == ["b.io#1"]
    assert len(report.written) == 7


def test_a_400_naming_an_account_sends_it_apart_and_finds_the_one_bad_person(make_client):
    # A 400 naming an account may be about one of its people: they are sent apart, not failed.
    def answer(body):
        for account in body["accounts"]:
            if any(p.get("title") == "???" for p in account["people"]):
                return refuse(f"Invalid title for a person of {account['accountDomain']}")
        return httpx.Response(200, json={"success": True, "data": {"added": 1}})

    items = people([("a.io", 3), ("b.io", 4), ("c.io", 3)])
    items[5] = AccountKeyed("b.io#bad", "b.io", {"first_name": "Bad", "email": "bad@b.io", "title": "???"})

    report = write_people_adds(make_client(Service(answer)), "tbl_1", items)

    assert list(report.failed) == ["b.io#bad"]
    assert "Invalid title for a person of b.io" in report.failed["b.io#bad"]
    assert len(report.written) == 9


def test_an_account_not_found_in_another_spelling_is_still_found(make_client):
    def answer(body):
        if any(a["accountDomain"] == "ghost.io" for a in body["accounts"]):
            return refuse("Account not found: GHOST.io (no such account row)", 404)
        return httpx.Response(200, json={"success": True, "data": {"added": 1}})

    service = Service(answer)
    report = write_people_adds(make_client(service), "tbl_1", people([("a.io", 2), ("ghost.io", 2)]))

    assert sorted(report.failed) == ["ghost.io#0", "ghost.io#1"]
    assert report.written == ["a.io#0", "a.io#1"]
    assert report.requests == 2


def cells_service(refusal: str):
    def answer(body):
        if any(u["rowId"] == "row_7" for u in body["updates"]):
            return refuse(refusal, 404)
        return httpx.Response(200, json={"success": True, "data": {"updated": len(body["updates"])}})

    return Service(answer)


def test_a_404_in_other_words_naming_a_row_fails_only_its_updates(make_client):
    service = cells_service("No such row(s): row_7")
    updates = [
        Keyed(f"k{i}", {"rowId": f"row_{i % 10}", "columnId": "status", "value": "done"}) for i in range(40)
    ]

    report = write_cell_updates(make_client(service), "tbl_1", updates)

    assert sorted(report.failed) == ["k17", "k27", "k37", "k7"]
    assert all("No such row(s): row_7" in reason for reason in report.failed.values())
    assert len(report.written) == 36
    # row_70 would not be row_7: the id is named as a whole token.
    assert [len(body["updates"]) for body in service.bodies] == [40, 36]
    assert (report.requests, report.isolation_requests) == (2, 1)


def test_row_deletes_refused_404_in_other_words_count_the_named_rows_as_gone(make_client):
    def answer(body):
        if "row_gone" in body["rowIds"]:
            return refuse("No such row(s): row_gone", 404)
        return httpx.Response(200, json={"success": True, "data": {"deleted": len(body["rowIds"])}})

    items = [Keyed("a", "row_1"), Keyed("b", "row_gone"), Keyed("c", "row_2")]
    report = write_row_deletes(make_client(Service(answer)), "tbl_1", items)

    assert sorted(report.written) == ["a", "b", "c"]
    assert report.not_found == ["row_gone"]
    assert report.failed == {}


@pytest.mark.parametrize(
    ("refusal", "requests"),
    [
        ("List not found or not accessible: tbl_1", 1),
        ("Table tbl_1 does not exist", 1),
        ("Cannot POST /v1/lists/tbl_1/targetable-people", 1),
        # Nothing named: both halves are refused too, and so is a read of the List.
        ("Not found", 4),
    ],
    ids=["a10", "table-id-named", "route-named", "nothing-named"],
)
def test_a_404_of_the_whole_list_fails_everything_without_bisecting_down_to_each_person(
    make_client, refusal, requests
):
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.method)
        return refuse(refusal, 404)

    items = people([(domain, 5) for domain in HELD[:20]])

    report = write_people_adds(make_client(handler), "tbl_1", items, chunk_size=50)

    assert report.written == [] and len(report.failed) == 100
    assert all(refusal in reason for reason in report.failed.values())
    # The first chunk finds the List refused; the other chunks are not sent.
    assert len(sent) == requests == report.requests
    assert sent.count("GET") == (1 if refusal == "Not found" else 0)


def test_a_list_there_keeps_a_404_naming_nothing_bisecting(make_client):
    # Both halves refused, but the List answers a read: the refusal is about the people.
    def answer(body):
        refused = [a for a in body["accounts"] if a["accountDomain"] in ("acct1.com", "acct8.com")]
        return refuse("Not found", 404) if refused else ok_added(body)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"success": True, "data": {"people": []}})
        return answer(json.loads(request.content))

    report = write_people_adds(make_client(handler), "tbl_1", people([(d, 2) for d in HELD[:10]]))

    assert sorted(report.failed) == ["acct1.com#0", "acct1.com#1", "acct8.com#0", "acct8.com#1"]
    assert len(report.written) == 16


def ok_added(body: dict) -> httpx.Response:
    return httpx.Response(
        200, json={"success": True, "data": {"added": sum(len(a["people"]) for a in body["accounts"])}}
    )
