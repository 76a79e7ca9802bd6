"""The rows endpoints of a List: POST rows, PATCH cells and DELETE rows (spec §4.7–4.9), each cell
checked against its column's type, kept in the profile's canonical forms, and unique account
domains kept (A23), and GET rows in its documented modes (A22, A27). The common ground of the List
endpoints is :mod:`~listsync.emulator.lists`'s."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime
from operator import ge, gt, le, lt
from typing import Any

from listsync.emulator.config import ColumnConfig
from listsync.emulator.lists import ListOperations
from listsync.emulator.people_endpoints import canonical_url
from listsync.emulator.request_checks import bad_request, body_array, body_object, int_param
from listsync.emulator.store import ApiError, ListState, Row, normalize_domain
from listsync.emulator.windows import iso_utc

OPERATORS = frozenset(
    (
        "eq",
        "not_eq",
        "contains",
        "not_contains",
        "like",
        "starts_with",
        "ends_with",
        "gt",
        "gte",
        "lt",
        "lte",
        "is_empty",
        "is_not_empty",
    )
)


def _check_value(column: ColumnConfig, value: object, path: str) -> object:
    """A cell value valid for the column's type, as stored (an enum label becomes its key)."""
    if value is None:
        return None
    kind = column.type
    if kind == "text" and not isinstance(value, str):
        raise bad_request(f"{path} must be a string")
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise bad_request(f"{path} must be a number")
    if kind == "boolean" and not isinstance(value, bool):
        raise bad_request(f"{path} must be a boolean")
    if kind == "date" and not (isinstance(value, str) and _is_iso_date(value)):
        raise bad_request(f"{path} must be an ISO 8601 date")
    if kind == "enum":
        for option in column.options:
            if value in (option.key, option.label):
                return option.key
        raise bad_request(f"{path} must be one of {', '.join(o.key for o in column.options)}")
    return value


_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_WEB_URL = re.compile(r"https?://\S+", re.IGNORECASE)


def canonical_cell(value: object, forms: frozenset[str]) -> object:
    """A checked cell value in the profile's ``canonical_forms``: text with its runs of white space
    made one space and its ends trimmed (``whitespace``), an e-mail address in lower case
    (``email_case``), an http(s) URL in the ``url`` form (:func:`canonical_url`); a number as a
    floating-point one (``number``: ``10`` is kept, and read, as ``10.0``)."""
    if isinstance(value, str):
        if "whitespace" in forms:
            value = " ".join(value.split())
        if "email_case" in forms and _EMAIL.fullmatch(value.strip()):
            value = value.lower()
        if "url" in forms and _WEB_URL.fullmatch(value.strip()):
            value = canonical_url(value)
    elif "number" in forms and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return value


def _is_iso_date(value: str) -> bool:
    try:
        if len(value) == 10:
            date.fromisoformat(value)
        else:
            datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    except ValueError:
        return False
    return True


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _is_empty(value: object) -> bool:
    return value is None or value in ("", [], {})


_LIKE_WILDCARDS = {"%": ".*", "_": "."}
_ORDERINGS: dict[str, Callable[[Any, Any], bool]] = {"gt": gt, "gte": ge, "lt": lt, "lte": le}


def _like(pattern: str) -> re.Pattern[str]:
    """SQL LIKE: ``%`` any run, ``_`` one character; without wildcards an exact match."""
    parts = (_LIKE_WILDCARDS.get(c) or re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def _row_filter(column: ColumnConfig, operator: str, query: str | None) -> Callable[[object], bool]:
    """A predicate on a cell value for the documented GET rows filter mode.

    Text comparisons ignore case; on a number column the ordering operators and ``eq`` compare
    numbers; on an enum column ``eq`` matches an option's key or label (public docs).
    """
    if operator in ("is_empty", "is_not_empty"):
        wanted_empty = operator == "is_empty"
        return lambda value: _is_empty(value) is wanted_empty
    if query is None:
        raise bad_request(f"query is required for operator {operator}")
    if operator in _ORDERINGS:
        ordered = _ORDERINGS[operator]
        if column.type != "number":
            return lambda value: not _is_empty(value) and ordered(_text(value), query)
        try:
            bound = float(query)
        except ValueError:
            raise bad_request(f"query must be a number for column {column.id}") from None
        return lambda value: isinstance(value, (int, float)) and ordered(float(value), bound)
    wanted = query.lower()
    # not_eq and not_contains are the negations of eq and contains.
    positive = operator.removeprefix("not_")
    test: Callable[[object], bool]
    if positive == "eq" and column.type == "enum":
        keys = {o.key for o in column.options if wanted in (o.key.lower(), o.label.lower())}

        def test(value: object) -> bool:
            return value in keys

    elif positive == "eq" and column.type == "number":

        def test(value: object) -> bool:
            return _number_equals(value, query)

    elif positive == "like":
        pattern = _like(query)

        def test(value: object) -> bool:
            return not _is_empty(value) and pattern.fullmatch(_text(value)) is not None

    else:
        text_tests: dict[str, Callable[[str], bool]] = {
            "eq": lambda text: text == wanted,
            "contains": lambda text: wanted in text,
            "starts_with": lambda text: text.startswith(wanted),
            "ends_with": lambda text: text.endswith(wanted),
        }
        text_test = text_tests[positive]

        def test(value: object) -> bool:
            return not _is_empty(value) and text_test(_text(value).lower())

    return (lambda value: not test(value)) if positive != operator else test


def _number_equals(value: object, query: str) -> bool:
    try:
        return isinstance(value, (int, float)) and float(value) == float(query)
    except ValueError:
        return False


class RowsEndpoints:
    """The rows and cells endpoints of the Lists :class:`~listsync.emulator.lists.ListOperations`
    finds: add rows, update cells, delete rows, and GET rows."""

    def __init__(self, lists: ListOperations) -> None:
        self._lists = lists
        self._dialect = lists.dialect
        self._caps = lists.dialect.caps
        self._forms = lists.dialect.canonical_forms

    def _kept(self, column: ColumnConfig, value: object, path: str) -> object:
        """A cell value checked against its column (:func:`_check_value`) and in the profile's
        canonical forms; an enum's key and a date are kept as checked."""
        checked = _check_value(column, value, path)
        return canonical_cell(checked, self._forms) if column.type in ("text", "number") else checked

    def _refuse_missing_rows(self, lst: ListState, row_ids: Iterable[str]) -> None:
        """``404 Rows not found: <ids>`` (A20; also DELETE rows when ``missing_row_delete`` is
        ``404``), or ``404 No such row(s): <ids>`` when ``refusal_wording`` is ``other``."""
        missing = [row_id for row_id in row_ids if row_id not in lst.rows]
        if missing:
            prefix = "No such row(s)" if self._lists.other_wording else "Rows not found"
            raise ApiError(404, f"{prefix}: {', '.join(dict.fromkeys(missing))}")

    def _check_unique(self, lst: ListState, final_cells: Mapping[str, Mapping[str, Any]]) -> None:
        """A23: refuse a change that leaves two rows with one domain on a unique account column.

        ``final_cells`` maps the ids of new or changed rows to their cells after the change.
        """
        column = lst.config.account_column
        if column is None or not lst.config.unique_domains:
            return
        owners: dict[str, str] = {}
        for row in lst.rows.values():
            if row.id not in final_cells and not _is_empty(row.cells.get(column)):
                owners[normalize_domain(row.cells[column])] = row.id
        for row_id, cells in final_cells.items():
            value = cells.get(column)
            if _is_empty(value):
                continue
            domain = normalize_domain(value)
            if owners.setdefault(domain, row_id) != row_id:
                raise ApiError(409, f"Duplicate value for unique column {column}: {value}")

    def _column(self, lst: ListState, column_id: object) -> ColumnConfig:
        column = lst.columns.get(column_id) if isinstance(column_id, str) else None
        if column is None:
            raise bad_request(f"Column not found: {column_id}")
        return column

    def add_rows(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST rows: new rows with ids ``row_<n>``, returned in request order (A18)."""
        new_rows: dict[str, dict[str, Any]] = {}
        for index, raw in enumerate(body_array(body, "rows", self._caps["rows"])):
            cells = body_object(body_object(raw, f"rows[{index}]").get("cells"), f"rows[{index}].cells")
            checked = {
                column_id: self._kept(self._column(lst, column_id), value, f"rows[{index}].cells.{column_id}")
                for column_id, value in cells.items()
            }
            # Ids are drawn only once the request is known to be valid (placeholder keys until then).
            new_rows[f"\0{index}"] = checked
        self._check_unique(lst, new_rows)
        stamp = iso_utc(self._lists.clock())
        added = []
        for cells in new_rows.values():
            row = Row(self._lists.state.new_row_id(), cells, stamp)
            lst.rows[row.id] = row
            added.append({"id": row.id, "cells": cells})
        lst.changed()
        return {"rows": added, "added": len(added)}

    def update_cells(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, int]:
        """PATCH cells: all updates or none (A20, A23)."""
        updates = body_array(body, "updates", self._caps["updates"])
        for index, raw in enumerate(updates):
            update = body_object(raw, f"updates[{index}]")
            for name in ("rowId", "columnId"):
                if not isinstance(update.get(name), str):
                    raise bad_request(f"updates[{index}].{name} is required")
            if "value" not in update:
                raise bad_request(f"updates[{index}].value is required")
        self._refuse_missing_rows(lst, (u["rowId"] for u in updates))
        final: dict[str, dict[str, Any]] = {}
        for index, update in enumerate(updates):
            column = self._column(lst, update["columnId"])
            value = self._kept(column, update["value"], f"updates[{index}].value")
            final.setdefault(update["rowId"], dict(lst.rows[update["rowId"]].cells))[column.id] = value
        self._check_unique(lst, final)
        stamp = iso_utc(self._lists.clock())
        for row_id, cells in final.items():
            row = lst.rows[row_id]
            row.cells = cells
            row.updated_at = stamp
        lst.changed()
        return {"updated": len(updates)}

    def delete_rows(self, lst: ListState, body: Mapping[str, Any]) -> dict[str, Any]:
        """DELETE rows: a missing id is listed in ``notFound``, not an error (A19), or, when the
        profile's ``missing_row_delete`` is ``404``, refuses the whole request."""
        row_ids = body_array(body, "rowIds", self._caps["row_deletes"])
        if not all(isinstance(r, str) for r in row_ids):
            raise bad_request("rowIds must be an array of strings")
        if self._dialect.missing_row_delete == "404":
            self._refuse_missing_rows(lst, row_ids)
        deleted = 0
        not_found = []
        for row_id in dict.fromkeys(row_ids):
            if lst.rows.pop(row_id, None) is None:
                not_found.append(row_id)
            else:
                deleted += 1
        lst.changed()
        return {"deleted": deleted, "notFound": not_found}

    def get_rows(self, lst: ListState, params: Mapping[str, str]) -> dict[str, Any]:
        """GET rows in the three documented modes, or all rows paged (A22)."""
        lst = self._lists.visible(lst)
        limit = self._lists.page_size(params)
        offset = int_param(params, "offset", 0, 0, None)
        matched: list[Row]
        if "rowIds" in params:
            wanted = [r for r in params["rowIds"].split(",") if r]
            matched = [lst.rows[r] for r in dict.fromkeys(wanted) if r in lst.rows]
            # A27: the rows asked for, all of them; paging belongs to the filter mode (and A22).
            limit, offset = max(len(matched), 1), 0
        elif "index" in params:
            index = int_param(params, "index", 0, 0, None)
            rows = list(lst.rows.values())
            matched = rows[index : index + 1]
        elif "columnId" in params:
            column = self._column(lst, params["columnId"])
            operator = params.get("operator", "")
            if operator not in OPERATORS:
                raise bad_request(f"operator must be one of {', '.join(sorted(OPERATORS))}")
            query = params.get("query")
            keep = _row_filter(column, operator, query)
            # Consecutive pages of one filter slice one list rather than filter the whole List again.
            key = (column.id, operator, query)
            cached = lst.row_queries.get(key)
            if cached is None:
                cached = [row for row in lst.rows.values() if keep(row.cells.get(column.id))]
                if len(lst.row_queries) > 32:
                    lst.row_queries.clear()
                lst.row_queries[key] = cached
            matched = cached
        else:
            matched = list(lst.rows.values())
        page = matched[offset : offset + limit]
        return {
            "rows": [self._read_row(lst, row) for row in page],
            "totalMatched": len(matched),
            "returned": len(page),
            "truncated": offset + len(page) < len(matched),
        }

    @staticmethod
    def _read_row(lst: ListState, row: Row) -> dict[str, Any]:
        cells = {}
        for column_id, value in row.cells.items():
            column = lst.columns[column_id]
            computed = value
            if column.type == "enum":
                computed = next((o.label for o in column.options if o.key == value), value)
            cells[column_id] = {
                "columnId": column_id,
                "rowId": row.id,
                "value": value,
                "computedValue": computed,
                "status": "completed",
            }
        return {"id": row.id, "tableId": lst.id, "updated_at": row.updated_at, "cells": cells}
