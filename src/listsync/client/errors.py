"""One error tree for the client, grouped by what the caller should do about it.

::

    ListSyncError                      anything raised by listsync.client
    ├── InvalidRecordError             a record breaks a spec rule; fix the data (nothing was sent)
    ├── ApiError                       the service answered with an error (status, method, path, message)
    │   ├── BadRequestError            400 and other 4xx: the request is wrong as it stands
    │   │   └── ConflictError          409: a unique column already holds the value (A23)
    │   ├── AuthenticationError        401/403: the key is missing, wrong or not allowed here
    │   ├── NotFoundError              404
    │   │   ├── SignalsNotFoundError   unknown or inactive signal slugs (.slugs)
    │   │   ├── AccountsNotFoundError  unknown account domains in a people write (.domains)
    │   │   ├── RowsNotFoundError      unknown row ids in a cells patch or rows delete (.row_ids)
    │   │   └── ListNotFoundError      unknown or inaccessible List (.table_id); 403 too (A10)
    │   ├── RateLimitedError           429: wait until .reset_at (epoch seconds) or .retry_after
    │   ├── ServerError                5xx: the service failed; 502/503/504 are retried
    │   └── UnexpectedResponseError    a 2xx whose body cannot be read as the spec says, or a 3xx
    │       └── NotJsonError           a 2xx whose body is not JSON at all
    └── TransportError                 the request never reached the service (connect failed)
        └── OutcomeUnknownError        sent, but no answer came (timeout, dropped connection):
                                       a write may or may not have been applied

``error_from_response`` is the only place that turns an HTTP response into an error. Messages
carry the service's ``error`` string, the method and the path, never a request header, so the
API key cannot leak through an exception. :func:`points_elsewhere` tells the errors that say
more about the base URL than about the service (nothing there, or not the API answering), for
which the command line and the operators add where the URL comes from.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

import httpx

from listsync.client.rate_hints import parse_retry_after, parse_timestamp
from listsync.errors import ListSyncError

_BODY_EXCERPT = 200


class InvalidRecordError(ListSyncError, ValueError):
    """A record breaks the spec's rules; ``violations`` lists every ``(field, message)``."""

    def __init__(self, violations: Sequence[tuple[str, str]], *, record: str = "record") -> None:
        self.violations: list[tuple[str, str]] = list(violations)
        self.record = record
        details = "; ".join(f"{field}: {message}" for field, message in self.violations)
        super().__init__(f"invalid {record}: {details}")

    @property
    def fields(self) -> list[str]:
        """The fields named by the violations, in order."""
        return [field for field, _ in self.violations]


class ApiError(ListSyncError):
    """The service answered with an error status.

    :ivar status: HTTP status code.
    :ivar method: request method.
    :ivar path: request path (no query string, which may name the user).
    :ivar message: the service's ``error`` string, or an excerpt of a body without the envelope.
    """

    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        self.status = status
        self.method = method
        self.path = path
        self.message = message
        super().__init__(f"{method} {path} -> {status}: {message}")


class BadRequestError(ApiError):
    """The service refused the request as it stands; sending it again unchanged will not help."""


class ConflictError(BadRequestError):
    """A write would repeat a value of a unique column (409, docs/assumptions.md A23)."""


class AuthenticationError(ApiError):
    """The API key is missing, invalid, or not allowed on this endpoint (401/403)."""


class NotFoundError(ApiError):
    """A named resource does not exist (404)."""


class SignalsNotFoundError(NotFoundError):
    """Signal slugs that match no active signal (spec §7). ``slugs`` lists them."""

    def __init__(self, status: int, method: str, path: str, message: str, slugs: list[str]) -> None:
        super().__init__(status, method, path, message)
        self.slugs = slugs


class AccountsNotFoundError(NotFoundError):
    """Account domains of a people write that match no account row (A14). ``domains`` lists them;
    :attr:`reason` is what the people on them failed with."""

    #: What a person whose account has no row in the List must wait for (A14).
    ADVICE = "a person is written under their account's row: write the account rows first, then the people"

    def __init__(self, status: int, method: str, path: str, message: str, domains: list[str]) -> None:
        super().__init__(status, method, path, message)
        self.domains = domains

    @property
    def reason(self) -> str:
        """The service's words, and what to do."""
        return f"{self.message} ({self.ADVICE})"


class RowsNotFoundError(NotFoundError):
    """Row ids of a cells patch or rows delete that match no row (A20). ``row_ids`` lists them."""

    def __init__(self, status: int, method: str, path: str, message: str, row_ids: list[str]) -> None:
        super().__init__(status, method, path, message)
        self.row_ids = row_ids


class ListNotFoundError(NotFoundError):
    """The List does not exist or the key may not use it (A10). ``table_id`` names it."""

    def __init__(self, status: int, method: str, path: str, message: str, table_id: str) -> None:
        super().__init__(status, method, path, message)
        self.table_id = table_id


class RateLimitedError(ApiError):
    """Too many requests (429).

    :ivar reset_at: epoch seconds of the window reset (``X-RateLimit-Reset``), if sent.
    :ivar retry_after: seconds to wait (``Retry-After``), if sent.
    """

    def __init__(
        self,
        status: int,
        method: str,
        path: str,
        message: str,
        *,
        reset_at: float | None,
        retry_after: float | None,
    ) -> None:
        super().__init__(status, method, path, message)
        self.reset_at = reset_at
        self.retry_after = retry_after

    def wait_seconds(self, now: float) -> float | None:
        """Seconds from ``now`` until a retry may succeed; ``None`` when the service gave no hint.

        ``X-RateLimit-Reset`` wins while it is ahead of ``now``; one already past by our clock
        (the clocks differ) gives way to ``Retry-After``, which is relative, when that was sent.
        """
        if self.reset_at is not None and (self.reset_at > now or self.retry_after is None):
            return max(0.0, self.reset_at - now)
        return self.retry_after


class ServerError(ApiError):
    """The service failed (5xx). Whether a write was applied is unknown."""


class UnexpectedResponseError(ApiError):
    """A success status whose body does not have the shape the spec describes."""


class NotJsonError(UnexpectedResponseError):
    """A success status whose body is not JSON at all: rarely the service, often a web server or
    a login page at the base URL."""


class TransportError(ListSyncError):
    """The request got no HTTP answer. Raised as is when it never reached the service."""


class OutcomeUnknownError(TransportError):
    """The request was sent but no answer came (timeout, dropped connection).

    A write may or may not have been applied. Reads and idempotent writes are retried; a row add
    is not (re-read before re-sending it).
    """


def points_elsewhere(error: BaseException) -> bool:
    """Whether ``error`` says that the base URL reaches no such service, rather than that the
    service failed: nothing answered there (no server, no TLS where ``https://`` was asked, no
    such host), or what answered sent a redirect or a body that is not JSON."""
    if isinstance(error, UnexpectedResponseError):
        return isinstance(error, NotJsonError) or 300 <= error.status < 400
    return isinstance(error, TransportError) and not isinstance(error, OutcomeUnknownError)


_SIGNALS_NOT_FOUND = re.compile(r"^Signals? not found:\s*(?P<names>.*)$", re.IGNORECASE | re.DOTALL)
_ACCOUNTS_NOT_FOUND = re.compile(r"^Accounts? not found:\s*(?P<names>.*)$", re.IGNORECASE | re.DOTALL)
_ROWS_NOT_FOUND = re.compile(r"^Rows? not found:\s*(?P<names>.*)$", re.IGNORECASE | re.DOTALL)
_LIST_NOT_FOUND = re.compile(r"^List not found or not accessible:\s*(?P<name>\S+)", re.IGNORECASE)


def _split_names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def error_message(response: httpx.Response) -> str:
    """The service's ``error`` string, or a short excerpt of a body without the §7 envelope.

    A service that echoes the request's key back does not get it into a message: it is masked.
    """
    return _masked(_service_message(response), response.request)


def _masked(text: str, request: httpx.Request) -> str:
    _scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return text.replace(key.strip(), "***") if len(key.strip()) >= 4 else text


def _service_message(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, str) and error:
            return error
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    text = response.text.strip()
    if not text:
        return response.reason_phrase or f"HTTP {response.status_code}"
    return text[:_BODY_EXCERPT]


def error_from_response(response: httpx.Response, *, now: float | None = None) -> ApiError:
    """Map an error response to the exception for it (see the tree in this module's docstring).

    :param response: a response without a 2xx status (a 3xx, unfollowed, is unexpected).
    :param now: epoch seconds, to turn an HTTP-date ``Retry-After`` into seconds (default: the
        system clock; the client passes its injected clock).
    """
    status = response.status_code
    request = response.request
    method, path = request.method, request.url.path
    message = error_message(response)

    list_match = _LIST_NOT_FOUND.match(message)
    if list_match and status in (403, 404):
        return ListNotFoundError(status, method, path, message, list_match.group("name"))
    if status == 429:
        reset_raw = response.headers.get("x-ratelimit-reset")
        retry_raw = response.headers.get("retry-after")
        return RateLimitedError(
            status,
            method,
            path,
            message,
            reset_at=parse_timestamp(reset_raw) if reset_raw is not None else None,
            retry_after=parse_retry_after(retry_raw, time.time() if now is None else now)
            if retry_raw is not None
            else None,
        )
    if status == 404:
        signals = _SIGNALS_NOT_FOUND.match(message)
        if signals:
            return SignalsNotFoundError(status, method, path, message, _split_names(signals["names"]))
        accounts = _ACCOUNTS_NOT_FOUND.match(message)
        if accounts:
            return AccountsNotFoundError(status, method, path, message, _split_names(accounts["names"]))
        rows = _ROWS_NOT_FOUND.match(message)
        if rows:
            return RowsNotFoundError(status, method, path, message, _split_names(rows["names"]))
        return NotFoundError(status, method, path, message)
    if status in (401, 403):
        return AuthenticationError(status, method, path, message)
    if status == 409:
        return ConflictError(status, method, path, message)
    if status >= 500:
        return ServerError(status, method, path, message)
    if status >= 400:
        return BadRequestError(status, method, path, message)
    return UnexpectedResponseError(status, method, path, f"not an error status: {message}")
