"""Reading back the accounts a people plan touched, and checking every write against what the plan
meant."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from listsync.sync.people.apply import PeopleApplyResult
from listsync.sync.people.plan import (
    PeoplePlan,
    PlannedAdd,
    PlannedDelete,
    PlannedPatch,
    item_key,
)
from listsync.sync.people.read import difference, looked_up_keys, people_index, read_accounts
from listsync.sync.plan import wait_for_late_writes

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient


@dataclass
class PeopleVerification:
    """What re-reading the accounts a plan touched showed.

    :ivar verified: writes the re-read confirms (acknowledged ones, and unknown ones found applied).
    :ivar drift: one reason per acknowledged write the re-read contradicts.
    :ivar filter: how the touched accounts were read: ``"service"`` (the service's account
        filter), ``"client"`` (the whole List, filtered here, because the service ignores the
        filter or too many accounts were touched), or ``None`` (nothing to verify).
    """

    verified: int = 0
    drift: list[str] = field(default_factory=list)
    filter: str | None = None


def verify_people(
    plan: PeoplePlan, result: PeopleApplyResult, client: ListSyncClient, *, table_id: str, page_size: int
) -> PeopleVerification:
    """Re-read the accounts the plan touched and check every write against the plan's intent.

    An acknowledged write the List contradicts is drift. A write of unknown outcome is settled
    here: found applied, it is counted as written; not found, it moves to ``result.failed``. Only
    the touched accounts are read: by the service's account filter when there are fewer of them
    than pages of the whole List, otherwise (or when the service ignores the filter) by one read
    of the whole List.
    """
    settled = result.written.keys() | result.unknown.keys()

    def items() -> Iterator[tuple[str, PlannedAdd | PlannedPatch | PlannedDelete]]:
        # Made again for each pass rather than held: a large plan's writes are many objects.
        return ((kind, item) for kind, item in _planned(plan) if item_key(item) in settled)

    verification = PeopleVerification()
    wanted: dict[str, set[str]] = {}
    for _, item in items():
        wanted.setdefault(item.account_domain, set()).update(looked_up_keys(item))
    if not wanted:
        return verification
    wait_for_late_writes(client, result.settle_after if result.unknown else None)
    listed, verification.filter = read_accounts(
        client, table_id, sorted(wanted), page_size, plan.current_people
    )
    index = people_index(listed, wanted)  # only the people the items look for are kept
    for kind, item in items():
        key = item_key(item)
        problem = difference(item, index.get(item.account_domain, {}))
        if key in result.unknown:
            _written_kind, reason = result.unknown.pop(key)
            if problem is None:
                result.count(kind, 1)
                verification.verified += 1
            else:
                result.failed[key] = f"outcome unknown ({reason}), and the List does not show it applied"
        elif problem is None:
            verification.verified += 1
        else:
            verification.drift.append(f"{kind} of {key}: {problem}")
    return verification


def _planned(plan: PeoplePlan) -> Iterator[tuple[str, PlannedAdd | PlannedPatch | PlannedDelete]]:
    yield from (("add", add) for add in plan.adds)
    yield from (("patch", patch) for patch in plan.patches)
    yield from (("delete", delete) for delete in [*plan.repairs, *plan.deletes])
