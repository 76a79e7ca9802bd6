"""``UpsertRowsOperator``: warehouse rows into a List, writing only the cells that changed."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from listsync.operators.base import ListSyncPlanOperator, holds_template
from listsync.sync.settings import RowsMode, check_rows_mode, rows_chunk_sizes

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["UpsertRowsOperator"]


class UpsertRowsOperator(ListSyncPlanOperator):
    """Make a List's rows match an extract: new keys become rows, changed values cell updates.

    The service has no row upsert; this builds one from GET rows, POST rows, PATCH cells and
    DELETE rows (see :mod:`listsync.sync.rows`). A row is identified by its ``key_column`` cell;
    values compare canonically (``10`` equals ``10.0``, JSON objects whatever their key order), so
    a second run over the same extract sends no write. Row adds whose outcome is unknown (a
    dropped connection) are re-read by key before anything is sent again, so a retry never
    duplicates a row. Returns the JSON summary (to XCom), a
    :class:`~listsync.sync.summary.RowsSummary`.

    It also takes the settings both List syncs share (``dry_run``, ``max_delete_fraction``,
    ``overwrite_with_null``, ``fail_on_error``, ``rejects_path``, ``plan_path``,
    ``max_reject_fraction``, ``shard``, ``max_memory``, ``state_path``, ``fresh_state``,
    ``verify_timeout``, ``visibility_window``) as keyword parameters, each documented once, at
    :class:`~listsync.sync.settings.SyncSettings`; what the operator adds to them (templated
    files and shard, object-storage paths, the asset state store as the state's default home)
    at :class:`~listsync.operators.base.ListSyncPlanOperator`.

    :param table_id: the List's id. (templated)
    :param key_column: the List column id that identifies a row, e.g. ``domain``; one extract
        column must be mapped to it.
    :param column_map: extract column → List column id; only mapped columns are compared and
        written. (templated)
    :param source: the extract file: a local path or an object-storage URI. (templated)
    :param sql: a query giving the extract, run on ``sql_conn_id``. (templated)
    :param sql_conn_id: an Airflow database connection (postgres, sqlite...) for ``sql``.
    :param delete_missing: delete List rows whose key is not in the extract (with ``mode="upsert"``).
    :param mode: ``"upsert"`` (default: add and update), ``"update_only"`` (update the rows the
        List holds, add none: an hourly score refresh that must not create accounts) or
        ``"insert_only"`` (add the rows the List lacks, update none). (templated)
    :param max_delete_fraction: (templated) see :class:`~listsync.sync.settings.SyncSettings`.
    :param dry_run: (templated, as ``is_dry_run``) see :class:`~listsync.sync.settings.SyncSettings`.
    :param chunk_size: items per request: one number for every kind, or a mapping with keys
        ``add_rows``, ``update_cells``, ``delete_rows``; by default the service's caps.
    :param listsync_conn_id: the ``listsync`` connection.
    :param user_id: the ``userId`` to act as, instead of the connection's. (templated)
    :param key_kind: ``"domain"`` (default) normalises keys as domains, ``"text"`` trims them.
    :param json_columns: extract columns whose text holds JSON, parsed before comparing: objects,
        arrays, and numbers from a CSV for a number column (jsonb and numeric columns need no mark).
    :param naive_timezone: the zone (IANA name, default ``"UTC"``) of extract timestamps written
        without an offset; an unknown name fails when the DAG is parsed.
    """

    template_fields: Sequence[str] = (
        "table_id",
        "column_map",
        "source",
        "sql",
        "rejects_path",
        "plan_path",
        "state_path",
        "user_id",
        "shard",
        "mode",
        "max_delete_fraction",
        "is_dry_run",
        "approved_plan",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"sql": "sql", "column_map": "json"}
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        key_column: str,
        delete_missing: bool = False,
        chunk_size: int | Mapping[str, int] | None = None,
        key_kind: Literal["domain", "text"] = "domain",
        json_columns: Collection[str] = (),
        mode: RowsMode = "upsert",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Checked at parse time, like the extract in the base class; a template once rendered.
        rows_chunk_sizes(chunk_size)
        if not holds_template(mode):
            check_rows_mode(mode, delete_missing)
        self.mode = mode
        self.key_column = key_column
        self.delete_missing = delete_missing
        self.chunk_size = chunk_size
        self.key_kind = key_kind
        self.json_columns = json_columns

    def execute(self, context: Context) -> dict[str, Any]:
        from listsync.sync.rows import upsert_rows

        frames = self.read_extract()
        return self.run_sync(
            context,
            "rows",
            lambda client, settings: upsert_rows(
                client,
                self.table_id,
                frames,
                key_column=self.key_column,
                column_map=self.column_map,
                key_kind=self.key_kind,
                json_columns=self.json_columns,
                delete_missing=self.delete_missing,
                chunk_size=self.chunk_size,
                mode=self.mode,
                settings=settings,
            ),
        )
