"""The provider as Airflow sees it: provider info, entry point, and the CLI."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import listsync
from listsync import get_provider_info

AIRFLOW = Path(sys.executable).with_name("airflow")


def declared_modules() -> list[str]:
    info = get_provider_info()
    return [
        module
        for section in ("hooks", "operators", "triggers")
        for entry in info.get(section, [])
        for module in entry["python-modules"]
    ]


def test_provider_info_is_valid_against_airflows_schema():
    import jsonschema

    schema_path = Path(importlib.import_module("airflow").__file__).with_name("provider_info.schema.json")
    jsonschema.validate(get_provider_info(), json.loads(schema_path.read_text()))
    assert get_provider_info()["versions"] == [listsync.__version__]


@pytest.mark.parametrize("module", declared_modules())
def test_every_declared_module_imports(module):
    importlib.import_module(module)


def test_every_declared_notifier_is_a_notifier():
    from airflow.sdk import BaseNotifier

    for path in get_provider_info()["notifications"]:
        module, _, name = path.rpartition(".")
        assert issubclass(getattr(importlib.import_module(module), name), BaseNotifier)


def test_connection_type_names_an_importable_hook():
    (conn_type,) = get_provider_info()["connection-types"]
    module, _, name = conn_type["hook-class-name"].rpartition(".")
    hook = getattr(importlib.import_module(module), name)
    assert hook.conn_type == conn_type["connection-type"] == "listsync"
    assert module in declared_modules()


def test_entry_point_is_registered():
    (entry,) = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("listsync")]
    assert entry.load() is get_provider_info


def test_airflow_sees_the_provider_and_its_connection_type(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    listed = subprocess.run(
        [str(AIRFLOW), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    providers = {item["package_name"]: item for item in json.loads(listed.stdout[listed.stdout.index("[") :])}
    assert providers["airflow-provider-listsync"]["version"] == listsync.__version__

    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook = ProvidersManagerTaskRuntime().hooks["listsync"]
    assert hook is not None
    assert hook.hook_class_name == "listsync.hooks.listsync.ListSyncHook"
    assert hook.connection_testable is True
    manager = ProvidersManager()
    assert manager.field_behaviours["listsync"]["relabeling"] == {"host": "Base URL", "password": "API key"}
    assert manager.connection_form_widgets["extra__listsync__user_id"].field["schema"]["title"] == "User ID"


def test_airflow_normalises_listsync_asset_uris_with_the_providers_handler():
    from airflow.sdk import Asset
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    from listsync.assets import convert_asset_to_openlineage, sanitize_uri

    # Airflow 3.3 reads Asset URI handlers from the task runtime's providers manager (those of
    # the core ProvidersManager are deprecated).
    manager = ProvidersManagerTaskRuntime()
    assert manager.asset_uri_handlers["listsync"] is sanitize_uri
    assert manager.asset_to_openlineage_converters["listsync"] is convert_asset_to_openlineage

    assert Asset("LISTSYNC://API.Example.com/tbl_accounts/").uri == "listsync://api.example.com/tbl_accounts"
    assert Asset("listsync://127.0.0.1:8080/tbl_accounts").uri == "listsync://127.0.0.1:8080/tbl_accounts"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("listsync://tbl_accounts", "path is one List id, got '/'"),
        ("listsync:///tbl_accounts", "must name the service's host"),
        ("listsync://api.example.com/lists/tbl_accounts", "path is one List id, got '/lists/tbl_accounts'"),
        ("listsync://listsync_default@api.example.com/tbl_accounts", "names the service, not a user"),
        ("listsync://api.example.com/tbl_accounts?view=all", "takes no query"),
    ],
)
def test_a_listsync_asset_uri_that_names_no_list_is_refused(uri, message):
    from airflow.sdk import Asset

    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        Asset(uri)

    assert "listsync://<service host>/<table_id>" in str(refused.value)


@pytest.mark.parametrize(
    ("package", "names"),
    [
        (
            "listsync.operators",
            [
                "IngestSignalsOperator",
                "SplitPeopleOperator",
                "SyncTargetablePeopleOperator",
                "UpsertRowsOperator",
            ],
        ),
        ("listsync.hooks", ["ListSyncHook"]),
        ("listsync.triggers", ["RateLimitWindowTrigger"]),
    ],
)
def test_each_airflow_package_exports_what_users_need(package, names):
    module = importlib.import_module(package)

    assert sorted(module.__all__) == names
    for name in names:
        exported = getattr(module, name)
        assert exported.__name__ == name
        assert exported.__module__.startswith(f"{package}.")


def test_importing_the_operators_package_loads_no_operator():
    code = (
        "import sys, listsync.operators; "
        "print(sorted(m for m in sys.modules if m.startswith(('pandas', 'listsync.operators.'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )

    assert loaded.stdout.strip() == "[]"
