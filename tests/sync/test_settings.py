"""``SyncSettings``: the settings both List syncs share, their defaults and their checks."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import pytest

from listsync.sync.settings import VERIFY_TIMEOUT, VISIBILITY_WINDOW, SyncSettings


def test_the_defaults_are_a_plain_upsert_that_fails_on_error() -> None:
    defaults = {field.name: getattr(SyncSettings(), field.name) for field in fields(SyncSettings)}

    assert defaults == {
        "max_delete_fraction": 0.1,
        "overwrite_with_null": False,
        "dry_run": False,
        "fail_on_error": True,
        "rejects_path": None,
        "plan_path": None,
        "max_reject_fraction": 1.0,
        "shard": None,
        "max_memory": "auto",
        "state_path": None,
        "fresh_state": False,
        "verify_timeout": VERIFY_TIMEOUT,
        "visibility_window": VISIBILITY_WINDOW,
        "approved_plan": None,
        "max_plan_age": 24 * 3600,
        "lock_timeout": 1800.0,
        "lease_expiry": 60.0,
        "lease_holder": None,
        "lease_location": None,
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_delete_fraction": 1.5}, "max_delete_fraction must be between 0 and 1, got 1.5"),
        ({"max_plan_age": -1}, "max_plan_age must be a number of seconds"),
        ({"lock_timeout": -1}, "lock_timeout must be a number of seconds"),
        ({"lease_expiry": 0}, "lease_expiry must be more than 0 seconds"),
        ({"approved_plan": "plan.jsonl", "dry_run": True}, "approved_plan applies a reviewed plan"),
        ({"max_delete_fraction": -0.1}, "max_delete_fraction must be between 0 and 1, got -0.1"),
        ({"max_reject_fraction": math.nan}, "max_reject_fraction must be between 0 and 1, got nan"),
        ({"max_reject_fraction": "0.5"}, "max_reject_fraction must be between 0 and 1, got '0.5'"),
        (
            {"shard": "2/2"},
            'shard must be "i/n" with 0 <= i < n, such as "0/4" (the first of four); got \'2/2\'',
        ),
        ({"max_memory": "lots"}, 'max_memory must be a number of bytes or a size such as "2GiB"'),
        ({"verify_timeout": -1}, "verify_timeout must be a number of seconds, 0 or more; got -1"),
        ({"visibility_window": True}, "visibility_window must be a number of seconds, 0 or more; got True"),
    ],
)
def test_a_wrong_value_fails_as_the_settings_are_made(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        SyncSettings(**settings)

    assert str(refused.value).startswith(message)


def test_the_limits_themselves_are_allowed() -> None:
    SyncSettings(max_delete_fraction=0, max_reject_fraction=1, verify_timeout=0, visibility_window=0)


def test_auto_memory_is_left_to_where_the_sync_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import listsync.sync.settings as settings

    def machine_memory() -> int:
        raise AssertionError("worked out as the settings were made")

    monkeypatch.setattr(settings, "default_max_memory", machine_memory)

    assert SyncSettings().max_memory == "auto"
