"""``UpsertRowsOperator``: warehouse rows into a List, writing only the cells that changed."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from airflow.sdk import BaseOperator

from listsync.operators.extract import check_extract_arguments, read_operator_extract, storage_path
from listsync.sync.rows import chunk_sizes, upsert_rows

if TYPE_CHECKING:
    from airflow.sdk import Context

    from listsync.hooks.listsync import ListSyncHook

__all__ = ["UpsertRowsOperator"]


class UpsertRowsOperator(BaseOperator):
    """Make a List's rows match an extract: new keys become rows, changed values cell updates.

    The service has no row upsert; this builds one from GET rows, POST rows, PATCH cells and
    DELETE rows (see :mod:`listsync.sync.rows`). A row is identified by its ``key_column`` cell;
    values compare canonically (``10`` equals ``10.0``, JSON objects whatever their key order), so
    a second run over the same extract sends no write. Row adds whose outcome is unknown (a
    dropped connection) are re-read by key before anything is sent again, so a retry never
    duplicates a row. Returns the JSON summary (to XCom).

    :param table_id: the List's id. (templated)
    :param key_column: the List column id that identifies a row, e.g. ``domain``; one extract
        column must be mapped to it.
    :param column_map: extract column → List column id; only mapped columns are compared and
        written. (templated)
    :param source: the extract file: a local path or an object-storage URI. (templated)
    :param sql: a query giving the extract, run on ``sql_conn_id``. (templated)
    :param sql_conn_id: an Airflow database connection (postgres, sqlite...) for ``sql``.
    :param delete_missing: delete List rows whose key is not in the extract.
    :param max_delete_fraction: refuse deletes above this fraction of the List's keyed rows, and
        any delete when the extract has no valid row.
    :param overwrite_with_null: a null in the extract clears the List's cell (otherwise the cell
        is kept).
    :param chunk_size: items per request: one number for every kind, or a mapping with keys
        ``add_rows``, ``update_cells``, ``delete_rows``; by default the service's caps.
    :param dry_run: plan and write the plan file, send no write.
    :param fail_on_error: fail the task at the end (after everything else was written) when any
        row could not be written.
    :param rejects_path: where rejected extract rows go, as JSON lines: a local path or an
        object-storage URI (default: a temporary file, only when some row is rejected). (templated)
    :param plan_path: where the plan goes, as JSON lines: a local path or an object-storage URI
        (default: none, or a temporary file in a dry run). (templated)
    :param listsync_conn_id: the ``listsync`` connection.
    :param user_id: the ``userId`` to act as, instead of the connection's. (templated)
    :param key_kind: ``"domain"`` (default) normalises keys as domains, ``"text"`` trims them.
    :param json_columns: extract columns whose text holds JSON, parsed before comparing: objects,
        arrays, and numbers from a CSV for a number column (jsonb and numeric columns need no mark).
    :param max_reject_fraction: fail before writing when more of the extract is rejected.
    """

    template_fields: Sequence[str] = (
        "table_id",
        "column_map",
        "source",
        "sql",
        "rejects_path",
        "plan_path",
        "user_id",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"sql": "sql", "column_map": "json"}
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        table_id: str,
        key_column: str,
        column_map: Mapping[str, str],
        source: str | None = None,
        sql: str | None = None,
        sql_conn_id: str | None = None,
        delete_missing: bool = False,
        max_delete_fraction: float = 0.1,
        overwrite_with_null: bool = False,
        chunk_size: int | Mapping[str, int] | None = None,
        dry_run: bool = False,
        fail_on_error: bool = True,
        rejects_path: str | None = None,
        plan_path: str | None = None,
        listsync_conn_id: str = "listsync_default",
        user_id: str | None = None,
        key_kind: Literal["domain", "text"] = "domain",
        json_columns: Collection[str] = (),
        max_reject_fraction: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Settings that are not templated are checked here, so a mistake fails when the DAG is
        # parsed rather than at run time.
        check_extract_arguments(source, sql, sql_conn_id)
        chunk_sizes(chunk_size)
        self.table_id = table_id
        self.key_column = key_column
        self.column_map = column_map
        self.source = source
        self.sql = sql
        self.sql_conn_id = sql_conn_id
        self.delete_missing = delete_missing
        self.max_delete_fraction = max_delete_fraction
        self.overwrite_with_null = overwrite_with_null
        self.chunk_size = chunk_size
        # Not self.dry_run: BaseOperator.dry_run() is a method Airflow calls.
        self.is_dry_run = dry_run
        self.fail_on_error = fail_on_error
        self.rejects_path = rejects_path
        self.plan_path = plan_path
        self.listsync_conn_id = listsync_conn_id
        self.user_id = user_id
        self.key_kind = key_kind
        self.json_columns = json_columns
        self.max_reject_fraction = max_reject_fraction

    @cached_property
    def hook(self) -> ListSyncHook:
        """The hook of ``listsync_conn_id``, built on first use."""
        from listsync.hooks.listsync import ListSyncHook

        return ListSyncHook(self.listsync_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        frames = read_operator_extract(source=self.source, sql=self.sql, sql_conn_id=self.sql_conn_id)
        # Closed when the task ends, also on failure, so no connection outlives the task.
        with self.hook.get_client() as client:
            if self.user_id:
                client.user_id = self.user_id
            return upsert_rows(
                client,
                self.table_id,
                frames,
                key_column=self.key_column,
                column_map=self.column_map,
                key_kind=self.key_kind,
                json_columns=self.json_columns,
                delete_missing=self.delete_missing,
                max_delete_fraction=self.max_delete_fraction,
                overwrite_with_null=self.overwrite_with_null,
                chunk_size=self.chunk_size,
                dry_run=self.is_dry_run,
                fail_on_error=self.fail_on_error,
                rejects_path=storage_path(self.rejects_path) if self.rejects_path else None,
                plan_path=storage_path(self.plan_path) if self.plan_path else None,
                max_reject_fraction=self.max_reject_fraction,
            )
