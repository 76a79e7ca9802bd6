"""Fixtures shared by the whole suite.

``postgres_url`` is a reachable PostgreSQL test database and ``redis_url`` a Redis server (a
test needing another service calls ``service_missing`` where it is absent); ``launcher`` is
``deploy/cluster.py``, the native cluster launcher. ``airflow_home`` points
Airflow at a SQLite metadata DB made once per session, ``run_dag`` runs a DAG with ``dag.test()``
on it, and ``connect_listsync`` points the ``listsync_default`` connection at a live emulator for
one test (``listsync_connection`` builds that connection for fixtures of a wider scope).

The test kit's fixtures (``fake_clock``, ``live_emulator``) come from :mod:`tests.support.plugin`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import httpx
import pytest
from hypothesis import settings

from .support import load_script

pytest_plugins = ["tests.support.plugin"]

# The property tests check what a rule gives, not how fast: a machine busy with other work must
# not fail them on hypothesis's 200 ms deadline (speed is measured under benchmarks/).
settings.register_profile("listsync", deadline=None)
settings.load_profile("listsync")

# dag.test() of Airflow 3.3.2 cannot finish a run of a DAG with a deadline: the example nightly
# DAG is parsed without it here (the cluster test, run by a scheduler, turns it back on).
os.environ.setdefault("LISTSYNC_NIGHTLY_DEADLINE", "off")

POSTGRES_URL = os.environ.get(
    "LISTSYNC_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("LISTSYNC_TEST_REDIS_URL", "redis://127.0.0.1:6379")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a reachable PostgreSQL test database.

    On a developer machine without PostgreSQL the test is skipped with the reason; under CI
    (``CI=true``) a missing server fails the run, so a green run never hides it.
    """
    import sqlalchemy as sa

    engine = sa.create_engine(POSTGRES_URL)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
    except sa.exc.OperationalError as exc:
        # Only "nothing listens there" means "no PostgreSQL here"; a wrong password, a missing
        # database or driver is a broken setup, and fails the test.
        if not refused(exc):
            raise
        service_missing(f"PostgreSQL not reachable at {POSTGRES_URL}: {exc.__class__.__name__}: {exc}")
    finally:
        engine.dispose()
    yield POSTGRES_URL


def refused(error: BaseException) -> bool:
    """Whether ``error`` says that nothing listens where a service was looked for."""
    return isinstance(error, ConnectionRefusedError) or any(
        words in str(error).lower() for words in ("connection refused", "could not connect to server")
    )


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The URL of a reachable Redis server; skipped or failed like :func:`postgres_url`."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        if not refused(exc):
            raise
        service_missing(f"Redis not reachable at {REDIS_URL}: {exc.__class__.__name__}: {exc}")
    finally:
        client.close()
    return REDIS_URL


def service_missing(message: str) -> NoReturn:
    """Skip the test that needs a service this machine lacks; under CI (``CI=true``) fail it, so a
    green run never hides a test that did not run."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: tests needing it must run)")
    pytest.skip(message)


@pytest.fixture(scope="session", name="service_missing")
def service_missing_fixture() -> Callable[[str], NoReturn]:
    """:func:`service_missing`, for a test that looks for a service of its own."""
    return service_missing


@pytest.fixture(scope="session")
def launcher() -> ModuleType:
    """``deploy/cluster.py``, the native cluster launcher, as a module."""
    return load_script("deploy/cluster.py")


class Intercepting:
    """An HTTP transport to a live server that answers some requests itself.

    ``answer(request)`` returns the response to give instead of the server's, or ``None`` to let
    the request through: a service that acknowledges writes it never applies, say.
    """

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response | None]) -> None:
        self._answer = answer
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answered = self._answer(request)
        return answered if answered is not None else self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


@pytest.fixture(autouse=True)
def listsync_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where ``listsync ingest`` keeps its checkpoints in this test: a folder of its own."""
    state = tmp_path / "listsync-state"
    monkeypatch.setenv("LISTSYNC_STATE_DIR", str(state))
    return state


@pytest.fixture(autouse=True)
def quick_register_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease in the asset state store settles for 50 ms rather than 2 s: under ``dag.test()``
    the store is reached in this process, in a millisecond; the 2 s are a margin for an API server
    across a network. The lease tests that race takers on such a store give it their own settle."""
    monkeypatch.setattr("listsync.sync.lease.REGISTER_SETTLE", 0.05)


@pytest.fixture
def intercepting() -> type[Intercepting]:
    """:class:`Intercepting`, for a client's ``transport=``."""
    return Intercepting


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An Airflow home with an initialised SQLite metadata DB, for ``dag.test()``; once per session.

    The environment is set and Airflow's ORM rebuilt from it, so this works whether or not
    Airflow was imported (and configured from another home) earlier in the session. Its DAG
    folder stays empty, as ``dag.test()`` parses that folder on every run.
    """
    home = tmp_path_factory.mktemp("airflow_home")
    (home / "dags").mkdir()
    settings_env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
    }
    configured_before = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in os.environ
    # The context puts the environment back even when the set-up fails half-way.
    with pytest.MonkeyPatch.context() as patch:
        for name, value in settings_env.items():
            patch.setenv(name, value)
        from airflow import settings
        from airflow.dag_processing.bundles.manager import DagBundlesManager
        from airflow.utils import db

        settings.configure_vars()
        settings.configure_orm()
        db.initdb()
        DagBundlesManager().sync_bundles_to_db()
        yield home
        settings.dispose_orm()
    # Hand the ORM back to the metadata DB the environment had configured before, if any.
    if configured_before:
        settings.configure_vars()
        settings.configure_orm()


@pytest.fixture
def run_dag(airflow_home: Path) -> Callable[..., Any]:
    """Runs a DAG with ``dag.test(**test_kwargs)`` and returns the DagRun.

    The DAG is written to the metadata DB first, as ``dag.test()`` needs it serialised there; the
    assets' state stores start empty for each test.
    """
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    # The metadata DB is the session's: a sync state or lease an earlier test kept in an asset's
    # state store would meet this test's fresh emulator.
    with create_session() as session:
        session.query(AssetStateStoreModel).delete()

    def run(dag: Any, **test_kwargs: Any) -> Any:
        bag = DagBag(dag_folder=str(airflow_home / "dags"))
        bag.bag_dag(dag)
        sync_bag_to_db(bag, "dags-folder", None)
        return dag.test(**test_kwargs)

    return run


def _listsync_connection(
    base_url: str, api_key: str, user_id: str | None = None, *, timeout: float | None = None
) -> str:
    connection: dict[str, Any] = {"conn_type": "listsync", "host": base_url, "password": api_key}
    extra = {name: value for name, value in (("user_id", user_id), ("timeout", timeout)) if value is not None}
    if extra:
        connection["extra"] = extra
    return json.dumps(connection)


@pytest.fixture(scope="session")
def listsync_connection() -> Callable[..., str]:
    """Builds a listsync connection as an ``AIRFLOW_CONN_*`` variable holds it:
    ``listsync_connection(base_url, api_key, user_id=None)``, for fixtures of any scope."""
    return _listsync_connection


@pytest.fixture
def connect_listsync(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Points ``listsync_default`` at a live emulator for this test: ``connect(url, api_key, user_id)``
    (``timeout=`` sets the connection's request timeout).

    It is set as ``AIRFLOW_CONN_LISTSYNC_DEFAULT``, the way a deployment names it, so the operators
    find it through the ordinary connection lookup.
    """

    def connect(
        base_url: str, api_key: str, user_id: str | None = None, *, timeout: float | None = None
    ) -> None:
        connection = _listsync_connection(base_url, api_key, user_id, timeout=timeout)
        monkeypatch.setenv("AIRFLOW_CONN_LISTSYNC_DEFAULT", connection)

    return connect


@pytest.fixture
def prepared_events(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every event :func:`~listsync.signals.build.prepare_events` builds for ``ingest_events``
    during the test, in order (the name is replaced where the ingestion looks it up)."""
    import listsync.signals.ingest

    events: list[Any] = []
    prepare = listsync.signals.ingest.prepare_events

    class Recording:
        """The stream ``prepare_events`` returned, noting each event it gives out."""

        def __init__(self, stream: Any) -> None:
            self._stream = stream

        def __getattr__(self, name: str) -> Any:
            return getattr(self._stream, name)

        def __iter__(self) -> Any:
            for event in self._stream:
                events.append(event)
                yield event

    def recording_prepare_events(*args: Any, **kwargs: Any) -> Any:
        return Recording(prepare(*args, **kwargs))

    monkeypatch.setattr(listsync.signals.ingest, "prepare_events", recording_prepare_events)
    return events
