"""The people sync's lines of the outcomes file (:mod:`listsync.sync.outcomes`): the people whose
write did not end as planned, in plan order, then those the plan held back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from listsync.sync.outcomes import outcome_line
from listsync.sync.people.apply import PeopleApplyResult
from listsync.sync.people.plan import PeoplePlan, PlannedDelete, PlannedPatch, item_key
from listsync.sync.people.read import NOT_IN_LIST
from listsync.sync.people.verify import UNCONFIRMED, PeopleVerification, planned_writes


def people_outcomes(
    plan: PeoplePlan,
    result: PeopleApplyResult,
    verification: PeopleVerification,
    *,
    numbered: bool,
    verify_timeout: float,
) -> Iterator[dict[str, Any]]:
    """The outcomes file's lines of a people sync.

    The plan's writes are gone through only when some failed, drifted or stayed unconfirmed; a
    failure under no planned write's key (none is expected) comes after them, as a ``write``,
    found by a second pass then only.

    :param numbered: a plan file was written: each line names its write's line in it.
    """
    failed = result.failed
    shown_other = verification.drift
    if failed or shown_other or verification.unconfirmed:
        met = 0
        for position, (kind, item) in enumerate(planned_writes(plan)):
            key = item_key(item)
            action = "remove_copy" if isinstance(item, PlannedDelete) and item.copy else kind
            where = (action, {"account_domain": item.account_domain, "identity": item.identity})
            line = position + 1 if numbered else None
            if key in failed:
                met += 1
                yield outcome_line("failed", *where, line, failed[key])
            elif key in shown_other:
                problem = shown_other[key].removeprefix(f"{kind} of {key}: ")
                gone = f"{item.account_domain} {item.identity}" in verification.lost or (
                    isinstance(item, PlannedPatch) and problem == NOT_IN_LIST
                )
                yield outcome_line("not_found" if gone else "drifted", *where, line, problem)
            elif verification.outcome[position] == UNCONFIRMED:
                message = f"not shown by the List after {verify_timeout:g} s"
                yield outcome_line("unconfirmed", *where, line, message)
        if met < len(failed):
            planned = {item_key(item) for _, item in planned_writes(plan)}
            for key, reason in failed.items():
                if key not in planned:
                    domain, _, identity = key.partition(" ")
                    record = {"account_domain": domain, "identity": identity}
                    yield outcome_line("failed", "write", record, None, reason)
    for held in plan.held:
        record = {"account_domain": held.account_domain, "identity": held.identity}
        yield outcome_line("refused", held.action, record, None, held.reason)
