# ruff: noqa: E501
"""The corpus: one line per bad input (see ``test_corpus.py`` for the rules and the decisions).

Read a line as: ``cli|op|sub|dag(id, class, job, input, outcome, *fragments, options...)``.
``job`` is ``people`` (sync-people), ``rows`` (upsert-rows) or ``ingest``. Unless a case says
otherwise, people map ``domain``/``email``/``first``, rows map ``domain``/``name`` with key
``domain``, events are ``page_visit`` of an ``account`` whose id is in ``id``; the List
``tbl_accounts`` holds the accounts ``acme.com`` and ``beta.io``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .harness import (
    DEFAULT_MAPPING,
    TABLE,
    Builder,
    Case,
    Result,
    gzipped,
    jsonl,
    parquet,
    parquet_bytes,
    path,
    raw,
    sql_on,
    sqlite,
    table,
    text,
)


def _case(entry: str) -> Callable[..., Case]:
    def make(
        id: str, cls: str, job: str, build: Builder, outcome: str, *fragments: str, **options: Any
    ) -> Case:
        return Case(id, cls, job, entry, build, outcome, fragments, **options)

    return make


cli, op, sub, dag = _case("cli"), _case("operator"), _case("subprocess"), _case("dag")

# --- inputs and checks used by many cases --------------------------------------------------

PEOPLE = "domain,email,first\nacme.com,ann@acme.com,Ann\n"
ROWS = "domain,name\nacme.com,Acme\n"
EVENTS = "id\nacc-1\n"
ANN = {"domain": "acme.com", "email": "ann@acme.com", "first": "Ann"}
DEEP = "[" * 600 + "]" * 600
DEEPER = "[" * 100_000 + "]" * 100_000
BIG = "y" * 5_000_000


def pmap(*pairs: str) -> tuple[str, ...]:
    """The people mapping plus ``--map`` for each ``COLUMN=FIELD``."""
    return DEFAULT_MAPPING["people"] + tuple(arg for pair in pairs for arg in ("--map", pair))


def rmap(*pairs: str, key: str = "domain") -> tuple[str, ...]:
    """A rows mapping: key column ``key`` and ``--map`` for each ``COLUMN=COLUMN_ID``."""
    return ("--key-column", key, *(arg for pair in pairs for arg in ("--map", pair)))


def imap(*options: str) -> tuple[str, ...]:
    """An ingest mapping: the options given, then the defaults for what they leave out."""
    given = set(options[::2])
    defaults = {"--signal": "page_visit", "--identity-type": "account", "--identity-id-column": "id"}
    others = {"--signal": "--signal-column", "--identity-type": "--identity-type-column"}
    extra = [
        arg
        for option, value in defaults.items()
        if option not in given and others.get(option) not in given
        for arg in (option, value)
    ]
    return (*options, *extra)


def _matches(actual: Any, expected: Any) -> bool:
    return bool(expected(actual)) if callable(expected) else actual == expected


def person(domain: str, **fields: Any) -> Callable[[Result], None]:
    """The List holds, on account ``domain``, a person with these fields (values or predicates)."""

    def check(result: Result) -> None:
        rows = result.service.state.lists[TABLE].rows.values()
        people = [dict(p) for row in rows if row.cells.get("domain") == domain for p in row.people]
        assert any(all(_matches(p.get(k), v) for k, v in fields.items()) for p in people), f"{people!r:.800}"

    return check


def cell(key: str, column: str, expected: Any) -> Callable[[Result], None]:
    """The List row with domain ``key`` holds ``expected`` (a value or a predicate) in ``column``."""

    def check(result: Result) -> None:
        rows = result.service.rows(TABLE)
        found = [r for r in rows if r.get("domain") == key]
        assert found and _matches(found[0].get(column), expected), f"{rows!r:.800}"

    return check


def event(**fields: Any) -> Callable[[Result], None]:
    """The service ingested exactly one event, with these fields (values or predicates)."""

    def check(result: Result) -> None:
        events = result.service.state.events
        assert len(events) == 1 and all(_matches(events[0].get(k), v) for k, v in fields.items()), (
            f"{events!r:.800}"
        )

    return check


def people_kept(count: int) -> Callable[[Result], None]:
    """The List still holds ``count`` people (nothing was deleted)."""

    def check(result: Result) -> None:
        rows = result.service.state.lists[TABLE].rows.values()
        assert sum(len(row.people) for row in rows) == count

    return check


def rows_kept(count: int) -> Callable[[Result], None]:
    def check(result: Result) -> None:
        assert len(result.service.state.lists[TABLE].rows) == count

    return check


def junk(size: int = 4096) -> bytes:
    """Random bytes (the same every run)."""
    return random.Random(7).randbytes(size)


def at(hour: str) -> Callable[[Any], bool]:
    return lambda stamp: stamp == f"2026-11-25T{hour}:00.000000Z"


def ts(value: str) -> Builder:
    return text(f"id,ts\nacc-1,{value}\n")


def pj(**extra: Any) -> Builder:
    """JSON lines of one person, Ann at acme.com, with ``extra`` columns."""
    return jsonl({**ANN, **extra})


WAREHOUSE = (
    "create table contacts(domain text, email text, first text);"
    " insert into contacts values('acme.com', 'ann@acme.com', 'Ann');"
)


def naive_timestamps() -> Any:
    """An Arrow table whose ``ts`` column is a timestamp without a zone (10:00 on 25 Nov 2026)."""
    import pyarrow as pa

    return pa.table({"id": ["acc-1"], "ts": pa.array([datetime(2026, 11, 25, 10, 0)], pa.timestamp("us"))})


TS = imap("--timestamp-column", "ts")
NOT_ISO = ("column 'ts'", "ISO 8601")
DATA = imap("--data-column", "payload")

# --- the cases -----------------------------------------------------------------------------
# fmt: off

FILE = [
    # Ragged rows: short and long, each rejected alone with a reason about its fields.
    cli("people-short-row", "file", "people", text("domain,email,first,title\nacme.com,ann@acme.com,Ann\nbeta.io,bo@beta.io,Bo,CTO\n"), "reject", "field", mapping=pmap("title=title")),
    cli("rows-short-row", "file", "rows", text("domain,name,owner\nacme.com,Acme\nbeta.io,Beta,Bo\n"), "reject", "field", mapping=rmap("domain=domain", "name=name", "owner=owner")),
    cli("ingest-short-row", "file", "ingest", text("id,path\nacc-1\nacc-2,/pricing\n"), "reject", "field", mapping=imap("--data-columns", "path")),
    cli("people-long-first-row", "file", "people", text("domain,email,first\nacme.com,ann@acme.com,Ann,extra\nbeta.io,bo@beta.io,Bo\n"), "reject", "field"),
    cli("rows-long-later-row", "file", "rows", text("domain,name\nacme.com,Acme\nbeta.io,Beta,extra\n"), "reject", "field", row=2),
    op("ingest-long-row", "file", "ingest", text("id,path\nacc-1,/a\nacc-2,/b,extra\n"), "reject", "field", row=2, kwargs={"data_columns": ["path"]}),
    # Unbalanced quotes swallow the rest of the file: an error naming the file and the quote.
    cli("people-unbalanced-quote", "file", "people", text('domain,email,first\nacme.com,"ann@acme.com,Ann\nbeta.io,bo@beta.io,Bo\n'), "error", "extract.csv", "quote"),
    op("rows-unbalanced-quote", "file", "rows", text('domain,name\nacme.com,"Acme\nbeta.io,Beta\n'), "error", "extract.csv", "quote"),
    # Control characters other than tab, CR and LF are rejected, naming the column.
    cli("people-nul-in-name", "file", "people", text("domain,email,first\nacme.com,ann@acme.com,An\x00n\n"), "reject", "column 'first'"),
    cli("rows-escape-in-value", "file", "rows", text("domain,name\nacme.com,Ac\x1bme\n"), "reject", "column 'name'"),
    cli("ingest-bell-in-data", "file", "ingest", text("id,path\nacc-1,/pri\x07cing\n"), "reject", "column 'path'", mapping=imap("--data-columns", "path")),
    op("people-vertical-tab-in-name", "file", "people", text("domain,email,first\nacme.com,ann@acme.com,An\x0bn\n"), "reject", "column 'first'"),
    cli("people-tab-in-quoted-name", "file", "people", text('domain,email,first\nacme.com,ann@acme.com,"An\tn"\n'), "ok", check=person("acme.com", first_name="An\tn")),
    cli("rows-newline-in-quoted-value", "file", "rows", text('domain,name\nacme.com,"Ac\nme"\n'), "ok", check=cell("acme.com", "name", "Ac\nme")),
    # Byte-order marks, encodings and line ends.
    cli("people-utf8-bom", "file", "people", text("\ufeff" + PEOPLE), "ok", expect={"passed": 1}, check=person("acme.com", email="ann@acme.com", first_name="Ann")),
    cli("rows-utf16-bom", "file", "rows", text(ROWS, encoding="utf-16"), "ok", check=cell("acme.com", "name", "Acme")),
    cli("ingest-utf16be-bom", "file", "ingest", text("\ufeffid,path\nacc-1,/café\n", encoding="utf-16-be"), "ok", mapping=imap("--data-columns", "path"), check=event(data={"path": "/café"})),
    op("people-utf8-bom-operator", "file", "people", text("\ufeff" + PEOPLE), "ok", check=person("acme.com", first_name="Ann")),
    cli("people-utf16-without-bom", "file", "people", text(PEOPLE, encoding="utf-16-le"), "error", "extract.csv", "--encoding"),
    cli("people-latin1", "file", "people", text("domain,email,first\nacme.com,renee@acme.com,Renée\n", encoding="latin-1"), "error", "extract.csv", "--encoding"),
    op("rows-latin1", "file", "rows", text("domain,name\nacme.com,Société\n", encoding="latin-1"), "error", "extract.csv", "encoding="),
    cli("ingest-latin1-with-encoding", "file", "ingest", text("id,path\nacc-1,/café\n", encoding="latin-1"), "ok", mapping=imap("--data-columns", "path"), args=("--encoding", "latin-1"), check=event(data={"path": "/café"})),
    op("people-cp1252-with-encoding", "file", "people", text("domain,email,first,last\nacme.com,ann@acme.com,Ann,O\u2019Neil\n", encoding="cp1252"), "ok",
       kwargs={"encoding": "cp1252", "column_map": {"domain": "account_domain", "email": "email", "first": "first_name", "last": "last_name"}}, check=person("acme.com", last_name="O\u2019Neil")),
    cli("people-crlf", "file", "people", text(PEOPLE.replace("\n", "\r\n")), "ok", check=person("acme.com", email="ann@acme.com", first_name="Ann")),
    cli("rows-cr-only", "file", "rows", text(ROWS.replace("\n", "\r")), "ok", check=cell("acme.com", "name", "Acme")),
    cli("ingest-crlf-jsonl", "file", "ingest", text('{"id": "acc-1"}\r\n{"id": "acc-2"}\r\n', name="extract.jsonl"), "ok", expect={"events": 2, "acknowledged": 2}),
    # Huge lines: a 5 MB cell is a value like any other, written whole.
    cli("rows-5mb-cell", "file", "rows", text(f"domain,name\nacme.com,{BIG}\n"), "ok", check=cell("acme.com", "name", lambda v: v == BIG)),
    cli("ingest-5mb-cell", "file", "ingest", text(f"id,blob\nacc-1,{BIG}\n"), "ok", mapping=imap("--data-columns", "blob"), check=event(data=lambda d: d == {"blob": BIG})),
    op("people-5mb-title", "file", "people", text(f"domain,email,first,title\nacme.com,ann@acme.com,Ann,{BIG}\n"), "ok",
       kwargs={"column_map": {"domain": "account_domain", "email": "email", "first": "first_name", "title": "title"}}, check=person("acme.com", title=lambda v: v == BIG)),
    # Binary junk and files of the wrong kind: an error naming the file and what it is.
    cli("people-binary-junk-csv", "file", "people", raw(junk), "error", "extract.csv"),
    cli("rows-binary-junk-parquet", "file", "rows", raw(junk, name="extract.parquet"), "error", "extract.parquet"),
    cli("ingest-binary-junk-jsonl", "file", "ingest", raw(junk, name="extract.jsonl"), "error", "extract.jsonl"),
    cli("people-csv-named-parquet", "file", "people", text(PEOPLE, name="contacts.parquet"), "error", "contacts.parquet", "parquet"),
    cli("rows-parquet-named-csv", "file", "rows", raw(lambda: parquet_bytes({"domain": ["acme.com"], "name": ["Acme"]}), name="accounts.csv"), "error", "accounts.csv", "parquet"),
    op("ingest-parquet-named-jsonl", "file", "ingest", raw(lambda: parquet_bytes({"id": ["acc-1"]}), name="events.jsonl"), "error", "events.jsonl", "parquet"),
    # Compressed files are read as what they hold: gzip, told by its bytes whatever the name.
    cli("people-csv-gz", "file", "people", gzipped(PEOPLE), "ok", check=person("acme.com", email="ann@acme.com", first_name="Ann")),
    op("ingest-jsonl-gz", "file", "ingest", gzipped('{"id": "acc-1"}\n', name="events.jsonl.gz"), "ok", expect={"events": 1, "acknowledged": 1}),
    cli("rows-gzip-named-csv", "file", "rows", gzipped(ROWS, name="accounts.csv"), "ok", check=cell("acme.com", "name", "Acme")),
    # Empty files and header-only files.
    cli("people-empty-file", "file", "people", text(""), "error", "extract.csv", "empty"),
    op("rows-empty-file", "file", "rows", text(""), "error", "extract.csv", "empty"),
    cli("ingest-empty-jsonl", "file", "ingest", text("", name="extract.jsonl"), "ok", expect={"rows_read": 0, "events": 0}),
    cli("people-header-only", "file", "people", text("domain,email,first\n"), "ok", expect={"read": 0, "added": 0}),
    cli("rows-header-only-with-delete-missing", "file", "rows", text("domain,name\n"), "error", "Refusing", args=("--delete-missing",), check=rows_kept(2)),
    cli("ingest-header-only", "file", "ingest", text("id\n"), "ok", expect={"rows_read": 0, "events": 0}),
]

HEADER = [
    cli("people-duplicate-header", "header", "people", text("domain,email,first,email\nacme.com,ann@acme.com,Ann,bob@acme.com\n"), "error", "email"),
    cli("rows-duplicate-header", "header", "rows", text("domain,name,name\nacme.com,Acme,Acme Corp\n"), "error", "name"),
    op("ingest-duplicate-header", "header", "ingest", text("account,account\nacc-1,acc-2\n"), "error", "account", kwargs={"identity_id_column": "account"}),
    cli("rows-query-duplicate-columns", "header", "rows", sqlite("", "select 'acme.com' as domain, 'Acme' as name, 'Other' as name"), "error", "name"),
    cli("people-blank-header-unmapped", "header", "people", text("domain,email,first,\nacme.com,ann@acme.com,Ann,\n"), "ok", expect={"passed": 1}),
    cli("rows-blank-header-in-the-middle", "header", "rows", text("domain,,name\nacme.com,x,Acme\n"), "ok", check=cell("acme.com", "name", "Acme")),
    cli("people-header-other-case", "header", "people", text("Domain,Email,First\nacme.com,ann@acme.com,Ann\n"), "error", "'domain'", "'Domain'"),
    cli("rows-header-with-space", "header", "rows", text("domain, name\nacme.com,Acme\n"), "error", "'name'", "' name'"),
    op("ingest-header-other-case", "header", "ingest", text("ID\nacc-1\n"), "error", "'id'", "'ID'"),
    cli("ingest-header-with-tab", "header", "ingest", text("id\t\nacc-1\n"), "error", "'id'", mapping=imap("--identity-id-column", "id")),
    cli("people-missing-mapped-column", "header", "people", text("domain,first\nacme.com,Ann\n"), "error", "'email'", "the extract has"),
    cli("rows-missing-key-column", "header", "rows", text("name\nAcme\n"), "error", "'domain'"),
    cli("ingest-missing-timestamp-column", "header", "ingest", text(EVENTS), "error", "'ts'", mapping=TS),
    op("ingest-missing-data-column", "header", "ingest", text(EVENTS), "error", "'path'", kwargs={"data_columns": ["path"]}),
]


VALUE = [
    # A wrong type for every person field of §2.1 (typed values from JSON lines or Parquet).
    cli("people-first-name-object", "value", "people", pj(first={"name": "Ann"}), "reject", "column 'first'"),
    cli("people-first-name-empty", "value", "people", text("domain,email,first\nacme.com,ann@acme.com,\n"), "reject", "column 'first'"),
    cli("people-last-name-object", "value", "people", pj(last={"x": 1}), "reject", "column 'last'", mapping=pmap("last=last_name")),
    cli("people-bio-list", "value", "people", pj(bio=[1, 2]), "reject", "column 'bio'", mapping=pmap("bio=bio")),
    cli("people-title-boolean", "value", "people", pj(title=True), "reject", "column 'title'", mapping=pmap("title=title")),
    cli("people-email-number", "value", "people", pj(email=5), "reject", "column 'email'"),
    cli("people-email-without-at", "value", "people", text("domain,email,first\nacme.com,ann at acme.com,Ann\n"), "reject", "column 'email'", "@"),
    cli("people-phone-letters", "value", "people", text("domain,email,first,phone\nacme.com,ann@acme.com,Ann,call me\n"), "reject", "column 'phone'", mapping=pmap("phone=phone_number")),
    op("people-phone-float", "value", "people", pj(phone=4155552671.0), "reject", "column 'phone'",
       kwargs={"column_map": {"domain": "account_domain", "email": "email", "first": "first_name", "phone": "phone_number"}}),
    cli("people-phone-extension", "value", "people", text("domain,email,first,phone\nacme.com,ann@acme.com,Ann,+1 415 555 2671 ext. 3\n"), "reject", "column 'phone'", "extension", mapping=pmap("phone=phone_number")),
    cli("people-profile-url-ftp", "value", "people", text("domain,email,first,li\nacme.com,ann@acme.com,Ann,ftp://example.com/in/ann\n"), "reject", "column 'li'", "http", mapping=pmap("li=network_profile_url")),
    cli("people-profile-url-list", "value", "people", pj(li=["https://example.com/in/ann"]), "reject", "column 'li'", mapping=pmap("li=network_profile_url")),
    cli("people-avatar-url-object", "value", "people", pj(avatar={"url": "x"}), "reject", "column 'avatar'", mapping=pmap("avatar=avatar_url")),
    cli("people-connection-paths-object", "value", "people", text('domain,email,first,paths\nacme.com,ann@acme.com,Ann,"{""userId"": ""u""}"\n'), "reject", "column 'paths'", "array", mapping=pmap("paths=connection_paths")),
    cli("people-connection-paths-bad-degree", "value", "people", pj(paths=[{"userId": "usr_demo", "source": "network", "degree": "3rd"}]), "reject", "column 'paths'", mapping=pmap("paths=connection_paths")),
    cli("people-connection-paths-deep", "value", "people", table(["domain", "email", "first", "paths"], ["acme.com", "ann@acme.com", "Ann", DEEP]), "reject", "column 'paths'", mapping=pmap("paths=connection_paths")),
    cli("people-target-maybe", "value", "people", text("domain,email,first,target\nacme.com,ann@acme.com,Ann,maybe\n"), "reject", "column 'target'", "true/false", mapping=pmap("target=target")),
    op("people-target-two", "value", "people", pj(target=2), "reject", "column 'target'",
       kwargs={"column_map": {"domain": "account_domain", "email": "email", "first": "first_name", "target": "target"}}),
    cli("people-personas-numbers", "value", "people", text('domain,email,first,personas\nacme.com,ann@acme.com,Ann,"[1, 2]"\n'), "reject", "column 'personas'", mapping=pmap("personas=personas")),
    cli("people-personas-object", "value", "people", pj(personas={"champion": True}), "reject", "column 'personas'", mapping=pmap("personas=personas")),
    cli("people-persona-rationale-list", "value", "people", pj(why=["because"]), "reject", "column 'why'", mapping=pmap("why=persona_rationale")),
    cli("people-title-1e400-is-text", "value", "people", text("domain,email,first,title\nacme.com,ann@acme.com,Ann,1e400\n"), "ok", mapping=pmap("title=title"), check=person("acme.com", title="1e400")),
    # A wrong type for every event field of §2.3.
    cli("ingest-signal-list", "value", "ingest", jsonl({"id": "acc-1", "slug": ["page_visit"]}), "reject", "column 'slug'", mapping=imap("--signal-column", "slug")),
    cli("ingest-signal-unknown", "value", "ingest", text("id,slug\nacc-1,nope\n"), "error", "refused every event", mapping=imap("--signal-column", "slug")),
    cli("ingest-identity-type-list", "value", "ingest", jsonl({"id": "acc-1", "kind": ["account"]}), "reject", "column 'kind'", mapping=imap("--identity-type-column", "kind")),
    cli("ingest-identity-id-object", "value", "ingest", jsonl({"id": {"crm": 1}}), "reject", "column 'id'"),
    op("ingest-identity-id-boolean", "value", "ingest", jsonl({"id": True}), "reject", "column 'id'"),
    cli("ingest-identity-id-empty", "value", "ingest", text("id,path\n,/pricing\n"), "reject", "column 'id'", mapping=imap("--data-columns", "path")),
    cli("ingest-data-list", "value", "ingest", text('id,payload\nacc-1,"[1, 2]"\n'), "reject", "column 'payload'", "object", mapping=DATA),
    cli("ingest-data-string", "value", "ingest", text('id,payload\nacc-1,"""x"""\n'), "reject", "column 'payload'", "object", mapping=DATA),
    cli("ingest-data-not-json", "value", "ingest", text("id,payload\nacc-1,{bad\n"), "reject", "column 'payload'", "JSON", mapping=DATA),
    cli("ingest-version-text", "value", "ingest", text(EVENTS), "error", "--version", status=2, args=("--version", "newest")),
    op("ingest-version-boolean", "value", "ingest", text(EVENTS), "error", "version", kwargs={"version": True}),
    cli("ingest-timestamp-epoch-number", "value", "ingest", jsonl({"id": "acc-1", "ts": 1764064800}), "reject", *NOT_ISO, mapping=TS),
    cli("ingest-reference-list", "value", "ingest", jsonl({"id": "acc-1", "ref": ["r1"]}), "reject", "column 'ref'", mapping=imap("--reference-column", "ref")),
    cli("ingest-reference-empty", "value", "ingest", text("id,ref\nacc-1,\n"), "reject", "column 'ref'", "empty", mapping=imap("--reference-column", "ref")),
    # Out-of-range numbers, infinities, NaN.
    cli("rows-json-1e400", "value", "rows", text("domain,arr\nacme.com,1e400\n"), "reject", "column 'arr'", mapping=rmap("domain=domain", "arr=arr"), args=("--json-column", "arr")),
    cli("rows-json-infinity", "value", "rows", text("domain,arr\nacme.com,Infinity\n"), "reject", "column 'arr'", mapping=rmap("domain=domain", "arr=arr"), args=("--json-column", "arr")),
    op("rows-json-nan", "value", "rows", text("domain,arr\nacme.com,NaN\n"), "reject", "column 'arr'", kwargs={"column_map": {"domain": "domain", "arr": "arr"}, "json_columns": ["arr"]}),
    cli("ingest-data-1e400", "value", "ingest", text('id,payload\nacc-1,"{""n"": 1e400}"\n'), "reject", "column 'payload'", mapping=DATA),
    cli("ingest-jsonl-1e400-in-data-columns", "value", "ingest", text('{"id": "acc-1", "n": 1e400}\n', name="extract.jsonl"), "reject", "column 'n'", "finite", mapping=imap("--data-columns", "n")),
    cli("rows-parquet-infinity", "value", "rows", parquet({"domain": ["acme.com"], "arr": [float("inf")]}), "reject", "column 'arr'", mapping=rmap("domain=domain", "arr=arr")),
    cli("rows-parquet-nan-is-missing", "value", "rows", parquet({"domain": ["acme.com"], "arr": [float("nan")]}), "ok", mapping=rmap("domain=domain", "arr=arr"), expect={"unchanged": 1}),
    cli("rows-query-real-overflow", "value", "rows", sqlite("", "select 'acme.com' as domain, 1e999 as arr"), "reject", "column 'arr'", mapping=rmap("domain=domain", "arr=arr")),
    cli("rows-text-into-number-column", "value", "rows", text("domain,arr\nacme.com,ten\n"), "error", "column 'arr'", "must be a number", mapping=rmap("domain=domain", "arr=arr")),
    # Deep and wide JSON.
    cli("rows-json-600-deep", "value", "rows", table(["domain", "meta"], ["acme.com", DEEP]), "reject", "column 'meta'", mapping=rmap("domain=domain", "meta=metadata"), args=("--json-column", "meta")),
    op("rows-json-100000-deep", "value", "rows", table(["domain", "meta"], ["acme.com", DEEPER]), "reject", "column 'meta'", kwargs={"column_map": {"domain": "domain", "meta": "metadata"}, "json_columns": ["meta"]}),
    cli("ingest-data-600-deep", "value", "ingest", table(["id", "payload"], ["acc-1", '{"a": ' + DEEP + "}"]), "reject", "column 'payload'", mapping=DATA),
    op("ingest-jsonl-data-600-deep", "value", "ingest", text('{"id": "acc-1", "payload": {"a": ' + DEEP + "}}\n", name="extract.jsonl"), "reject", "column 'payload'", kwargs={"data_column": "payload"}),
    cli("rows-json-20000-keys", "value", "rows", jsonl({"domain": "acme.com", "meta": {f"k{i}": i for i in range(20_000)}}), "ok", mapping=rmap("domain=domain", "meta=metadata"), check=cell("acme.com", "metadata", lambda v: len(v) == 20_000)),
    cli("ingest-data-50000-keys", "value", "ingest", table(["id", "payload"], ["acc-1", json.dumps({f"k{i}": i for i in range(50_000)})]), "ok", mapping=DATA, check=event(data=lambda d: len(d) == 50_000)),
    # Timestamps in every form people write: ISO 8601 in, everything else rejected.
    cli("ingest-timestamp-utc", "value", "ingest", ts("2026-11-25T10:00:00Z"), "ok", mapping=TS, check=event(timestamp=at("10:00"))),
    cli("ingest-timestamp-offset", "value", "ingest", ts("2026-11-25T10:00:00+02:00"), "ok", mapping=TS, check=event(timestamp=at("08:00"))),
    cli("ingest-timestamp-naive-in-zone", "value", "ingest", ts("2026-11-25T10:00:00"), "ok", mapping=TS, args=("--naive-timezone", "Europe/Paris"), check=event(timestamp=at("09:00"))),
    cli("ingest-timestamp-with-space", "value", "ingest", ts("2026-11-25 10:00"), "ok", mapping=TS, check=event(timestamp=at("10:00"))),
    cli("ingest-timestamp-date-only", "value", "ingest", ts("2026-11-25"), "ok", mapping=TS, check=event(timestamp=at("00:00"))),
    cli("ingest-timestamp-day-first", "value", "ingest", ts("25/11/2026"), "reject", *NOT_ISO, mapping=TS),
    cli("ingest-timestamp-epoch-text", "value", "ingest", ts("1764064800"), "reject", *NOT_ISO, mapping=TS),
    op("ingest-timestamp-yesterday", "value", "ingest", ts("yesterday"), "reject", *NOT_ISO, kwargs={"timestamp_column": "ts"}),
    cli("ingest-timestamp-month-13", "value", "ingest", ts("2026-13-45T10:00:00Z"), "reject", *NOT_ISO, mapping=TS),
    cli("ingest-timestamp-parquet-naive", "value", "ingest", parquet(naive_timestamps), "ok",
        mapping=TS, args=("--naive-timezone", "America/New_York"), check=event(timestamp=at("15:00"))),
    # Unicode edge cases: format characters, combining marks and emoji pass unchanged.
    cli("people-rtl-mark-in-name", "value", "people", text("domain,email,first,last\nacme.com,ann@acme.com,Ann,\u200fLee\n"), "ok", mapping=pmap("last=last_name"), check=person("acme.com", last_name="\u200fLee")),
    cli("people-zwj-emoji-in-name", "value", "people", text("domain,email,first,last\nacme.com,ann@acme.com,Ann,\U0001f469\u200d\U0001f469\u200d\U0001f467\n"), "ok", mapping=pmap("last=last_name"),
        check=person("acme.com", last_name="\U0001f469\u200d\U0001f469\u200d\U0001f467")),
    cli("rows-combining-marks-kept", "value", "rows", text("domain,name\nacme.com,Zoe\u0308\n"), "ok", check=cell("acme.com", "name", "Zoe\u0308")),
    cli("ingest-emoji-in-data", "value", "ingest", text("id,note\nacc-1,\U0001f680 launch\n"), "ok", mapping=imap("--data-columns", "note"), check=event(data={"note": "\U0001f680 launch"})),
    cli("rows-rtl-override-in-key", "value", "rows", text("domain,name\n\u202eacme.com,Acme\n"), "reject", "column 'domain'"),
    cli("people-lone-surrogate-in-name", "value", "people", text('{"domain": "acme.com", "email": "ann@acme.com", "first": "A\\ud800"}\n', name="extract.jsonl"), "reject", "column 'first'"),
    op("rows-lone-surrogate-in-value", "value", "rows", text('{"domain": "acme.com", "name": "A\\udfff"}\n', name="extract.jsonl"), "reject", "column 'name'"),
    cli("ingest-lone-surrogate-in-id", "value", "ingest", text('{"id": "acc-\\ud800"}\n', name="extract.jsonl"), "reject", "column 'id'"),
]

KEY = [
    cli("people-same-person-other-values", "key", "people", text("domain,email,first\nacme.com,ann@acme.com,Ann\nacme.com,ann@acme.com,Anne\n"), "reject", "duplicate of row 1", row=2),
    cli("people-email-case-collision", "key", "people", text("domain,email,first\nacme.com,Ann@Acme.com,Ann\nACME.com,ann@acme.com,Anne\n"), "reject", "duplicate of row 1", row=2),
    cli("people-identical-rows", "key", "people", text(PEOPLE + "acme.com,ann@acme.com,Ann\n"), "ok", expect={"passed": 1, "duplicates": 1}),
    op("people-www-and-url-domains-collapse", "key", "people", text("domain,email,first\nwww.acme.com,ann@acme.com,Ann\nhttps://ACME.com/about,ann@acme.com,Ann\n"), "ok", expect={"passed": 1, "duplicates": 1}),
    cli("people-empty-domain", "key", "people", text("domain,email,first\n,ann@acme.com,Ann\n"), "reject", "column 'domain'", "empty"),
    cli("people-no-identity", "key", "people", text("domain,email,first\nacme.com,,Ann\n"), "reject", "no identity"),
    cli("people-shared-profile-url", "key", "people", text("domain,email,first,li\nacme.com,ann@acme.com,Ann,https://example.com/in/x\nacme.com,bob@acme.com,Bob,http://www.example.com/in/x/\n"), "ok",
        mapping=pmap("li=network_profile_url"), expect={"passed": 2}),
    cli("people-same-profile-url-other-person", "key", "people", text("domain,email,first,li\nacme.com,ann@acme.com,Ann,https://example.com/in/x\nacme.com,bob@acme.com,Bob,https://EXAMPLE.com/in/x/\n"), "reject", "profile URL", row=2,
        mapping=pmap("li=network_profile_url")),
    cli("rows-case-collision", "key", "rows", text("domain,name\nAcme.com,Acme\nacme.com,ACME Inc\n"), "reject", "duplicate of row 1", row=2),
    cli("rows-www-collision-identical", "key", "rows", text("domain,name\nwww.acme.com,Acme\nacme.com,Acme\n"), "ok", expect={"passed": 1, "duplicates": 1}),
    cli("rows-empty-key", "key", "rows", text("domain,name\n,Acme\n"), "reject", "column 'domain'", "empty"),
    cli("rows-nul-in-key", "key", "rows", text("domain,name\nacme\x00.com,Acme\n"), "reject", "column 'domain'"),
    cli("rows-blank-key", "key", "rows", text('domain,name\n"   ",Acme\n'), "reject", "column 'domain'"),
    cli("rows-ip-address-key", "key", "rows", text("domain,name\n192.168.0.1,Acme\n"), "reject", "column 'domain'", "IP address"),
    cli("rows-email-as-key", "key", "rows", text("domain,name\nann@acme.com,Acme\n"), "reject", "column 'domain'", "e-mail"),
    op("rows-idn-collision", "key", "rows", text("domain,name\nbücher.de,Bücher\nxn--bcher-kva.de,Buecher\n"), "reject", "duplicate of row 1", row=2),
    cli("rows-zero-width-space-in-key", "key", "rows", text("domain,name\nacme\u200b.com,Acme\n"), "ok", check=cell("acme.com", "name", "Acme")),
    cli("rows-text-key-trimmed-collision", "key", "rows", text("domain,name\nabc,A\n abc ,B\n"), "reject", "duplicate of row 1", row=2, args=("--key-kind", "text")),
    cli("ingest-reference-twice-other-values", "key", "ingest", text("id,ref\nacc-1,r1\nacc-2,r1\n"), "reject", "duplicate of row 1", row=2, mapping=imap("--reference-column", "ref")),
    cli("ingest-identical-rows-collapse", "key", "ingest", text("id,ts\nacc-1,2026-11-25T10:00:00Z\nacc-1,2026-11-25T10:00:00Z\n"), "ok", mapping=TS, expect={"events": 1, "duplicates_collapsed": 1}),
    cli("ingest-same-instant-two-spellings", "key", "ingest", text("id,ts\nacc-1,2026-11-25T10:00:00Z\nacc-1,2026-11-25T11:00:00+01:00\n"), "ok", mapping=TS, expect={"events": 1, "duplicates_collapsed": 1}),
]

SOURCE = [
    cli("people-query-no-such-table", "source", "people", sqlite(WAREHOUSE, "select * from nope"), "error", "no such table", "--sql"),
    cli("rows-query-syntax-error", "source", "rows", sqlite(WAREHOUSE, "selec domain from contacts"), "error", "syntax", "--sql"),
    op("rows-query-no-such-table", "source", "rows", sqlite(WAREHOUSE, "select * from nope"), "error", "no such table"),
    cli("ingest-database-unreachable", "source", "ingest", sql_on("postgresql+psycopg2://u:hunter2pw@127.0.0.1:{port}/db", "select 'acc-1' as id"), "error", "127.0.0.1", secrets=("hunter2pw",)),
    cli("people-sql-url-unparsable", "source", "people", sql_on("not a url"), "error", "--sql-url", status=2),
    cli("rows-sql-url-unknown-dialect", "source", "rows", sql_on("nosuchdb://host/db"), "error", "--sql-url", status=2),
    op("ingest-sql-connection-undefined", "source", "ingest", sqlite("", "select 'acc-1' as id"), "error", "nope_conn", kwargs={"sql_conn_id": "nope_conn"}),
    cli("people-query-no-rows", "source", "people", sqlite(WAREHOUSE, "select * from contacts where 0"), "ok", expect={"read": 0}),
    cli("people-query-no-rows-mirror-list", "source", "people", sqlite(WAREHOUSE, "select * from contacts where 0"), "error", "Refusing", seed_people=True,
        args=("--mode", "mirror", "--delete-scope", "list", "--max-delete-fraction", "1"), check=people_kept(2)),
    cli("rows-query-blob", "source", "rows", sqlite("", "select 'acme.com' as domain, x'00ff' as name"), "reject", "column 'name'", "binary"),
    cli("ingest-query-no-rows", "source", "ingest", sqlite("create table e(id text);", "select id from e"), "ok", expect={"rows_read": 0}),
    cli("rows-parquet-struct-into-text-column", "source", "rows", parquet({"domain": ["acme.com"], "name": [{"a": 1, "b": [1, 2]}]}), "error", "column 'name'", "must be a string"),
    cli("people-parquet-struct-first-name", "source", "people", parquet({"domain": ["acme.com"], "email": ["ann@acme.com"], "first": [{"a": 1}]}), "reject", "column 'first'"),
    cli("people-parquet-list-personas", "source", "people", parquet({"domain": ["acme.com"], "email": ["ann@acme.com"], "first": ["Ann"], "p": [["Champion", "economic buyer"]]}), "ok",
        mapping=pmap("p=personas"), check=person("acme.com", personas=["champion", "economic_buyer"])),
    cli("rows-jsonl-mixed-types", "source", "rows", jsonl({"domain": "acme.com", "name": 1}, {"domain": "beta.io", "name": [1]}), "error", "must be a string"),
    cli("ingest-jsonl-mixed-id-types", "source", "ingest", jsonl({"id": "acc-1"}, {"id": 2}, {"id": 3.5}), "ok", expect={"events": 3, "acknowledged": 3}),
    cli("ingest-jsonl-nested-data", "source", "ingest", jsonl({"id": "acc-1", "ctx": {"a": {"b": [1, {"c": None}]}}}), "ok", mapping=imap("--data-columns", "ctx"),
        check=event(data={"ctx": {"a": {"b": [1, {"c": None}]}}})),
    cli("rows-jsonl-line-not-object", "source", "rows", jsonl({"domain": "acme.com"}, "[1, 2]"), "error", "line 2", "extract.jsonl"),
    op("ingest-jsonl-invalid-line", "source", "ingest", jsonl({"id": "acc-1"}, "{bad"), "error", "line 2", "extract.jsonl"),
    cli("people-missing-file", "source", "people", path("/nonexistent/contacts.csv"), "error", "--source", "contacts.csv", status=2),
    cli("rows-file-uri-missing", "source", "rows", path("file:///nonexistent/accounts.csv"), "error", "file:///nonexistent/accounts.csv", status=2),
    cli("ingest-s3-uri-missing", "source", "ingest", path("s3://nope/x.csv"), "error", "s3://nope/x.csv", status=2),
    op("people-s3-uri-missing", "source", "people", path("s3://nope/x.csv"), "error", "s3://nope/x.csv"),
    op("rows-file-uri-missing-operator", "source", "rows", path("file:///nonexistent/accounts.csv"), "error", "/nonexistent/accounts.csv"),
]

ARGUMENT = [
    cli("people-rejects-path-unwritable", "argument", "people", text(PEOPLE), "error", "--rejects-path", status=2, args=("--rejects-path", "/proc/listsync/rejects.jsonl")),
    cli("rows-plan-path-unwritable", "argument", "rows", text(ROWS), "error", "--plan-path", status=2, args=("--dry-run", "--plan-path", "/proc/listsync/plan.jsonl")),
    cli("ingest-rejects-path-unwritable", "argument", "ingest", text(EVENTS), "error", "--rejects-path", status=2, args=("--rejects-path", "/proc/listsync/rejects.jsonl")),
    cli("ingest-checkpoint-unwritable", "argument", "ingest", text(EVENTS), "error", "--checkpoint", status=2, args=("--checkpoint", "/proc/listsync/checkpoint.json")),
    cli("ingest-state-dir-unwritable", "argument", "ingest", text(EVENTS), "error", "--state-dir", status=2, args=("--state-dir", "/proc/listsync")),
    op("rows-rejects-path-unwritable", "argument", "rows", text(ROWS), "error", "rejects_path", kwargs={"rejects_path": "/proc/listsync/rejects.jsonl"}),
    op("people-plan-path-unwritable", "argument", "people", text(PEOPLE), "error", "plan_path", kwargs={"dry_run": True, "plan_path": "/proc/listsync/plan.jsonl"}),
    cli("rows-table-id-question-mark", "argument", "rows", text(ROWS), "error", "tbl?x", args=("--table-id", "tbl?x")),
    cli("people-table-id-hash", "argument", "people", text(PEOPLE), "error", "tbl#x", args=("--table-id", "tbl#x")),
    cli("rows-table-id-dot-dot", "argument", "rows", text(ROWS), "error", "'..'", status=2, args=("--table-id", "..")),
    op("people-table-id-slash", "argument", "people", text(PEOPLE), "error", "tbl/x", kwargs={"table_id": "tbl/x"}),
    cli("people-map-without-equals", "argument", "people", text(PEOPLE), "error", "--map", status=2, mapping=("--map", "domain", "--map", "first=first_name")),
    cli("rows-map-empty-target", "argument", "rows", text(ROWS), "error", "--map", status=2, mapping=rmap("domain=", "name=name")),
    cli("people-map-unknown-field", "argument", "people", text(PEOPLE), "error", "emial", status=2, mapping=("--map", "domain=account_domain", "--map", "email=emial", "--map", "first=first_name")),
    cli("people-map-field-twice", "argument", "people", text(PEOPLE), "error", "first_name", status=2, mapping=("--map", "domain=account_domain", "--map", "email=first_name", "--map", "first=first_name")),
    cli("rows-key-column-not-mapped", "argument", "rows", text(ROWS), "error", "'domain'", status=2, mapping=rmap("name=name")),
    cli("ingest-column-mapped-twice", "argument", "ingest", text(EVENTS), "error", "more than once", "id", status=2, mapping=imap("--data-columns", "id")),
    cli("people-naive-timezone-unknown", "argument", "people", text(PEOPLE), "error", "--naive-timezone", status=2, args=("--naive-timezone", "Mars/Olympus")),
    op("rows-naive-timezone-unknown", "argument", "rows", text(ROWS), "error", "Mars/Olympus", kwargs={"naive_timezone": "Mars/Olympus"}),
    cli("ingest-naive-timezone-empty", "argument", "ingest", text(EVENTS), "error", "--naive-timezone", status=2, args=("--naive-timezone", "")),
    cli("people-chunk-size-zero", "argument", "people", text(PEOPLE), "error", "between 1 and 500", status=2, args=("--chunk-size", "0")),
    cli("rows-chunk-size-words", "argument", "rows", text(ROWS), "error", "--chunk-size", status=2, args=("--chunk-size", "lots")),
    cli("rows-chunk-size-unknown-kind", "argument", "rows", text(ROWS), "error", "--chunk-size", status=2, args=("--chunk-size", "add=5")),
    op("people-chunk-size-too-big", "argument", "people", text(PEOPLE), "error", "between 1 and 500", kwargs={"chunk_size": 10_000}),
    cli("ingest-batch-size-zero", "argument", "ingest", text(EVENTS), "error", "--batch-size", status=2, args=("--batch-size", "0")),
    cli("rows-delimiter-two-characters", "argument", "rows", text(ROWS), "error", "--delimiter", status=2, args=("--delimiter", ";;")),
    cli("people-encoding-unknown", "argument", "people", text(PEOPLE), "error", "--encoding", status=2, args=("--encoding", "klingon")),
    cli("people-default-region-unknown", "argument", "people", text(PEOPLE), "error", "--default-region", status=2, args=("--default-region", "XX")),
    cli("rows-base-url-not-a-url", "argument", "rows", text(ROWS), "error", "--base-url", status=2, server="url:not a url"),
    cli("ingest-api-key-control-character", "argument", "ingest", text(EVENTS), "error", "--api-key", status=2, args=("--api-key", "sk_bad\x01key")),
    cli("people-max-reject-fraction-above-one", "argument", "people", text(PEOPLE), "error", "--max-reject-fraction", status=2, args=("--max-reject-fraction", "2")),
    cli("ingest-signal-type-unknown", "argument", "ingest", text(EVENTS), "error", "--signal-type", status=2, args=("--signal-type", "page_visit=Fast")),
]

SERVER = [
    # Answers that show the base URL names no API: say to check it.
    cli("people-server-answers-html", "server", "people", text(PEOPLE), "error", "not JSON", "--base-url", server="html"),
    op("rows-server-answers-html", "server", "rows", text(ROWS), "error", "not JSON", "listsync_default", server="html"),
    cli("ingest-server-answers-html", "server", "ingest", text(EVENTS), "error", "not JSON", "--base-url", server="html"),
    cli("rows-server-redirects", "server", "rows", text(ROWS), "error", "302", "--base-url", server="redirect"),
    cli("people-tls-to-plain-http", "server", "people", text(PEOPLE), "error", "SSL", "--base-url", server="tls"),
    op("ingest-tls-to-plain-http", "server", "ingest", text(EVENTS), "error", "SSL", "listsync_default", server="tls"),
    cli("rows-nothing-listening", "server", "rows", text(ROWS), "error", "could not reach", "--base-url", server="unreachable"),
    # Answers that cannot be read: an error naming the request, never a guess.
    cli("people-server-invalid-json", "server", "people", text(PEOPLE), "error", "not JSON", server="badjson"),
    op("ingest-server-invalid-json", "server", "ingest", text(EVENTS), "error", "not JSON", server="badjson"),
    cli("rows-server-empty-body", "server", "rows", text(ROWS), "error", "/rows", server="empty"),
    cli("ingest-server-empty-body", "server", "ingest", text(EVENTS), "error", "acknowledges no event", server="empty"),
    cli("people-server-wrong-shape", "server", "people", text(PEOPLE), "error", "people is not a list", server="shape"),
    cli("rows-server-wrong-shape", "server", "rows", text(ROWS), "error", "rows is not a list", server="shape"),
    cli("ingest-server-scalars", "server", "ingest", text(EVENTS), "error", "cannot read", server="scalars"),
    cli("people-server-huge-error-page", "server", "people", text(PEOPLE), "error", "502", server="huge"),
    cli("ingest-server-huge-error-page", "server", "ingest", text(EVENTS), "error", "502", server="huge"),
    cli("rows-server-rate-limited-for-an-hour", "server", "rows", text(ROWS), "error", "429", server="ratelimited"),
    # The key echoed back by the service never reaches the user.
    cli("people-401-echoes-the-key", "server", "people", text(PEOPLE), "error", "401", "API key", server="echo401"),
    cli("ingest-401-echoes-the-key", "server", "ingest", text(EVENTS), "error", "401", server="echo401"),
    op("rows-401-echoes-the-key", "server", "rows", text(ROWS), "error", "401", server="echo401"),
    cli("rows-503-echoes-the-key", "server", "rows", text(ROWS), "error", "503", server="echo503"),
    cli("ingest-503-echoes-the-key", "server", "ingest", text(EVENTS), "error", "503", server="echo503"),
    # Slow and silent servers: each request ends at its timeout, and the run with an error.
    op("rows-server-never-answers", "server", "rows", text(ROWS), "error", "no answer", server="silent"),
    op("people-server-too-slow", "server", "people", text(PEOPLE), "error", "no answer", server="slow"),
    sub("ingest-server-never-answers-cli", "server", "ingest", text(EVENTS), "error", "no answer", server="silent", args=("--timeout", "0.3")),
    sub("people-server-too-slow-cli", "server", "people", text(PEOPLE), "error", "no answer", server="slow", args=("--timeout", "0.3")),
]

DAG = [
    dag("dag-people-latin1", "file", "people", text("domain,email,first\nacme.com,renee@acme.com,Renée\n", encoding="latin-1"), "error", "extract.csv", "encoding="),
    dag("dag-ingest-server-answers-html", "server", "ingest", text(EVENTS), "error", "not JSON", "listsync_default", server="html"),
    dag("dag-rows-short-row", "file", "rows", text("domain,name,owner\nacme.com,Acme\n"), "reject", "field", kwargs={"column_map": {"domain": "domain", "name": "name", "owner": "owner"}}),
]

# fmt: on

CASES: list[Case] = [*FILE, *HEADER, *VALUE, *KEY, *SOURCE, *ARGUMENT, *SERVER, *DAG]
