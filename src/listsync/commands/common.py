"""What the ``listsync`` job commands share: options, the API key, messages and exit statuses.

``sync-people``, ``upsert-rows`` and ``ingest`` read an extract the same way (``--source``, or
``--sql`` with ``--sql-url``), reach the service the same way (``--base-url``, ``--api-key`` or
``$LISTSYNC_API_KEY``) and end the same way (:func:`listsync.commands.display.run_and_report`):
the summary on standard output, a message on standard error, and exit status :data:`EXIT_OK`,
:data:`EXIT_FAILED` or :data:`EXIT_USAGE`. Everything they print has its secrets masked.

Nothing heavy is imported at module level, so ``listsync --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pandas as pd


__all__ = [
    "API_KEY_ENV",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "HISTORY_URL_ENV",
    "OUTPUT_ADVICE",
    "STATE_DIR_ENV",
    "add_extract_arguments",
    "add_service_arguments",
    "api_key",
    "check_extract_arguments",
    "check_option",
    "check_service_arguments",
    "check_source_file",
    "chunk_size_argument",
    "column_mapping",
    "default_state_dir",
    "mask",
    "masked_secrets",
    "read_frames",
    "report",
    "without_credentials",
]

API_KEY_ENV = "LISTSYNC_API_KEY"
#: The SQLAlchemy URL of the run history's database, when ``--history-url`` is not given.
HISTORY_URL_ENV = "LISTSYNC_HISTORY_URL"
#: The folder of the command line's checkpoints and sync states.
STATE_DIR_ENV = "LISTSYNC_STATE_DIR"
#: What to do about a file a command cannot write (formatted with the option).
OUTPUT_ADVICE = "give {} a file in a folder this command can write"

T = TypeVar("T")

#: The job ran (or, in a dry run, planned) and everything was written.
EXIT_OK = 0
#: The job failed or some items could not be written.
EXIT_FAILED = 1
#: The arguments were wrong; nothing was read or sent.
EXIT_USAGE = 2


def column_mapping(text: str) -> tuple[str, str]:
    """Parse ``--map COLUMN=TARGET`` into ``(column, target)``."""
    # rpartition: field names and column ids never hold "=", extract column names might.
    column, sep, field = text.rpartition("=")
    if not sep or not column or not field:
        raise argparse.ArgumentTypeError(f"expected COLUMN=FIELD, got {text!r}")
    return column, field.strip()


def chunk_size_argument(kinds: Collection[str], unit: str) -> Callable[[str], tuple[str | None, int]]:
    """The parser of ``--chunk-size N|KIND=N``: ``(None, N)`` for every kind, ``(KIND, N)`` for one.

    :param kinds: the write kinds a size may name.
    :param unit: what is counted, for the message ("people", "items").
    """

    def parse(text: str) -> tuple[str | None, int]:
        kind, sep, number = text.rpartition("=")
        if sep and kind not in kinds:
            raise argparse.ArgumentTypeError(f"expected N or KIND=N with KIND one of {', '.join(kinds)}")
        try:
            return (kind or None), int(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number of {unit}, got {number!r}") from None

    return parse


def add_extract_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--source``, ``--sql``, ``--sql-url``, ``--delimiter``, ``--encoding`` and
    ``--naive-timezone`` (see :func:`read_frames`)."""
    extract = parser.add_argument_group("extract (give --source or --sql with --sql-url)")
    extract.add_argument("--source", help="the extract file: CSV, Parquet or JSON lines")
    extract.add_argument("--sql", help="a query giving the extract")
    extract.add_argument("--sql-url", help="SQLAlchemy URL of the database the query runs on")
    extract.add_argument("--delimiter", help="CSV field separator (default ,)")
    extract.add_argument(
        "--encoding",
        default="utf-8",
        help="text encoding of a CSV or JSON lines file (default utf-8; a UTF-16 byte-order mark wins)",
    )
    extract.add_argument(
        "--naive-timezone",
        default="UTC",
        metavar="ZONE",
        help="IANA zone of timestamps written without an offset (default UTC)",
    )


def default_state_dir() -> Path:
    """``$LISTSYNC_STATE_DIR``, else ``$XDG_STATE_HOME/listsync``, else ``~/.local/state/listsync``."""
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "listsync"


def add_service_arguments(
    parser: argparse.ArgumentParser, *, user_id: bool = True
) -> argparse._ArgumentGroup:
    """Add the ``service`` group: ``--base-url``, ``--api-key``, ``--timeout`` and, with ``user_id``,
    ``--user-id``.

    :return: the group, for a command's own service options.
    """
    service = parser.add_argument_group("service")
    service.add_argument("--base-url", required=True, help="the service's base URL")
    service.add_argument("--api-key", help=f"the API key (default: ${API_KEY_ENV})")
    service.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for each answer of the service (default 30)",
    )
    if user_id:
        service.add_argument("--user-id", help="the service user to act as (userId)")
    return service


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return seconds


def check_option(option: str, check: Callable[..., T], *values: Any) -> T:
    """``check(*values)``, a ``ValueError`` it raises named after ``option`` (a usage error)."""
    try:
        return check(*values)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None


def api_key(args: argparse.Namespace, *, required: bool = True) -> str:
    """``--api-key``, else ``$LISTSYNC_API_KEY`` (whitespace around it dropped); ``""`` when
    neither is set and not ``required``.

    :raises ValueError: neither is set and ``required``, or the key holds a character no HTTP
        header carries (the message names where the key came from, never the key).
    """
    from listsync.client.arguments import check_api_key

    key: str = args.api_key or os.environ.get(API_KEY_ENV) or ""
    if not key and required:
        raise ValueError(f"no API key: set ${API_KEY_ENV} or give --api-key")
    return check_option("--api-key" if args.api_key else f"${API_KEY_ENV}", check_api_key, key)


def check_service_arguments(args: argparse.Namespace) -> None:
    """Check ``--base-url`` and, for the List commands, ``--table-id``, before any request.

    :raises ValueError: the base URL is not an http(s) URL, or the List id cannot name a List.
    """
    from listsync.client.arguments import check_base_url, check_table_id

    check_option("--base-url", check_base_url, args.base_url)
    if getattr(args, "table_id", None) is not None:
        check_option("--table-id", check_table_id, args.table_id)


def check_extract_arguments(args: argparse.Namespace) -> None:
    """Check that the extract is named once, and how to read it.

    :raises ValueError: not exactly one of ``--source`` and ``--sql``, ``--sql`` without
        ``--sql-url``, a ``--naive-timezone`` that is not a known zone, an unknown
        ``--encoding`` or a ``--delimiter`` that is not one character.
    """
    if (args.source is None) == (args.sql is None) or (args.sql is not None and not args.sql_url):
        raise ValueError("give --source FILE, or --sql QUERY with --sql-url URL")
    if args.sql_url:
        check_sql_url(args.sql_url)
    from listsync.extract.options import resolve_timezone
    from listsync.extract.sources import check_delimiter, check_encoding

    check_option("--naive-timezone", resolve_timezone, args.naive_timezone)
    check_option("--encoding", check_encoding, args.encoding)
    check_option("--delimiter", check_delimiter, args.delimiter)


def check_source_file(args: argparse.Namespace) -> None:
    """Check that the ``--source`` file exists, if one is named; called once the other options
    are checked, so a wrong option is reported before a missing file.

    :raises ValueError: ``--source`` names no file.
    """
    # Checked before reading, so a missing file is a usage error (exit 2), not a traceback.
    if args.source is not None and not os.path.isfile(args.source):
        raise ValueError(f"--source {args.source}: no such file")


def check_sql_url(url: str) -> None:
    """:raises ValueError: ``url`` is no SQLAlchemy URL, or names a database nothing here can reach
    (the message does not repeat the URL, which may hold a password)."""
    import sqlalchemy as sa

    try:
        sa.engine.make_url(url).get_dialect()
    except sa.exc.ArgumentError:
        raise ValueError(
            "--sql-url is not a database URL: write it as dialect+driver://user:password@host/database"
        ) from None
    except sa.exc.NoSuchModuleError as exc:
        raise ValueError(f"--sql-url names a database no installed driver serves ({exc})") from None


def read_frames(args: argparse.Namespace, *, arrow_text: bool = False) -> Iterator[pd.DataFrame]:
    """The extract the options name, in chunks (checked by :func:`check_extract_arguments`);
    ``arrow_text`` as ``read_extract`` takes it."""
    from listsync.extract.sources import read_extract

    if args.source is not None:
        return read_extract(
            args.source,
            delimiter=args.delimiter,
            encoding=args.encoding,
            naive_timezone=args.naive_timezone,
            arrow_text=arrow_text,
        )
    return read_extract(sql=args.sql, url=args.sql_url, naive_timezone=args.naive_timezone)


#: Strings never printed as they are (the API key): ``masked_secrets`` adds them.
_SECRETS: set[str] = set()
MASK = "***"


@contextmanager
def masked_secrets(*secrets: str | None) -> Iterator[None]:
    """Within the block, :func:`mask` (through which :func:`report` and every printed result go)
    replaces each secret by ``***``."""
    added = {secret.strip() for secret in secrets if secret and len(secret.strip()) >= 4} - _SECRETS
    _SECRETS.update(added)
    try:
        yield
    finally:
        _SECRETS.difference_update(added)


def mask(text: str) -> str:
    """``text`` with every secret :func:`masked_secrets` holds replaced by ``***``."""
    for secret in _SECRETS:
        text = text.replace(secret, MASK)
    return text


def report(command: str, message: object) -> None:
    """Print ``listsync <command>: <message>`` on standard error, secrets masked."""
    print(mask(f"listsync {command}: {message}"), file=sys.stderr)


def without_credentials(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
