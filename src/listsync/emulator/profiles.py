"""Profiles: named readings of the spec's unknowns, so the client can be tested against each.

``docs/assumptions.md`` decides every "not shown" of the spec one way; that reading is the
``reference`` profile and is what the emulator serves by default. A :class:`Dialect` holds one
value per knob below; :data:`PROFILES` names six presets (``busy`` plays a List other people use,
with another writer and deletes that reach every match, rather than another reading of a quiet
List). Choose one with ``EmulatorConfig(profile=...)`` or ``listsync emulator --profile NAME``, and
change single knobs of it with ``EmulatorConfig(dialect_overrides={...})`` (say
``{"lag_seconds": 0.3}`` on ``hosted``).

Knobs (reference value first; the assumption row each one varies):

- ``page_cap`` 1000, ``page_cap_refuses`` True (A12, A22): the largest ``limit`` of GET
  targetable-people and GET rows; a larger one is a 400, or, when not refused, served at the cap.
- ``people_paging`` ``inside`` | ``beside`` (A13): paging metadata inside ``data`` with the people,
  or ``data`` the bare array and ``total``/``offset``/``limit`` beside it.
- ``people_key`` ``people`` (A13): the key of the people array when paging is inside.
- ``people_more_flag`` ``hasMore`` | ``truncated`` | None (A13): the "more results" boolean.
- ``filter_names`` (A12): the query parameters of the contactability, text-search and
  account-domain filters; other parameters are ignored.
- ``patch_match_keys`` ``identities`` | ``email`` (A17): what a PATCH ``match`` may name. DELETE
  identities are the spec's own (§4.6) in every profile.
- ``unknown_accounts`` ``refuse`` | ``create`` (A14): an unknown domain refuses a people write, or
  POST creates its account row and PATCH/DELETE list its entries in ``notFound``.
- ``windows`` ``aligned`` | ``first_event`` (A5): rate windows aligned to the epoch, or opened by
  a signal's first event after its previous window ended.
- ``reset_format`` ``iso`` | ``epoch`` (A6): ``X-RateLimit-Reset`` as ISO 8601 or epoch seconds.
- ``single_ingest_status`` 200 (A1): the status of a successful POST /v1/events.
- ``rate_limited_reference`` True (A7): whether ``rate_limited`` entries carry ``reference``.
- ``list_id_field`` ``id`` | ``tableId`` (A27): the id field of a List in GET /v1/lists[/{tableId}].
- ``write_counts`` ``reference`` | ``renamed`` | ``none`` (A18): List write answers as A18, with
  counts renamed (:data:`RENAMED_COUNTS`, and ``rowIds`` for new rows), or ``{"success": true}`` alone.
- ``invalid_key_status`` 401 (A2), ``list_not_found_status`` 404 (A10): same messages either way.
- ``missing_row_delete`` ``not_found`` | ``404`` (A19): missing row ids of a DELETE rows listed in
  ``notFound``, or the whole request refused ``404 Rows not found: <ids>``.
- ``caps`` (A21): per-request caps of the List writes.
- ``lag_seconds`` 0 (A33): how long after a List write was answered it shows in GET
  targetable-people, GET rows and the ``rowCount`` of GET /v1/lists[/{tableId}], like a service
  with a queue behind its write API. Writes are validated against, and applied to, the List as it
  is; only those reads serve it as it was ``lag_seconds`` ago (``/_emulator/state`` shows it now).
- ``canonical_forms`` empty (A33): the forms in which a person's fields and a row's cells are
  stored on add, patch and cell update, of :data:`CANONICAL_FORMS`: ``whitespace`` (each text
  field's or text cell's runs of whitespace made one space, ends trimmed), ``email_case`` (email
  lower-cased; a text cell holding an e-mail address too), ``url`` (``network_profile_url`` and
  ``avatar_url``, and a text cell holding an http(s) URL: lower-cased, scheme https, no trailing
  slash), ``number`` (a number cell kept as a floating-point number: ``10`` read as ``10.0``). A
  PATCH ``match`` or a DELETE identity is put in the same forms before it is compared.
- ``delete_reach`` ``one`` | ``all`` (A38): how far a DELETE of people reaches: the first person
  of the account the entry identifies, or every one of them (all who share the phone number, or
  the first and last name, an entry names).
- ``other_writer_share`` 0, ``other_writer_every`` 3600 (A39): another writer of the List. While a
  paged read is between pages (a page served with more to come), it deletes, adds and edits this
  share of the people (a people read) or rows (a rows read) each, at most once every
  ``other_writer_every`` seconds per List, so that a read again soon after is steady.
- ``refusal_wording`` ``reference`` | ``other`` (A14, A20, A33): the messages of two List
  refusals. ``other`` words an unknown account on a people write ``404 Unknown account domain(s):
  <d1>, <d2>`` (for ``Account not found: ...``) and missing rows ``404 No such row(s): <ids>``
  (for ``Rows not found: ...``); statuses, cap refusals and every 400 keep their wording.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

PeoplePaging = Literal["inside", "beside"]
MoreFlag = Literal["hasMore", "truncated"]
WindowKind = Literal["aligned", "first_event"]
ResetFormat = Literal["iso", "epoch"]
WriteCounts = Literal["reference", "renamed", "none"]
RefusalWording = Literal["reference", "other"]

# canonical_forms: the forms a service may keep person fields and cells in (see the module docstring).
CANONICAL_FORMS = ("whitespace", "email_case", "url", "number")

# The spec's two unnamed GET targetable-people filters and the account-domain filter: role -> name.
REFERENCE_FILTER_NAMES: dict[str, str] = {
    "contactable": "contactable",
    "search": "search",
    "account_domain": "accountDomain",
}
# Query parameters the spec names; a filter renamed onto one of them would shadow it.
SPEC_QUERY_PARAMETERS = frozenset(("target", "personas", "limit", "offset", "userId"))

# A21: what -> the most of it one request may carry.
REFERENCE_CAPS: dict[str, int] = {
    "accounts": 100,
    "people": 500,
    "rows": 500,
    "updates": 1000,
    "row_deletes": 1000,
}

# write_counts "renamed": A18 count name -> the name this reading uses.
RENAMED_COUNTS: dict[str, str] = {
    "added": "created",
    "updated": "modified",
    "deleted": "removed",
    "skipped": "unchanged",
    "notFound": "missing",
}


class Dialect(BaseModel):
    """How the emulator decides each unknown of the spec; ``Dialect()`` is the reference reading.

    Frozen, because the presets of :data:`PROFILES` are shared by every emulator.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    page_cap: int = Field(default=1000, ge=1)
    page_cap_refuses: bool = True
    people_paging: PeoplePaging = "inside"
    people_key: str = Field(default="people", min_length=1)
    people_more_flag: MoreFlag | None = "hasMore"
    filter_names: dict[str, str] = Field(default_factory=lambda: dict(REFERENCE_FILTER_NAMES))
    patch_match_keys: Literal["identities", "email"] = "identities"
    unknown_accounts: Literal["refuse", "create"] = "refuse"
    windows: WindowKind = "aligned"
    reset_format: ResetFormat = "iso"
    single_ingest_status: int = Field(default=200, ge=200, le=299)
    rate_limited_reference: bool = True
    list_id_field: Literal["id", "tableId"] = "id"
    write_counts: WriteCounts = "reference"
    invalid_key_status: int = Field(default=401, ge=400, le=499)
    list_not_found_status: int = Field(default=404, ge=400, le=499)
    missing_row_delete: Literal["not_found", "404"] = "not_found"
    caps: dict[str, int] = Field(default_factory=lambda: dict(REFERENCE_CAPS))
    lag_seconds: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    canonical_forms: frozenset[str] = frozenset()
    refusal_wording: RefusalWording = "reference"
    delete_reach: Literal["one", "all"] = "one"
    other_writer_share: float = Field(default=0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    other_writer_every: float = Field(default=3600.0, ge=0.0, allow_inf_nan=False)

    @field_validator("filter_names")
    @classmethod
    def _every_filter_named_once(cls, names: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(names) - set(REFERENCE_FILTER_NAMES))
        if unknown:
            raise ValueError(f"unknown filter {unknown[0]!r}; one of {', '.join(REFERENCE_FILTER_NAMES)}")
        merged = {**REFERENCE_FILTER_NAMES, **names}
        if len(set(merged.values())) < len(merged):
            raise ValueError(f"filters share a name: {merged}")
        shadowing = sorted(set(merged.values()) & SPEC_QUERY_PARAMETERS)
        if shadowing:
            raise ValueError(f"{shadowing[0]} is a query parameter of the spec")
        return merged

    @field_validator("caps")
    @classmethod
    def _known_caps(cls, caps: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(caps) - set(REFERENCE_CAPS))
        if unknown:
            raise ValueError(f"unknown cap {unknown[0]!r}; one of {', '.join(REFERENCE_CAPS)}")
        if any(cap < 1 for cap in caps.values()):
            raise ValueError("caps must be at least 1")
        return {**REFERENCE_CAPS, **caps}

    @field_validator("canonical_forms")
    @classmethod
    def _known_forms(cls, forms: frozenset[str]) -> frozenset[str]:
        unknown = sorted(forms - set(CANONICAL_FORMS))
        if unknown:
            raise ValueError(f"unknown canonical form {unknown[0]!r}; one of {', '.join(CANONICAL_FORMS)}")
        return forms


PROFILES: dict[str, Dialect] = {
    "reference": Dialect(),
    # A small, terse server: short pages served silently, no paging flags, no write counts.
    "lean": Dialect(
        page_cap=50,
        page_cap_refuses=False,
        people_paging="beside",
        people_more_flag=None,
        write_counts="none",
        caps={"accounts": 25, "people": 100, "rows": 100, "updates": 200, "row_deletes": 200},
        missing_row_delete="404",
        invalid_key_status=403,
        list_not_found_status=403,
    ),
    # Reads the spec narrowly: email-only matches, other names everywhere, epoch resets.
    "strict": Dialect(
        patch_match_keys="email",
        filter_names={"contactable": "isContactable", "search": "q", "account_domain": "domain"},
        list_id_field="tableId",
        single_ingest_status=202,
        write_counts="renamed",
        rate_limited_reference=False,
        reset_format="epoch",
    ),
    # Windows that open on use, accounts made on demand, the GET rows paging vocabulary.
    "rolling": Dialect(
        windows="first_event",
        people_key="items",
        people_more_flag="truncated",
        unknown_accounts="create",
        page_cap=200,
        page_cap_refuses=False,
    ),
    # A hosted service: writes show in reads 2 s after their answer, values are kept in its own
    # forms, and two refusals are worded its own way.
    "hosted": Dialect(
        lag_seconds=2.0,
        canonical_forms=frozenset(CANONICAL_FORMS),
        refusal_wording="other",
    ),
    # A List other people use: another writer moves 4% of it while a read is between pages, and
    # a delete by phone or name removes every person who shares it.
    "busy": Dialect(delete_reach="all", other_writer_share=0.04),
}
