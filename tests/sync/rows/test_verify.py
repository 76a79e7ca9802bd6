"""The rows read back against the emulator: added rows whose ids are not known are found by key."""

from __future__ import annotations

from pytest_mock import MockerFixture

from listsync.sync.rows import ApplyOutcome, RowAddition, RowsPlan, list_key_normalizer, verify

from ...support import LiveEmulator
from ...support.tenants import ROWS_TABLE as TABLE

ADDED = ("a.com", "b.com", "c.com")


def test_added_rows_without_ids_are_found_in_one_read_of_the_list_which_keeps_only_theirs(
    emulator: LiveEmulator, mocker: MockerFixture
) -> None:
    emulator.seed(
        TABLE, *({"domain": domain, "name": domain} for domain in (*ADDED, "other.com", "else.org"))
    )
    plan = RowsPlan(
        key_column="domain",
        list_rows=0,
        additions=[RowAddition(domain, {"domain": domain, "name": domain}) for domain in ADDED],
    )
    outcome = ApplyOutcome(rows_added=list(ADDED))  # the service returned no ids
    reads = mocker.spy(verify, "read_current_rows")

    with emulator.client() as client:
        verification = verify.verify_rows(plan, outcome, client, TABLE, list_key_normalizer("domain"))

    assert (verification.verified, verification.drift, verification.unconfirmed) == (3, {}, {})
    kept, _requests = reads.spy_return
    assert sorted(row.cells["domain"] for row in kept) == list(ADDED)
