"""``SyncTargetablePeopleOperator``: make a List's targetable people match a CRM extract.

The operator only orchestrates: its base class (:mod:`listsync.operators.base`) resolves the
extract and gets a client from :class:`~listsync.hooks.listsync.ListSyncHook`; it runs
:func:`listsync.sync.people.sync_people`, whose JSON summary it returns (the task's XCom).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from listsync.operators.base import ListSyncExtractOperator, ListSyncPlanOperator, holds_template
from listsync.sync.settings import (
    SHARED,
    DeleteScope,
    SyncMode,
    SyncSettings,
    check_sync_options,
    settings_of,
    with_param_docs,
)

_DECLARED = settings_of("people")
_SHARED_DEFAULTS = {name: setting.default for name, setting in SHARED.items()}

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context, ObjectStoragePath

__all__ = ["SplitPeopleOperator", "SyncTargetablePeopleOperator"]


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
    :param parts_path: the folder (a local path or an object-storage URI) where
        :class:`SplitPeopleOperator` wrote the parts of a split: with ``shard``, the task syncs its
        shard's part, the extract and the List read once by the split, instead of ``source`` or
        ``sql`` and a read of the whole List (see :mod:`listsync.sync.people.split`). (templated)
    """

    template_fields: Sequence[str] = (
        "table_id",
        "parts_path",
        "source",
        "sql",
        "column_map",
        "rejects_path",
        "plan_path",
        "outcomes_path",
        "report_path",
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
    arrow_text = True
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
        parts_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(extract_in_parts=parts_path is not None, **kwargs)
        if parts_path is not None and kwargs.get("shard") is None:
            raise ValueError('parts_path names the parts of a split: give the shard ("i/n") to sync')
        self.parts_path = parts_path
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

        parts = None if self.parts_path is None else parts_folder(self.parts_path)
        # A shard of a split takes its extract from its part.
        extract: AbstractContextManager[Iterator[Any]] = (
            nullcontext(iter(())) if parts is not None else self.read_extract()
        )
        with extract as frames:
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
                    parts_path=parts,
                ),
            )


def parts_folder(path: str) -> Path | ObjectStoragePath:
    """The folder of a split's parts, ``path``: a local folder (made if missing) or object storage."""
    from listsync.operators.extract import checked_storage_path

    folder = checked_storage_path(path)
    if isinstance(folder, Path):
        folder.mkdir(parents=True, exist_ok=True)
    return folder


class SplitPeopleOperator(ListSyncExtractOperator):
    """Read a people extract and a List once, and write each shard its part, for the mapped
    :class:`SyncTargetablePeopleOperator` tasks that sync the shards (``parts_path``, ``shard``).

    The extract is prepared here once (its rejects written to ``rejects_path``, ``max_reject_fraction``
    enforced); the List is paged once, each person streamed to its shard's part, so the task holds
    the prepared extract but none of the List. It writes nothing to the List and takes no lease.
    Returns what it split (to XCom): the extract's counts, the List's people, whether its read
    was steady, and each part's sizes; see :func:`~listsync.sync.people.split.split_people`.

    :param table_id: the List. (templated)
    :param column_map: as the shards': extract column → person field or ``account_domain``. (templated)
    :param shards: how many shards (``n`` of the shards' ``"i/n"``).
    :param parts_path: the folder the parts go to: a local path or an object-storage URI, one per
        run (a retry of a shard reads its part there). (templated)
    :param default_region: region of phone numbers written without ``+``, as the shards'.
    :param user_id: the service user to act as; overrides the connection's ``user_id``. (templated)
    :param max_reject_fraction: fail, before the List is read, when a larger share of the rows is
        rejected (see ``SyncTargetablePeopleOperator``).
    :param max_memory: as ``SyncTargetablePeopleOperator``'s: the limit on the prepared extract.
    :param kwargs: the parameters of :class:`~listsync.operators.base.ListSyncExtractOperator`.
    """

    template_fields: Sequence[str] = (
        "table_id",
        "source",
        "sql",
        "column_map",
        "rejects_path",
        "parts_path",
        "user_id",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"sql": "sql", "column_map": "json"}
    arrow_text = True
    ui_color = "#d7ecfa"

    def __init__(
        self,
        *,
        table_id: str,
        column_map: Mapping[str, str],
        shards: int,
        parts_path: str,
        default_region: str = "US",
        user_id: str | None = None,
        max_reject_fraction: float = _SHARED_DEFAULTS["max_reject_fraction"],
        max_memory: int | str | None = _SHARED_DEFAULTS["max_memory"],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
            raise ValueError(f"shards must be a whole number, 1 or more; got {shards!r}")
        # Checked now, so that a mistake fails when the DAG is parsed.
        SyncSettings(max_reject_fraction=max_reject_fraction, max_memory=max_memory)
        self.table_id = table_id
        self.column_map = column_map
        self.shards = shards
        self.parts_path = parts_path
        self.default_region = default_region
        self.user_id = user_id
        self.max_reject_fraction = max_reject_fraction
        self.max_memory = max_memory

    def execute(self, context: Context) -> dict[str, Any]:
        from listsync.sync.people.split import split_people

        folder = parts_folder(self.parts_path)
        settings = SyncSettings(
            rejects_path=self.output_file(self.rejects_path),
            max_reject_fraction=self.max_reject_fraction,
            max_memory=self.max_memory,
        )
        with (
            self.read_extract() as frames,
            self.failing_the_airflow_way(context),
            self.get_client() as client,
        ):
            return split_people(
                client,
                self.table_id,
                frames,
                self.column_map,
                shards=self.shards,
                parts_path=folder,
                default_region=self.default_region,
                settings=settings,
            )

    def service_dataset_name(self) -> str:
        """The List it reads: its ``tableId``."""
        return self.table_id

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        """The extract and the List it read, as inputs: it writes nothing at the service."""
        lineage = super().get_openlineage_facets_on_complete(task_instance)
        if lineage is not None:
            lineage.inputs, lineage.outputs = [*lineage.inputs, *lineage.outputs], []
        return lineage
