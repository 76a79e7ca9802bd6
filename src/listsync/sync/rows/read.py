"""Reading a List's rows: every row, page by page, and keys as the List holds them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from listsync.client.models import Row
from listsync.client.paging import iter_offset_pages
from listsync.sync.rows.plan import CurrentRow

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient
    from listsync.sync.options import Shard


#: Rows per GET rows page: the largest page the service allows (A22), so a read costs least.
ROWS_PAGE_SIZE = 1000


def read_current_rows(
    client: ListSyncClient,
    table_id: str,
    key_column: str,
    *,
    page_size: int = ROWS_PAGE_SIZE,
    keep: Callable[[CurrentRow], bool] | None = None,
    counted: Callable[[Iterator[CurrentRow]], Iterable[CurrentRow]] | None = None,
) -> tuple[list[CurrentRow], int]:
    """Read every List row whose ``key_column`` cell is not empty, page by page.

    Uses the documented filter mode (``columnId=<key_column>&operator=is_not_empty``), so it does
    not depend on how the service pages a List without a filter. Rows without a key cannot be
    matched to the extract and are not read.

    :param keep: keep only the rows it accepts (e.g. :func:`in_shard`), page by page, so that the
        rows left out are never all held at once.
    :param counted: passes the rows kept on as they are read, e.g.
        :meth:`~listsync.sync.memory.MemoryGuard.count_list`, which fails before the next page
        when they would take too much memory.
    :return: the rows (cells' ``value``, never ``computedValue``) and the GET requests sent.
    """
    requests = 0

    def fetch(offset: int) -> tuple[list[Row], bool | None, int | None]:
        nonlocal requests
        requests += 1
        page = client.get_rows(
            table_id, column_id=key_column, operator="is_not_empty", limit=page_size, offset=offset
        )
        return page.rows, page.more, page.total

    rows = (current_row(row) for row in iter_offset_pages(fetch, what=f"rows of {table_id}"))
    kept = (row for row in rows if keep is None or keep(row))
    return list(kept if counted is None else counted(kept)), requests


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
    from listsync.sync.normalize import NormalizationError, normalize_domain, normalize_text

    rule = normalize_domain if key_kind == "domain" else normalize_text

    def normalize(value: Any) -> str | None:
        if value is None or value == "":
            return None
        try:
            return rule(value)
        except NormalizationError:
            return str(value)

    return normalize


def in_shard(
    key_column: str, normalize_key: Callable[[Any], str | None], shard: Shard
) -> Callable[[CurrentRow], bool]:
    """The ``keep`` of :func:`read_current_rows` for ``shard``: whether a List row's key, normalised
    like the extract's (:func:`list_key_normalizer`), is in it. Each distinct key is hashed once;
    rows sharing a key land in one shard."""
    held: dict[str, bool] = {}

    def keep(row: CurrentRow) -> bool:
        key = normalize_key(row.cells.get(key_column)) or ""
        kept = held.get(key)
        if kept is None:
            kept = held[key] = shard.holds(key)
        return kept

    return keep
