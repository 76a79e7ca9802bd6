"""``SyncTargetablePeopleOperator``: make a List's targetable people match a CRM extract.

The operator only orchestrates: its base class (:mod:`listsync.operators.base`) resolves the
extract and gets a client from :class:`~listsync.hooks.listsync.ListSyncHook`; it runs
:func:`listsync.sync.people.sync_people`, whose JSON summary it returns (the task's XCom).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from listsync.operators.base import ListSyncPlanOperator, holds_template
from listsync.sync.settings import DeleteScope, SyncMode, check_sync_options, settings_of, with_param_docs

_DECLARED = settings_of("people")

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["SyncTargetablePeopleOperator"]


class SyncTargetablePeopleOperator(ListSyncPlanOperator):
    """Diff an extract of contacts against a List's targetable people and write only the changes.

    People are matched by account domain and identity (e-mail, else profile URL, phone, first and
    last name). New people are added, changed fields patched, and with ``mode="mirror"`` people
    missing from the extract deleted, in as few requests as the per-request caps allow. Deletes
    that look like a broken extract are refused (see ``max_delete_fraction``). Rejected rows go
    to a rejects file with their reasons.

    Returns the JSON summary (to XCom), a :class:`~listsync.sync.summary.PeopleSummary`.

    It also takes the settings both List syncs share as keyword parameters, documented at
    :class:`~listsync.operators.base.ListSyncPlanOperator`; ``mode`` and ``chunk_size`` are
    documented below from their declaration (:data:`~listsync.sync.settings.SETTINGS`).

    :param table_id: the List to sync. (templated)
    :param column_map: extract column → person field (``first_name``, ``last_name``, ``email``,
        ``phone_number``, ``network_profile_url``, ``title``, ``personas``, ...) or
        ``account_domain``; ``account_domain`` and ``first_name`` are required. (templated)
    :param source: the extract file: a local path or an object-storage URI (CSV, Parquet, JSON
        lines). Give this or ``sql``. (templated)
    :param sql: a query giving the extract, run on ``sql_conn_id``. (templated)
    :param sql_conn_id: the Airflow database connection ``sql`` runs on.
    :param delete_scope: in mirror mode, ``"accounts_in_source"`` (delete only within accounts the
        extract names) or ``"list"`` (anywhere in the List). (templated)
    :param listsync_conn_id: the connection to the service.
    :param user_id: the service user to act as; overrides the connection's ``user_id``. (templated)
    :param default_region: region of phone numbers written without ``+`` (ISO 3166 code).
    :param naive_timezone: the zone (IANA name, default ``"UTC"``) of extract timestamps written
        without an offset; an unknown name fails when the DAG is parsed.
    """

    template_fields: Sequence[str] = (
        "table_id",
        "source",
        "sql",
        "column_map",
        "rejects_path",
        "plan_path",
        "state_path",
        "user_id",
        "shard",
        "mode",
        "delete_scope",
        "max_delete_fraction",
        "is_dry_run",
        "approved_plan",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"sql": "sql", "column_map": "json"}
    # The job's own settings are documented from their declaration, once.
    __doc__ = with_param_docs(
        __doc__, [_DECLARED["mode"], _DECLARED["chunk_size"]], templated=template_fields
    )
    ui_color = "#d7ecfa"

    def __init__(
        self,
        *,
        mode: SyncMode = _DECLARED["mode"].default,
        delete_scope: DeleteScope = "accounts_in_source",
        chunk_size: int | Mapping[str, int] = _DECLARED["chunk_size"].default,
        default_region: str = "US",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Checked at parse time, like the extract in the base class; templates once rendered.
        if not holds_template(mode) and not holds_template(delete_scope):
            check_sync_options(mode, delete_scope)
        _DECLARED["chunk_size"].checked(chunk_size)
        self.mode = mode
        self.delete_scope = delete_scope
        self.chunk_size = chunk_size
        self.default_region = default_region

    def execute(self, context: Context) -> dict[str, Any]:
        from listsync.sync.people import sync_people

        frames = self.read_extract()
        return self.run_sync(
            context,
            "people",
            lambda client, settings: sync_people(
                client,
                self.table_id,
                frames,
                self.column_map,
                mode=self.mode,
                delete_scope=self.delete_scope,
                chunk_size=self.chunk_size,
                default_region=self.default_region,
                settings=settings,
            ),
        )
