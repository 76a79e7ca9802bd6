"""ListSyncClient over httpx.MockTransport: wire format, retries, tolerance, secrecy."""

from __future__ import annotations

import json
import logging
import socket

import httpx
import pytest

import listsync
from listsync.client import (
    InvalidRecordError,
    ListSyncClient,
    OutcomeUnknownError,
    RateLimitedError,
    RetryPolicy,
    ServerError,
    TransportError,
    UnexpectedResponseError,
)

API_KEY = "sk_live_SECRET_abc123"
ACK = {"id": "0b7c", "signal_id": "sig_1", "schema_version": None, "status": "pending", "reference": "r1"}
EVENT = {"signal": "visit", "identity": {"type": "account", "id": "acc-1"}, "reference": "r1"}


class Recorder:
    """A MockTransport handler answering from a script, recording every request."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def body(self, index: int = -1) -> object:
        return json.loads(self.requests[index].content)


def ok(data: object = None, status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"success": True, "data": data}, headers=headers)


def test_every_request_carries_bearer_auth_and_a_user_agent_with_package_and_version(make_client):
    recorder = Recorder(ok([]))
    make_client(recorder).list_lists()

    request = recorder.requests[0]
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert request.headers["User-Agent"] == f"airflow-provider-listsync/{listsync.__version__}"
    assert request.url.path == "/v1/lists"


def test_delete_sends_a_json_body_with_user_id(make_client):
    recorder = Recorder(ok({"deleted": 2, "notFound": []}))
    result = make_client(recorder).delete_rows("tbl_1", ["row_1", "row_2"])

    request = recorder.requests[0]
    assert request.method == "DELETE"
    assert request.url.path == "/v1/lists/tbl_1/rows"
    assert request.headers["Content-Type"] == "application/json"
    assert recorder.body() == {"userId": "usr_123", "rowIds": ["row_1", "row_2"]}
    assert result.deleted == 2


def test_people_writes_use_the_spec_casing_and_leave_out_none(make_client):
    recorder = Recorder(ok({"added": 1, "updated": 0, "skipped": 0}))
    person = {
        "first_name": "Ada",
        "email": "ada@x.io",
        "title": None,
        "connection_paths": [{"user_id": "usr_9", "source": "relation", "degree": "2nd"}],
    }

    make_client(recorder).add_people("tbl_1", [{"account_domain": "x.io", "people": [person]}])

    assert recorder.body() == {
        "userId": "usr_123",
        "accounts": [
            {
                "accountDomain": "x.io",
                "people": [
                    {
                        "first_name": "Ada",
                        "email": "ada@x.io",
                        "connection_paths": [{"userId": "usr_9", "source": "relation", "degree": "2nd"}],
                    }
                ],
            }
        ],
    }


def test_patch_and_cells_bodies(make_client):
    recorder = Recorder(ok({"updated": 1}))
    client = make_client(recorder, user_id=None)

    client.update_people(
        "tbl_1",
        [{"accountDomain": "x.io", "people": [{"match": {"email": "a@x.io"}, "patch": {"title": "CTO"}}]}],
    )
    client.update_cells("tbl_1", [{"rowId": "row_1", "columnId": "status", "value": None}])

    assert recorder.requests[0].method == "PATCH"
    assert recorder.body(0) == {
        "accounts": [
            {"accountDomain": "x.io", "people": [{"match": {"email": "a@x.io"}, "patch": {"title": "CTO"}}]}
        ]
    }
    assert recorder.body(1) == {"updates": [{"rowId": "row_1", "columnId": "status", "value": None}]}


def test_reads_send_user_id_and_filters_in_the_query(make_client):
    recorder = Recorder(
        ok(
            {
                "people": [{"first_name": "Ada", "accountDomain": "x.io", "rowId": "row_1"}],
                "total": 1,
                "limit": 25,
                "offset": 0,
                "hasMore": False,
            }
        )
    )

    page = make_client(recorder).get_targetable_people(
        "tbl_1", target=True, personas=["champion", "decision_maker"], limit=25, offset=0
    )

    params = recorder.requests[0].url.params
    assert dict(params) == {
        "target": "true",
        "personas": "champion,decision_maker",
        "limit": "25",
        "offset": "0",
        "userId": "usr_123",
    }
    assert page.people[0].account_domain == "x.io"
    assert page.has_more is False


def test_invalid_input_is_refused_before_sending(make_client):
    recorder = Recorder(ok())
    with pytest.raises(InvalidRecordError) as error:
        make_client(recorder).add_rows("tbl_1", [{"cells": {}}, {"nope": 1}])
    assert "rows.1.cells" in error.value.fields
    assert recorder.requests == []


def test_a_503_then_200_on_a_read_succeeds_after_backoff(make_client, fake_clock, caplog):
    caplog.set_level(logging.DEBUG)
    recorder = Recorder(httpx.Response(503, text="busy"), ok([{"id": "tbl_1", "name": "Accounts"}]))

    lists = make_client(recorder).list_lists()

    assert [item.id for item in lists] == ["tbl_1"]
    assert len(recorder.requests) == 2
    assert fake_clock.slept == [0.5]  # the first backoff step, no jitter
    assert "Attempt 1 failed (GET /v1/lists -> 503: busy); retrying in 0.5 s" in caplog.text
    assert API_KEY not in caplog.text


def test_backoff_is_capped_and_attempts_are_bounded(make_client, fake_clock):
    recorder = Recorder(httpx.Response(502))
    client = make_client(recorder, retry_policy=RetryPolicy(max_attempts=6, backoff_initial=1, backoff_max=4))

    with pytest.raises(ServerError) as error:
        client.list_lists()

    assert error.value.status == 502
    assert len(recorder.requests) == 6
    assert fake_clock.slept == [1, 2, 4, 4, 4]


def test_a_429_waits_until_x_ratelimit_reset(make_client, fake_clock):
    reset = "2027-01-15T08:01:00.000Z"  # START is 08:00:00Z
    recorder = Recorder(
        httpx.Response(
            429,
            json={"success": False, "error": "Rate limit exceeded"},
            headers={"X-RateLimit-Reset": reset, "Retry-After": "99"},
        ),
        ok(ACK),
    )

    ack = make_client(recorder).ingest_event(EVENT)

    assert ack.id == "0b7c"
    assert fake_clock.slept == [60.0]  # X-RateLimit-Reset wins over Retry-After


def test_a_429_with_only_retry_after_waits_that_long(make_client, fake_clock):
    recorder = Recorder(httpx.Response(429, headers={"Retry-After": "7"}), ok([]))

    make_client(recorder).list_lists()

    assert fake_clock.slept == [7.0]


def test_a_429_longer_than_the_maximum_wait_is_raised(make_client, fake_clock):
    recorder = Recorder(
        httpx.Response(
            429, json={"success": False, "error": "Rate limit exceeded"}, headers={"Retry-After": "900"}
        )
    )
    client = make_client(recorder, retry_policy=RetryPolicy(max_rate_limit_wait=300))

    with pytest.raises(RateLimitedError) as error:
        client.list_lists()

    assert error.value.retry_after == 900
    assert fake_clock.slept == []


def test_an_event_batch_that_timed_out_is_resent_and_flagged_possibly_duplicated(make_client):
    recorder = Recorder(httpx.ReadTimeout("slow"), ok([ACK]))

    result = make_client(recorder).ingest_batch([EVENT])

    assert len(recorder.requests) == 2
    assert recorder.body(0) == recorder.body(1)
    assert result.possibly_duplicated is True
    assert [ack.reference for ack in result.acks] == ["r1"]


def test_an_event_batch_refused_before_connecting_is_not_flagged(make_client):
    recorder = Recorder(httpx.ConnectError("refused"), ok([ACK]))

    assert make_client(recorder).ingest_batch([EVENT]).possibly_duplicated is False


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ReadTimeout("slow"),
        httpx.RemoteProtocolError("dropped"),
        httpx.Response(503),
        httpx.Response(500),
    ],
    ids=["timeout", "dropped", "503", "500"],
)
def test_a_row_add_is_not_retried_blindly(make_client, failure):
    recorder = Recorder(failure, ok({"rows": [{"id": "row_1"}], "added": 1}))

    with pytest.raises((OutcomeUnknownError, ServerError)):
        make_client(recorder).add_rows("tbl_1", [{"cells": {"domain": "x.io"}}])

    assert len(recorder.requests) == 1


def test_a_row_add_is_retried_when_nothing_reached_the_service(make_client):
    recorder = Recorder(httpx.ConnectError("refused"), ok({"rows": [{"id": "row_9"}], "added": 1}))

    result = make_client(recorder).add_rows("tbl_1", [{"cells": {"domain": "x.io"}}])

    assert result.row_ids == ["row_9"]
    assert len(recorder.requests) == 2


def test_idempotent_writes_are_retried_after_an_unknown_outcome(make_client):
    recorder = Recorder(httpx.ReadTimeout("slow"), ok({"updated": 1}))

    make_client(recorder).update_cells("tbl_1", [{"rowId": "row_1", "columnId": "c", "value": 1}])

    assert len(recorder.requests) == 2


def test_a_connection_that_never_opens_raises_transport_error_after_retries(make_client):
    recorder = Recorder(httpx.ConnectError("refused"))

    with pytest.raises(TransportError) as error:
        make_client(recorder).list_lists()

    assert not isinstance(error.value, OutcomeUnknownError)
    assert len(recorder.requests) == 5


@pytest.mark.parametrize("status", [200, 201, 202])
def test_list_writes_accept_any_2xx_with_a_success_envelope(make_client, status):
    recorder = Recorder(httpx.Response(status, json={"success": True}))

    result = make_client(recorder).delete_rows("tbl_1", ["row_1"])

    assert result.status_code == status
    assert result.deleted is None


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (204, b""),
        (200, b""),
        (200, b"<html>ok</html>"),
        (200, b"[]"),
        (200, b'"ok"'),
        (200, b'{"success": false}'),
    ],
    ids=["204", "empty", "html", "array", "string", "success-false"],
)
def test_a_write_answer_that_cannot_be_read_leaves_the_outcome_unknown(make_client, status, body):
    # "deleted 1" cannot be read from such an answer, nor can "nothing happened".
    recorder = Recorder(httpx.Response(status, content=body))

    with pytest.raises(OutcomeUnknownError, match="whether the write was applied is unknown"):
        make_client(recorder).delete_rows("tbl_1", ["row_1"])
    assert len(recorder.requests) == 1  # read as unknown, not retried blindly


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"created": 2, "modified": 1, "unchanged": 3, "missing": ["x"]}, (2, 1, 3, None, ["x"])),
        ({"inserted": 2, "removed": 4, "not_found": []}, (2, None, None, 4, [])),
        ({"added": 1, "updated": 0, "skipped": 0, "deleted": 0, "notFound": []}, (1, 0, 0, 0, [])),
    ],
    ids=["renamed", "other-names", "reference"],
)
def test_write_counts_are_read_under_other_names(make_client, data, expected):
    result = make_client(Recorder(ok(data))).delete_rows("tbl_1", ["row_1"])

    assert (result.added, result.updated, result.skipped, result.deleted, result.not_found) == expected


def test_row_ids_from_an_add_answered_as_row_ids(make_client):
    result = make_client(Recorder(ok({"rowIds": ["row_7", "row_8"], "created": 2}))).add_rows(
        "tbl_1", [{"cells": {"a": 1}}, {"cells": {"a": 2}}]
    )
    assert (result.row_ids, result.added) == (["row_7", "row_8"], 2)


def test_list_writes_accept_data_null(make_client):
    result = make_client(Recorder(ok(None))).add_people(
        "tbl_1", [{"accountDomain": "x.io", "people": [{"first_name": "A"}]}]
    )
    assert result.added is None


@pytest.mark.parametrize("status", [200, 201, 202])
def test_single_ingestion_accepts_any_2xx(make_client, status):
    assert make_client(Recorder(ok(ACK, status=status))).ingest_event(EVENT).status == "pending"


def test_single_ingestion_reads_its_acknowledgement_from_a_one_item_list(make_client):
    assert make_client(Recorder(ok([ACK]))).ingest_event(EVENT).id == ACK["id"]


@pytest.mark.parametrize(
    "data",
    [[{"id": "tbl_1"}], {"lists": [{"id": "tbl_1"}]}, {"items": [{"id": "tbl_1"}]}],
    ids=["list", "object-lists", "object-items"],
)
def test_data_as_a_list_or_an_object(make_client, data):
    assert [item.id for item in make_client(Recorder(ok(data))).list_lists()] == ["tbl_1"]


def test_people_page_as_a_bare_list(make_client):
    page = make_client(Recorder(ok([{"first_name": "Ada", "email": "a@x.io"}]))).get_targetable_people(
        "tbl_1"
    )
    assert page.people[0].email == "a@x.io"
    assert page.has_more is None


def test_row_ids_from_an_add(make_client):
    recorder = Recorder(
        ok({"rows": [{"id": "row_1", "cells": {}}, {"id": "row_2", "cells": {}}], "added": 2})
    )

    result = make_client(recorder).add_rows("tbl_1", [{"cells": {"a": 1}}, {"cells": {"a": 2}}])

    assert result.row_ids == ["row_1", "row_2"]
    assert result.added == 2


@pytest.mark.parametrize(
    "body",
    [b"<html>", b'{"success": true, "data": [{"id": "tbl_1", "name": NaN}]}', b'{"data": []}\xff'],
    ids=["html", "nan-outside-the-standard", "not-utf-8"],
)
def test_a_success_body_that_is_not_json_is_an_unexpected_response(make_client, body):
    with pytest.raises(UnexpectedResponseError, match="the body is not JSON"):
        make_client(Recorder(httpx.Response(200, content=body))).list_lists()


def test_iter_targetable_people_pages_until_has_more_is_false(make_client):
    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        people = [{"first_name": f"P{i}"} for i in range(offset, min(offset + 2, 5))]
        return ok({"people": people, "hasMore": offset + 2 < 5})

    names = [p.first_name for p in make_client(handler).iter_targetable_people("tbl_1", page_size=2)]

    assert names == ["P0", "P1", "P2", "P3", "P4"]


def test_a_short_page_is_a_cap_not_the_end(make_client):
    # Asked for 2, the service serves 1 at a time and says nothing of the end: only the empty
    # page after the last row ends the paging.
    recorder = Recorder(ok({"rows": [{"id": "row_1"}]}), ok({"rows": [{"id": "row_2"}]}), ok({"rows": []}))

    # One page at a time: the requests are the paging rule's own (pages asked for ahead aside).
    client = make_client(recorder, max_in_flight=1)
    rows = list(client.iter_rows("tbl_1", column_id="domain", operator="is_not_empty", page_size=2))

    assert [row.id for row in rows] == ["row_1", "row_2"]
    assert [r.url.params["offset"] for r in recorder.requests] == ["0", "1", "2"]
    assert recorder.requests[0].url.params["operator"] == "is_not_empty"


@pytest.mark.parametrize(
    "pages",
    [
        # Paging metadata beside data, only a total.
        [{"success": True, "data": [{"first_name": f"P{i}"}], "total": 3} for i in range(3)],
        # Inside data, under other names.
        [
            {"success": True, "data": {"items": [{"first_name": f"P{i}"}], "truncated": i < 2}}
            for i in range(3)
        ],
        # Beside data, with a flag.
        [{"success": True, "data": [{"first_name": f"P{i}"}], "hasMore": i < 2} for i in range(3)],
    ],
    ids=["total-beside", "truncated-inside", "flag-beside"],
)
def test_people_paging_ends_on_the_services_own_word_wherever_it_is(make_client, pages):
    recorder = Recorder(*[httpx.Response(200, json=page) for page in pages])

    # One page at a time: the requests are the paging rule's own (pages asked for ahead aside).
    people = list(make_client(recorder, max_in_flight=1).iter_targetable_people("tbl_1", page_size=1000))

    assert [p.first_name for p in people] == ["P0", "P1", "P2"]
    assert len(recorder.requests) == 3  # the third page ends it: no fourth request
    assert [r.url.params["limit"] for r in recorder.requests] == ["1000"] * 3


SIX_PEOPLE = [{"first_name": f"P{i}", "email": f"p{i}@x.io", "accountDomain": "x.io"} for i in range(6)]
PAGINATION = {"total": 6, "limit": 25, "offset": 0, "hasMore": False}


@pytest.mark.parametrize(
    "body",
    [
        {"success": True, "data": SIX_PEOPLE, "pagination": PAGINATION},
        {"success": True, "data": {"people": SIX_PEOPLE, "pagination": PAGINATION}},
        {"success": True, "data": SIX_PEOPLE, "meta": PAGINATION},
        {"success": True, "data": {"items": SIX_PEOPLE, "paging": PAGINATION}},
        {"people": SIX_PEOPLE, "pagination": PAGINATION},
    ],
    ids=["pagination-beside", "pagination-inside", "meta-beside", "paging-inside", "no-envelope"],
)
def test_paging_fields_in_a_pagination_object_are_read(make_client, body):
    recorder = Recorder(httpx.Response(200, json=body))
    client = make_client(recorder)

    page = client.get_targetable_people("tbl_1", limit=25)

    assert (page.total, page.has_more, page.more, page.limit, page.offset) == (6, False, False, 25, 0)
    assert len(page.people) == 6
    # The iterators stop on the page's own word: no request for an empty page after it.
    assert len(list(client.iter_targetable_people("tbl_1", page_size=25))) == 6
    assert len(list(client.iter_targetable_people_records("tbl_1", page_size=25))) == 6
    assert len(recorder.requests) == 3


def test_a_paging_field_given_directly_wins_over_one_in_a_pagination_object(make_client):
    body = {"success": True, "data": {"people": SIX_PEOPLE, "hasMore": True, "pagination": PAGINATION}}

    page = make_client(Recorder(httpx.Response(200, json=body))).get_targetable_people("tbl_1")

    assert (page.has_more, page.total) == (True, 6)


def test_rows_paging_fields_in_a_pagination_object_are_read(make_client):
    rows = [{"id": f"row_{i}", "cells": {}} for i in range(3)]
    pagination = {"totalMatched": 3, "truncated": False, "returned": 3}
    recorder = Recorder(ok({"rows": rows, "pagination": pagination}))
    client = make_client(recorder)

    page = client.get_rows("tbl_1", column_id="domain", operator="is_not_empty", limit=10)
    records, paging = client.get_row_records("tbl_1", column_id="domain", operator="is_not_empty")
    listed = list(client.iter_rows("tbl_1", column_id="domain", operator="is_not_empty", page_size=10))

    assert (page.total_matched, page.truncated, page.returned) == (3, False, 3)
    assert (len(records), paging.total_matched, paging.more) == (3, 3, False)
    assert len(listed) == 3
    assert len(recorder.requests) == 3  # iter_rows stopped after its one page


@pytest.mark.parametrize(
    "body",
    [
        {"success": True, "data": {"people": {"0": {"first_name": "A"}}}},
        {"success": True, "data": {"people": None}},
        {"success": True, "data": None},
        {"success": True, "data": "people"},
    ],
    ids=["object", "null-field", "null-data", "string"],
)
def test_a_page_without_a_list_of_people_is_refused_not_read_as_empty(make_client, body):
    with pytest.raises(UnexpectedResponseError):
        list(make_client(Recorder(httpx.Response(200, json=body))).iter_targetable_people("tbl_1"))


def test_iter_rows_refuses_a_page_that_repeats(make_client):
    recorder = Recorder(ok({"rows": [{"id": "row_1"}, {"id": "row_2"}], "truncated": True}))

    with pytest.raises(UnexpectedResponseError, match="repeats"):
        list(make_client(recorder).iter_rows("tbl_1", page_size=2))


def test_read_cells_are_objects_with_value_and_computed_value(make_client):
    body = {
        "rows": [
            {
                "id": "row_1",
                "tableId": "tbl_1",
                "cells": {
                    "status": {
                        "columnId": "status",
                        "rowId": "row_1",
                        "value": "pending",
                        "computedValue": "Pending",
                        "status": "completed",
                    }
                },
            }
        ],
        "totalMatched": 12,
        "returned": 1,
        "truncated": True,
    }

    page = make_client(Recorder(ok(body))).get_rows("tbl_1", row_ids=["row_1"])

    assert page.rows[0].cells["status"].computed_value == "Pending"
    assert page.total_matched == 12
    assert page.truncated is True


def test_the_api_key_never_appears_in_repr_errors_or_logs(make_client, caplog):
    caplog.set_level(logging.DEBUG)
    recorder = Recorder(httpx.Response(401, json={"success": False, "error": "Invalid API key"}))
    client = make_client(recorder)

    with pytest.raises(Exception) as error:
        client.list_lists()

    assert API_KEY not in repr(client)
    assert API_KEY not in str(error.value)
    assert API_KEY not in repr(error.value)
    assert API_KEY not in caplog.text
    assert "Invalid API key" in str(error.value)


def test_client_works_as_a_context_manager():
    transport = httpx.MockTransport(lambda request: ok([]))
    with ListSyncClient("https://api.example.com/", API_KEY, transport=transport) as client:
        assert client.list_lists() == []
        assert client.base_url == "https://api.example.com"


@pytest.mark.parametrize("key", [f"{API_KEY}\n", f"{API_KEY} ", f"\t{API_KEY}\r\n"])
def test_a_key_with_surrounding_whitespace_is_sent_trimmed_and_never_shown(key, caplog):
    # A key read from a file or an environment variable often ends with a newline. Sent as is,
    # the HTTP layer refuses the header and quotes its value (the key) in the error.
    caplog.set_level(logging.DEBUG)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    base_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        client = ListSyncClient(base_url, key, timeout=0.5, retry_policy=RetryPolicy(max_attempts=1))
        with pytest.raises(OutcomeUnknownError) as error:
            client.list_lists()  # nothing answers: the request is sent and times out
    finally:
        listener.close()

    assert "ReadTimeout" in str(error.value)
    assert API_KEY not in str(error.value)
    assert API_KEY not in caplog.text
    recorder = Recorder(ok([]))
    ListSyncClient("https://api.example.com", key, transport=httpx.MockTransport(recorder)).list_lists()
    assert recorder.requests[0].headers["Authorization"] == f"Bearer {API_KEY}"


def test_a_key_with_characters_a_header_cannot_carry_is_refused_without_showing_it():
    with pytest.raises(ValueError) as error:
        ListSyncClient("https://api.example.com", "sk_live_SECRET\x00abc")

    assert "SECRET" not in str(error.value)


@pytest.mark.parametrize("status", [301, 307, 308])
def test_a_redirect_is_not_taken_for_success(make_client, status):
    # httpx does not follow redirects: a 3xx means the write was not applied and the read got no data.
    redirect = httpx.Response(status, headers={"Location": "https://elsewhere.example.com/v1/lists"})

    with pytest.raises(UnexpectedResponseError) as error:
        make_client(Recorder(redirect)).add_rows("tbl_1", [{"cells": {"domain": "acme.com"}}])
    assert error.value.status == status
    with pytest.raises(UnexpectedResponseError):
        make_client(Recorder(redirect)).list_lists()
