"""Fixtures for the signal ingestion tests: an Airflow metadata DB for ``dag.test()``.

``airflow_db`` points Airflow at a fresh SQLite database in a temporary ``AIRFLOW_HOME`` and
creates its tables once per session. It works whether or not Airflow was imported earlier in the
session, because it sets the environment and then rebuilds Airflow's ORM from it. ``run_dag``
registers an in-memory DAG (``dag.test()`` needs it serialised) and runs it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An initialised Airflow metadata DB (SQLite) for this session; yields its AIRFLOW_HOME."""
    home = tmp_path_factory.mktemp("airflow_home")
    settings_env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
    }
    saved = {key: os.environ.get(key) for key in settings_env}
    os.environ.update(settings_env)
    (home / "dags").mkdir()

    from airflow import settings
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.utils import db

    settings.configure_vars()
    settings.configure_orm()
    db.initdb()
    DagBundlesManager().sync_bundles_to_db()
    yield str(home)

    settings.dispose_orm()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def run_dag(airflow_db: str) -> Callable[..., Any]:
    """Run a DAG defined in the test with ``dag.test()``; returns the DagRun."""
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    def run(dag: Any, **test_kwargs: Any) -> Any:
        bag = DagBag(dag_folder=os.path.join(airflow_db, "dags"))
        bag.bag_dag(dag)
        sync_bag_to_db(bag, "dags-folder", None)
        return dag.test(**test_kwargs)

    return run
