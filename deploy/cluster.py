"""A native Airflow cluster on this machine, with the settings of the compose stack.

``make cluster`` (``python deploy/cluster.py start``) starts, each in a process group of its own
with its output in a log file:

* a throwaway metadata database ``listsync_cluster_<id>`` on the local PostgreSQL, and beside it
  ``listsync_cluster_<id>_warehouse``, loaded with the example warehouse
  (``examples/generate_data.py``, as the compose stack's ``warehouse-seed`` job does);
* the Celery broker on the first empty database of the local Redis;
* ``airflow db migrate``, then the api-server, scheduler, dag-processor, triggerer and one Celery
  worker, in an Airflow home of their own;
* the service emulator (``listsync emulator``) with ``examples/emulator.yaml``.

Every Airflow setting comes from ``deploy/airflow.env``, the file docker-compose.yml gives its
Airflow services, with the compose hosts and container paths swapped for the local ones
(:func:`native_settings`); the only additions are what a shared host needs (free ports, the
Airflow home). ``start`` waits until every component answers, writes ``cluster.json`` (mode 0600:
it holds the login) beside the logs, prints the UI's address and login, and returns, leaving the
cluster running. ``stop`` (``make cluster-stop``) ends every process group it started, drops both
databases and empties the Redis database; a ``start`` that fails half-way does the same.

    python deploy/cluster.py start [--dir .cluster] [--emulator-config FILE] [--set KEY=VALUE]...
    eval "$(python deploy/cluster.py env)"   # then the airflow CLI talks to the running cluster
    python deploy/cluster.py stop [--dir .cluster]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

REPO = Path(__file__).resolve().parents[1]
SETTINGS_FILE = REPO / "deploy" / "airflow.env"
DEFAULT_DIR = REPO / ".cluster"
STATE_NAME = "cluster.json"
BIN = Path(sys.executable).parent
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
# Redis answers SELECT for databases 0-15 unless configured otherwise; 0 is left to others.
REDIS_DATABASES = range(1, 16)
REDIS_CLAIM_KEY = "listsync:cluster"
UI_USER = "admin"

# Container paths of the compose stack and what they are here: ./dags is mounted at the image's
# DAG folder, and everything else under the image's AIRFLOW_HOME goes to the cluster's home.
COMPOSE_DAGS = "/opt/airflow/dags"
COMPOSE_HOME = "/opt/airflow"

# A URL inside a setting (also inside a JSON connection): scheme, user info, host, port, path.
URL = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*)://(?:(?P<userinfo>[^@/\s\"']*)@)?(?P<host>[A-Za-z0-9_.-]+)"
    r"(?::(?P<port>\d+))?(?P<path>/[^\s\"']*)?"
)
ENV_LINE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)")


class ClusterError(Exception):
    """The cluster could not be started or stopped; the message says what and where to look."""


def read_env_file(path: Path) -> dict[str, str]:
    """The ``KEY=VALUE`` lines of an env file as compose reads them, in order.

    Blank lines and ``#`` comments are skipped, as is a comment after an unquoted value (`` #``);
    a value in single quotes is taken literally. ``${...}`` is refused: compose does not promise
    to interpolate env files, so a value must mean the same to compose and to this launcher.
    """
    settings: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        match = ENV_LINE.fullmatch(text)
        if match is None:
            raise ClusterError(f"{path}:{number}: expected KEY=VALUE, got {text[:40]!r}")
        value = match["value"]
        quoted = value[:1] in {"'", '"'}
        value = shlex.split(value)[0] if quoted else value.split(" #", 1)[0].rstrip()
        if "${" in value:
            raise ClusterError(
                f"{path}:{number}: {match['key']} uses ${{...}}, which env files do not expand"
            )
        settings[match["key"]] = value
    return settings


@dataclass(frozen=True)
class Endpoint:
    """Where a compose service is reached on this machine.

    ``netloc`` replaces the user, host and port of every URL naming the service; ``path``, when
    given, replaces the URL's path (a database name), else the path is kept.
    """

    netloc: str
    path: str | None = None


def hosts_named(settings: Mapping[str, str]) -> set[str]:
    """Every host a URL in ``settings`` names."""
    return {match["host"] for value in settings.values() for match in URL.finditer(value)}


def localize(value: str, endpoints: Mapping[str, Endpoint], paths: Mapping[str, Path]) -> str:
    """``value`` with the URLs naming a compose service pointed at its ``endpoints`` entry, and
    a container path (a key of ``paths``, or below one) turned into the local path."""

    def swap(match: re.Match[str]) -> str:
        endpoint = endpoints.get(match["host"])
        if endpoint is None:
            return match[0]
        path = endpoint.path if endpoint.path is not None else match["path"] or ""
        return f"{match['scheme']}://{endpoint.netloc}{path}"

    value = URL.sub(swap, value)
    for container in sorted(paths, key=len, reverse=True):
        if value == container or value.startswith(container + "/"):
            return str(paths[container]) + value[len(container) :]
    return value


def native_settings(
    compose_settings: Mapping[str, str], endpoints: Mapping[str, Endpoint], paths: Mapping[str, Path]
) -> dict[str, str]:
    """The compose settings with every compose host and container path made local.

    :raises ClusterError: a setting names a host no endpoint is given for.
    """
    unknown = hosts_named(compose_settings) - set(endpoints)
    if unknown:
        raise ClusterError(
            f"{SETTINGS_FILE.name} names {', '.join(sorted(unknown))}, which the native cluster does not "
            "start: give it an endpoint in deploy/cluster.py (endpoints_for)"
        )
    return {key: localize(value, endpoints, paths) for key, value in compose_settings.items()}


def netloc(user: str | None, password: str | None, host: str, port: int | None) -> str:
    credentials = quote(user or "", safe="") + (f":{quote(password, safe='')}" if password else "")
    return (f"{credentials}@" if credentials else "") + host + (f":{port}" if port else "")


@dataclass
class State:
    """What a cluster started, kept in ``cluster.json`` so that ``stop`` can undo it."""

    directory: Path
    name: str = ""
    postgres_url: str = DEFAULT_POSTGRES_URL
    databases: list[str] = field(default_factory=list)
    redis_url: str = DEFAULT_REDIS_URL
    redis_db: int | None = None
    # name -> {"pid", "started" (the process's start time, so a reused pid is never signalled), "log"}
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    login: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.directory / STATE_NAME

    def save(self) -> None:
        data = {key: value for key, value in vars(self).items() if key != "directory"}
        self.path.touch(mode=0o600)
        self.path.write_text(json.dumps(data, indent=2, sort_keys=True))

    @classmethod
    def load(cls, directory: Path) -> State | None:
        path = directory / STATE_NAME
        if not path.is_file():
            return None
        return cls(directory=directory, **json.loads(path.read_text()))


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def admin_engine(url: str) -> Any:
    import sqlalchemy as sa

    return sa.create_engine(
        sa.make_url(url).set(drivername="postgresql+psycopg2"), isolation_level="AUTOCOMMIT"
    )


def create_databases(state: State, names: Iterable[str]) -> None:
    import sqlalchemy as sa

    engine = admin_engine(state.postgres_url)
    try:
        with engine.connect() as conn:
            for name in names:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
                state.databases.append(name)
                state.save()
    except sa.exc.SQLAlchemyError as exc:
        raise ClusterError(
            f"cannot create a database on {engine.url.render_as_string(hide_password=True)} "
            f"(give a server and a user that may, with --postgres): {first_line(exc)}"
        ) from None
    finally:
        engine.dispose()


def drop_databases(state: State) -> list[str]:
    """Drop the cluster's databases; return the problems met (a database that stays is one)."""
    import sqlalchemy as sa

    if not state.databases:
        return []
    problems = []
    engine = admin_engine(state.postgres_url)
    try:
        with engine.connect() as conn:
            for name in list(state.databases):
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                state.databases.remove(name)
    except sa.exc.SQLAlchemyError as exc:
        problems.append(f"could not drop {', '.join(state.databases)}: {first_line(exc)}")
    finally:
        engine.dispose()
    return problems


def claim_redis_database(state: State) -> int:
    """The first empty Redis database, marked as this cluster's so that no other cluster takes it."""
    import redis

    for number in REDIS_DATABASES:
        client = redis.Redis.from_url(state.redis_url, db=number)
        try:
            if client.dbsize() == 0 and client.set(REDIS_CLAIM_KEY, state.name, nx=True):
                return number
        except redis.RedisError as exc:
            raise ClusterError(
                f"cannot use Redis at {urlsplit(state.redis_url).hostname} (give one with --redis): "
                f"{first_line(exc)}"
            ) from None
        finally:
            client.close()
    raise ClusterError(f"no empty Redis database at {state.redis_url} (tried {REDIS_DATABASES})")


def release_redis_database(state: State) -> list[str]:
    import redis

    if state.redis_db is None:
        return []
    client = redis.Redis.from_url(state.redis_url, db=state.redis_db)
    try:
        if client.get(REDIS_CLAIM_KEY) == state.name.encode():
            client.flushdb()
        state.redis_db = None
    except redis.RedisError as exc:
        return [f"could not empty Redis database {state.redis_db}: {first_line(exc)}"]
    finally:
        client.close()
    return []


def endpoints_for(state: State, ports: Mapping[str, int]) -> dict[str, Endpoint]:
    """The compose services of deploy/airflow.env and where this cluster has them."""
    from sqlalchemy import make_url

    server = make_url(state.postgres_url)
    database = netloc(server.username, server.password, server.host or "127.0.0.1", server.port)
    metadata, warehouse = state.databases
    return {
        "postgres": Endpoint(database, f"/{metadata}"),
        "warehouse": Endpoint(database, f"/{warehouse}"),
        "redis": Endpoint(urlsplit(state.redis_url).netloc, f"/{state.redis_db}"),
        "airflow-apiserver": Endpoint(f"127.0.0.1:{ports['api']}"),
        "emulator": Endpoint(f"127.0.0.1:{ports['emulator']}"),
    }


def inherited_environment() -> dict[str, str]:
    """This shell's environment without its Airflow settings, which must not leak into the cluster."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_")) and key != "AIRFLOW_HOME"
    }


def alive(record: Mapping[str, Any]) -> bool:
    """Whether the recorded process still runs (the same process: its start time matches)."""
    import psutil

    try:
        return bool(psutil.Process(record["pid"]).create_time() == record["started"])
    except psutil.Error:
        return False


def launch(state: State, name: str, command: list[str]) -> subprocess.Popen[bytes]:
    """Start ``command`` in a new session (its own process group), its output in ``logs/<name>.log``."""
    import psutil

    log_path = state.directory / "logs" / f"{name}.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command,
            env={**inherited_environment(), **state.env},
            cwd=state.directory,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        started = psutil.Process(process.pid).create_time()
    except psutil.Error:
        started = 0.0
    state.processes[name] = {"pid": process.pid, "started": started, "log": str(log_path)}
    state.save()
    return process


def log_tail(path: str | Path, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def finish(state: State, name: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a one-off step; raise with its log's tail if it fails or overruns."""
    log = state.processes[name]["log"]
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{name} did not finish in {timeout:.0f} s; see {log}") from None
    if code != 0:
        raise ClusterError(f"{name} failed (exit {code}); see {log}\n{log_tail(log)}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def wait_until_ready(state: State, processes: Mapping[str, subprocess.Popen[bytes]], timeout: float) -> None:
    """Wait until the emulator and the api-server answer, the api-server reports the scheduler,
    triggerer and dag-processor healthy, and the Celery worker is consuming."""
    deadline = time.monotonic() + timeout
    waiting = ["emulator", "api-server", "scheduler", "triggerer", "dag-processor", "celery-worker"]
    while waiting:
        for name, process in processes.items():
            if process.poll() is not None:
                log = state.processes[name]["log"]
                raise ClusterError(f"{name} exited with {process.returncode}; see {log}\n{log_tail(log)}")
        try:
            get_json(state.urls["emulator"] + "/_emulator/stats")
            waiting = [name for name in waiting if name != "emulator"]
            health = get_json(state.urls["ui"] + "/api/v2/monitor/health")
            waiting = [name for name in waiting if name != "api-server"]
            for component in ("scheduler", "triggerer", "dag_processor"):
                if health.get(component, {}).get("status") == "healthy":
                    waiting = [name for name in waiting if name != component.replace("_", "-")]
        except (OSError, ValueError):
            pass
        if " ready." in log_tail(state.processes["celery-worker"]["log"], lines=200):
            waiting = [name for name in waiting if name != "celery-worker"]
        if waiting and time.monotonic() > deadline:
            raise ClusterError(
                f"{', '.join(waiting)} not ready after {timeout:.0f} s; see {state.directory / 'logs'}"
            )
        if waiting:
            time.sleep(1)


@dataclass(frozen=True)
class Options:
    """How ``start`` builds the cluster; the defaults are those of ``make cluster``."""

    emulator_config: Path = REPO / "examples" / "emulator.yaml"
    # The emulator's command, to which ``--port`` and ``--config`` are added; empty: ``listsync
    # emulator``. A benchmark gives its own, serving the same emulator with its List preloaded.
    emulator_command: Sequence[str] = ()
    # Environment settings on top of deploy/airflow.env.
    overrides: Mapping[str, str] = field(default_factory=dict)
    # An airflow_local_settings.py (cluster policies) for the Airflow home's config folder.
    local_settings: Path | None = None
    postgres_url: str = DEFAULT_POSTGRES_URL
    redis_url: str = DEFAULT_REDIS_URL
    concurrency: int = 4
    timeout: float = 300.0


def start(directory: Path, options: Options) -> State:
    """Start the cluster described in the module's docstring; stop it again if any step fails."""
    previous = State.load(directory)
    if previous is not None and any(alive(record) for record in previous.processes.values()):
        raise ClusterError(f"a cluster already runs from {directory}; stop it first (make cluster-stop)")
    if previous is not None:
        stop(directory)
    shutil.rmtree(directory, ignore_errors=True)
    for folder in (directory / "airflow" / "config", directory / "logs"):
        folder.mkdir(parents=True)
    state = State(directory, name=f"listsync_cluster_{secrets.token_hex(4)}")
    state.postgres_url, state.redis_url = options.postgres_url, options.redis_url
    state.save()
    try:
        _start(state, options)
    except BaseException:
        problems = stop(directory)
        if problems:
            print("; ".join(problems), file=sys.stderr)
        raise
    return state


def _start(state: State, options: Options) -> None:
    began = time.monotonic()
    home = state.directory / "airflow"
    create_databases(state, [state.name, f"{state.name}_warehouse"])
    state.redis_db = claim_redis_database(state)
    ports = {"api": free_port(), "emulator": free_port(), "scheduler_health": free_port()}
    endpoints = endpoints_for(state, ports)
    settings = native_settings(
        read_env_file(SETTINGS_FILE), endpoints, {COMPOSE_DAGS: REPO / "dags", COMPOSE_HOME: home}
    )
    state.env = {
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        **settings,
        # A shared host: the scheduler's health check on a free local port, not 0.0.0.0:8974.
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": "127.0.0.1",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(ports["scheduler_health"]),
        **options.overrides,
    }
    state.urls = {
        "ui": f"http://127.0.0.1:{ports['api']}",
        "emulator": f"http://127.0.0.1:{ports['emulator']}",
    }
    state.login = {"username": UI_USER, "password": secrets.token_urlsafe(12)}
    state.save()
    # The simple auth manager keeps the passwords it generated in this file; one found there is used.
    passwords = home / "simple_auth_manager_passwords.json.generated"
    passwords.touch(mode=0o600)
    passwords.write_text(json.dumps({UI_USER: state.login["password"]}))
    if options.local_settings is not None:
        shutil.copy(options.local_settings, home / "config" / "airflow_local_settings.py")

    command = options.emulator_command or [str(BIN / "listsync"), "emulator"]
    emulator = [*command, "--port", str(ports["emulator"])]
    processes = {"emulator": launch(state, "emulator", [*emulator, "--config", str(options.emulator_config)])}
    warehouse = endpoints["warehouse"]
    seed = [sys.executable, str(REPO / "examples" / "generate_data.py"), "--no-sqlite"]
    seeding = launch(
        state,
        "warehouse-seed",
        [*seed, "--postgres-url", f"postgresql+psycopg2://{warehouse.netloc}{warehouse.path}"],
    )
    airflow = str(BIN / "airflow")
    migrating = launch(state, "db-migrate", [airflow, "db", "migrate"])
    finish(state, "db-migrate", migrating, options.timeout)
    finish(state, "warehouse-seed", seeding, options.timeout)
    print(f"- metadata database {state.name} migrated, warehouse loaded ({time.monotonic() - began:.0f} s)")
    components = {
        "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(ports["api"]), "--workers", "1"],
        "scheduler": ["scheduler", "--skip-serve-logs"],
        "dag-processor": ["dag-processor"],
        "triggerer": ["triggerer", "--skip-serve-logs"],
        "celery-worker": [
            "celery", "worker", "--skip-serve-logs", "--concurrency", str(options.concurrency),
            "--celery-hostname", f"{state.name}@%h", "--without-mingle", "--without-gossip",
        ],
    }  # fmt: skip
    for name, arguments in components.items():
        processes[name] = launch(state, name, [airflow, *arguments])
    wait_until_ready(state, processes, options.timeout)
    print(f"- {', '.join(components)} up ({time.monotonic() - began:.0f} s)")


def stop(directory: Path, grace: float = 20.0) -> list[str]:
    """Stop every process group the cluster in ``directory`` started, drop its databases and empty
    its Redis database. Returns the problems met; nothing to stop is not one."""
    state = State.load(directory)
    if state is None:
        return []
    running = [record for record in state.processes.values() if alive(record)]
    for record in running:
        _signal_group(record["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(alive(record) for record in running) and time.monotonic() < deadline:
        time.sleep(0.2)
    # Whatever is left in the groups (a task process, a stuck worker) is killed.
    for record in running:
        _signal_group(record["pid"], signal.SIGKILL)
    state.processes = {}
    state.save()
    problems = drop_databases(state) + release_redis_database(state)
    if problems:
        state.save()
    else:
        state.path.unlink()
    return problems


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def parse_setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not ENV_LINE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/cluster.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    start_parser = commands.add_parser("start", help="start the cluster and leave it running")
    env_parser = commands.add_parser("env", help="print export lines for the airflow CLI")
    stop_parser = commands.add_parser("stop", help="stop the cluster and drop its databases")
    for sub in (start_parser, env_parser, stop_parser):
        sub.add_argument(
            "--dir", type=Path, default=DEFAULT_DIR, help="the cluster's folder (default .cluster)"
        )
    defaults = Options()
    start_parser.add_argument(
        "--emulator-config", type=Path, default=defaults.emulator_config, help="the emulator's config"
    )
    start_parser.add_argument(
        "--set",
        dest="overrides",
        type=parse_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment setting on top of deploy/airflow.env; repeatable",
    )
    start_parser.add_argument(
        "--local-settings", type=Path, help="an airflow_local_settings.py (cluster policies) to install"
    )
    start_parser.add_argument(
        "--postgres",
        default=os.environ.get("LISTSYNC_CLUSTER_POSTGRES_URL", defaults.postgres_url),
        help="a PostgreSQL server URL whose user may create databases (env LISTSYNC_CLUSTER_POSTGRES_URL)",
    )
    start_parser.add_argument(
        "--redis",
        default=os.environ.get("LISTSYNC_CLUSTER_REDIS_URL", defaults.redis_url),
        help="the Redis server URL (env LISTSYNC_CLUSTER_REDIS_URL)",
    )
    start_parser.add_argument(
        "--concurrency",
        type=int,
        default=defaults.concurrency,
        help="Celery worker slots (default %(default)s)",
    )
    start_parser.add_argument(
        "--timeout", type=float, default=defaults.timeout, help="seconds to wait for each step"
    )
    args = parser.parse_args(argv)
    directory = args.dir.resolve()

    try:
        if args.command == "start":
            options = Options(
                emulator_config=args.emulator_config.resolve(),
                overrides=dict(args.overrides),
                local_settings=args.local_settings and args.local_settings.resolve(),
                postgres_url=args.postgres,
                redis_url=args.redis,
                concurrency=args.concurrency,
                timeout=args.timeout,
            )
            state = start(directory, options)
            login = state.login
            print(f"Airflow UI   {state.urls['ui']}  (login {login['username']} / {login['password']})")
            print(f"Emulator     {state.urls['emulator']}  (/_emulator/state, /_emulator/stats)")
            print(f"Logs         {directory / 'logs'}")
            print(f'Airflow CLI  eval "$({sys.executable} {Path(__file__)} env --dir {directory})"')
            print("Stop it with make cluster-stop.")
        elif args.command == "env":
            running = State.load(directory)
            if running is None or not running.env:
                raise ClusterError(f"no cluster runs from {directory}; start one with make cluster")
            for key, value in running.env.items():
                print(f"export {key}={shlex.quote(value)}")
        else:
            problems = stop(directory)
            if problems:
                raise ClusterError("; ".join(problems))
            print(f"Stopped the cluster of {directory}.")
    except ClusterError as error:
        print(f"cluster {args.command} failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
