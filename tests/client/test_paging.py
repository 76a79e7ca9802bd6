"""What the client makes of the spec's unnamed filters, List ids and List descriptions, and of a List
that moves while it is read page by page."""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Callable

import httpx
import pytest

from listsync.client import PeopleFilters, ReadWatch, iter_offset_pages

PEOPLE = [
    {"first_name": "Ada", "email": "ada@acme.com", "accountDomain": "acme.com"},
    {"first_name": "Bob", "phone_number": "+14155550100", "accountDomain": "ACME.com"},
    {"first_name": "Cy", "last_name": "Ng", "accountDomain": "globex.com"},
]


def people_service(honoured: set[str]) -> tuple[list[httpx.Request], object]:
    """A one-page people service that applies only the A12 filters named in ``honoured``."""
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        params = request.url.params
        people = PEOPLE
        if "accountDomain" in honoured and "accountDomain" in params:
            people = [p for p in people if p["accountDomain"].lower() == params["accountDomain"]]
        if "contactable" in honoured and "contactable" in params:
            wanted = params["contactable"] == "true"
            people = [p for p in people if bool(p.get("email") or p.get("phone_number")) is wanted]
        return httpx.Response(200, json={"success": True, "data": {"people": people, "hasMore": False}})

    return requests, handler


def test_an_honoured_filter_is_left_to_the_service(make_client, caplog):
    requests, handler = people_service({"accountDomain"})
    client = make_client(handler)

    people = list(client.iter_targetable_people("tbl_1", account_domain="acme.com"))

    assert [p.first_name for p in people] == ["Ada", "Bob"]
    assert requests[0].url.params["accountDomain"] == "acme.com"
    assert client.filters_applied_here == set()
    assert "ignored" not in caplog.text


def test_an_ignored_filter_is_applied_by_the_client_with_one_warning(make_client, caplog):
    requests, handler = people_service(set())
    client = make_client(handler)

    with caplog.at_level(logging.WARNING):
        first = list(client.iter_targetable_people("tbl_1", account_domain="acme.com"))
        second = list(client.iter_targetable_people("tbl_1", account_domain="globex.com"))

    assert [p.first_name for p in first] == ["Ada", "Bob"]
    assert [p.first_name for p in second] == ["Cy"]
    assert client.filters_applied_here == {"account_domain"}
    assert caplog.text.count("ignored the account_domain filter") == 1
    # Known to be ignored, the parameter is no longer sent.
    assert "accountDomain" in requests[0].url.params
    assert "accountDomain" not in requests[1].url.params


@pytest.mark.parametrize("honoured", [{"accountDomain"}, set()])
def test_an_accounts_people_read_as_json_objects_are_those_of_the_account(make_client, caplog, honoured):
    requests, handler = people_service(honoured)
    client = make_client(handler)

    with caplog.at_level(logging.WARNING):
        first = list(client.iter_targetable_people_records("tbl_1", account_domain="acme.com"))
        second = list(client.iter_targetable_people_records("tbl_1", account_domain="globex.com"))

    assert [p["first_name"] for p in first] == ["Ada", "Bob"]
    assert [p["first_name"] for p in second] == ["Cy"]
    # What the JSON objects' reads learn is the client's: its reads of models keep to it too.
    assert client.filters_applied_here == ({"account_domain"} if not honoured else set())
    assert caplog.text.count("ignored the account_domain filter") == (0 if honoured else 1)
    assert ("accountDomain" in requests[1].url.params) is bool(honoured)
    again = client.iter_targetable_people("tbl_1", account_domain="globex.com")
    assert [p.first_name for p in again] == ["Cy"]


def test_filters_are_checked_one_by_one(make_client):
    _, handler = people_service({"accountDomain"})
    client = make_client(handler)

    people = list(client.iter_targetable_people("tbl_1", account_domain="acme.com", contactable=True))

    assert [p.first_name for p in people] == ["Ada", "Bob"]
    assert client.filters_applied_here == set()  # every answer satisfied both

    people = list(client.iter_targetable_people("tbl_1", contactable=False))
    assert [p.first_name for p in people] == ["Cy"]
    assert client.filters_applied_here == {"contactable"}


@pytest.mark.parametrize(
    ("filters", "person", "failed"),
    [
        (PeopleFilters(search="ACME"), {"first_name": "A", "accountDomain": "acme.com"}, []),
        (PeopleFilters(search="zed"), {"first_name": "A", "title": "CTO"}, ["search"]),
        (PeopleFilters(account_domain="https://www.Acme.com/"), {"accountDomain": "acme.com"}, []),
        (PeopleFilters(account_domain="acme.com"), {"accountDomain": None}, ["account_domain"]),
        (PeopleFilters(contactable=True), {"first_name": "A"}, ["contactable"]),
    ],
)
def test_what_each_filter_keeps(filters, person, failed):
    from listsync.client.models import ListedPerson

    assert filters.failed_by(ListedPerson.model_validate(person)) == failed


@pytest.mark.parametrize(
    ("table_id", "path"),
    [
        ("tbl?x", "/v1/lists/tbl%3Fx/rows"),
        ("tbl#x", "/v1/lists/tbl%23x/rows"),
        ("tbl x", "/v1/lists/tbl%20x/rows"),
        ("a%2Fb", "/v1/lists/a%252Fb/rows"),
        ("tbl_123", "/v1/lists/tbl_123/rows"),
    ],
)
def test_table_ids_are_percent_encoded_into_their_own_path_segment(make_client, table_id, path):
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"success": True, "data": {"deleted": 1}})

    make_client(handler).delete_rows(table_id, ["row_1"])

    assert requests[0].url.raw_path.decode() == path


@pytest.mark.parametrize("table_id", ["", " ", ".", "..", "a/b", "a\\b", "tbl\n", "tbl\x00"])
def test_table_ids_no_encoding_keeps_in_place_are_refused_before_any_request(make_client, table_id):
    requests: list[httpx.Request] = []
    client = make_client(lambda request: requests.append(request) or httpx.Response(500))

    with pytest.raises(ValueError, match="invalid tableId"):
        client.get_rows(table_id)
    assert requests == []


@pytest.mark.parametrize(
    "item",
    [{"id": "tbl_1"}, {"tableId": "tbl_1", "name": "Accounts", "rowCount": 3, "columns": []}],
    ids=["id", "tableId-with-extras"],
)
def test_lists_are_named_by_id_or_table_id(make_client, item):
    client = make_client(lambda request: httpx.Response(200, json={"success": True, "data": [item]}))

    (info,) = client.list_lists()

    assert info.id == "tbl_1"


def test_each_page_is_freed_once_read_without_waiting_for_the_garbage_collector(make_client):
    # httpx's stream of a body points back at its response: pages of a long List read would stay
    # until a full collection. With the collector off, nothing but that cycle could keep them.
    answered: list[weakref.ref[httpx.Response]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params.get("offset", 0))
        page = PEOPLE[offset : offset + 1]
        response = httpx.Response(
            200, json={"success": True, "data": {"people": page, "hasMore": offset + 1 < len(PEOPLE)}}
        )
        answered.append(weakref.ref(response))
        return response

    client = make_client(handler, max_in_flight=1)  # no page asked for ahead, past the end
    gc.collect()
    gc.disable()
    try:
        people = list(client.iter_targetable_people("tbl_1", page_size=1))
        alive = [ref for ref in answered if ref() is not None]
    finally:
        gc.enable()

    assert [person.first_name for person in people] == ["Ada", "Bob", "Cy"]
    assert len(answered) == 3
    assert alive == []


# ---- a read that notes the List moving under it (ReadWatch) -------------------------------------


class MovingList:
    """``size`` items (0, 1, 2...) paged ``cap`` at a time with a total; ``move`` changes them once,
    right after the first page is served."""

    def __init__(self, size: int, cap: int, move: Callable[[list[int]], None] | None = None) -> None:
        self.items, self.cap, self.move = list(range(size)), cap, move
        self.asked: list[int] = []

    def fetch(self, offset: int) -> tuple[list[int], bool | None, int | None]:
        self.asked.append(offset)
        page = self.items[offset : offset + self.cap]
        total = len(self.items)
        if self.move is not None and len(self.asked) == 1:
            self.move(self.items)
        return page, None, total


@pytest.mark.parametrize("in_flight", [1, 4])
def test_a_steady_read_yields_every_item_once_its_pages_overlapping_by_one(in_flight: int) -> None:
    listed = MovingList(95, cap=10)
    watch = ReadWatch()

    assert list(iter_offset_pages(listed.fetch, in_flight=in_flight, watch=watch)) == list(range(95))
    assert watch.steady, watch.problems
    assert sorted(set(listed.asked))[:3] == [0, 9, 18]  # each page starts at the last item read


def test_without_a_watch_pages_do_not_overlap() -> None:
    listed = MovingList(25, cap=10)
    assert list(iter_offset_pages(listed.fetch)) == list(range(25))
    assert listed.asked == [0, 10, 20]


def test_items_removed_and_added_between_pages_tear_the_read_with_the_same_total() -> None:
    def move(items: list[int]) -> None:
        del items[3:5]  # two removed before the next page: two items would be skipped
        items.extend([100, 101])  # and two added: the total stays

    watch = ReadWatch()
    read = list(iter_offset_pages(MovingList(30, cap=10, move=move).fetch, watch=watch))

    assert 10 not in read and 11 not in read  # skipped, as a read without the overlap would
    assert "does not join the page before it" in watch.problems[0]


def test_items_changed_within_the_first_page_without_a_shift_tear_the_read() -> None:
    def move(items: list[int]) -> None:
        items[3] = 103  # within the first page, read already: nothing after it moves

    watch = ReadWatch()
    assert list(iter_offset_pages(MovingList(30, cap=10, move=move).fetch, watch=watch)) == list(range(30))
    assert watch.problems == ["the first page changed while the pages after it were read"]


def test_a_total_that_changes_between_pages_tears_the_read() -> None:
    watch = ReadWatch()
    list(iter_offset_pages(MovingList(30, cap=10, move=lambda items: items.append(99)).fetch, watch=watch))
    assert watch.problems == ["the total went from 30 to 31 between pages"]


def test_a_read_ending_short_of_its_total_is_torn() -> None:
    def fetch(offset: int) -> tuple[list[int], bool | None, int | None]:
        return list(range(offset, min(offset + 10, 25))), offset + 10 < 25, 30

    watch = ReadWatch()
    assert list(iter_offset_pages(fetch, watch=watch)) == list(range(25))
    assert watch.problems == ["the read ended with 25 of the 30 items it stated"]
