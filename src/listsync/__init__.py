"""Apache Airflow provider for the Signal Ingestion and List Write service."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("airflow-provider-listsync")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"


CONNECTION_FORM_FIELDS: dict[str, dict[str, Any]] = {
    "user_id": {
        "label": "User ID",
        "description": "The service user to act as on List requests (userId), e.g. usr_123.",
        "schema": {"type": ["string", "null"]},
    },
    "timeout": {
        "label": "Timeout (seconds)",
        "description": "Seconds to wait for each request.",
        "schema": {"type": ["number", "null"], "default": 30},
    },
}
"""Extra fields of the ``listsync`` connection form (``conn-fields``)."""

CONNECTION_FORM_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port", "login"],
    "relabeling": {"host": "Base URL", "password": "API key"},
    "placeholders": {"host": "https://api.example.com", "password": "sk_..."},
}
"""Standard fields of the ``listsync`` connection form (``ui-field-behaviour``)."""


def get_provider_info() -> dict[str, Any]:
    """Describe the provider to Airflow (the ``apache_airflow_provider`` entry point)."""
    return {
        "package-name": "airflow-provider-listsync",
        "name": "ListSync",
        "description": "Sync CRM and warehouse extracts into account-based Lists and backfill signal events.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "ListSync",
                "external-doc-url": "https://github.com/listsync/airflow-provider-listsync",
                "tags": ["service"],
            }
        ],
        "hooks": [{"integration-name": "ListSync", "python-modules": ["listsync.hooks.listsync"]}],
        "operators": [
            {
                "integration-name": "ListSync",
                "python-modules": [
                    "listsync.operators.signals",
                    "listsync.operators.people",
                    "listsync.operators.rows",
                ],
            }
        ],
        "triggers": [{"integration-name": "ListSync", "python-modules": ["listsync.triggers.rate_limit"]}],
        "notifications": ["listsync.notifications.SyncNotifier"],
        # listsync://<service host>/<table_id> names a List (see listsync.assets).
        "asset-uris": [
            {
                "schemes": ["listsync"],
                "handler": "listsync.assets.sanitize_uri",
                "to_openlineage_converter": "listsync.assets.convert_asset_to_openlineage",
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "listsync.hooks.listsync.ListSyncHook",
                "hook-name": "ListSync",
                "connection-type": "listsync",
                "conn-fields": CONNECTION_FORM_FIELDS,
                "ui-field-behaviour": CONNECTION_FORM_BEHAVIOUR,
            }
        ],
    }
