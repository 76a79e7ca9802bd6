"""The tenants the suite serves: a people List with account rows, a rows List of account
columns, and what a test reads back from them (write counts, the people a List holds)."""

from __future__ import annotations

from typing import Any

from listsync.emulator import EmulatorConfig, ListConfig
from listsync.emulator.config import ColumnConfig

from .emulator import LiveEmulator

# --- the people List ----------------------------------------------------------------------

PEOPLE_TABLE = "tbl_people"
PEOPLE_API_KEY = "sk_test_people_secret"
PEOPLE_USER = "usr_people"
#: The account rows ``people_client`` seeds.
ACCOUNTS = ("acme.com", "beta.io", "gamma.org")
PEOPLE_ENDPOINTS = {
    "add": "POST /v1/lists/{tableId}/targetable-people",
    "patch": "PATCH /v1/lists/{tableId}/targetable-people",
    "delete": "DELETE /v1/lists/{tableId}/targetable-people",
}


def people_config() -> EmulatorConfig:
    """A tenant with one people List whose account rows are keyed by ``domain``."""
    return EmulatorConfig(
        secret_keys=[PEOPLE_API_KEY],
        users=[PEOPLE_USER],
        lists=[
            ListConfig(
                id=PEOPLE_TABLE,
                account_column="domain",
                unique_domains=True,
                columns=[ColumnConfig(id="domain"), ColumnConfig(id="name")],
            )
        ],
    )


def people_writes(emulator: LiveEmulator) -> dict[str, int]:
    """Write requests the emulator has answered, by kind (``add``, ``patch``, ``delete``)."""
    return {kind: emulator.stats.requests[endpoint] for kind, endpoint in PEOPLE_ENDPOINTS.items()}


def people_in_list(emulator: LiveEmulator) -> dict[str, list[dict[str, Any]]]:
    """The people List as the emulator holds it: account domain → people."""
    rows = emulator.state.lists[PEOPLE_TABLE].rows.values()
    return {row.cells["domain"]: [dict(person) for person in row.people] for row in rows}


# --- the rows List ------------------------------------------------------------------------

ROWS_SECRET = "sk_rows_test"
ROWS_USER = "usr_rows"
ROWS_TABLE = "tbl_rows_upsert"
ROWS_COLUMNS = [
    {"id": "domain", "type": "text"},
    {"id": "name", "type": "text"},
    {"id": "arr", "type": "number"},
    {
        "id": "plan",
        "type": "enum",
        "options": [
            {"key": "free", "label": "Free"},
            {"key": "team", "label": "Team"},
            {"key": "enterprise", "label": "Enterprise"},
        ],
    },
    {"id": "owner", "type": "text"},
    {"id": "health_score", "type": "number"},
    {"id": "metadata", "type": "json"},
    {"id": "renewal_date", "type": "date"},
    {"id": "last_seen", "type": "date"},
]
#: The endpoints that write rows and cells, as the emulator names them in its counters.
ROW_WRITES = (
    "POST /v1/lists/{tableId}/rows",
    "PATCH /v1/lists/{tableId}/cells",
    "DELETE /v1/lists/{tableId}/rows",
)


def rows_config(*, unique_domains: bool = True) -> EmulatorConfig:
    """A tenant with one rows List; without unique domains the List can hold duplicate keys."""
    table = ListConfig.model_validate(
        {
            "id": ROWS_TABLE,
            "columns": ROWS_COLUMNS,
            "account_column": "domain",
            "unique_domains": unique_domains,
        }
    )
    return EmulatorConfig(secret_keys=[ROWS_SECRET], users=[ROWS_USER], lists=[table])
