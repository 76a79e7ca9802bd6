"""The outcomes file: one JSON line per person or row whose write did not end as planned.

A List sync writes it (``outcomes_path``) after the read back, in plan order, from what the apply
and the read back recorded; the lines stream to the file, a line at a time. Each line is a flat
object::

    {"outcome": "failed", "action": "add", "account_domain": "acme.io",
     "identity": "email:ann@acme.io", "plan_line": 3, "status": 404,
     "message": "Account not found: acme.io (...: write the account rows first, then the people)",
     "curable": false}

- ``outcome``: ``failed`` (the service refused the item or its request, or a write of unknown
  outcome the List does not show), ``drifted`` (the List shows another value than was written,
  in no form of the service's own), ``unconfirmed`` (acknowledged, not shown within
  ``verify_timeout``), ``not_found`` (a patched person or updated row no longer in the List; a
  person whose extra copies all went) or ``refused`` (held back by the sync itself: an identity
  several List people share, a delete that could reach someone staying, a key several List rows
  hold);
- ``action``: the plan file's action (``add``, ``patch``, ``delete``, ``remove_copy``; rows:
  ``add``, ``update``, ``delete``), or ``write`` for a refused person or row the plan holds no
  write of;
- the record: ``account_domain`` and ``identity`` (people, as in the plan file), or ``key`` and
  ``row_id`` (rows; None where unknown);
- ``plan_line``: the plan file's line (1-based) of the write, when a plan file was written, else
  None;
- ``status`` and ``message``: the service's HTTP status (None when it gave none: no answer, a
  read back) and its words or what the read back showed; the client keeps headers, and so the
  API key, out of them;
- ``curable``: whether a later run can cure it as things stand (:func:`curable`).
"""

from __future__ import annotations

import itertools
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from listsync.client.errors import AccountsNotFoundError
from listsync.files import OpenableFile, write_json_lines

__all__ = [
    "CURABLE_STATUSES",
    "FAILURES",
    "OUTCOMES",
    "OutcomeCounts",
    "curable",
    "outcome_line",
    "service_status",
    "write_outcomes",
]

#: What became of a write that did not end as planned.
OUTCOMES = ("failed", "drifted", "unconfirmed", "not_found", "refused")
#: The outcomes the summary counts in ``failed``.
FAILURES = ("failed", "refused")
#: Distinct reasons of permanent failures counted, at most: memory stays bounded when every
#: failure has a reason of its own.
REASONS_TRACKED = 1000
#: Statuses a later run may not meet again: a timeout, too many requests, the service failing.
CURABLE_STATUSES = frozenset((408, 425, 429))

_STATUS = re.compile(r"-> (\d{3}): ")


def service_status(message: str) -> int | None:
    """The HTTP status of the service's answer a failure's ``message`` quotes (``POST /v1/... ->
    404: ...``; an unknown account's reason, 404); None when it quotes none."""
    found = _STATUS.search(message)
    if found:
        return int(found[1])
    return 404 if AccountsNotFoundError.ADVICE in message else None


def curable(outcome: str, status: int | None, message: str) -> bool:
    """Whether a later run can cure an ``outcome``: an unconfirmed write (it shows later, or is
    sent again after the visibility window), a person or row the List lost (added again), a
    failure on a 408, 425, 429 or 5xx, or on no answer at all. Not a refusal the service would
    make again (any other 4xx, an invalid record), a drift (the service keeps another value than
    the one a run sends) or a write the sync held back (the List needs a hand first)."""
    if outcome in ("unconfirmed", "not_found"):
        return True
    if outcome != "failed":
        return False
    if status is not None:
        return status in CURABLE_STATUSES or status >= 500
    # No status: no answer came (a timeout, a dropped connection), or the record broke a rule.
    return not message.startswith("invalid ")


def outcome_line(
    outcome: str, action: str, record: Mapping[str, Any], plan_line: int | None, message: str
) -> dict[str, Any]:
    """One line of the outcomes file (see the module docstring); ``record`` names the person or
    row, ``message`` is the reason as the apply or the read back recorded it."""
    status = service_status(message) if outcome == "failed" else None
    return {
        "outcome": outcome,
        "action": action,
        **record,
        "plan_line": plan_line,
        "status": status,
        "message": message,
        "curable": curable(outcome, status, message),
    }


@dataclass
class OutcomeCounts:
    """What an outcomes file holds: where it went (None: nowhere), the failures (``failed`` and
    ``refused``) a re-run can cure and those it cannot, and the most frequent reasons of each
    (among the first :data:`REASONS_TRACKED` distinct ones)."""

    path: str | None = None
    lines: int = 0
    curable: int = 0
    permanent: int = 0
    curable_reasons: Counter[str] = field(default_factory=Counter)
    permanent_reasons: Counter[str] = field(default_factory=Counter)

    def count(self, line: Mapping[str, Any]) -> None:
        self.lines += 1
        if line["outcome"] not in FAILURES:
            return
        if line["curable"]:
            self.curable += 1
            reasons = self.curable_reasons
        else:
            self.permanent += 1
            reasons = self.permanent_reasons
        if line["message"] in reasons or len(reasons) < REASONS_TRACKED:
            reasons[line["message"]] += 1


def write_outcomes(
    lines: Iterable[dict[str, Any]],
    path: str | os.PathLike[str] | OpenableFile | None,
    *,
    prefix: str,
) -> OutcomeCounts:
    """Write the outcomes file, a line at a time: to ``path``, or without one to a temporary file
    when some write did not end as planned; return what it holds."""
    counts = OutcomeCounts()

    def counted(items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for line in items:
            counts.count(line)
            yield line

    stream = iter(lines)
    first = next(stream, None)
    if first is None and path is None:
        return counts
    head = [] if first is None else [first]
    counts.path = write_json_lines(counted(itertools.chain(head, stream)), path, prefix=prefix)
    return counts
