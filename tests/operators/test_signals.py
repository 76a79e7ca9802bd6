"""IngestSignalsOperator: dag.test() against the emulator, crash and resume, deferral and resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from importlib import import_module
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from listsync.hooks.listsync import ListSyncHook
from listsync.operators.signals import IngestSignalsOperator
from listsync.signals.checkpoints import CHECKPOINT_KEY, CheckpointStore
from listsync.triggers.rate_limit import RateLimitWindowTrigger

from ..support import LiveEmulator
from ..support.signal_data import (
    API_KEY,
    INVALID_ROWS,
    MAPPING_COLUMNS,
    SIGNAL_TYPES,
    UNKNOWN_SIGNAL_ROWS,
    DictStore,
    fail_next_batch,
    ingested_references,
    mixed_rows,
    valid_references,
)


@pytest.fixture
def extract(tmp_path: Path) -> tuple[Path, list[dict[str, str]]]:
    rows = mixed_rows()
    path = tmp_path / "events.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path, rows


@pytest.fixture
def connected_url(live_emulator: Callable[..., LiveEmulator], connect_listsync: Callable[..., None]) -> str:
    """A demo emulator with 2-second windows on the wall clock, as the tasks' clients use it, named by
    the default connection."""
    url = live_emulator(clock=None, window_seconds=2).url
    connect_listsync(url, API_KEY, "usr_demo")
    return url


def ingest_dag(
    dag_id: str,
    summaries: list[dict[str, Any]],
    params: dict[str, Any] | None = None,
    **operator_kwargs: Any,
) -> Any:
    from airflow.sdk import DAG, task

    with DAG(
        dag_id, schedule=None, start_date=datetime(2026, 11, 1), catchup=False, params=params or {}
    ) as dag:
        ingest = IngestSignalsOperator(
            task_id="ingest",
            retries=1,
            retry_delay=timedelta(0),
            signal_types=SIGNAL_TYPES,
            **MAPPING_COLUMNS,
            **operator_kwargs,
        )

        @task
        def keep(summary: dict[str, Any]) -> None:
            summaries.append(summary)

        keep(ingest.output)
    return dag


@pytest.mark.slow
def test_dag_ingests_every_valid_row_once_and_accounts_for_the_rest(
    run_dag: Callable[..., Any],
    connected_url: str,
    extract: tuple[Path, list],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path, rows = extract
    summaries: list[dict[str, Any]] = []
    rejects_path = tmp_path / "rejects.jsonl"
    dag = ingest_dag(
        "signals_e2e",
        summaries,
        params={"extract": str(path), "rejects": str(rejects_path)},
        source="{{ params.extract }}",
        rejects_path="{{ params.rejects }}",
    )

    run = run_dag(dag)

    assert run.state == "success"
    assert ingested_references(connected_url) == dict.fromkeys(valid_references(rows), 1)
    (summary,) = summaries
    assert summary["rows_read"] == len(rows)
    assert summary["rows_rejected"] == INVALID_ROWS
    assert len(rejects_path.read_text().splitlines()) == INVALID_ROWS
    assert summary["acknowledged"] == len(valid_references(rows))
    assert summary["signals"]["not_a_signal"]["rejected_reasons"] == {
        "Signals not found: not_a_signal": UNKNOWN_SIGNAL_ROWS
    }
    assert API_KEY not in json.dumps(summary)
    assert "Signals not found: not_a_signal" in caplog.text
    assert API_KEY not in caplog.text


@pytest.mark.slow
def test_a_retried_task_resumes_after_the_last_acknowledged_batch(
    run_dag: Callable[..., Any],
    connected_url: str,
    extract: tuple[Path, list],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, rows = extract
    saves: list[dict[str, Any]] = []
    original_save = CheckpointStore.save

    def save_then_crash_after_the_third_batch(self: CheckpointStore, checkpoint: dict[str, Any]) -> None:
        original_save(self, checkpoint)
        acknowledged = sum(checkpoint["acknowledged"].values())
        if acknowledged == 75 and not saves:
            saves.append(checkpoint)
            fail_next_batch(connected_url)  # try 1 dies on its 4th batch, with 3 acknowledged

    monkeypatch.setattr(CheckpointStore, "save", save_then_crash_after_the_third_batch)
    summaries: list[dict[str, Any]] = []
    dag = ingest_dag("signals_crash", summaries, source=str(path), batch_size=25)

    run = run_dag(dag)

    assert run.state == "success"
    (summary,) = summaries
    acknowledged_by_try_1 = sum(saves[0]["acknowledged"].values())
    assert acknowledged_by_try_1 == 75
    assert sum(summary["resumed_from"].values()) == acknowledged_by_try_1
    assert ingested_references(connected_url) == dict.fromkeys(valid_references(rows), 1)


@pytest.mark.slow
def test_a_deferrable_task_defers_through_the_trigger_and_completes(
    run_dag: Callable[..., Any], connected_url: str, extract: tuple[Path, list]
) -> None:
    path, rows = extract
    summaries: list[dict[str, Any]] = []
    dag = ingest_dag("signals_defer", summaries, source=str(path), deferrable=True, defer_after_seconds=0)

    run = run_dag(dag)

    assert run.state == "success"
    (summary,) = summaries
    # 150 Event and 35 State events cannot go in one window: the task resumed at least once.
    assert summary["resumed_from"]
    assert ingested_references(connected_url) == dict.fromkeys(valid_references(rows), 1)


def run_trigger(trigger: RateLimitWindowTrigger, fake_clock: Any, monkeypatch: pytest.MonkeyPatch) -> list:
    import asyncio

    from listsync.triggers import rate_limit

    monkeypatch.setattr(rate_limit, "time", fake_clock.time)
    monkeypatch.setattr(rate_limit, "sleep", fake_clock.async_sleep)

    async def collect() -> list:
        return [event async for event in trigger.run()]

    return asyncio.run(collect())


@pytest.fixture
def page_visits(tmp_path: Path) -> tuple[Path, list[dict[str, str]]]:
    """An extract of 150 valid page_visit events: more than one window of the Event limit (100)."""
    rows = [row for row in mixed_rows(page_visits=150, seats=0, stages=0) if row["signal"] == "page_visit"]
    rows = [row for row in rows if row["event_id"] in valid_references(rows)]
    path = tmp_path / "page_visits.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path, rows


@pytest.mark.parametrize("with_task_state_store", [True, False])
def test_defer_then_execute_complete_resumes_from_the_checkpoint(
    page_visits: tuple[Path, list],
    monkeypatch: pytest.MonkeyPatch,
    with_task_state_store: bool,
    fake_clock: Any,
    live_emulator: Callable[..., LiveEmulator],
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    deferred_at = fake_clock.now
    path, rows = page_visits
    emulator = live_emulator()
    monkeypatch.setattr(ListSyncHook, "get_client", lambda self: emulator.client())
    operator = IngestSignalsOperator(
        task_id="ingest", source=str(path), deferrable=True, defer_after_seconds=5, **MAPPING_COLUMNS
    )
    context: dict[str, Any] = {"task_state_store": DictStore()} if with_task_state_store else {}

    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)  # type: ignore[arg-type]

    trigger = deferred.value.trigger
    classpath, kwargs = trigger.serialize()
    kwargs = json.loads(json.dumps(kwargs))  # JSON primitives only
    next_kwargs = json.loads(json.dumps(deferred.value.kwargs))
    assert deferred.value.method_name == "execute_complete"
    assert next_kwargs == {"deferred_at": deferred_at, "waiting": ["page_visit"]}
    assert len(ingested_references(emulator.url)) == 100
    if with_task_state_store:
        assert context["task_state_store"].values[CHECKPOINT_KEY]["acknowledged"] == {"page_visit": 100}

    # Rebuilt the way the triggerer does it: from the class path and the JSON arguments.
    rebuilt = import_module(classpath.rsplit(".", 1)[0]).RateLimitWindowTrigger(**kwargs)
    assert classpath.endswith(".RateLimitWindowTrigger")
    (event,) = run_trigger(rebuilt, fake_clock, monkeypatch)
    assert fake_clock.now >= datetime.fromisoformat(kwargs["resume_at"]).timestamp()
    assert len(ingested_references(emulator.url)) == 100  # the trigger sent nothing

    summary = operator.execute_complete(context, event.payload, **next_kwargs)  # type: ignore[arg-type]

    assert summary["resumed_from"] == {"page_visit": 100}
    assert summary["acknowledged"] == 150
    assert ingested_references(emulator.url) == dict.fromkeys(valid_references(rows), 1)
    # The time spent deferred, until the window reopened, is time waited.
    assert fake_clock.now - deferred_at == 60.0
    assert summary["seconds_waited"] == summary["signals"]["page_visit"]["seconds_waited"] == 60.0


@pytest.mark.parametrize(("window_seconds", "defers"), [(60.0, False), (120.0, True)])
def test_by_default_only_a_wait_longer_than_a_window_defers(
    page_visits: tuple[Path, list],
    monkeypatch: pytest.MonkeyPatch,
    window_seconds: float,
    defers: bool,
    fake_clock: Any,
    live_emulator: Callable[..., LiveEmulator],
) -> None:
    # The ordinary wait for a 60 s window to reopen stays in the worker, with the prepared events;
    # a longer one (here, a service whose windows are two minutes) frees the worker slot.
    from airflow.sdk.exceptions import TaskDeferred

    start = fake_clock.now
    path, rows = page_visits
    emulator = live_emulator(window_seconds=window_seconds)
    monkeypatch.setattr(ListSyncHook, "get_client", lambda self: emulator.client())
    operator = IngestSignalsOperator(task_id="ingest", source=str(path), deferrable=True, **MAPPING_COLUMNS)

    if defers:
        with pytest.raises(TaskDeferred) as deferred:
            operator.execute({})  # type: ignore[arg-type]
        resume_at = datetime.fromisoformat(deferred.value.trigger.resume_at).timestamp()
        assert resume_at - start == window_seconds
        assert fake_clock.slept == []
        assert len(ingested_references(emulator.url)) == 100
    else:
        summary = operator.execute({})  # type: ignore[arg-type]
        assert summary["acknowledged"] == len(rows) == 150
        assert summary["seconds_waited"] == sum(fake_clock.slept) == window_seconds
        assert ingested_references(emulator.url) == dict.fromkeys(valid_references(rows), 1)


@pytest.mark.parametrize(
    "event", [None, {"status": "failed"}, {"status": "window_reopened", "checkpoint": [1]}]
)
def test_execute_complete_refuses_an_unexpected_event(event: Any) -> None:
    operator = IngestSignalsOperator(
        task_id="ingest", source="x.csv", signal="s", identity_type="a", identity_id_column="id"
    )
    with pytest.raises(ValueError, match="trigger"):
        operator.execute_complete({}, event)  # type: ignore[arg-type]


def test_mapping_and_extract_errors_fail_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match="exactly one of signal"):
        IngestSignalsOperator(task_id="a", source="x.csv", identity_type="account", identity_id_column="id")
    with pytest.raises(ValueError, match="exactly one extract"):
        IngestSignalsOperator(task_id="b", signal="s", identity_type="account", identity_id_column="id")
    with pytest.raises(ValueError, match="batch_size"):
        IngestSignalsOperator(
            task_id="c",
            source="x.csv",
            signal="s",
            identity_type="a",
            identity_id_column="id",
            batch_size=101,
        )


@pytest.mark.slow
def test_an_orphaned_try_sends_nothing_more(
    run_dag: Callable[..., Any],
    connected_url: str,
    extract: tuple[Path, list],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The supervisor of the try is gone (its Celery pool process was killed): the try's next
    # round trip through it, the checkpoint written before every send, fails, and the try stops
    # there instead of sending on beside the try Airflow starts next. (Its retry meets the same.)
    from airflow.sdk.execution_time.context import TaskStateStoreAccessor

    path, rows = extract
    original_set = TaskStateStoreAccessor.set
    acknowledged_when_lost: list[int] = []

    def set_until_the_supervisor_is_lost(self: Any, key: str, value: Any, **kwargs: Any) -> None:
        if acknowledged_when_lost or sum(value["acknowledged"].values()) >= 50:
            acknowledged_when_lost.append(len(ingested_references(connected_url)))
            raise BrokenPipeError(32, "Broken pipe")
        original_set(self, key, value, **kwargs)

    monkeypatch.setattr(TaskStateStoreAccessor, "set", set_until_the_supervisor_is_lost)
    dag = ingest_dag("signals_orphan", [], source=str(path), batch_size=25)

    run = run_dag(dag)

    assert run.state == "failed"
    # Not one event after the first lost round trip, by this try or the next.
    assert len(ingested_references(connected_url)) == acknowledged_when_lost[0] == 50
    assert len(valid_references(rows)) > 50


def test_a_re_run_of_a_completed_task_sends_nothing_unless_fresh(
    connected_url: str, extract: tuple[Path, list], caplog: pytest.LogCaptureFixture
) -> None:
    # A cleared task run again reads the task state store its run kept (Airflow keeps it after
    # success unless [state_store] clear_on_success): the same store, here, for every execute.
    path, rows = extract
    everyone = dict.fromkeys(valid_references(rows), 1)
    store = DictStore()

    def execute(try_number: int, **options: Any) -> dict[str, Any]:
        operator = IngestSignalsOperator(
            task_id="ingest", source=str(path), signal_types=SIGNAL_TYPES, **MAPPING_COLUMNS, **options
        )
        ti = type("TI", (), {"try_number": try_number})()
        return operator.execute({"task_state_store": store, "ti": ti})  # type: ignore[arg-type]

    first = execute(1)
    with caplog.at_level("WARNING"):
        again = execute(1)

    assert first["acknowledged"] == again["acknowledged"] == len(everyone)
    assert sum(again["resumed_from"].values()) == len(everyone)
    assert "Nothing left to send" in caplog.text
    assert ingested_references(connected_url) == everyone

    # fresh: the first try sends everything again, on purpose; a retry of it resumes.
    assert execute(1, fresh=True)["resumed_from"] is None
    assert ingested_references(connected_url) == dict.fromkeys(everyone, 2)
    assert sum(execute(2, fresh=True)["resumed_from"].values()) == len(everyone)
    assert ingested_references(connected_url) == dict.fromkeys(everyone, 2)


@pytest.mark.parametrize("setting", ["True", "False"])
def test_deferrable_defaults_to_airflows_default_deferrable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str
) -> None:
    import importlib

    import listsync.operators.signals

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", setting)
    module = importlib.reload(listsync.operators.signals)
    try:
        operator = module.IngestSignalsOperator(
            task_id="t", source=str(tmp_path / "x.csv"), **MAPPING_COLUMNS
        )
        assert operator.deferrable is (setting == "True")
    finally:
        monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE")
        importlib.reload(listsync.operators.signals)


@pytest.mark.slow
def test_fresh_applies_to_the_first_try_after_the_task_is_cleared(
    run_dag: Callable[..., Any], connected_url: str, extract: tuple[Path, list]
) -> None:
    # A cleared task keeps counting its tries: its next try is not try 1. The numbers are taken
    # from Airflow clearing a real task instance; the task state store is the DictStore.
    import sqlalchemy as sa
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session

    path, rows = extract
    run = run_dag(ingest_dag("signals_cleared", [], source=str(path), dry_run=True))
    with create_session() as session:
        ti = session.scalar(
            sa.select(TaskInstance).where(TaskInstance.run_id == run.run_id, TaskInstance.task_id == "ingest")
        )
        first = SimpleNamespace(try_number=ti.try_number, max_tries=ti.max_tries)
        clear_task_instances([ti], session, dag_run_state=False)
        after_clearing = SimpleNamespace(try_number=ti.try_number + 1, max_tries=ti.max_tries)
        session.rollback()
    retry_after_clearing = SimpleNamespace(
        try_number=after_clearing.try_number + 1, max_tries=after_clearing.max_tries
    )
    assert (first.try_number, after_clearing.try_number) == (1, 2)
    everyone = valid_references(rows)
    store = DictStore()

    def execute(ti: Any, **options: Any) -> dict[str, Any]:
        operator = IngestSignalsOperator(
            task_id="ingest",
            source=str(path),
            signal_types=SIGNAL_TYPES,
            retries=1,
            **MAPPING_COLUMNS,
            **options,
        )
        return operator.execute({"task_state_store": store, "ti": ti})  # type: ignore[arg-type]

    execute(first, fresh=True)
    assert ingested_references(connected_url) == dict.fromkeys(everyone, 1)
    assert sum(execute(after_clearing)["resumed_from"].values()) == len(everyone)  # sends nothing
    assert ingested_references(connected_url) == dict.fromkeys(everyone, 1)

    assert execute(after_clearing, fresh=True)["resumed_from"] is None  # sends all again
    assert ingested_references(connected_url) == dict.fromkeys(everyone, 2)
    assert sum(execute(retry_after_clearing, fresh=True)["resumed_from"].values()) == len(everyone)
    assert ingested_references(connected_url) == dict.fromkeys(everyone, 2)
