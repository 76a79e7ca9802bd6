"""Reading a List's rows: every row, page by page, and keys as the List holds them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pandas as pd

from listsync.client.models import Row, RowsPage
from listsync.client.paging import ReadWatch, iter_offset_pages
from listsync.sync.rows.list_rows import CurrentRow, ListColumn, ListRows
from listsync.sync.rows.prepare import object_array

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient
    from listsync.extract.options import Shard


#: Rows per GET rows page: the largest page the service allows (A22), so a read costs least.
ROWS_PAGE_SIZE = 1000


class _KeyedRows:
    """Every List row whose key cell is not empty, page by page (GET rows in the documented
    filter mode, ``columnId=<key_column>&operator=is_not_empty``, so the read does not depend
    on how the service pages a List without a filter), as the JSON objects the service sent;
    ``requests`` counts the GETs sent."""

    def __init__(
        self,
        client: ListSyncClient,
        table_id: str,
        key_column: str,
        page_size: int,
        watch: ReadWatch | None = None,
    ) -> None:
        self.client = client
        self.table_id = table_id
        self.key_column = key_column
        self.page_size = page_size
        self.watch = watch
        self.requests = 0
        self._counting = threading.Lock()  # pages are asked for from several threads at once

    def __iter__(self) -> Iterator[Any]:
        return iter_offset_pages(
            self._fetch,
            what=f"rows of {self.table_id}",
            in_flight=self.client.max_in_flight,
            watch=self.watch,
        )

    def _fetch(self, offset: int) -> tuple[list[Any], bool | None, int | None]:
        with self._counting:
            self.requests += 1
        rows, page = self._page(
            column_id=self.key_column, operator="is_not_empty", limit=self.page_size, offset=offset
        )
        return rows, page.more, page.total

    def _page(self, **query: Any) -> tuple[list[Any], RowsPage]:
        return self.client.get_row_records(self.table_id, **query)


class _KeyedRowModels(_KeyedRows):
    """:class:`_KeyedRows` as :class:`Row` models."""

    def _page(self, **query: Any) -> tuple[list[Any], RowsPage]:
        page = self.client.get_rows(self.table_id, **query)
        return page.rows, page


def read_current_rows(
    client: ListSyncClient,
    table_id: str,
    key_column: str,
    *,
    page_size: int = ROWS_PAGE_SIZE,
    keep: Callable[[CurrentRow], bool] | None = None,
) -> tuple[list[CurrentRow], int]:
    """Read every List row whose ``key_column`` cell is not empty, page by page, as a
    :class:`CurrentRow` each (rows without a key cannot be matched to the extract and are not
    read). The upsert reads into columns instead (:func:`read_list_rows`).

    :param keep: which rows to keep, as they are read (None: all), so that a read for a few rows
        holds those rows, not the List.
    :return: the rows (cells' ``value``, never ``computedValue``) and the GET requests sent.
    """
    read = _KeyedRowModels(client, table_id, key_column, page_size)
    rows = (current_row(row) for row in read)
    return [row for row in rows if keep is None or keep(row)], read.requests


def current_row(row: Row) -> CurrentRow:
    shown = {
        column: cell.computed_value
        for column, cell in row.cells.items()
        if cell.computed_value is not None and cell.computed_value != cell.value
    }
    return CurrentRow(row.id, {column: cell.value for column, cell in row.cells.items()}, shown)


def list_key_normalizer(key_kind: str) -> Callable[[Any], str | None]:
    """How a List key cell is normalised to meet keys prepared with ``key_kind`` (see ``prepare_rows``).

    A cell the rule refuses keeps its text: it then matches no extract key, which is what it is.
    """
    from listsync.extract.contact_rules import normalize_domain
    from listsync.extract.text_rules import NormalizationError, normalize_text

    rule = normalize_domain if key_kind == "domain" else normalize_text

    def normalize(value: Any) -> str | None:
        if value is None or value == "":
            return None
        try:
            return rule(value)
        except NormalizationError:
            return str(value)

    return normalize


def list_keys(values: list[Any], key_kind: str) -> list[str | None]:
    """:func:`list_key_normalizer` of each value, over a whole column at once."""
    from listsync.extract.contact_rules import normalize_domain
    from listsync.extract.normalize import normalize_column
    from listsync.extract.text_rules import normalize_text

    rule = normalize_domain if key_kind == "domain" else normalize_text
    result = normalize_column(pd.Series(object_array(values, len(values)), dtype=object), rule)
    return [
        key if key is not None else None if value is None or value == "" else str(value)
        for key, value in zip(result.values, values, strict=True)
    ]


def read_list_rows(
    client: ListSyncClient,
    table_id: str,
    key_column: str,
    columns: Iterable[str],
    *,
    key_kind: str,
    shard: Shard | None = None,
    counted: Callable[[Iterator[int]], Iterable[int]] | None = None,
    page_size: int = ROWS_PAGE_SIZE,
    watch: ReadWatch | None = None,
) -> tuple[ListRows, int]:
    """Read every List row whose ``key_column`` cell is not empty, page by page, into columns.

    Only ``columns`` (and the key, normalised per ``key_kind`` by :func:`list_keys`) are kept,
    page by page: a page's rows are held as the service sent them only until their cells are taken.

    :param shard: keep only the rows whose normalised key is in this shard (each distinct key
        of a page is hashed once).
    :param counted: passes one item per row kept, as they are kept, e.g.
        :meth:`~listsync.sync.memory.MemoryGuard.count_list`, which fails before the next page
        when they would take too much memory.
    :param watch: notes the List moving under the read (:class:`~listsync.client.paging.ReadWatch`).
    :return: the rows and the GET requests sent.
    """
    read = _KeyedRows(client, table_id, key_column, page_size, watch)
    wanted = list(dict.fromkeys(columns))
    table = ListRows([], [], {column: ListColumn() for column in wanted})
    page: list[dict[str, Any]] = []

    def take(rows: list[dict[str, Any]]) -> None:
        cells = [row.get("cells", {}) for row in rows]
        keys = list_keys([_value(row_cells.get(key_column)) for row_cells in cells], key_kind)
        kept: Iterable[int] = range(len(rows))
        if shard is not None:
            # Keys are remembered for a page only: a List's keys are mostly distinct, and
            # remembering them all would hold every key of the List.
            held = {key: shard.holds(key) for key in {key or "" for key in keys}}
            kept = [index for index, key in enumerate(keys) if held[key or ""]]
        if counted is not None:
            kept = list(counted(iter(kept)))
        table.row_ids.extend(rows[index]["id"] for index in kept)
        table.keys.extend(keys[index] for index in kept)
        for column in wanted:
            table.cells[column].append([_value(cells[index].get(column)) for index in kept])

    for row in read:
        page.append(row)
        if len(page) == page_size:
            take(page)
            page = []
    if page:
        take(page)
    return table, read.requests


def _value(cell: Any) -> Any:
    """A cell's value: the ``value`` of an object holding one (``computedValue`` beside it), else
    the cell itself (a bare value, the shape cells are written in), as :class:`Row` reads it."""
    return cell["value"] if isinstance(cell, dict) and "value" in cell else cell
