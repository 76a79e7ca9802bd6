"""Wire models of the service (spec §2, §4; GET rows from the public docs; A13/A18 responses).

Request models enforce the spec's rules before anything is sent. Build them from untrusted
data with the ``validate_*`` functions: they raise :class:`InvalidRecordError` listing every
``(field, message)`` violation of the record, never a bare pydantic error. Models serialise
with :meth:`WireModel.to_wire`: the spec's casing (``userId``, ``accountDomain``, ``rowId``,
``columnId`` on List endpoints; person fields snake_case) and without ``None`` fields. Both the
Python names and the wire names are accepted on input.

Response models are tolerant: unknown fields are kept, missing optional ones are ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import date, datetime, timezone
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from listsync.client.errors import InvalidRecordError

MAX_EVENTS_PER_BATCH = 100
"""Spec §8: events per batch request."""

KNOWN_PERSONAS = ("economic_buyer", "champion", "technical_evaluator", "decision_maker")
"""Persona keys the docs show. Not a complete list: other keys are accepted (public docs)."""

_E164 = re.compile(r"^\+[1-9][0-9]{1,14}$")

NonEmptyStr = Annotated[str, Field(min_length=1)]


class WireModel(BaseModel):
    """Base of every request model: strict about unknown fields, serialised in the spec's casing."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", str_strip_whitespace=True)

    def to_wire(self) -> dict[str, Any]:
        """The JSON body the service expects: wire names, ``None`` fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def wire_json(self) -> bytes:
        """:meth:`to_wire` as JSON text, made by pydantic's serializer at once (a request of 500
        people is made several times faster than as a dict then encoded)."""
        return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude_none=True)


class ResponseModel(BaseModel):
    """Base of every response model: keeps unknown fields, accepts wire or Python names."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")


class ListWriteRequest(WireModel):
    """Base of the bodies of List writes (§4.4–4.9): each may name the user the write acts as."""

    user_id: str | None = Field(default=None, alias="userId")


def _check_e164(value: str | None) -> str | None:
    if value is not None and not _E164.match(value):
        raise ValueError("must be E.164: a plus sign followed by up to 15 digits, e.g. +14155550123")
    return value


def _check_iso8601(value: Any) -> Any:
    if isinstance(value, datetime):
        # A naive datetime is taken as UTC so the wire value is never ambiguous.
        aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return aware.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        text = value.strip()
        try:
            # Python 3.10's fromisoformat does not read a trailing "Z".
            datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
        except ValueError:
            raise ValueError("must be an ISO 8601 date-time, e.g. 2026-11-21T06:12:00Z") from None
        # ISO 8601 writes UTC as an upper-case Z; the lower-case one of RFC 3339 is sent as that.
        return text[:-1] + "Z" if text[-1:] == "z" else text
    return value


# ---------------------------------------------------------------------------------------------
# Targetable people (§2.1, §2.2, §4.3-4.6)


class ConnectionPath(WireModel):
    """A known path from a teammate to the person (§2.2)."""

    user_id: NonEmptyStr = Field(alias="userId")
    source: Literal["network", "relation"]
    degree: Literal["1st", "2nd"]
    context: str | None = None


class PersonFields(WireModel):
    """The person fields of §2.1, all optional: the ``patch`` of a PATCH request (§4.5)."""

    first_name: NonEmptyStr | None = None
    last_name: str | None = None
    bio: str | None = None
    title: str | None = None
    email: str | None = None
    phone_number: str | None = None
    network_profile_url: str | None = None
    avatar_url: str | None = None
    connection_paths: list[ConnectionPath] | None = None
    target: bool | None = None
    personas: list[NonEmptyStr] | None = None
    persona_rationale: str | None = None

    _phone = field_validator("phone_number")(_check_e164)


class Person(PersonFields):
    """A targetable person (§2.1): ``first_name`` is required, ``phone_number`` is E.164.

    ``personas`` accepts any key, not only :data:`KNOWN_PERSONAS` (no complete list is published).
    """

    first_name: NonEmptyStr


class PersonMatch(WireModel):
    """Identifies a person on a List (§4.6, and ``match`` of §4.5 per A17).

    At least one identity is required: ``email``, ``network_profile_url``, ``phone_number``, or
    ``first_name`` with ``last_name``. Build one from a person with :func:`person_match`.
    """

    email: NonEmptyStr | None = None
    network_profile_url: NonEmptyStr | None = None
    phone_number: str | None = None
    first_name: NonEmptyStr | None = None
    last_name: NonEmptyStr | None = None

    _phone = field_validator("phone_number")(_check_e164)

    @model_validator(mode="after")
    def _has_identity(self) -> PersonMatch:
        if self.email or self.network_profile_url or self.phone_number:
            return self
        if self.first_name and self.last_name:
            return self
        raise ValueError("needs email, network_profile_url, phone_number, or first_name and last_name")


class PersonPatch(WireModel):
    """One person to update (§4.5): ``match`` finds them, ``patch`` lists the fields to change.

    A field given as ``None`` in ``patch`` is sent as ``null``, which clears it on the List;
    fields not given are left out and stay as they are. ``first_name`` cannot be cleared.
    """

    match: PersonMatch
    patch: PersonFields

    @field_validator("patch")
    @classmethod
    def _patch_changes_something(cls, value: PersonFields) -> PersonFields:
        if not value.model_fields_set:
            raise ValueError("must change at least one field")
        if "first_name" in value.model_fields_set and value.first_name is None:
            raise ValueError("first_name is required and cannot be cleared")
        return value

    @model_serializer(mode="wrap")
    def _send_explicit_nulls(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            data["patch"] = self.patch.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return data


class AccountPeople(WireModel):
    """People to add to one account row (§4.4 ``accounts[]``)."""

    account_domain: NonEmptyStr = Field(alias="accountDomain")
    people: list[Person] = Field(min_length=1)


class AccountPatches(WireModel):
    """People to update on one account row (§4.5 ``accounts[]``)."""

    account_domain: NonEmptyStr = Field(alias="accountDomain")
    people: list[PersonPatch] = Field(min_length=1)


class AccountDeletes(WireModel):
    """People to remove from one account row (§4.6 ``accounts[]``)."""

    account_domain: NonEmptyStr = Field(alias="accountDomain")
    people: list[PersonMatch] = Field(min_length=1)


class AddPeopleRequest(ListWriteRequest):
    """Body of POST /v1/lists/{tableId}/targetable-people (§4.4)."""

    accounts: list[AccountPeople] = Field(min_length=1)
    duplicate_strategy: str | None = Field(default=None, alias="duplicateStrategy")


class UpdatePeopleRequest(ListWriteRequest):
    """Body of PATCH /v1/lists/{tableId}/targetable-people (§4.5)."""

    accounts: list[AccountPatches] = Field(min_length=1)


class DeletePeopleRequest(ListWriteRequest):
    """Body of DELETE /v1/lists/{tableId}/targetable-people (§4.6)."""

    accounts: list[AccountDeletes] = Field(min_length=1)


class ListedPerson(ResponseModel):
    """A person read back from a List (A13): the §2.1 fields plus ``account_domain``, ``row_id``."""

    first_name: str | None = None
    last_name: str | None = None
    bio: str | None = None
    title: str | None = None
    email: str | None = None
    phone_number: str | None = None
    network_profile_url: str | None = None
    avatar_url: str | None = None
    connection_paths: list[dict[str, Any]] | None = None
    target: bool | None = None
    personas: list[str] | None = None
    persona_rationale: str | None = None
    account_domain: str | None = Field(default=None, alias="accountDomain")
    row_id: str | None = Field(default=None, alias="rowId")


class _Paged(ResponseModel):
    """Paging fields of a page, under the names services use for them (read, never required)."""

    total: int | None = Field(
        default=None, validation_alias=AliasChoices("total", "totalMatched", "totalCount")
    )
    has_more: bool | None = Field(default=None, validation_alias=AliasChoices("hasMore", "has_more"))
    truncated: bool | None = None

    @property
    def more(self) -> bool | None:
        """Whether more items follow: ``hasMore``, else ``truncated``; ``None`` when unsaid."""
        return self.has_more if self.has_more is not None else self.truncated


class PeoplePage(_Paged):
    """One page of GET targetable-people (A13); paging fields are ``None`` when the service omits them."""

    people: list[ListedPerson] = Field(default_factory=list)
    limit: int | None = None
    offset: int | None = None


PersonLike = Person | ListedPerson | PersonFields | Mapping[str, Any]


def _field_getter(person: PersonLike) -> Callable[[str], Any]:
    if isinstance(person, Mapping):
        return person.get
    return lambda name: getattr(person, name, None)


def person_identity(person: PersonLike) -> str | None:
    """The key that identifies a person on an account row, in the order the service matches.

    ``email:<lowercased email>``, else ``url:<network_profile_url>``, else
    ``phone:<phone_number>``, else ``name:<first_name> <last_name>``; ``None`` when the person
    has none of these (a first name alone identifies no one). Accepts a model or a mapping.
    """
    get = _field_getter(person)
    email = _clean(get("email"))
    if email:
        return f"email:{email.lower()}"
    url = _clean(get("network_profile_url"))
    if url:
        return f"url:{url}"
    phone = _clean(get("phone_number"))
    if phone:
        return f"phone:{phone}"
    first, last = _clean(get("first_name")), _clean(get("last_name"))
    if first and last:
        return f"name:{first} {last}"
    return None


def is_merged_on_add(person: PersonLike) -> bool:
    """Whether the service merges ``person`` into an existing one when it is added again.

    It matches duplicates by e-mail and profile URL (§4.4), so adding such a person twice leaves
    one; a person known only by phone or name would be there twice.
    """
    get = _field_getter(person)
    return bool(_clean(get("email")) or _clean(get("network_profile_url")))


def person_match(person: PersonLike) -> PersonMatch:
    """The :class:`PersonMatch` for ``person``, on the same identity as :func:`person_identity`.

    Raises :class:`InvalidRecordError` when the person has no identity.
    """
    kind = (person_identity(person) or "").partition(":")[0]
    fields = {
        "email": ["email"],
        "url": ["network_profile_url"],
        "phone": ["phone_number"],
        "name": ["first_name", "last_name"],
    }.get(kind)
    if fields is None:
        raise InvalidRecordError(
            [("person", "needs email, network_profile_url, phone_number, or first_name and last_name")],
            record="person",
        )
    get = _field_getter(person)
    return PersonMatch.model_validate({name: _clean(get(name)) for name in fields})


def _clean(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


# ---------------------------------------------------------------------------------------------
# Signal events (§2.3-2.5, §4.1-4.2)


class Identity(WireModel):
    """The CRM object an event relates to: ``type`` (account, contact, deal, lead or custom) and ``id``."""

    type: NonEmptyStr
    id: NonEmptyStr


class SignalEvent(WireModel):
    """A signal event (§2.3).

    ``version`` is a number or ``"latest"`` (left out means latest); ``timestamp`` is ISO 8601
    (a ``datetime`` is accepted and sent as ISO 8601, naive ones as UTC); ``reference`` is echoed
    back by the service and is how the client maps acknowledgements to events.
    """

    signal: NonEmptyStr
    version: int | float | Literal["latest"] | None = None
    identity: Identity
    data: dict[str, Any] | None = None
    timestamp: str | None = None
    reference: NonEmptyStr | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        # bool is an int to Python but not a number to the spec.
        if (
            value is None
            or value == "latest"
            or (isinstance(value, (int, float)) and not isinstance(value, bool))
        ):
            return value
        raise ValueError("must be a number or the string 'latest'")

    _timestamp = field_validator("timestamp", mode="before")(_check_iso8601)


class EventBatchRequest(WireModel):
    """Body of POST /v1/events/batch (§4.2): 1 to 100 events."""

    events: list[SignalEvent] = Field(min_length=1, max_length=MAX_EVENTS_PER_BATCH)


class EventAck(ResponseModel):
    """Acknowledgement of an ingested event (§2.4)."""

    id: str
    signal_id: str | None = None
    schema_version: int | float | None = None
    status: str | None = None
    reference: str | None = None


class RateLimitedEntry(ResponseModel):
    """An event of a batch refused by its signal's rate limit (§2.5)."""

    signal_id: str | None = None
    reference: str | None = None


class BatchIngestResult(ResponseModel):
    """Response of POST /v1/events/batch (§4.2), plus what the client learnt sending it.

    :ivar acks: acknowledgements, in request order.
    :ivar rate_limited: events refused by their signal's limit; send them again later.
    :ivar possibly_duplicated: the batch was sent again after an attempt whose outcome was unknown
        (a timeout or dropped connection after sending), so some events may be ingested twice.
    """

    success: bool = True
    acks: list[EventAck] = Field(default_factory=list, alias="data")
    rate_limited: list[RateLimitedEntry] = Field(default_factory=list)
    possibly_duplicated: bool = False
    rate_limit_limit: int | None = None
    rate_limit_remaining: int | None = None
    rate_limit_reset_at: float | None = None


# ---------------------------------------------------------------------------------------------
# Rows and cells (§2.6, §4.7-4.9; GET rows from the public docs)


class RowAdd(WireModel):
    """A row to add (§4.7): ``cells`` maps column ID to a JSON value."""

    cells: dict[NonEmptyStr, Any]


class CellUpdate(WireModel):
    """One cell to change (§4.8). ``value`` is always sent, even when ``None`` (it clears the cell)."""

    row_id: NonEmptyStr = Field(alias="rowId")
    column_id: NonEmptyStr = Field(alias="columnId")
    value: Any

    @model_serializer(mode="wrap")
    def _keep_null_value(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        data.setdefault("value", None)
        return data


class AddRowsRequest(ListWriteRequest):
    """Body of POST /v1/lists/{tableId}/rows (§4.7)."""

    rows: list[RowAdd] = Field(min_length=1)


class UpdateCellsRequest(ListWriteRequest):
    """Body of PATCH /v1/lists/{tableId}/cells (§4.8)."""

    updates: list[CellUpdate] = Field(min_length=1)


class DeleteRowsRequest(ListWriteRequest):
    """Body of DELETE /v1/lists/{tableId}/rows (§4.9)."""

    row_ids: list[NonEmptyStr] = Field(alias="rowIds", min_length=1)


class Cell(ResponseModel):
    """A cell read back (public docs): the written ``value`` and the ``computed_value``."""

    value: Any = None
    computed_value: Any = Field(default=None, alias="computedValue")
    status: str | None = None
    column_id: str | None = Field(default=None, alias="columnId")
    row_id: str | None = Field(default=None, alias="rowId")


class Row(ResponseModel):
    """A row read back (public docs); ``cells`` maps column ID to :class:`Cell`."""

    id: str
    table_id: str | None = Field(default=None, alias="tableId")
    updated_at: str | None = None
    cells: dict[str, Cell] = Field(default_factory=dict)

    @field_validator("cells", mode="before")
    @classmethod
    def _bare_values(cls, value: Any) -> Any:
        # Tolerate cells given as bare values (the write shape) by wrapping them.
        if isinstance(value, Mapping):
            return {
                k: v if isinstance(v, Mapping) and "value" in v else {"value": v} for k, v in value.items()
            }
        return value


class RowsPage(_Paged):
    """One page of GET /v1/lists/{tableId}/rows (public docs: ``totalMatched``, ``truncated``)."""

    rows: list[Row] = Field(default_factory=list)
    returned: int | None = None

    @property
    def total_matched(self) -> int | None:
        """The rows matching the query in all (``totalMatched``)."""
        return self.total


class ListInfo(ResponseModel):
    """A List as GET /v1/lists returns it: its id (``id`` or ``tableId``); other fields are extras."""

    id: str = Field(validation_alias=AliasChoices("id", "tableId"))
    name: str | None = None


class WriteResult(ResponseModel):
    """What a List write returned (A18). A count is ``None`` when the service did not say it.

    Counts are read under the names services give them (``added``/``created``/``inserted``,
    ``updated``/``modified``, ``skipped``/``unchanged``, ``deleted``/``removed``).

    :ivar row_ids: ids of added rows, in request order, when the service returns them.
    :ivar not_found: people or row ids a patch or delete did not find (not an error, A19).
    """

    status_code: int = 200
    added: int | None = Field(default=None, validation_alias=AliasChoices("added", "created", "inserted"))
    updated: int | None = Field(default=None, validation_alias=AliasChoices("updated", "modified"))
    skipped: int | None = Field(default=None, validation_alias=AliasChoices("skipped", "unchanged"))
    deleted: int | None = Field(default=None, validation_alias=AliasChoices("deleted", "removed"))
    not_found: list[Any] = Field(
        default_factory=list, validation_alias=AliasChoices("notFound", "not_found", "missing")
    )
    row_ids: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Validation entry points


ModelT = TypeVar("ModelT", bound=BaseModel)


def validate_record(
    model: type[ModelT], data: ModelT | Mapping[str, Any], *, record: str | None = None
) -> ModelT:
    """Build ``model`` from ``data``; raise :class:`InvalidRecordError` with every violation.

    An instance of ``model`` is returned as is. Field names in violations are dotted paths
    (``connection_paths.0.degree``).
    """
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRecordError(
            [(_field_path(error["loc"]), _message(error)) for error in exc.errors()],
            record=record or model.__name__,
        ) from None


def _message(error: Any) -> str:
    # Our own validators' messages read better without pydantic's "Value error, " prefix.
    if error["type"] == "value_error" and "error" in error.get("ctx", {}):
        return str(error["ctx"]["error"])
    return str(error["msg"])


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "record"


def validate_person(data: Person | Mapping[str, Any]) -> Person:
    """A :class:`Person` from a mapping of §2.1 fields, or :class:`InvalidRecordError`."""
    return validate_record(Person, data, record="person")


def validate_event(data: SignalEvent | Mapping[str, Any]) -> SignalEvent:
    """A :class:`SignalEvent` from a mapping of §2.3 fields, or :class:`InvalidRecordError`."""
    return validate_record(SignalEvent, data, record="event")


def validate_row(data: RowAdd | Mapping[str, Any]) -> RowAdd:
    """A :class:`RowAdd` from ``{"cells": {...}}``, or :class:`InvalidRecordError`."""
    return validate_record(RowAdd, data, record="row")


def validate_cell_update(data: CellUpdate | Mapping[str, Any]) -> CellUpdate:
    """A :class:`CellUpdate` from ``rowId``/``columnId``/``value``, or :class:`InvalidRecordError`."""
    return validate_record(CellUpdate, data, record="cell update")


def validate_person_patch(data: PersonPatch | Mapping[str, Any]) -> PersonPatch:
    """A :class:`PersonPatch` from ``{"match": {...}, "patch": {...}}``, or :class:`InvalidRecordError`."""
    return validate_record(PersonPatch, data, record="person patch")


def validate_person_match(data: PersonMatch | Mapping[str, Any]) -> PersonMatch:
    """A :class:`PersonMatch` (delete identity), or :class:`InvalidRecordError`."""
    return validate_record(PersonMatch, data, record="person match")
