"""A columnar baseline of the people sync's read + prepare + plan, in DuckDB (the ``bench`` extra).

Run by ``people_scaling.py --baseline`` in a process of its own:
``.venv/bin/python benchmarks/people_baseline.py EXTRACT.csv LIST.jsonl [--threads N | --ours]``;
prints one JSON line: the counts, the seconds of each step, the whole wall time, the CPU seconds
(all threads) and the peak RSS (MiB). With ``--ours``, the same steps by listsync's own functions
on the same files (:func:`ours`), to compare like with like: no service, no HTTP.

What it does, as SQL over the extract (``people_job.py``'s CSV columns) and the List (JSON lines,
each person as the service sent it):

- read + prepare: the CSV read as text; the account domain normalised from the website (trimmed,
  lower-cased, scheme, path, query, port, trailing dots and leading ``www.`` dropped) and checked
  as a host name (``contact_rules.HOST_PATTERN``); the e-mail trimmed, lower-cased, checked (one
  ``@``, a dot-atom local part, a host after it); the phone to E.164 for the common case (``+``
  and its digits, or ten digits read as a US number); names and title trimmed; a row with a bad
  domain or a bad e-mail is rejected; each person's identity: ``email:``, else ``phone:``, else
  ``name:first last``;
- read List: the JSON lines read, each person's account domain normalised the same way (as it is,
  trimmed and lower-cased, where the rules refuse it) and their identity;
- plan: the extract joined to the List on account domain and identity; matched people whose
  mapped fields differ (a value in the extract that is not the List's) are patches, the others
  unchanged; extract people not found are adds; List people not found on an account the extract
  names are deletes (mirror mode, ``delete_scope="accounts_in_source"``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import msgspec
from rss import peak_rss_mib

from listsync.extract.contact_rules import HOST_PATTERN, LOCAL_PART_PATTERN

#: About the size of a page of 1,000 List people as the service sends them.
PAGE_BYTES = 200_000
FIELDS = ("email", "first_name", "last_name", "title", "phone_number")


def domain_sql(column: str) -> str:
    """The SQL of ``column`` normalised as an account domain (null: the rules refuse it)."""
    text = f"regexp_replace(lower(trim({column})), '^[a-z][a-z0-9+.-]*://', '')"
    host = (
        f"regexp_replace(regexp_replace(regexp_extract(({text}), '^[^/?#]*'), ':[0-9]*$', ''), '[.]+$', '')"
    )
    host = f"regexp_replace({host}, '^(www[.])+', '')"
    return f"CASE WHEN regexp_full_match({host}, '{HOST_PATTERN}') THEN {host} END"


def identity_sql(email: str, phone: str, first: str, last: str) -> str:
    return f"coalesce('email:' || {email}, 'phone:' || {phone}, 'name:' || {first} || ' ' || {last})"


def blank(column: str) -> str:
    return f"nullif(trim({column}), '')"


def prepare(db: duckdb.DuckDBPyConnection, extract: Path) -> None:
    """The extract's rows normalised (table ``raw``) and the people kept of them (table ``source``)."""
    email = f"lower({blank('email')})"
    # A dot-atom local part, international letters allowed (as the rules allow them).
    local = LOCAL_PART_PATTERN.replace("[a-z0-9", r"[\pL\pN").replace("'", "''")
    valid_email = f"regexp_full_match({email}, '{local}@{HOST_PATTERN}')"
    given = blank("phone")
    digits = f"regexp_replace({given}, '[^0-9]', '', 'g')"
    phone = (
        f"CASE WHEN {given} IS NULL THEN NULL WHEN starts_with({given}, '+') THEN '+' || {digits} "
        f"WHEN length({digits}) = 10 THEN '+1' || {digits} "
        f"WHEN length({digits}) = 11 AND starts_with({digits}, '1') THEN '+' || {digits} END"
    )
    db.execute(
        f"""
        CREATE TABLE raw AS SELECT
            {domain_sql("domain")} AS domain, {email} AS email, {email} IS NULL OR {valid_email} AS email_ok,
            {blank("first")} AS first_name, {blank("last")} AS last_name, {blank("title")} AS title,
            {phone} AS phone_number
        FROM read_csv(?, header = true, all_varchar = true)
        """,
        [str(extract)],
    )
    db.execute(
        f"""
        CREATE TABLE source AS SELECT
            domain, {identity_sql("email", "phone_number", "first_name", "last_name")} AS identity,
            {", ".join(FIELDS)}
        FROM raw WHERE domain IS NOT NULL AND email_ok
        """
    )


def read_list(db: duckdb.DuckDBPyConnection, listed: Path) -> None:
    """The List's people (table ``listed``), their account domain normalised and their identity."""
    columns = ", ".join(f"'{name}': 'VARCHAR'" for name in ("account_domain", "accountDomain", *FIELDS))
    names = (blank("phone_number"), blank("first_name"), blank("last_name"))
    identity = identity_sql(f"lower({blank('email')})", *names)
    named = "coalesce(account_domain, accountDomain)"  # the service names it either way
    people = f"read_json(?, format = 'newline_delimited', columns = {{{columns}}})"
    db.execute(
        f"""
        CREATE TABLE listed AS SELECT
            coalesce({domain_sql(named)}, lower(trim({named})), '') AS domain,
            {identity} AS identity, {", ".join(FIELDS)}
        FROM {people}
        """,
        [str(listed)],
    )


def plan(db: duckdb.DuckDBPyConnection) -> dict[str, int]:
    changed = " OR ".join(f"(s.{name} IS NOT NULL AND s.{name} IS DISTINCT FROM l.{name})" for name in FIELDS)
    row = db.execute(
        f"""
        WITH matched AS (
            SELECT
                s.identity IS NOT NULL AS in_source, l.identity IS NOT NULL AS in_list,
                ({changed}) AS changed, coalesce(s.domain, l.domain) AS domain
            FROM source s FULL OUTER JOIN listed l ON s.domain = l.domain AND s.identity = l.identity
        )
        SELECT
            count(*) FILTER (WHERE in_source AND NOT in_list),
            count(*) FILTER (WHERE in_source AND in_list AND changed),
            count(*) FILTER (WHERE NOT in_source AND domain IN (SELECT domain FROM source)),
            count(*) FILTER (WHERE in_source AND in_list AND NOT changed)
        FROM matched
        """
    ).fetchone()
    assert row is not None
    return dict(zip(("adds", "patches", "deletes", "unchanged"), row, strict=True))


def ours(extract: Path, listed: Path) -> dict[str, Any]:
    """The same steps by listsync's own functions, from the same files, as a people sync takes
    them: the extract read and prepared (``prepare_people``) while the List's people are made
    columns (``list_frame``) in a thread beside it, then the plan (``plan_people_sync``, mirror
    mode, ``delete_scope="accounts_in_source"``, no state). The memory allocator is the C
    library's as it comes, as DuckDB's is its own: a sync fixes glibc's mmap threshold to keep its
    peak down, at some cost in time (:func:`listsync.sync.memory.use_returning_allocator`)."""
    from people_sync import COLUMN_MAP

    from listsync.extract.rejects import Rejects
    from listsync.extract.sources import read_extract
    from listsync.sync.memory import collected_sparingly
    from listsync.sync.people.diff import plan_people_sync
    from listsync.sync.people.frames import ListPeople, list_frame
    from listsync.sync.people.prepare import prepare_people

    started = time.perf_counter()  # as DuckDB's, the modules' import is not timed
    steps = {}

    def read_list() -> ListPeople:
        step = time.perf_counter()
        people = list_frame(pages(listed))
        steps["read List"] = time.perf_counter() - step
        return people

    # The cycle collector's young collections as sparing as in a sync (listsync.sync.job).
    with collected_sparingly():
        with ThreadPoolExecutor(1, thread_name_prefix="list") as pool:
            reading = pool.submit(read_list)
            step = time.perf_counter()
            prepared = prepare_people(read_extract(extract, arrow_text=True), COLUMN_MAP, rejects=Rejects())
            steps["read + prepare"] = time.perf_counter() - step
            people = reading.result()
        step = time.perf_counter()
        planned = plan_people_sync(
            prepared.frame,
            people,
            fields=set(COLUMN_MAP.values()),
            mode="mirror",
            delete_scope="accounts_in_source",
        )
        steps["plan"] = time.perf_counter() - step
    counts = {
        "adds": len(planned.adds),
        "patches": len(planned.patches),
        "deletes": len(planned.deletes),
        "unchanged": planned.unchanged,
        "rejected": prepared.stats.rejected,
    }
    return {"counts": counts, "steps": steps, "seconds": time.perf_counter() - started}


def pages(listed: Path) -> Iterator[Any]:
    """The List's people in ``listed``, decoded a page at a time (about 1,000 people, 200 kB), as
    the client decodes the body of a page it reads."""
    decoder = msgspec.json.Decoder()
    rest = b""
    with listed.open("rb") as lines:
        while block := lines.read(PAGE_BYTES):
            page, _, rest = (rest + block).rpartition(b"\n")
            yield from decoder.decode_lines(page)
    yield from decoder.decode_lines(rest)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("extract", type=Path)
    parser.add_argument("listed", type=Path)
    parser.add_argument("--threads", type=int, help="DuckDB's threads (default: its own, one a core)")
    parser.add_argument("--ours", action="store_true", help="listsync's own steps on the same files instead")
    args = parser.parse_args()
    if args.ours:
        figures = ours(args.extract, args.listed)
        figures.update(cpu=time.process_time(), rss=peak_rss_mib())
        print(json.dumps({**figures, "version": None, "threads": None}))
        return
    started = time.perf_counter()
    db = duckdb.connect()
    if args.threads:
        db.execute(f"SET threads = {args.threads}")
    steps = {}
    step = time.perf_counter()
    prepare(db, args.extract)
    steps["read + prepare"] = time.perf_counter() - step
    step = time.perf_counter()
    read_list(db, args.listed)
    steps["read List"] = time.perf_counter() - step
    step = time.perf_counter()
    counts = plan(db)
    steps["plan"] = time.perf_counter() - step
    rows = db.execute("SELECT (SELECT count(*) FROM raw) - (SELECT count(*) FROM source)").fetchone()
    assert rows is not None
    counts["rejected"] = rows[0]
    seconds = time.perf_counter() - started
    threads = db.execute("SELECT current_setting('threads')").fetchone()
    figures = {
        "counts": counts,
        "steps": steps,
        "seconds": seconds,
        "cpu": time.process_time(),
        "rss": peak_rss_mib(),
    }
    print(json.dumps({**figures, "version": duckdb.__version__, "threads": threads[0] if threads else None}))


if __name__ == "__main__":
    main()
