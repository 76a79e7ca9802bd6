"""What the three operators share: an extract to read, a connection to the service, a dry run.

:class:`ListSyncExtractOperator` holds the parameters every operator takes (``source``, ``sql``,
``sql_conn_id``, ``rejects_path``, ``dry_run``, ``listsync_conn_id``, ``naive_timezone``) and
their handling: the extract and the zone are checked when the DAG is parsed, the hook is built on
first use, and a client is opened for the task's run. :class:`ListSyncPlanOperator` adds what the
two List writers (people and rows) share: the List, the column map, the ``user_id`` to act as,
and the settings of :class:`~listsync.sync.settings.SyncSettings` (delete safety, failure policy,
the plan file, the shard, the memory limit, the state...), which it builds for the sync. Each
operator keeps its own parameters, its ``template_fields`` and the call into its ``listsync.sync``
entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from listsync.extract.options import check_encoding, resolve_timezone
from listsync.operators.asset_state import names_list, state_asset
from listsync.operators.extract import check_extract_arguments, checked_storage_path, read_operator_extract
from listsync.sync.settings import SHARED, SyncSettings, check_history, with_param_docs

if TYPE_CHECKING:
    import pandas as pd
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context, ObjectStoragePath
    from airflow.sdk.definitions.mappedoperator import OperatorPartial

    from listsync.client import ListSyncClient
    from listsync.hooks.listsync import ListSyncHook
    from listsync.sync.history import Job, SyncRun

__all__ = [
    "ListSyncExtractOperator",
    "ListSyncPlanOperator",
    "holds_template",
    "rendered_bool",
    "rendered_float",
    "task_holder",
]

_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0", "")


def holds_template(value: object) -> bool:
    """Whether ``value`` is text still holding a Jinja template: the DAG is being parsed, and the
    value is checked once rendered, as the task runs."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def rendered_bool(value: object, parameter: str) -> bool:
    """A templated flag as rendered: a bool, or its text (``"True"``, ``"false"``, ``"1"``...),
    which is what a template such as ``"{{ params.dry_run }}"`` renders to.

    :raises ValueError: any other value, naming ``parameter``.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{parameter} must be true or false; got {value!r}")


def rendered_float(value: object, parameter: str) -> float:
    """A templated number as rendered: a number, or its text.

    :raises ValueError: anything else, naming ``parameter``.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise ValueError(f"{parameter} must be a number; got {value!r}") from None


def task_holder(context: Context) -> str:
    """Who a task's run is, for the runs that wait for its lease: DAG, run, task (and map index),
    try and host."""
    import socket

    ti = context.get("ti")
    if ti is None:  # a context made by hand, outside a task run
        return f"a task on {socket.gethostname()}"
    task = ti.task_id if getattr(ti, "map_index", -1) in (-1, None) else f"{ti.task_id}[{ti.map_index}]"
    return f"DAG {ti.dag_id}, run {ti.run_id}, task {task}, try {ti.try_number} on {socket.gethostname()}"


def with_state_asset(kwargs: dict[str, Any], *, table_id: object, state_path: object) -> dict[str, Any]:
    """An operator's ``kwargs``, with the state asset of its connection
    (:func:`~listsync.operators.asset_state.state_asset`) added to its ``inlets`` when it keeps its
    state in no file and names no asset of its List: the state and the lease need a store every
    worker reaches, declared as the DAG is parsed so that Airflow registers it."""
    assets = [*(kwargs.get("inlets") or []), *(kwargs.get("outlets") or [])]
    if state_path is not None or names_list(assets, str(table_id)):
        return kwargs
    conn_id = kwargs.get("listsync_conn_id", "listsync_default")
    return {**kwargs, "inlets": [*(kwargs.get("inlets") or []), state_asset(conn_id)]}


class ListSyncExtractOperator(BaseOperator):
    """An operator that reads an extract and sends what it holds to the service.

    :param source: the extract file: a local path or an object-storage URI. Give this or ``sql``.
    :param sql: a query giving the extract, run on ``sql_conn_id``.
    :param sql_conn_id: the Airflow database connection ``sql`` runs on.
    :param rejects_path: where rejected rows go, as JSON lines: a local path or an object-storage URI.
    :param dry_run: do everything but send writes. The List operators template it (as the
        attribute ``is_dry_run``), so a trigger's params can set it: ``"{{ params.dry_run }}"``.
    :param listsync_conn_id: the ``listsync`` connection.
    :param naive_timezone: the zone (IANA name) of extract timestamps written without an offset.
    :param encoding: the text encoding of a CSV or JSON lines ``source`` (default UTF-8, where a
        UTF-16 byte-order mark is followed).
    :param extract_in_parts: the extract comes from a split's parts (``parts_path``), not from
        ``source`` or ``sql``, which must then be absent.
    """

    # A templated ``sql`` ending in .sql names a file (found on the DAG's template_searchpath)
    # whose rendered text is the query, in every operator alike.
    template_ext: Sequence[str] = (".sql",)

    #: The service user to act as instead of the connection's ``user_id``; None: the connection's.
    #: Operators that expose it set it from their ``user_id`` parameter.
    user_id: str | None = None

    #: Whether the job takes a CSV extract's text as Arrow strings (``read_extract``'s
    #: ``arrow_text``): the people jobs, which prepare it as columns.
    arrow_text: ClassVar[bool] = False

    def __init__(
        self,
        *,
        source: str | None = None,
        sql: str | None = None,
        sql_conn_id: str | None = None,
        rejects_path: str | None = None,
        dry_run: bool | str = False,
        listsync_conn_id: str = "listsync_default",
        naive_timezone: str = "UTC",
        encoding: str = "utf-8",
        extract_in_parts: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Settings that are not templated are checked here, so a mistake fails when the DAG is
        # parsed rather than at run time.
        if not extract_in_parts:
            check_extract_arguments(source, sql, sql_conn_id)
        elif source is not None or sql is not None:
            raise ValueError("parts_path takes the extract from a split's parts: give no source= or sql=")
        resolve_timezone(naive_timezone)
        check_encoding(encoding)
        self.naive_timezone = naive_timezone
        self.encoding = encoding
        self.source = source
        self.sql = sql
        self.sql_conn_id = sql_conn_id
        self.rejects_path = rejects_path
        # Not self.dry_run: BaseOperator.dry_run() is a method Airflow calls.
        self.is_dry_run = dry_run
        self.listsync_conn_id = listsync_conn_id

    @property
    def runs_dry(self) -> bool:
        """``dry_run`` as rendered (:func:`rendered_bool`)."""
        return rendered_bool(self.is_dry_run, "dry_run")

    @cached_property
    def hook(self) -> ListSyncHook:
        """The hook of ``listsync_conn_id``, built on first use."""
        from listsync.hooks.listsync import ListSyncHook

        return ListSyncHook(self.listsync_conn_id)

    @contextmanager
    def read_extract(self) -> Iterator[Iterator[pd.DataFrame]]:
        """The extract (``source``, or ``sql`` on ``sql_conn_id``), in chunks, read as iterated;
        closed when the block ends, read to the end or not: a job that fails part way lets go of
        the file or the database cursor then, not when Python's cycle collector comes to it."""
        options = {"encoding": self.encoding} if self.source is not None else {}
        frames = read_operator_extract(
            source=self.source,
            sql=self.sql,
            sql_conn_id=self.sql_conn_id,
            naive_timezone=self.naive_timezone,
            arrow_text=self.arrow_text,
            **options,
        )
        try:
            yield frames
        finally:
            close = getattr(frames, "close", None)
            if close is not None:
                close()

    @contextmanager
    def failing_the_airflow_way(self, context: Context) -> Iterator[None]:
        """Around a job: what a retry cannot fix fails the task at once, without its retries
        (``AirflowFailException``): an unsafe delete, too many rejects, a key the service refuses,
        a List it does not have, a checkpoint of other events, a bad setting, a sync that would
        take more than ``max_memory`` (a retry would need as much). A job that wrote
        what it could and failed the rest pushes its summary to XCom (``return_value``) before the
        task fails, so the numbers of the failed run are there for a person or a downstream task;
        its retry writes only what is still missing. An error that says more about the address
        than about the service (nothing answering, a redirect, a body that is not JSON) adds to
        check the connection.
        """
        from airflow.sdk.exceptions import AirflowFailException

        from listsync.client.errors import (
            AuthenticationError,
            ListNotFoundError,
            ListSyncError,
            points_elsewhere,
        )
        from listsync.sync.steps import SyncFailedError

        try:
            yield
        except SyncFailedError as exc:
            context["ti"].xcom_push(key="return_value", value=exc.summary)
            raise
        except (AuthenticationError, ListNotFoundError, ValueError) as exc:
            # ValueError: an unsafe delete, too many rejects, a checkpoint or mapping that does
            # not fit, a setting out of range; the service's refusals are ListSyncErrors.
            raise AirflowFailException(str(exc)) from exc
        except ListSyncError as exc:
            if not points_elsewhere(exc):
                raise
            raise ListSyncError(
                f"{exc}; check the Airflow connection {self.listsync_conn_id!r}: its host must be the "
                "service's API address"
            ) from exc

    @staticmethod
    def output_file(path: str | None, parameter: str = "rejects_path") -> Path | ObjectStoragePath | None:
        """The file a sync writes (plan, rejects) named by ``path``, which may be in object
        storage; None when no path was given. Called as the task starts: a local file that
        cannot be written fails it then, naming ``parameter``, before anything is read or sent."""
        if not path:
            return None
        from listsync.files import check_output_file

        what = {
            "plan_path": "the plan file",
            "outcomes_path": "the outcomes file",
            "report_path": "the report",
            "state_path": "the state file",
        }.get(parameter, "the rejects file")
        check_output_file(path, what, f"give {parameter} a file in a folder the task can write")
        return checked_storage_path(path)

    def get_client(self) -> ListSyncClient:
        """The client of the connection, acting as ``user_id`` when one is set.

        The task owns it for its run: use it as a context manager, so that closing it releases
        the connection pool, also when the task fails.
        """
        client = self.hook.get_client()
        if self.user_id:
            client.user_id = self.user_id
        return client

    def service_dataset_name(self) -> str:
        """What the task writes at the service, as the name of its OpenLineage output dataset."""
        raise NotImplementedError

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        """The task's lineage for Airflow's OpenLineage integration: the extract it read in, what it
        wrote at the service out (nothing in a dry run); see :mod:`listsync.operators.lineage`.
        None when the OpenLineage provider is not installed."""
        try:
            from listsync.operators.lineage import extract_lineage, service_dataset
        except ImportError:  # the module needs the provider, an optional install
            return None
        lineage = extract_lineage(source=self.source, sql=self.sql, sql_conn_id=self.sql_conn_id)
        if not self.runs_dry:
            lineage.outputs = [service_dataset(self.hook.get_base_url(), self.service_dataset_name())]
        return lineage


class ListSyncPlanOperator(ListSyncExtractOperator):
    """An operator that makes a List match an extract: it plans, checks deletes, then writes.

    Its parameters after ``table_id``, ``column_map`` and ``user_id`` are the settings both List
    syncs share, documented below from their declaration (:data:`~listsync.sync.settings.SETTINGS`),
    which also checks them. They are checked when the DAG is parsed, those that may hold a
    template (the files, ``shard``, ``dry_run``, ``max_delete_fraction``, ``approved_plan``) once
    rendered, as the task runs; a task that breaks one of their limits fails without retries
    (:meth:`failing_the_airflow_way`). ``dry_run`` and ``max_delete_fraction`` may be templates
    rendering to text (``"True"``, ``"0.25"``), so that a run triggered with params can set them
    (a reviewed clean-up allowed a larger delete for one night). On an operator, the files
    (``rejects_path``, ``plan_path``, ``report_path``, ``state_path``, ``approved_plan``) may be
    object-storage URIs; ``shard`` may be mapped (``.expand(shard=[f"{i}/4" for i in range(4)])``);
    ``"auto"`` ``max_memory`` is worked out on the worker; with no ``state_path``, the state and the
    lease live in the Airflow asset state store of the task's List asset (an inlet or outlet
    ``listsync://<host>/<tableId>``), else of its connection's state asset, which the operator
    adds to its inlets (:mod:`listsync.operators.asset_state`); ``history_table`` is on
    ``history_conn_id``, and a row that cannot be written is logged and fails nothing.

    :param table_id: the List.
    :param column_map: extract column → what it fills in the List.
    :param user_id: the service user to act as; overrides the connection's ``user_id``.
    :param history_conn_id: an Airflow database connection (postgres, sqlite...: any hook with a
        SQLAlchemy engine, as ``sql_conn_id``) holding ``history_table``.
    :param kwargs: the parameters of :class:`ListSyncExtractOperator` and ``BaseOperator``.
    """

    #: The shared settings the List operators template (``dry_run`` as ``is_dry_run``).
    templated_settings = (
        "max_delete_fraction",
        "dry_run",
        "rejects_path",
        "plan_path",
        "outcomes_path",
        "report_path",
        "state_path",
        "shard",
        "approved_plan",
    )
    __doc__ = with_param_docs(__doc__, SHARED.values(), templated=templated_settings)

    def __init__(
        self,
        *,
        table_id: str,
        column_map: Mapping[str, str],
        max_delete_fraction: float | str = SHARED["max_delete_fraction"].default,
        overwrite_with_null: bool = SHARED["overwrite_with_null"].default,
        fail_on_error: bool = SHARED["fail_on_error"].default,
        plan_path: str | None = SHARED["plan_path"].default,
        outcomes_path: str | None = SHARED["outcomes_path"].default,
        report_path: str | None = SHARED["report_path"].default,
        user_id: str | None = None,
        max_reject_fraction: float = SHARED["max_reject_fraction"].default,
        shard: str | None = SHARED["shard"].default,
        max_memory: int | str | None = SHARED["max_memory"].default,
        state_path: str | None = SHARED["state_path"].default,
        fresh_state: bool = SHARED["fresh_state"].default,
        verify_timeout: float = SHARED["verify_timeout"].default,
        visibility_window: float = SHARED["visibility_window"].default,
        max_in_flight: int = SHARED["max_in_flight"].default,
        history_table: str | None = SHARED["history_table"].default,
        history_conn_id: str | None = None,
        history_rejects_table: str | None = SHARED["history_rejects_table"].default,
        history_outcomes_table: str | None = SHARED["history_outcomes_table"].default,
        approved_plan: str | None = SHARED["approved_plan"].default,
        max_plan_age: float = SHARED["max_plan_age"].default,
        lock_timeout: float = SHARED["lock_timeout"].default,
        lease_expiry: float = SHARED["lease_expiry"].default,
        **kwargs: Any,
    ) -> None:
        super().__init__(**with_state_asset(kwargs, table_id=table_id, state_path=state_path))
        self.lock_timeout = lock_timeout
        self.lease_expiry = lease_expiry
        self.approved_plan = approved_plan
        self.max_plan_age = max_plan_age
        check_history(
            history_table,
            (history_rejects_table, history_outcomes_table),
            history_conn_id,
            names=("history_table", "history_rejects_table and history_outcomes_table", "history_conn_id"),
        )
        self.history_table = history_table
        self.history_conn_id = history_conn_id
        self.history_rejects_table = history_rejects_table
        self.history_outcomes_table = history_outcomes_table
        self.max_in_flight = SHARED["max_in_flight"].checked(max_in_flight)
        self.table_id = table_id
        self.column_map = column_map
        self.max_delete_fraction = max_delete_fraction
        self.overwrite_with_null = overwrite_with_null
        self.fail_on_error = fail_on_error
        self.plan_path = plan_path
        self.outcomes_path = outcomes_path
        self.report_path = report_path
        self.user_id = user_id
        self.max_reject_fraction = max_reject_fraction
        self.shard = shard
        self.max_memory = max_memory
        self.state_path = state_path
        self.fresh_state = fresh_state
        self.verify_timeout = verify_timeout
        self.visibility_window = visibility_window
        # Checked now, so that a mistake fails when the DAG is parsed.
        self._settings()

    @classmethod
    def partial(cls, **kwargs: Any) -> OperatorPartial:
        """``BaseOperator.partial``, the connection's state asset added to the inlets as
        ``__init__`` adds it: a mapped task's operator is made only as it runs, too late to
        declare an asset."""
        return super().partial(
            **with_state_asset(kwargs, table_id=kwargs.get("table_id"), state_path=kwargs.get("state_path"))
        )

    def get_client(self) -> ListSyncClient:
        """The client of the connection (see the base class), keeping up to ``max_in_flight``
        requests to the List at once."""
        client = super().get_client()
        client.in_flight.resize(self.max_in_flight)
        return client

    def run_sync(
        self, context: Context, job: Job, sync: Callable[[ListSyncClient, SyncSettings], dict[str, Any]]
    ) -> dict[str, Any]:
        """Run ``sync`` with a client of the connection and the task's settings, the Airflow way
        (:meth:`failing_the_airflow_way`), recording the run in ``history_table`` when one is set;
        when it wrote to the List, add the List's event to the asset aliases of the task's
        outlets (:mod:`listsync.operators.asset_events`); return its summary."""
        from listsync.operators.asset_events import emit_list_event

        def attempt() -> dict[str, Any]:
            with self.failing_the_airflow_way(context), self.get_client() as client:
                return sync(client, self.sync_settings(context))

        if not self.history_table:
            summary = attempt()
        else:
            from listsync.sync.history import run_recorded

            summary = run_recorded(
                job,
                self.table_id,
                attempt,
                self._record_history,
                dag_id=self.dag_id,
                task_id=self.task_id,
                airflow_run_id=context.get("run_id"),
            )
        emit_list_event(
            context, self.table_id, [*self.inlets, *self.outlets], self.hook.get_base_url(), summary
        )
        return summary

    def _record_history(self, run: SyncRun) -> None:
        from listsync.operators.extract import sql_engine
        from listsync.sync.history import record_run

        assert self.history_table is not None and self.history_conn_id is not None
        engine = sql_engine(self.history_conn_id)
        try:
            record_run(
                engine,
                self.history_table,
                run,
                rejects_table=self.history_rejects_table,
                outcomes_table=self.history_outcomes_table,
            )
        finally:
            engine.dispose()

    def sync_settings(self, context: Context) -> SyncSettings:
        """The settings of the task's sync, from this operator's parameters as rendered: the
        rejects and plan files and the report as :meth:`output_file` gives them, the state in ``state_path``,
        else in the List asset's state store in ``context``."""
        from listsync.operators.asset_state import list_asset_state_store

        state = self.output_file(self.state_path, "state_path") or list_asset_state_store(
            self.table_id, [*self.inlets, *self.outlets], context, self.listsync_conn_id
        )
        return replace(
            self._settings(),
            rejects_path=self.output_file(self.rejects_path),
            plan_path=self.output_file(self.plan_path, "plan_path"),
            outcomes_path=self.output_file(self.outcomes_path, "outcomes_path"),
            report_path=self.output_file(self.report_path, "report_path"),
            state_path=state,
            lease_holder=task_holder(context),
            approved_plan=checked_storage_path(self.approved_plan) if self.approved_plan else None,
        )

    def _settings(self) -> SyncSettings:
        """The settings of the parameters that name no file, as rendered; one that still holds a
        template (the DAG being parsed) takes its default meanwhile."""
        defaults = SyncSettings()
        return SyncSettings(
            max_delete_fraction=(
                defaults.max_delete_fraction
                if holds_template(self.max_delete_fraction)
                else rendered_float(self.max_delete_fraction, "max_delete_fraction")
            ),
            overwrite_with_null=self.overwrite_with_null,
            dry_run=not holds_template(self.is_dry_run) and self.runs_dry,
            fail_on_error=self.fail_on_error,
            max_reject_fraction=self.max_reject_fraction,
            shard=None if holds_template(self.shard) else self.shard,
            max_memory=self.max_memory,
            fresh_state=self.fresh_state,
            verify_timeout=self.verify_timeout,
            visibility_window=self.visibility_window,
            max_plan_age=self.max_plan_age,
            lock_timeout=self.lock_timeout,
            lease_expiry=self.lease_expiry,
        )

    def service_dataset_name(self) -> str:
        """The List: its ``tableId``."""
        return self.table_id
