"""The emulator's data: Lists (rows, cells, targetable people per row) and ingested events.

Targetable people hang off the row whose targetable-account cell holds their account domain;
each row keeps its people in insertion order, so paging through them is stable. The whole state
can be written to and read back from a JSON file (``EmulatorConfig.state_file``).
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from listsync.emulator.config import ColumnConfig, EmulatorConfig, ListConfig

Person = dict[str, Any]


class ApiError(Exception):
    """A refusal the emulator answers with ``{"success": false, "error": message}``."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def normalize_domain(value: object) -> str:
    """The form in which account domains are compared: trimmed, lower case, without ``www.``."""
    domain = str(value).strip().lower()
    return domain[4:] if domain.startswith("www.") else domain


@dataclass
class Row:
    id: str
    cells: dict[str, Any]
    updated_at: str
    people: list[Person] = field(default_factory=list)


class ListState:
    """One List: its rows in insertion order, and an index from account domain to row."""

    def __init__(self, config: ListConfig) -> None:
        self.config = config
        self.columns: dict[str, ColumnConfig] = {c.id: c for c in config.columns}
        self.rows: dict[str, Row] = {}
        self._rows_by_domain: dict[str, Row] = {}
        # Filters of recent GET targetable-people queries -> the (row, person) pairs they match,
        # so consecutive pages slice one list instead of filtering the whole List again. Any
        # change empties it; it lives and dies with this List, so a reset never serves old pages.
        self.people_queries: dict[tuple[object, ...], list[tuple[Row, Person]]] = {}
        # Likewise for GET rows in filter mode: (column id, operator, query) -> the rows matched.
        self.row_queries: dict[tuple[str, str, str | None], list[Row]] = {}
        # Only under a profile's lag_seconds: (when a write was answered, a copy of the List as it
        # left it), oldest first; a first entry at -inf is the List before the first of them.
        self.history: list[tuple[float, ListState]] = []

    @property
    def id(self) -> str:
        return self.config.id

    def account_domain(self, row: Row) -> str | None:
        column = self.config.account_column
        value = row.cells.get(column) if column else None
        return None if value in (None, "") else str(value)

    def row_for_domain(self, domain: str) -> Row | None:
        return self._rows_by_domain.get(normalize_domain(domain))

    def changed(self) -> None:
        """Call after any change to rows, cells or people."""
        self.people_queries.clear()
        self.row_queries.clear()
        index: dict[str, Row] = {}
        for row in self.rows.values():
            domain = self.account_domain(row)
            # Without unique domains, people attach to the first row holding the domain.
            if domain is not None:
                index.setdefault(normalize_domain(domain), row)
        self._rows_by_domain = index

    def people_changed(self) -> None:
        """Cheaper than :meth:`changed` when only people moved: the domain index still holds."""
        self.people_queries.clear()

    def copy(self) -> ListState:
        """A copy of the rows, cells and people that later writes leave alone (for lag_seconds)."""
        twin = ListState(self.config)
        twin.rows = {
            row.id: Row(row.id, copy.deepcopy(row.cells), row.updated_at, copy.deepcopy(row.people))
            for row in self.rows.values()
        }
        twin.changed()
        return twin

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "rows": [
                {
                    "id": row.id,
                    "cells": row.cells,
                    "updated_at": row.updated_at,
                    "accountDomain": self.account_domain(row),
                    "people": row.people,
                }
                for row in self.rows.values()
            ],
        }


class EmulatorState:
    """All Lists and ingested events of one emulator, plus the counter behind row ids."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.lists: dict[str, ListState] = {}
        self.events: list[dict[str, Any]] = []
        self.next_row_number = 1
        self.clear()

    def clear(self) -> None:
        """Back to the configured starting point: empty Lists, no events."""
        self.lists = {lc.id: ListState(lc) for lc in self.config.lists}
        self.events = []
        self.next_row_number = 1

    def new_row_id(self) -> str:
        row_id = f"row_{self.next_row_number}"
        self.next_row_number += 1
        return row_id

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-ready data (also what ``/_emulator/state`` returns)."""
        return {
            "lists": {table_id: lst.snapshot() for table_id, lst in self.lists.items()},
            "events": self.events,
            "next_row_number": self.next_row_number,
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Load a :meth:`snapshot`; Lists no longer in the config are ignored."""
        self.clear()
        for table_id, saved in data.get("lists", {}).items():
            lst = self.lists.get(table_id)
            if lst is None:
                continue
            for raw in saved["rows"]:
                lst.rows[raw["id"]] = Row(raw["id"], raw["cells"], raw["updated_at"], raw["people"])
            lst.changed()
        self.events = list(data.get("events", []))
        self.next_row_number = int(data.get("next_row_number", 1))

    def save(self, path: str | Path) -> None:
        """Write the state atomically, so a crash mid-write never leaves a torn file."""
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(self.snapshot()), encoding="utf-8")
        os.replace(tmp, target)

    def load(self, path: str | Path) -> None:
        self.restore(json.loads(Path(path).read_text(encoding="utf-8")))
