"""Where an operator's extract comes from: a file (``source``) or a query (``sql`` + ``sql_conn_id``).

The three operators take the same three parameters and hand them here; this module turns them
into what ``listsync.extract.sources.read_extract`` reads:

- ``source``: a local path (``/data/contacts.csv``) or a URI that Airflow's object storage
  understands (``s3://aws_default@bucket/contacts.parquet``, ``file:///data/contacts.csv``),
  opened as an ``ObjectStoragePath``;
- ``sql`` with ``sql_conn_id``: the query runs on the SQLAlchemy engine of that Airflow
  connection's hook (any hook with ``get_sqlalchemy_engine()``: postgres, sqlite, mysql...).

Exactly one of ``source`` and ``sql`` must be given; :func:`check_extract_arguments` says so
early (an operator calls it from ``__init__``, which does no I/O).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from airflow.sdk import ObjectStoragePath
    from sqlalchemy.engine import Engine

__all__ = [
    "check_extract_arguments",
    "checked_storage_path",
    "read_operator_extract",
    "sql_engine",
    "storage_path",
]


def check_extract_arguments(source: str | None, sql: str | None, sql_conn_id: str | None) -> None:
    """Check that the extract is named exactly once.

    :raises ValueError: neither or both of ``source`` and ``sql`` are given, or ``sql`` lacks
        ``sql_conn_id`` (or ``sql_conn_id`` comes without ``sql``).
    """
    if (source is None) == (sql is None):
        raise ValueError(
            "Give exactly one extract: source= (a file path or URI) or sql= (a query, with sql_conn_id=); "
            f"got {'both' if source is not None else 'neither'}"
        )
    if sql is not None and not sql_conn_id:
        raise ValueError("sql= needs sql_conn_id=, the Airflow connection to run the query on")
    if sql is None and sql_conn_id is not None:
        raise ValueError("sql_conn_id= is only used with sql=; a file source= needs no connection")


#: What to install for a URI scheme whose filesystem Airflow does not have.
_FILESYSTEM_PACKAGES = {
    "s3": "apache-airflow-providers-amazon (with s3fs)",
    "gs": "apache-airflow-providers-google (with gcsfs)",
    "gcs": "apache-airflow-providers-google (with gcsfs)",
    **dict.fromkeys(
        ("abfs", "abfss", "az", "adl", "wasb"), "apache-airflow-providers-microsoft-azure (with adlfs)"
    ),
}


def storage_path(path: str) -> Path | ObjectStoragePath:
    """The file named by ``path``: a local ``Path``, or an ``ObjectStoragePath`` for a URI.

    Used for the extract and for the files a sync writes (plan, rejects), so each may live in
    object storage. A URI may carry the Airflow connection of its store,
    ``s3://my_aws_conn@bucket/key``. Nothing is opened: see :func:`checked_storage_path`.
    """
    if "://" not in path:
        return Path(path)
    from airflow.sdk import ObjectStoragePath

    return ObjectStoragePath(path)


def checked_storage_path(path: str) -> Path | ObjectStoragePath:
    """:func:`storage_path`, for a file the task is about to read or write.

    :raises ValueError: Airflow has no filesystem for the URI's scheme (its provider is not
        installed), naming the URI and what to install.
    """
    located = storage_path(path)
    if isinstance(located, Path):
        return located
    try:
        located.fs  # noqa: B018 (Airflow finds the scheme's filesystem on first use)
    except ValueError as exc:
        package = _FILESYSTEM_PACKAGES.get(path.partition("://")[0].lower())
        advice = f"; install {package} where the task runs" if package else ""
        raise ValueError(f"cannot open {path}: {exc}{advice}") from None
    return located


def sql_engine(sql_conn_id: str) -> Engine:
    """The SQLAlchemy engine of the Airflow connection ``sql_conn_id``.

    :raises ValueError: the connection's hook cannot give a SQLAlchemy engine (e.g. an HTTP
        connection was named by mistake).
    """
    from airflow.sdk import BaseHook

    hook = BaseHook.get_hook(sql_conn_id)
    get_engine = getattr(hook, "get_sqlalchemy_engine", None)
    if get_engine is None:
        raise ValueError(
            f"Connection {sql_conn_id!r} has hook {type(hook).__name__}, which gives no SQLAlchemy engine; "
            "name a database connection (postgres, sqlite, mysql...) in sql_conn_id"
        )
    engine: Engine = get_engine()
    return engine


def read_operator_extract(
    *, source: str | None, sql: str | None, sql_conn_id: str | None, **read_options: Any
) -> Iterator[pd.DataFrame]:
    """Read the extract an operator was given, in chunks.

    :param source: a local path or an object-storage URI, or None when ``sql`` is given.
    :param sql: a query, or None when ``source`` is given.
    :param sql_conn_id: the Airflow connection the query runs on.
    :param read_options: passed on to ``read_extract`` (chunk size, CSV delimiter...).
    :return: the extract's DataFrames, one chunk at a time. A SQL extract's engine is disposed
        of once they have been read, or when the iterator is closed.
    """
    from listsync.extract.sources import read_extract

    check_extract_arguments(source, sql, sql_conn_id)
    if source is not None:
        return read_extract(checked_storage_path(source), **read_options)
    assert sql is not None and sql_conn_id is not None  # check_extract_arguments guarantees it
    engine = sql_engine(sql_conn_id)
    try:
        frames = read_extract(sql=sql, engine=engine, **read_options)
    except BaseException:
        engine.dispose()
        raise
    return _disposing_engine(frames, engine)


def _disposing_engine(frames: Iterator[pd.DataFrame], engine: Engine) -> Iterator[pd.DataFrame]:
    """Yield ``frames``, then dispose of ``engine``: read to the end, or closed when abandoned.

    The hook builds a new engine for each call, so the read owns it; its pool keeps the query's
    connection open after the read until the engine is disposed (left to the garbage collector,
    an open PostgreSQL connection and a ``ResourceWarning``). The query does not connect before
    the first chunk is asked for, so a read never started leaves nothing open.
    """
    try:
        yield from frames
    finally:
        engine.dispose()
