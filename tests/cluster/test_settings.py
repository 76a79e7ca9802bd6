"""The native cluster's settings are the compose stack's, with only its hosts and paths made local.

``deploy/cluster.py`` reads ``deploy/airflow.env``, the file compose gives its Airflow services,
and swaps the compose hosts and container paths for local ones. These tests need no service.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

import pytest

ENDPOINTS = {
    "postgres": ("postgres@127.0.0.1:5432", "/listsync_cluster_x"),
    "warehouse": ("postgres@127.0.0.1:5432", "/listsync_cluster_x_warehouse"),
    "redis": ("127.0.0.1:6379", "/3"),
    "airflow-apiserver": ("127.0.0.1:41001", None),
    "emulator": ("127.0.0.1:41002", None),
}


@pytest.fixture
def native(launcher: ModuleType, tmp_path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(compose settings, the native cluster's settings made from them)."""
    compose = launcher.read_env_file(launcher.SETTINGS_FILE)
    endpoints = {host: launcher.Endpoint(*where) for host, where in ENDPOINTS.items()}
    paths = {launcher.COMPOSE_DAGS: tmp_path / "dags", launcher.COMPOSE_HOME: tmp_path / "home"}
    return compose, launcher.native_settings(compose, endpoints, paths)


def test_every_url_of_the_native_settings_is_local(launcher, native):
    _, settings = native
    hosts = launcher.hosts_named(settings)
    assert hosts == {"127.0.0.1"}


def test_the_native_cluster_changes_only_hosts_ports_databases_and_paths(launcher, native):
    compose, settings = native
    assert settings.keys() == compose.keys()
    changed = {key for key in compose if settings[key] != compose[key]}
    # Only values holding a compose host or a container path differ; the rest (executor, JWT
    # secret, auth, DAG defaults...) is the same text.
    assert changed == {
        key
        for key, value in compose.items()
        if launcher.URL.search(value) or value.startswith("/opt/airflow")
    }
    assert settings["AIRFLOW__CORE__EXECUTOR"] == compose["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    broker = urlsplit(settings["AIRFLOW__CELERY__BROKER_URL"])
    assert (broker.scheme, broker.netloc, broker.path) == ("redis", "127.0.0.1:6379", "/3")
    metadata = urlsplit(settings["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert metadata.scheme == urlsplit(compose["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]).scheme
    assert (metadata.netloc, metadata.path) == ENDPOINTS["postgres"]
    # The execution API keeps its path, on the cluster's api-server port.
    assert settings["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:41001/execution/"
    # Inside the JSON connection too: the service connection points at the cluster's emulator.
    assert '"host": "http://127.0.0.1:41002"' in settings["AIRFLOW_CONN_LISTSYNC_DEFAULT"]


def test_container_paths_become_the_repository_dags_and_the_cluster_home(native, tmp_path):
    _, settings = native
    assert settings["AIRFLOW__CORE__DAGS_FOLDER"] == str(tmp_path / "dags")
    assert settings["LISTSYNC_OUTPUT_DIR"] == str(tmp_path / "home" / "listsync")


def test_a_compose_host_the_cluster_does_not_start_is_refused(launcher):
    settings = {"AIRFLOW__METRICS__STATSD_HOST_URL": "udp://statsd:8125/"}

    with pytest.raises(launcher.ClusterError, match="names statsd, which the native cluster does not start"):
        launcher.native_settings(settings, {}, {})


def test_env_file_values_are_read_as_compose_reads_them(launcher, tmp_path):
    env_file = tmp_path / "airflow.env"
    env_file.write_text(
        "# a comment\n\nPLAIN=a=b # a note\n"
        'JSON=\'{"host": "http://x:1", "extra": {}}\'\n'
        'QUOTED="two # words"\n'
    )

    assert launcher.read_env_file(env_file) == {
        "PLAIN": "a=b",
        "JSON": '{"host": "http://x:1", "extra": {}}',
        "QUOTED": "two # words",
    }


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("KEY=${OTHER:-x}", r"airflow.env:1: KEY uses \$\{...\}, which env files do not expand"),
        ("not a setting", r"airflow.env:1: expected KEY=VALUE"),
    ],
)
def test_env_file_lines_compose_and_the_launcher_could_read_differently_are_refused(
    launcher, tmp_path, line, message
):
    env_file = tmp_path / "airflow.env"
    env_file.write_text(line + "\n")

    with pytest.raises(launcher.ClusterError, match=message):
        launcher.read_env_file(env_file)
