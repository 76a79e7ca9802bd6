"""What a chunked writer takes and gives back: items keyed by the caller, and the report per key.

Every item carries a caller-chosen string ``key`` (a source row number, a person identity, a
row key) and ends up in exactly one bucket of the :class:`WriteReport`:

- ``written``: the request holding it succeeded (for deletes, also "was already gone");
- ``failed``: it was not applied; the reason says why (a rule it breaks, an unknown account,
  the service's refusal of that item, or the error of the request that carried it);
- ``outcome_unknown``: the request was sent but its fate is unknown (no answer, a 5xx after the
  client's retries, a 2xx that cannot be read). Re-read before re-sending, no earlier than
  ``settle_after``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from listsync.client.models import WriteResult

#: How long past a lost request's send a write may still land, in the client's timeouts: the
#: timeout itself and a fifth of it more (at least a second). The earliest a write of unknown
#: outcome is looked for in the List, so that a re-read does not miss a write still on its way
#: and send it a second time.
LATE_WRITE_TIMEOUTS = 1.2


def late_write_deadline(sent_at: float, timeout: float) -> float:
    """When a request sent at ``sent_at`` with ``timeout`` can no longer land."""
    return sent_at + max(LATE_WRITE_TIMEOUTS * timeout, timeout + 1.0)


#: Covariant, as the items are frozen: a ``Keyed[RowAdd]`` is a ``Keyed[RowAdd | Mapping[str, Any]]``.
ValueT_co = TypeVar("ValueT_co", covariant=True)


@dataclass(frozen=True)
class Keyed(Generic[ValueT_co]):
    """An item to write and the caller's key for it."""

    key: str
    value: ValueT_co


@dataclass(frozen=True)
class AccountKeyed(Generic[ValueT_co]):
    """A person-level item to write on the account row of ``account_domain``."""

    key: str
    account_domain: str
    value: ValueT_co


@dataclass
class WriteReport:
    """What a chunked write did, per item key.

    :ivar requests: requests sent (a request retried after a transient failure counts once): the
        writes, and the rare read of :attr:`isolation_requests`.
    :ivar isolation_requests: those of ``requests`` sent to take apart a request the service
        refused whole (bisection, a re-cut to a stated cap, a resend without unknown accounts,
        a read checking that the List is still there).
    :ivar written: keys of items whose request succeeded, in order.
    :ivar failed: key -> reason, for items not applied.
    :ivar outcome_unknown: key -> reason, for items whose request may or may not have been
        applied (no answer, 5xx, an unreadable 2xx). Re-read them before re-sending.
    :ivar row_ids: key -> new row id, for row adds when the service returns the ids.
    :ivar counts: the service's counts summed over requests (``added``, ``updated``, ``skipped``,
        ``deleted``), when it returns them.
    :ivar not_found: the ``notFound`` entries of patches and deletes (A19), as returned.
    :ivar settle_after: for ``outcome_unknown`` items, the time (the client's clock) after which
        their requests can no longer land (:func:`late_write_deadline` of the last attempt).
        Re-read them no earlier.
    """

    requests: int = 0
    isolation_requests: int = 0
    written: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    outcome_unknown: dict[str, str] = field(default_factory=dict)
    row_ids: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    not_found: list[Any] = field(default_factory=list)
    settle_after: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary (for XCom)."""
        return {
            "requests": self.requests,
            "isolation_requests": self.isolation_requests,
            "written": list(self.written),
            "failed": dict(self.failed),
            "outcome_unknown": dict(self.outcome_unknown),
            "row_ids": dict(self.row_ids),
            "counts": dict(self.counts),
            "not_found": list(self.not_found),
            "settle_after": self.settle_after,
        }

    def merge(self, other: WriteReport) -> None:
        """Add ``other``'s outcome to this report's."""
        self.requests += other.requests
        self.isolation_requests += other.isolation_requests
        self.written += other.written
        self.failed.update(other.failed)
        self.outcome_unknown.update(other.outcome_unknown)
        self.row_ids.update(other.row_ids)
        for name, value in other.counts.items():
            self.counts[name] = self.counts.get(name, 0) + value
        self.not_found += other.not_found
        if other.settle_after is not None:
            self.settle_after = max(self.settle_after or other.settle_after, other.settle_after)

    def succeeded(self, keys: Sequence[str], result: WriteResult) -> None:
        """Record ``keys`` as written by a request that answered ``result``."""
        self.written.extend(keys)
        for name in ("added", "updated", "skipped", "deleted"):
            value = getattr(result, name)
            if value is not None:
                self.counts[name] = self.counts.get(name, 0) + value
        self.not_found.extend(result.not_found)

    def fail(self, keys: Iterable[str], reason: str) -> None:
        """Record ``keys`` as not applied, for ``reason``."""
        for key in keys:
            self.failed[key] = reason
