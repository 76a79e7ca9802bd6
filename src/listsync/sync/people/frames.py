"""People as columns: the extract's and the List's people as DataFrames, one row a person.

Both sides of a people plan are held this way rather than as an object per person: text fields
as Arrow strings (a few bytes a value instead of a Python string each), the other fields
(``connection_paths``, ``personas``, ``target``) as Python values. Identities and the keys a person
is found by are computed as column operations (:func:`identities`), with the same rules as
:func:`~listsync.client.models.person_identity` and :func:`~listsync.sync.people.match.person_keys`.

A people frame has the columns ``account_domain`` (normalised), ``identity``, and one column per
person field it carries (:data:`~listsync.extract.mapping.PERSON_FIELDS` order); a missing value is a
null. The List's frame (:func:`list_frame`) keeps the fields as the List holds them, since patches
name the List's own spelling, and adds ``url_key``, the profile URL normalised for matching.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ValidationError

from listsync.client.errors import UnexpectedResponseError
from listsync.client.models import ListedPerson
from listsync.extract.contact_rules import normalize_domain, normalize_profile_url
from listsync.extract.mapping import ACCOUNT_DOMAIN, PERSON_FIELDS
from listsync.extract.normalize import lower, normalize_column
from listsync.sync.memory import give_back_freed_memory

__all__ = [
    "IDENTITY",
    "OBJECT_FIELDS",
    "STRING_FIELDS",
    "TEXT",
    "TEXT_ARROW",
    "ListPeople",
    "PersonRecord",
    "field_column",
    "frame_records",
    "given",
    "identified",
    "identities",
    "list_batch",
    "list_columns",
    "list_frame",
    "one_chunk",
    "record_fields",
    "records_frame",
    "stacked",
    "text_chunks",
    "text_column",
    "wire",
]

#: What a source person or a List person may be: a mapping with ``account_domain`` and person
#: fields, or a model with those attributes (``ListedPerson``, ``Person``).
PersonRecord = Mapping[str, Any] | BaseModel

IDENTITY = "identity"
TEXT = pd.ArrowDtype(pa.string())
#: The Arrow type of the values of a :data:`TEXT` column.
TEXT_ARROW = pa.string()
#: Person fields held as Python values (lists and booleans); the others are text.
OBJECT_FIELDS = frozenset({"connection_paths", "personas", "target"})
STRING_FIELDS = tuple(name for name in PERSON_FIELDS if name not in OBJECT_FIELDS)
#: How many List people are turned into columns at a time.
BATCH = 20_000


def text_column(values: Sequence[Any] | np.ndarray | pa.Array) -> pd.Series:
    """Text values (``None`` for missing), or an Arrow string array, as an Arrow string column."""
    if isinstance(values, pa.Array):
        return pd.Series(pd.arrays.ArrowExtensionArray(values))
    return pd.Series(pa.array(values, type=pa.string(), from_pandas=True), dtype=TEXT)


def one_chunk(chunks: Sequence[pa.Array]) -> pd.Series:
    """A text column of ``chunks`` joined into one Arrow array. Arrow joins a column's chunks
    before it takes rows from them, so a plan that takes rows a slice at a time from a column of
    many chunks would copy the whole column for each slice."""
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array(chunks, TEXT_ARROW).combine_chunks()))


def field_column(name: str, values: Sequence[Any] | np.ndarray | pa.Array) -> pd.Series:
    """The column of person field ``name``: text as Arrow strings, the other fields as objects."""
    if name in OBJECT_FIELDS:
        return pd.Series(values, dtype=object)
    return text_column(values)


def given(value: Any) -> bool:
    """Whether a value read from a column is there (not ``None``, ``NA`` or ``NaN``)."""
    return value is not None and value is not pd.NA and not (isinstance(value, float) and np.isnan(value))


def frame_records(
    frame: pd.DataFrame,
    positions: Sequence[int] | np.ndarray | slice | None = None,
    names: Iterable[str] | None = None,
    *,
    keep_nulls: bool = False,
) -> list[dict[str, Any]]:
    """Rows of ``frame`` (those at ``positions``, or in a ``slice`` of it; default all) as dicts of
    the columns ``names`` (default all): the values given, and with ``keep_nulls`` the others as
    ``None``. (A slice is a view: taking rows by position copies them, some 0.1 ms a column.)"""
    if positions is None or isinstance(positions, slice):
        rows = frame if positions is None else frame.iloc[positions]
    else:
        rows = frame.iloc[np.asarray(positions, dtype=np.intp)]
    records: list[dict[str, Any]] = [{} for _ in range(len(rows))]
    for name in list(frame.columns) if names is None else names:
        values = _python_values(rows[name])
        if keep_nulls:
            for record, value in zip(records, values, strict=True):
                record[name] = value
        else:
            for record, value in zip(records, values, strict=True):
                if value is not None:
                    record[name] = value
    return records


def _python_values(column: pd.Series) -> list[Any]:
    """A column's values as Python objects, its nulls (``None``, NaN, ``pd.NA``) as ``None``.
    Arrow text, booleans and integers are converted by Arrow: pandas takes them one scalar at a
    time (ten times slower for text)."""
    dtype = column.dtype
    if isinstance(dtype, pd.ArrowDtype) and _arrow_converts(dtype.pyarrow_dtype):
        values: list[Any] = pa.array(column.array).to_pylist()
        return values
    return [value if given(value) else None for value in column.tolist()]


def _arrow_converts(kind: pa.DataType) -> bool:
    return any(
        test(kind)
        for test in (pa.types.is_string, pa.types.is_large_string, pa.types.is_boolean, pa.types.is_integer)
    )


def _clean(column: pd.Series) -> pd.Series:
    """Values trimmed, blanks as nulls (``_clean`` of :mod:`listsync.client.models`)."""
    return pd.Series(_cleaned(pa.array(column.astype(TEXT).array)), dtype=TEXT, index=column.index)


def _cleaned(text: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """:func:`_clean` on Arrow text: a column is cleaned in a few Arrow calls rather than through
    pandas' string methods, whose cost per call outweighs the work on a batch of List people."""
    trimmed = pc.utf8_trim_whitespace(text)
    return pc.if_else(pc.greater(pc.binary_length(trimmed), 0), trimmed, pa.scalar(None, TEXT_ARROW))


def identities(frame: pd.DataFrame) -> pd.Series:
    """Each person's identity (:func:`~listsync.client.models.person_identity`), null when none."""

    def field(name: str) -> pa.Array | pa.ChunkedArray:
        if name in frame.columns:
            return _cleaned(pa.array(frame[name].astype(TEXT).array))
        return pa.nulls(len(frame), TEXT_ARROW)

    join = pc.binary_join_element_wise  # null where a part is: the next kind of key is taken
    keys = pc.coalesce(
        join("email:", lower(field("email")), ""),
        join("url:", field("network_profile_url"), ""),
        join("phone:", field("phone_number"), ""),
        join("name:", field("first_name"), " ", field("last_name"), ""),
    )
    return pd.Series(keys, dtype=TEXT, index=frame.index)


def record_fields(record: PersonRecord) -> dict[str, Any]:
    """The person fields a record (a model or a mapping) holds, as they are."""
    if isinstance(record, BaseModel):
        values, present = vars(record), record.model_fields_set
        return {name: values[name] for name in PERSON_FIELDS if name in present}
    return {name: record[name] for name in PERSON_FIELDS if name in record}


def wire(value: Any) -> Any:
    """``value`` as JSON-ready data: models dumped as their wire form, lists item by item."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, list | tuple):
        return [wire(item) for item in value]
    return value


def records_frame(
    records: Iterable[tuple[str | None, Mapping[str, Any]]], names: Sequence[str]
) -> pd.DataFrame:
    """A frame of ``(account domain, person fields)`` pairs with the columns ``names``."""
    domains: list[str | None] = []
    columns: dict[str, list[Any]] = {name: [] for name in names}
    for domain, fields in records:
        domains.append(domain)
        for name, values in columns.items():
            value = fields.get(name)
            values.append(wire(value) if name in OBJECT_FIELDS else value)
    frame = pd.DataFrame({name: field_column(name, values) for name, values in columns.items()})
    frame.insert(0, ACCOUNT_DOMAIN, text_column(domains))
    return frame


@dataclass
class ListPeople:
    """The List's people as columns (:func:`list_frame`).

    :ivar frame: the identified people, in List order: ``domain`` (their account's, normalised
        like the extract's), ``identity``, ``url_key`` and every person field, except those no
        List person has (read them as nulls).
    :ivar read: every person read, the unidentified included.
    """

    frame: pd.DataFrame
    read: int

    @property
    def unidentified(self) -> int:
        """List people with no identity (left alone by a plan)."""
        return self.read - len(self.frame)


def list_frame(records: Iterable[PersonRecord], *, before: ListPeople | None = None) -> ListPeople:
    """The List's people as columns, built :data:`BATCH` people at a time.

    Each batch is turned into columns in a thread of its own while the next is read, so that this
    work overlaps the waits for the service's answers. ``records`` is still read here, one person
    after the other, so its pages are asked for one at a time as before and the memory guard stops
    a read where it did. A batch's error is raised at the latest once the next batch is read.

    :param records: the List's people as read: ``ListedPerson`` models, or the JSON objects the
        service sent (``iter_targetable_people_records``), whose field types are checked here as
        the client's ``ListedPerson`` would (:class:`~listsync.client.errors.UnexpectedResponseError`).
    :param before: people read before, put first (a split's part,
        :mod:`~listsync.sync.people.split`): identified, the columns of :func:`list_columns` that
        any of them has a value in.
    """
    built: list[Future[pd.DataFrame]] = []
    read = 0
    people = iter(records)
    with ThreadPoolExecutor(1, thread_name_prefix="listsync-list-batches") as builder:
        while (batch := list(itertools.islice(people, BATCH))) or not built:
            if built:
                built[-1].result()  # the one before, done by now: its error, if any, now
            built.append(builder.submit(list_batch, batch))
            read += len(batch)
            if len(batch) < BATCH:
                break
        batches = [future.result() for future in built]
    del built
    if before is not None:
        batches.insert(0, before.frame)
        read += before.read
    # A field no List person has would be a column of nulls, 4 to 8 bytes a person: left out.
    names = [
        name
        for name in batches[-1].columns
        if name in ("domain", IDENTITY)
        or any(name in batch.columns and batch[name].notna().any() for batch in batches)
    ]
    for name in set(names).difference(batches[0].columns):  # one the people before have none of
        batches[0][name] = field_column(name, np.full(len(batches[0]), None, dtype=object))
    return ListPeople(stacked(batches, names), read)


def stacked(parts: list[pd.DataFrame], names: Sequence[str]) -> pd.DataFrame:
    """The columns ``names`` of ``parts`` (people frames) put end to end, taken a column at a time
    and dropped from ``parts`` as they are, so that only one column is ever held twice; text
    columns end in one Arrow chunk (:func:`one_chunk`), the others (objects, row numbers) in one
    NumPy array. The parts' small buffers (a chunk's offsets) go back to the system a column at a
    time too, rather than pile up in the C library's heap."""
    columns: dict[str, pd.Series] = {}
    for name in names:
        if not isinstance(parts[0][name].dtype, pd.ArrowDtype):  # object fields, row numbers
            columns[name] = pd.Series(np.concatenate([part[name].to_numpy() for part in parts]))
        else:
            columns[name] = one_chunk([chunk for part in parts for chunk in text_chunks(part[name])])
        for part in parts:
            del part[name]
        give_back_freed_memory()
    return pd.DataFrame(columns)


def text_chunks(column: pd.Series) -> list[pa.Array]:
    """The Arrow chunks of a text column (no copy)."""
    array = pa.array(column.array).cast(TEXT_ARROW)
    return array.chunks if isinstance(array, pa.ChunkedArray) else [array]


def list_batch(batch: Sequence[PersonRecord], accounts: Collection[str] | None = None) -> pd.DataFrame:
    """A batch of List people as columns, as :func:`list_frame` holds them: the identified people
    of :func:`list_columns`, of ``accounts`` only when given."""
    return identified(list_columns(batch, accounts))


def list_columns(batch: Sequence[PersonRecord], accounts: Collection[str] | None = None) -> pd.DataFrame:
    """A batch of List people as columns: ``domain`` (normalised), every person field, ``url_key``
    and ``identity`` (null for a person without one).

    :param accounts: account domains (normalised): only their people are made columns, the others
        passed over before their fields are read (a read back of the accounts a night wrote).
    :raises UnexpectedResponseError: a person whose fields the client's model would refuse.
    """
    try:
        objects = _json_objects(batch)
        present = set().union(*objects) if objects else set()  # of those kept, or more
        domains = list_domains(text_column(_domains_named(batch, objects, present)))
        if accounts is not None:
            codes, distinct = pd.factorize(domains)  # each account's people come one after another
            kept = np.array([domain in accounts for domain in pa.array(distinct).to_pylist()])[codes]
            batch = list(itertools.compress(batch, kept.tolist()))
            objects = None if objects is None else cast("Sequence[Mapping[str, Any]]", batch)
            domains = domains[kept].reset_index(drop=True)
        frame = _columns(batch, objects, present)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValidationError) as error:
        raise UnexpectedResponseError(
            200, "GET", "targetable-people", f"cannot read a List person: {_first_error(error)}"
        ) from None
    frame.insert(0, "domain", domains)
    normalised = frame.assign(network_profile_url=_list_urls(frame["network_profile_url"]))
    frame["url_key"] = _clean(normalised["network_profile_url"])
    frame[IDENTITY] = identities(normalised)
    return frame


def identified(people: pd.DataFrame) -> pd.DataFrame:
    """The people of a List frame (:func:`list_columns`) who have an identity."""
    return people[people[IDENTITY].notna().to_numpy()].reset_index(drop=True)


def _columns(
    batch: Sequence[PersonRecord], objects: Sequence[Mapping[str, Any]] | None, present: Collection[str]
) -> pd.DataFrame:
    """The person fields of a batch of List people as columns: models as they are, JSON objects
    checked like a model (text must be text, ``target`` a boolean; lists by the model itself).
    ``objects``: the batch when every person in it is a JSON object (:func:`_json_objects`), and
    ``present`` the fields any of them has, or more."""
    if objects is None:
        if all(isinstance(record, BaseModel) for record in batch):
            frame = records_frame(((None, record_fields(record)) for record in batch), PERSON_FIELDS)
            return frame.drop(columns=ACCOUNT_DOMAIN)
        objects = [_as_dict(record) for record in batch]
        present = set().union(*objects)
    for name in ("personas", "connection_paths"):
        if name in present:
            for record in objects:
                if record.get(name) is not None:
                    ListedPerson.model_validate(record)  # the model says what is wrong, if anything
    # The text fields are taken out of the objects by Arrow, all at once; text must be text.
    texts = [name for name in STRING_FIELDS if name in present]
    converted = pa.array(objects, type=pa.struct([(name, TEXT_ARROW) for name in texts]))
    columns: dict[str, pd.Series] = {}
    for name in PERSON_FIELDS:
        if name in texts:
            columns[name] = pd.Series(converted.field(name), dtype=TEXT)
            continue
        values = [record.get(name) for record in objects] if name in present else [None] * len(objects)
        if name == "target":
            pa.array(values, type=pa.bool_())  # a boolean or nothing, as the model accepts
        columns[name] = field_column(name, values)
    return pd.DataFrame(columns)


def _as_dict(record: PersonRecord) -> Mapping[str, Any]:
    return record.model_dump() if isinstance(record, BaseModel) else record


def _json_objects(batch: Sequence[PersonRecord]) -> Sequence[Mapping[str, Any]] | None:
    """The batch as it is when every person in it is a JSON object (a dict); else None."""
    return cast("Sequence[Mapping[str, Any]]", batch) if batch and set(map(type, batch)) == {dict} else None


def _domains_named(
    batch: Sequence[PersonRecord], objects: Sequence[Mapping[str, Any]] | None, present: Collection[str]
) -> list[Any]:
    """The account domains a batch of List people names, as sent (a model's: None when empty);
    ``objects`` and ``present`` as :func:`_columns` takes them."""
    if objects is None:
        return [_domain_of(record) for record in batch]
    if ACCOUNT_DOMAIN not in present:  # as the service spells it, the only spelling there
        return [record.get("accountDomain") for record in objects]
    return [record.get(ACCOUNT_DOMAIN, record.get("accountDomain")) for record in objects]


def _domain_of(record: PersonRecord) -> Any:
    if not isinstance(record, BaseModel):
        return record.get(ACCOUNT_DOMAIN, record.get("accountDomain"))
    value = getattr(record, ACCOUNT_DOMAIN, None)
    return value if isinstance(value, str) and value else None


def _first_error(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return str(error.errors()[0]["msg"])
    return str(error)


def _normalised(column: pd.Series, rule: Callable[[Any], Any], fallback: pd.Series) -> pd.Series:
    """``column`` normalised by ``rule``; a value the rule rejects becomes its ``fallback``."""
    if not column.notna().any():  # a field no one in the batch has: nothing to normalise
        return column.astype(TEXT)
    result = normalize_column(column.astype(object).where(column.notna(), None), rule)
    values = text_column(result.data)
    if result.errors:
        failed = np.zeros(len(values), dtype=bool)
        failed[list(result.errors)] = True
        values = values.where(~failed, fallback)
    return values


def list_domains(domains: pd.Series) -> pd.Series:
    """List account domains normalised like the extract's (:func:`~listsync.sync.people.match.list_domain`):
    a domain the rules reject is matched as it is, trimmed and lower-cased; a missing one is ``""``.
    Each distinct domain is normalised once: a List gives an account's people one after another."""
    codes, distinct = pd.factorize(domains.astype(TEXT))
    text = pd.Series(distinct, dtype=TEXT)
    normalised = _normalised(text, normalize_domain, text.str.strip().str.lower()).fillna("")
    taken = pa.array(normalised.array).take(pa.array(codes, mask=codes < 0)).fill_null("")
    return pd.Series(taken, dtype=TEXT, index=domains.index)


def _list_urls(urls: pd.Series) -> pd.Series:
    """List profile URLs normalised like the extract's, as they are (trimmed) where the rules refuse."""
    return _normalised(urls, normalize_profile_url, urls.str.strip())
