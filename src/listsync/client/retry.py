"""When to send a request again, and how long to wait first.

The decisions are small pure functions (tested from tables); :func:`call_with_retries` runs them
with tenacity, the injected clock and the injected sleep.

What repeating each request does decides its :class:`Repeat` policy (STYLE rule 5):

- ``READ``: reads. Nothing is written, so any failure the service may recover from is retried:
  every 5xx as well as a dropped or timed-out connection.
- ``SAFE``: targetable-people adds (the service matches duplicates by email and profile URL),
  people patches and deletes, cell patches, row deletes (all idempotent). Retried on any
  transient failure.
- ``AT_LEAST_ONCE``: event ingestion. A lost event is worse than a duplicate, so a batch whose
  fate is unknown is sent again, and the result says it was ``possibly_duplicated``.
- ``AT_MOST_ONCE``: row adds. Sent again only when the failure proves nothing was applied
  (the connection was never made, or a 429 refused it). A timeout after sending or a 5xx is
  raised, so the caller re-reads before re-sending.

Transient failures: the connection failing, a timeout, a dropped connection, 502/503/504 (any 5xx
for a read).
A 429 waits until the service's reset time (``X-RateLimit-Reset``, else ``Retry-After``, else
the backoff), unless that wait is longer than ``max_rate_limit_wait``: then it is raised.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from listsync.client.errors import (
    OutcomeUnknownError,
    RateLimitedError,
    ServerError,
    TransportError,
)

T = TypeVar("T")
log = logging.getLogger(__name__)


class Repeat(enum.Enum):
    """What sending a request twice does (see the module docstring)."""

    READ = "read"
    SAFE = "safe"
    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"


@dataclass(frozen=True)
class RetryPolicy:
    """Limits of retrying.

    :param max_attempts: attempts per request, the first included (429 waits count too).
    :param backoff_initial: seconds before the second attempt; doubles with each attempt.
    :param backoff_max: cap of one backoff wait.
    :param jitter: fraction of a backoff wait taken off at random, so clients do not retry in step.
    :param max_rate_limit_wait: the longest 429 wait honoured; a longer one is raised.
    :param retry_statuses: 5xx statuses that mean "try again".
    """

    max_attempts: int = 5
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    jitter: float = 0.5
    max_rate_limit_wait: float = 300.0
    retry_statuses: frozenset[int] = field(default_factory=lambda: frozenset({502, 503, 504}))


def outcome_unknown(error: BaseException) -> bool:
    """Whether a failed request may nevertheless have been applied by the service."""
    return isinstance(error, (OutcomeUnknownError, ServerError))


def is_retryable(error: BaseException, repeat: Repeat, policy: RetryPolicy, now: float) -> bool:
    """Whether ``error`` should be met by sending the same request again."""
    if isinstance(error, RateLimitedError):
        wait = error.wait_seconds(now)
        return wait is None or wait <= policy.max_rate_limit_wait
    if isinstance(error, OutcomeUnknownError):
        return repeat is not Repeat.AT_MOST_ONCE
    if isinstance(error, TransportError):
        return True
    if isinstance(error, ServerError):
        if repeat is Repeat.READ:
            return True
        return repeat is not Repeat.AT_MOST_ONCE and error.status in policy.retry_statuses
    return False


def backoff_seconds(attempt: int, policy: RetryPolicy, rand: float) -> float:
    """Wait before attempt ``attempt + 1``: exponential, capped, jittered by ``rand`` in [0, 1)."""
    base = min(policy.backoff_max, policy.backoff_initial * 2 ** (attempt - 1))
    return base * (1.0 - policy.jitter * rand)


def wait_seconds(
    error: BaseException | None, attempt: int, policy: RetryPolicy, now: float, rand: float
) -> float:
    """Wait before retrying after ``error``: the service's hint wins over our backoff."""
    if isinstance(error, RateLimitedError):
        hint = error.wait_seconds(now)
        if hint is not None:
            return hint
    return backoff_seconds(attempt, policy, rand)


@dataclass
class Attempts:
    """What happened while retrying one request.

    :ivar sent: attempts made, the first included (HTTP requests sent).
    :ivar waited: seconds slept between attempts.
    :ivar after_unknown_outcome: an attempt was made after one whose outcome was unknown, so the
        request may have been applied more than once.
    """

    sent: int = 0
    waited: float = 0.0
    after_unknown_outcome: bool = False


def call_with_retries(
    send: Callable[[], T],
    *,
    repeat: Repeat,
    policy: RetryPolicy,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    attempts: Attempts | None = None,
    rand: Callable[[], float] = random.random,
    retry_rate_limited: bool = True,
) -> T:
    """Call ``send`` until it returns, retrying what :func:`is_retryable` allows.

    :param attempts: filled in with the seconds waited and whether a later attempt followed one
        whose outcome was unknown.
    :param retry_rate_limited: ``False`` raises a 429 at once (for callers that pace themselves).
    """
    record = attempts if attempts is not None else Attempts()

    def should_retry(error: BaseException) -> bool:
        if isinstance(error, RateLimitedError) and not retry_rate_limited:
            return False
        return is_retryable(error, repeat, policy, clock())

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        return wait_seconds(error, state.attempt_number, policy, clock(), rand())

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        if error is not None and outcome_unknown(error):
            record.after_unknown_outcome = True
        record.waited += state.upcoming_sleep
        # Error messages name the method, path and the service's message, never a header.
        log.warning(
            "Attempt %d failed (%s); retrying in %.1f s", state.attempt_number, error, state.upcoming_sleep
        )

    retrying = Retrying(
        stop=stop_after_attempt(policy.max_attempts),
        retry=retry_if_exception(should_retry),
        wait=wait,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )

    def attempt() -> T:
        record.sent += 1
        return send()

    return retrying(attempt)
