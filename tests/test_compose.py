"""The compose stack is coherent: checked by reading docker-compose.yml, without Docker.

Every reference in the file (images, build contexts, volumes, dependencies, connection URIs, the
DAG folder, the files the containers run) must point at something that exists, and the stack must
be the CeleryExecutor layout of Airflow 3.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer", "celery worker")
# ${NAME:-default} and ${NAME-default}: the default is what the stack runs with out of the box.
SUBSTITUTION = re.compile(r"\$\{(?P<name>\w+)(?::?-(?P<default>[^}]*))?\}")


def with_defaults(value: str) -> str:
    return SUBSTITUTION.sub(lambda m: m.group("default") or "", value)


def command_of(service: dict[str, Any]) -> str:
    parts = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if isinstance(value, list):
            parts.extend(str(v) for v in value)
        elif value:
            parts.extend(shlex.split(str(value)))
    return " ".join(parts)


def env_files(service: dict[str, Any]) -> list[tuple[str, bool]]:
    """(path, required) of each ``env_file`` entry, in the order compose reads them."""
    entries = service.get("env_file") or []
    if isinstance(entries, str):
        entries = [entries]
    return [
        (entry, True) if isinstance(entry, str) else (entry["path"], entry.get("required", True))
        for entry in entries
    ]


def environment_of(service: dict[str, Any], launcher: ModuleType) -> dict[str, str]:
    """The environment the service starts with out of the box: its required env files (read the
    way the native cluster reads them), then its ``environment``, which wins."""
    merged = {}
    for path, required in env_files(service):
        if required:
            merged.update(launcher.read_env_file(REPO / path))
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    merged.update({key: with_defaults(str(value)) for key, value in env.items()})
    return merged


def depends_on(service: dict[str, Any]) -> list[str]:
    targets = service.get("depends_on") or []
    return list(targets)


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Host path (relative to the repository) -> container path, for bind mounts only."""
    mounts = {}
    for volume in service.get("volumes") or []:
        source, target = str(volume).split(":")[:2]
        if source.startswith((".", "/")):
            mounts[source] = target
    return mounts


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def service_running(services: dict[str, dict[str, Any]], command: str) -> tuple[str, dict[str, Any]]:
    matches = [(name, s) for name, s in services.items() if re.search(rf"\b{command}\b", command_of(s))]
    assert len(matches) == 1, f"expected one service running {command!r}, found {[n for n, _ in matches]}"
    return matches[0]


def test_every_service_has_an_image_or_a_build_whose_files_exist(services):
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        if "build" in service:
            build = service["build"]
            context = REPO / (build["context"] if isinstance(build, dict) else build)
            dockerfile = context / (
                build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"
            )
            assert dockerfile.is_file(), f"{name}: {dockerfile} missing"


def test_dependencies_and_named_volumes_exist(compose, services):
    declared_volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        for target in depends_on(service):
            assert target in services, f"{name} depends on unknown service {target}"
            assert target != name
        for volume in service.get("volumes") or []:
            source = str(volume).split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared_volumes, f"{name} mounts undeclared volume {source}"


def test_bind_mounts_point_at_files_in_the_repository(services):
    for name, service in services.items():
        for source in bind_mounts(service):
            assert (REPO / source).exists(), f"{name} mounts {source}, which does not exist"


def test_celery_executor_with_postgres_metadata_db_and_redis_broker(services, launcher):
    for command in AIRFLOW_COMPONENTS:
        name, service = service_running(services, command)
        env = environment_of(service, launcher)
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        metadata_db = urlsplit(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        assert metadata_db.scheme.startswith("postgresql")
        assert services[metadata_db.hostname]["image"].startswith("postgres:")
        broker = urlsplit(env["AIRFLOW__CELERY__BROKER_URL"])
        assert broker.scheme == "redis"
        assert services[broker.hostname]["image"].startswith("redis:")
        assert (
            urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]).hostname
            == service_running(services, "api-server")[0]
        )


def test_every_url_in_the_airflow_environment_names_a_service(services, launcher):
    for command in AIRFLOW_COMPONENTS:
        _, service = service_running(services, command)
        for key, value in environment_of(service, launcher).items():
            if "://" in value and not value.lstrip().startswith("{"):
                assert urlsplit(value).hostname in services, f"{key}={value}"


def test_connections_point_at_the_emulator_and_the_seeded_warehouse(services, launcher):
    _, worker = service_running(services, "celery worker")
    env = environment_of(worker, launcher)

    service_conn = json.loads(env["AIRFLOW_CONN_LISTSYNC_DEFAULT"])
    assert service_conn["conn_type"] == "listsync"
    assert service_conn["password"].startswith("sk_")
    emulator_host = urlsplit(service_conn["host"]).hostname
    assert "listsync emulator" in command_of(services[emulator_host])
    assert str(urlsplit(service_conn["host"]).port) in command_of(services[emulator_host])

    warehouse = urlsplit(env["AIRFLOW_CONN_LISTSYNC_WAREHOUSE"])
    assert services[warehouse.hostname]["image"].startswith("postgres:")
    seeders = [
        s
        for s in services.values()
        if "generate_data.py" in command_of(s) and "--postgres-url" in command_of(s)
    ]
    assert len(seeders) == 1
    seed_command = command_of(seeders[0])
    assert urlsplit(seed_command.split("--postgres-url ")[1].split()[0]).hostname == warehouse.hostname
    assert warehouse.hostname in depends_on(seeders[0])
    # The worker, which runs the tasks, waits for the seeded warehouse and a live emulator.
    worker_deps = worker["depends_on"]
    assert worker_deps[emulator_host]["condition"] == "service_healthy"
    seeder_name = next(name for name, s in services.items() if s is seeders[0])
    assert worker_deps[seeder_name]["condition"] == "service_completed_successfully"


def test_files_the_containers_run_are_in_the_image(services):
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"pip install .*/opt/listsync", dockerfile)
    copied = {
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY")
        for source in line.split()[1:-1]
        if not source.startswith("--")
    }
    for name, service in services.items():
        for path in re.findall(r"/opt/listsync/(\S+)", command_of(service)):
            top = path.split("/")[0]
            assert top in copied, f"{name} runs {path}, not copied into the image"
            assert (REPO / path).is_file(), f"{name} runs {path}, missing from the repository"


def test_dag_folder_is_mounted_on_every_airflow_component(services, launcher):
    for command in AIRFLOW_COMPONENTS:
        name, service = service_running(services, command)
        mounts = bind_mounts(service)
        dags_folder = environment_of(service, launcher).get("AIRFLOW__CORE__DAGS_FOLDER", "/opt/airflow/dags")
        assert mounts.get("./dags") == dags_folder, f"{name} does not mount ./dags at {dags_folder}"


def test_metadata_db_is_migrated_before_airflow_starts(services):
    init_name, _ = service_running(services, "db migrate")
    for command in AIRFLOW_COMPONENTS:
        name, service = service_running(services, command)
        assert service["depends_on"][init_name]["condition"] == "service_completed_successfully", name


def test_with_defaults_substitutes_the_default_value():
    assert with_defaults("${A:-x}/${B-y}/${C}") == "x/y/"


def test_build_context_leaves_out_the_virtualenv_and_local_files():
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()}
    assert {".venv", ".demo", ".git"} <= ignored


def test_airflow_services_take_their_settings_from_the_file_the_native_cluster_reads(services, launcher):
    airflow_services = [service_running(services, command) for command in (*AIRFLOW_COMPONENTS, "db migrate")]
    for name, service in airflow_services:
        files = env_files(service)
        assert files[0] == (str(launcher.SETTINGS_FILE.relative_to(REPO)), True), name
        # Only the optional local overrides may follow; nothing in `environment` redefines an
        # Airflow setting, so compose and `make cluster` cannot drift apart.
        assert files[1:] == [("deploy/local.env", False)], name
        overridden = set(service.get("environment") or {})
        assert not {key for key in overridden if key.startswith("AIRFLOW")}, name


def test_the_native_cluster_has_every_service_the_deployment_settings_name(services, launcher, tmp_path):
    hosts = launcher.hosts_named(launcher.read_env_file(launcher.SETTINGS_FILE))
    state = launcher.State(tmp_path, databases=["metadata", "warehouse"], redis_db=1)
    native = launcher.endpoints_for(state, {"api": 1, "emulator": 2})

    assert hosts <= set(services)
    assert hosts == set(native)


def test_local_overrides_stay_out_of_git_and_the_image():
    assert "/deploy/local.env" in (REPO / ".gitignore").read_text().splitlines()
    assert "deploy/local.env" in (REPO / ".dockerignore").read_text().splitlines()


def test_the_image_installs_with_the_constraints_file_of_its_python():
    dockerfile = (REPO / "Dockerfile").read_text()
    python = re.search(r"^ARG PYTHON_VERSION=(\S+)$", dockerfile, flags=re.MULTILINE)[1]
    assert (REPO / "deploy" / f"constraints-{python}.txt").is_file()
    install = re.search(r"^RUN pip install (.*?)(?<!\\)$", dockerfile, flags=re.MULTILINE | re.DOTALL)[1]
    assert '--constraint "/opt/listsync/deploy/constraints-${PYTHON_VERSION}.txt"' in install
    assert (
        "COPY --chown=airflow:root deploy/constraints-${PYTHON_VERSION}.txt /opt/listsync/deploy/"
        in dockerfile
    )
