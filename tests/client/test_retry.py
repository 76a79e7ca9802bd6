"""Retry decisions, from tables."""

from __future__ import annotations

import httpx
import pytest

from listsync.client import (
    AuthenticationError,
    BadRequestError,
    OutcomeUnknownError,
    RateLimitedError,
    ServerError,
    TransportError,
)
from listsync.client.retry import (
    Repeat,
    RetryPolicy,
    backoff_seconds,
    is_retryable,
    outcome_unknown,
    wait_seconds,
)

NOW = 1000.0
POLICY = RetryPolicy(max_rate_limit_wait=120)
READ, SAFE, AT_LEAST, AT_MOST = Repeat.READ, Repeat.SAFE, Repeat.AT_LEAST_ONCE, Repeat.AT_MOST_ONCE


def server(status: int) -> ServerError:
    return ServerError(status, "GET", "/v1/lists", "x")


def limited(reset_in: float | None = None, retry_after: float | None = None) -> RateLimitedError:
    reset_at = NOW + reset_in if reset_in is not None else None
    return RateLimitedError(
        429, "POST", "/v1/events", "Rate limit exceeded", reset_at=reset_at, retry_after=retry_after
    )


@pytest.mark.parametrize(
    ("error", "read", "safe", "at_least_once", "at_most_once"),
    [
        (TransportError("refused"), True, True, True, True),
        (OutcomeUnknownError("timeout"), True, True, True, False),
        (server(502), True, True, True, False),
        (server(503), True, True, True, False),
        (server(504), True, True, True, False),
        (server(500), True, False, False, False),
        (server(501), True, False, False, False),
        (limited(reset_in=30), True, True, True, True),
        (limited(retry_after=5), True, True, True, True),
        (limited(), True, True, True, True),
        (limited(reset_in=121), False, False, False, False),
        (limited(retry_after=600), False, False, False, False),
        (BadRequestError(400, "POST", "/", "bad"), False, False, False, False),
        (AuthenticationError(401, "POST", "/", "Invalid API key"), False, False, False, False),
        (ValueError("bug"), False, False, False, False),
    ],
)
def test_is_retryable(error, read, safe, at_least_once, at_most_once):
    assert [is_retryable(error, repeat, POLICY, NOW) for repeat in (READ, SAFE, AT_LEAST, AT_MOST)] == [
        read,
        safe,
        at_least_once,
        at_most_once,
    ]


@pytest.mark.parametrize(
    ("error", "unknown"),
    [
        (TransportError("refused"), False),
        (OutcomeUnknownError("timeout"), True),
        (server(500), True),
        (server(503), True),
        (limited(), False),
    ],
)
def test_outcome_unknown(error, unknown):
    assert outcome_unknown(error) is unknown


@pytest.mark.parametrize(
    ("attempt", "rand", "seconds"),
    [
        (1, 0.0, 0.5),
        (2, 0.0, 1.0),
        (3, 0.0, 2.0),
        (7, 0.0, 30.0),
        (20, 0.0, 30.0),
        (3, 1.0, 1.0),
        (3, 0.5, 1.5),
    ],
)
def test_backoff_is_exponential_capped_and_jittered(attempt, rand, seconds):
    assert backoff_seconds(attempt, RetryPolicy(), rand) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("error", "seconds"),
    [
        (limited(reset_in=42), 42.0),
        (limited(retry_after=9), 9.0),
        (limited(reset_in=-5), 0.0),
        # A reset already past by our clock (clocks differ): the relative Retry-After still holds.
        (limited(reset_in=-5, retry_after=9), 9.0),
        (limited(reset_in=0, retry_after=9), 9.0),
        (limited(), 1.0),  # no hint: the backoff
        (server(503), 1.0),
    ],
)
def test_the_service_hint_wins_over_backoff(error, seconds):
    assert wait_seconds(error, 2, RetryPolicy(), NOW, 0.0) == pytest.approx(seconds)


def test_transport_error_classes_map_from_httpx(make_client):
    # The client sorts httpx failures by whether the request left: connect failures are
    # TransportError, anything after sending is OutcomeUnknownError.
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.WriteError("broken pipe")

    client = make_client(handler, retry_policy=RetryPolicy(max_attempts=1))
    with pytest.raises(OutcomeUnknownError, match="no answer"):
        client.list_lists()


def test_a_read_is_retried_on_any_5xx_and_a_row_add_is_not(make_client):
    answers = [httpx.Response(500, json={"success": False, "error": "boom"})] * 2
    answers.append(httpx.Response(200, json={"success": True, "data": []}))
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.method)
        return answers.pop(0) if answers else httpx.Response(500, json={"success": False, "error": "boom"})

    client = make_client(handler, retry_policy=RetryPolicy(backoff_initial=0))
    assert client.list_lists() == []
    assert sent == ["GET", "GET", "GET"]
    with pytest.raises(ServerError):
        client.add_rows("tbl_1", [{"cells": {"a": 1}}])
    assert sent[3:] == ["POST"]
