"""``UpsertRowsOperator``: warehouse rows into a List, writing only the cells that changed."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from listsync.operators.base import ListSyncPlanOperator, holds_template
from listsync.sync.settings import RowsMode, check_rows_mode, settings_of, with_param_docs

_DECLARED = settings_of("rows")

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

    It also takes the settings both List syncs share as keyword parameters, documented at
    :class:`~listsync.operators.base.ListSyncPlanOperator`; ``mode`` and ``chunk_size`` are
    documented below from their declaration (:data:`~listsync.sync.settings.SETTINGS`).

    :param table_id: the List's id. (templated)
    :param key_column: the List column id that identifies a row, e.g. ``domain``; one extract
        column must be mapped to it.
    :param column_map: extract column → List column id; only mapped columns are compared and
        written. (templated)
    :param source: the extract file: a local path or an object-storage URI. (templated)
    :param sql: a query giving the extract, run on ``sql_conn_id``. (templated)
    :param sql_conn_id: an Airflow database connection (postgres, sqlite...) for ``sql``.
    :param delete_missing: delete List rows whose key is not in the extract (with ``mode="upsert"``).
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
        "outcomes_path",
        "report_path",
        "state_path",
        "user_id",
        "shard",
        "mode",
        "max_delete_fraction",
        "is_dry_run",
        "approved_plan",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"sql": "sql", "column_map": "json"}
    # The job's own settings are documented from their declaration, once.
    __doc__ = with_param_docs(
        __doc__, [_DECLARED["mode"], _DECLARED["chunk_size"]], templated=template_fields
    )
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        key_column: str,
        delete_missing: bool = False,
        chunk_size: int | Mapping[str, int] | None = _DECLARED["chunk_size"].default,
        key_kind: Literal["domain", "text"] = "domain",
        json_columns: Collection[str] = (),
        mode: RowsMode = _DECLARED["mode"].default,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Checked at parse time, like the extract in the base class; a template once rendered.
        _DECLARED["chunk_size"].checked(chunk_size)
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

        with self.read_extract() as frames:
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
