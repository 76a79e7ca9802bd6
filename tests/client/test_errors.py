"""error_from_response: every status and message of spec §7 and the List errors of A2-A24."""

from __future__ import annotations

import httpx
import pytest

from listsync.client import (
    AccountsNotFoundError,
    ApiError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ListNotFoundError,
    ListSyncError,
    NotFoundError,
    RateLimitedError,
    RowsNotFoundError,
    ServerError,
    SignalsNotFoundError,
    error_from_response,
)
from listsync.client.errors import (
    NotJsonError,
    OutcomeUnknownError,
    TransportError,
    UnexpectedResponseError,
    points_elsewhere,
)

NOW = 1_800_000_000.0


def response(
    status: int,
    error: str | None = None,
    *,
    text: str | None = None,
    method: str = "POST",
    path: str = "/v1/events/batch",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    request = httpx.Request(
        method,
        f"https://api.example.com{path}?userId=usr_1",
        headers={"Authorization": "Bearer sk_live_SECRET"},
    )
    if text is not None:
        return httpx.Response(status, text=text, request=request, headers=headers)
    return httpx.Response(status, json={"success": False, "error": error}, request=request, headers=headers)


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        # spec §7
        (400, "signal is required", BadRequestError),
        (400, "identity.type and identity.id are required", BadRequestError),
        (400, "events array is required and must not be empty", BadRequestError),
        (400, "Maximum 100 events per batch", BadRequestError),
        (404, "Signal not found: page_visit", SignalsNotFoundError),
        (404, "Signals not found: page_visit, trial_started", SignalsNotFoundError),
        (429, "Rate limit exceeded", RateLimitedError),
        (429, "Rate limit exceeded for all events in batch", RateLimitedError),
        # docs/assumptions.md
        (401, "Missing API key", AuthenticationError),  # A2
        (401, "Invalid API key", AuthenticationError),  # A2
        (403, "Invalid API key", AuthenticationError),  # A2 alternative
        (
            403,
            "Public keys may only call POST /v1/events and POST /v1/events/batch",
            AuthenticationError,
        ),  # A3
        (400, "Invalid JSON body", BadRequestError),  # A4
        (400, "events[3]: signal is required", BadRequestError),  # A4
        (400, "timestamp must be an ISO 8601 string", BadRequestError),  # A4
        (400, "Schema version 3 not found for signal visit", BadRequestError),  # A4
        (400, "Missing required data keys for signal visit: url, path", BadRequestError),  # A4
        (400, "User not found: usr_9", BadRequestError),  # A9
        (404, "List not found or not accessible: tbl_9", ListNotFoundError),  # A10
        (403, "List not found or not accessible: tbl_9", ListNotFoundError),  # A10 alternative
        (400, "accounts[0].accountDomain is required", BadRequestError),  # A11
        (404, "Row not found: row_1", RowsNotFoundError),  # A11 / A19 alternative
        (404, "Account not found: a.io, b.io", AccountsNotFoundError),  # A14
        (400, "Invalid duplicateStrategy: merge", BadRequestError),  # A15
        (404, "Rows not found: row_1, row_2", RowsNotFoundError),  # A20
        (400, "Column not found: status", BadRequestError),  # A20
        (400, "Maximum 500 rows per request", BadRequestError),  # A21
        (409, "Duplicate value for unique column domain: x.io", ConflictError),  # A23
        (422, "Unprocessable", BadRequestError),  # any other 4xx
        (404, "Not Found", NotFoundError),
        (500, "Internal error", ServerError),
        (502, "Bad gateway", ServerError),
        (503, "Service unavailable", ServerError),
        (504, "Gateway timeout", ServerError),
    ],
)
def test_every_status_and_message_maps_to_its_error(status, message, kind):
    error = error_from_response(response(status, message), now=NOW)

    assert type(error) is kind
    assert isinstance(error, ApiError)
    assert isinstance(error, ListSyncError)
    assert (error.status, error.method, error.path, error.message) == (
        status,
        "POST",
        "/v1/events/batch",
        message,
    )
    assert str(error) == f"POST /v1/events/batch -> {status}: {message}"


def test_names_are_parsed_from_not_found_messages():
    signals = error_from_response(response(404, "Signals not found: page_visit, trial_started"))
    accounts = error_from_response(response(404, "Account not found: a.io, b.io"))
    rows = error_from_response(response(404, "Rows not found: row_1"))
    table = error_from_response(response(404, "List not found or not accessible: tbl_9"))

    assert isinstance(signals, SignalsNotFoundError) and signals.slugs == ["page_visit", "trial_started"]
    assert isinstance(accounts, AccountsNotFoundError) and accounts.domains == ["a.io", "b.io"]
    assert isinstance(rows, RowsNotFoundError) and rows.row_ids == ["row_1"]
    assert isinstance(table, ListNotFoundError) and table.table_id == "tbl_9"


@pytest.mark.parametrize(
    ("headers", "reset_at", "retry_after", "wait"),
    [
        ({"X-RateLimit-Reset": "2027-01-15T08:01:00.000Z"}, NOW + 60, None, 60),
        ({"X-RateLimit-Reset": str(int(NOW + 30))}, NOW + 30, None, 30),
        ({"X-RateLimit-Reset": str(int((NOW + 30) * 1000))}, NOW + 30, None, 30),
        ({"Retry-After": "12"}, None, 12, 12),
        ({"Retry-After": "Fri, 15 Jan 2027 08:00:20 GMT"}, None, 20, 20),
        ({"X-RateLimit-Reset": "2027-01-15T08:00:10Z", "Retry-After": "99"}, NOW + 10, 99, 10),
        ({}, None, None, None),
    ],
)
def test_rate_limited_errors_carry_the_reset(headers, reset_at, retry_after, wait):
    error = error_from_response(response(429, "Rate limit exceeded", headers=headers), now=NOW)

    assert isinstance(error, RateLimitedError)
    assert error.reset_at == (pytest.approx(reset_at) if reset_at else None)
    assert error.retry_after == (pytest.approx(retry_after) if retry_after else None)
    assert error.wait_seconds(NOW) == (pytest.approx(wait) if wait is not None else None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        ("", "Bad Gateway"),
        ("x" * 500, "x" * 200),
    ],
)
def test_bodies_without_the_envelope_are_tolerated(body, message):
    error = error_from_response(response(502, text=body), now=NOW)
    assert isinstance(error, ServerError)
    assert error.message == message


def test_error_messages_never_carry_headers_or_query():
    error = error_from_response(response(401, "Invalid API key"), now=NOW)
    assert "SECRET" not in str(error)
    assert "usr_1" not in str(error)


def test_a_key_the_service_echoes_back_is_masked_in_the_error() -> None:
    request = httpx.Request(
        "GET", "https://api.example.com/v1/lists", headers={"Authorization": "Bearer sk_live_XYZ123"}
    )
    response = httpx.Response(
        401, json={"success": False, "error": "Invalid API key: Bearer sk_live_XYZ123"}, request=request
    )

    error = error_from_response(response)

    assert "sk_live_XYZ123" not in str(error)
    assert error.message == "Invalid API key: Bearer ***"


def test_errors_that_point_at_the_base_url_rather_than_the_service_are_told_apart() -> None:
    elsewhere = [
        TransportError("GET /v1/lists: could not reach the service: [Errno 111] Connection refused"),
        NotJsonError(200, "GET", "/v1/lists", "the body is not JSON"),
        error_from_response(response(302, text="")),
    ]
    assert all(points_elsewhere(error) for error in elsewhere)
    assert isinstance(elsewhere[2], UnexpectedResponseError)
    service = [
        OutcomeUnknownError("POST /v1/events/batch: no answer (ReadTimeout)"),
        UnexpectedResponseError(200, "GET", "/v1/lists/t/rows", "rows is not a list"),
        error_from_response(response(503, "Service unavailable")),
        ValueError("not a service error"),
    ]
    assert not any(points_elsewhere(error) for error in service)
