"""The settings of the List jobs: their declaration, ``SyncSettings``, their defaults and checks, and
the operators' parameters and the command line's options held to the declaration."""

from __future__ import annotations

import argparse
import inspect
import math
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from listsync.sync.settings import (
    JOBS,
    SHARED,
    VERIFY_TIMEOUT,
    VISIBILITY_WINDOW,
    Job,
    SyncSettings,
    settings_of,
)


def test_the_defaults_are_a_plain_upsert_that_fails_on_error() -> None:
    defaults = {field.name: getattr(SyncSettings(), field.name) for field in fields(SyncSettings)}

    assert defaults == {
        "max_delete_fraction": 0.1,
        "overwrite_with_null": False,
        "dry_run": False,
        "fail_on_error": True,
        "rejects_path": None,
        "plan_path": None,
        "outcomes_path": None,
        "report_path": None,
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


# --- every view of a setting is held to its declaration ---------------------------------------

OPERATORS = {"people": "SyncTargetablePeopleOperator", "rows": "UpsertRowsOperator"}
COMMANDS = {"people": "sync-people", "rows": "upsert-rows"}


def one_line(text: str | None) -> str:
    return " ".join((text or "").split())


@pytest.mark.parametrize("job", JOBS)
def test_every_setting_is_an_operator_parameter_with_its_default_and_its_help(job: Job) -> None:
    import listsync.operators

    operator = getattr(listsync.operators, OPERATORS[job])
    parameters: dict[str, inspect.Parameter] = {}
    for cls in reversed(operator.__mro__):
        if "__init__" in vars(cls):
            parameters.update(inspect.signature(cls.__init__).parameters)
    docs = one_line(" ".join(cls.__doc__ or "" for cls in operator.__mro__))

    for setting in settings_of(job).values():
        assert parameters[setting.name].default == setting.default, setting.name
        assert f":param {setting.name}: {one_line(setting.help)}" in docs, setting.name


@pytest.mark.parametrize("job", JOBS)
def test_every_setting_is_a_command_line_option_with_its_default_and_its_help(job: Job) -> None:
    from listsync.cli import build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    options = {action.dest: action for action in commands.choices[COMMANDS[job]]._actions}

    for setting in settings_of(job).values():
        option = options[setting.name]
        assert option.option_strings == [setting.option], setting.name
        # The command line takes chunk sizes as repeated N or KIND=N: none given is the default.
        assert option.default == ([] if setting.name == "chunk_size" else setting.default), setting.name
        assert one_line(setting.help.replace("``", "")) in one_line(option.help), setting.name


def test_every_sync_settings_field_is_a_declared_setting_of_both_jobs() -> None:
    declared = {field.name for field in fields(SyncSettings)} - {"lease_holder", "lease_location"}

    assert declared <= set(SHARED)
    assert {name: getattr(SyncSettings(), name) for name in declared} == {
        name: SHARED[name].default for name in declared
    }


def settings_table() -> str:
    """README's table of the settings both List syncs share, as they are declared."""
    lines = ["| Setting | Default | |", "|---|---|---|"]
    for setting in SHARED.values():
        default = "none" if setting.default is None else f"`{setting.default!r}`"
        lines.append(f"| `{setting.name}` | {default} | {setting.help.replace('``', '`')} |")
    return "\n".join(lines)


def test_the_readme_lists_every_shared_setting_as_declared() -> None:
    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- settings -->\n(.*?)\n<!-- /settings -->", text, re.S)
    assert found, "README.md has no <!-- settings --> block"
    expected = settings_table()
    assert found.group(1) == expected, f"README's settings differ; the block should be:\n{expected}"
