"""Configuration of the emulator: keys, users, signals, Lists, windows and faults.

A config is an :class:`EmulatorConfig`; build one in code, load one from YAML or JSON with
:func:`load_config`, or start from :func:`demo_config` (the built-in demo tenant). Example::

    secret_keys: [sk_test]
    public_keys: [public_wk_test]
    users: [usr_1]
    window_seconds: 60
    profile: reference   # how the unknowns of the spec are read: listsync.emulator.profiles
    dialect_overrides: {} # knobs of that profile to change, e.g. {lag_seconds: 0.3}
    signals:
      - {slug: page_visit, id: sig_pagevisit01, type: Event}
      - {slug: seats_used, id: sig_seats01, type: Metric, schema_versions: [1, 2],
         required_data_keys: [seats]}
    lists:
      - id: tbl_accounts
        account_column: domain
        unique_domains: true
        columns: [{id: domain, type: text}, {id: plan, type: enum,
                  options: [{key: free, label: Free}]}]
    faults:
      rules: [{endpoint: "POST /v1/events/batch", kind: error, status: 503, probability: 0.1}]
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from listsync.emulator.profiles import PROFILES, Dialect

SignalType = Literal["Event", "Metric", "State"]
ColumnType = Literal["text", "number", "boolean", "enum", "date", "json"]
FaultKind = Literal["error", "latency", "drop_before", "drop_after", "rate_limit"]

# Spec §8: requests per window (one minute on the service) per signal, by signal type.
DEFAULT_RATE_LIMITS: dict[SignalType, int] = {"Event": 100, "Metric": 1000, "State": 30}

# The endpoint names used by fault rules and by /_emulator/stats: method and path template.
ENDPOINTS: tuple[str, ...] = (
    "POST /v1/events",
    "POST /v1/events/batch",
    "GET /v1/lists",
    "GET /v1/lists/{tableId}",
    "GET /v1/lists/{tableId}/targetable-people",
    "POST /v1/lists/{tableId}/targetable-people",
    "PATCH /v1/lists/{tableId}/targetable-people",
    "DELETE /v1/lists/{tableId}/targetable-people",
    "GET /v1/lists/{tableId}/rows",
    "POST /v1/lists/{tableId}/rows",
    "PATCH /v1/lists/{tableId}/cells",
    "DELETE /v1/lists/{tableId}/rows",
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SignalConfig(_Model):
    """One signal: its slug, internal id, type (which sets its rate limit) and schema."""

    slug: str
    id: str
    type: SignalType
    active: bool = True
    schema_versions: list[int] = Field(default_factory=list)
    required_data_keys: list[str] = Field(default_factory=list)


class EnumOption(_Model):
    key: str
    label: str
    color: str | None = None


class ColumnConfig(_Model):
    """A List column; ``options`` only for ``enum`` columns."""

    id: str
    name: str | None = None
    type: ColumnType = "text"
    options: list[EnumOption] = Field(default_factory=list)


class ListConfig(_Model):
    """A List: its columns and its targetable account column. Lists start empty."""

    id: str
    name: str | None = None
    columns: list[ColumnConfig]
    account_column: str | None = None
    unique_domains: bool = False

    @model_validator(mode="after")
    def _columns_are_consistent(self) -> ListConfig:
        _refuse_repeats("column id", [c.id for c in self.columns])
        if self.account_column is not None and self.account_column not in {c.id for c in self.columns}:
            raise ValueError(f"account_column {self.account_column!r} is not a column of {self.id}")
        return self


class FaultRule(_Model):
    """One fault to inject on an endpoint (or ``*`` for every ``/v1`` endpoint).

    ``kind``: ``error`` answers ``status`` (500, 502 or 503); ``latency`` delays by
    ``latency_seconds`` then serves normally; ``drop_before`` closes the connection without
    applying the request; ``drop_after`` applies the request, then closes the connection without
    answering; ``rate_limit`` answers 429 with ``Retry-After: retry_after_seconds``.

    The rule fires with ``probability`` on each matching request, or, when ``times`` is set, on
    exactly the next ``times`` matching requests (then it is spent).
    """

    endpoint: str
    kind: FaultKind
    probability: float = Field(default=1.0, ge=0.0, le=1.0)
    times: int | None = Field(default=None, ge=1)
    status: Literal[500, 502, 503] = 500
    latency_seconds: float = Field(default=0.0, ge=0.0)
    retry_after_seconds: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _known_endpoint(self) -> FaultRule:
        if self.endpoint != "*" and self.endpoint not in ENDPOINTS:
            raise ValueError(f"unknown endpoint {self.endpoint!r}; one of {', '.join(ENDPOINTS)} or *")
        return self


class FaultsConfig(_Model):
    rules: list[FaultRule] = Field(default_factory=list)


class EmulatorConfig(_Model):
    """Everything the emulator serves. Faults are off unless rules are given."""

    secret_keys: list[str] = Field(default_factory=list)
    public_keys: list[str] = Field(default_factory=list)
    users: list[str] = Field(default_factory=list)
    signals: list[SignalConfig] = Field(default_factory=list)
    lists: list[ListConfig] = Field(default_factory=list)
    window_seconds: float = Field(default=60.0, gt=0)
    rate_limits: dict[SignalType, int] = Field(default_factory=lambda: dict(DEFAULT_RATE_LIMITS))
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    # Seeds fault decisions, so a run with the same seed and requests fails the same way.
    seed: int | None = None
    # When set, Lists and events are loaded from this JSON file at start and saved after each write.
    state_file: str | None = None
    # A name of PROFILES: how the emulator reads the spec where it says "not shown".
    profile: str = "reference"
    # Knobs of the profile's Dialect to change (field name -> value); a dict knob (caps,
    # filter_names) is merged into the profile's. E.g. {"lag_seconds": 0.3} on "hosted".
    dialect_overrides: dict[str, Any] = Field(default_factory=dict)

    @property
    def dialect(self) -> Dialect:
        """The :class:`Dialect` of :attr:`profile`, with :attr:`dialect_overrides` applied."""
        return _overridden(PROFILES[self.profile], self.dialect_overrides)

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, name: str) -> str:
        if name not in PROFILES:
            raise ValueError(f"unknown profile {name!r}; one of {', '.join(PROFILES)}")
        return name

    @field_validator("rate_limits")
    @classmethod
    def _defaults_for_unnamed_types(cls, limits: dict[SignalType, int]) -> dict[SignalType, int]:
        return {**DEFAULT_RATE_LIMITS, **limits}

    @model_validator(mode="after")
    def _overrides_make_a_dialect(self) -> EmulatorConfig:
        # Refused here, with the field names, rather than when the emulator starts.
        _overridden(PROFILES[self.profile], self.dialect_overrides)
        return self

    @model_validator(mode="after")
    def _names_are_unique(self) -> EmulatorConfig:
        _refuse_repeats("signal slug", [s.slug for s in self.signals])
        _refuse_repeats("signal id", [s.id for s in self.signals])
        _refuse_repeats("List id", [lst.id for lst in self.lists])
        return self


def _overridden(base: Dialect, overrides: dict[str, Any]) -> Dialect:
    """``base`` with ``overrides`` applied; the profile itself (not a copy) when there are none."""
    if not overrides:
        return base
    merged = base.model_dump()
    for name, value in overrides.items():
        current = merged.get(name)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[name] = {**current, **value}
        else:
            merged[name] = value
    return Dialect.model_validate(merged)


def _refuse_repeats(what: str, names: list[str]) -> None:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"repeated {what}: {', '.join(repeated)}")


def load_config(path: str | Path) -> EmulatorConfig:
    """Read a YAML or JSON config file (JSON is valid YAML)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return EmulatorConfig.model_validate(data)


def demo_config() -> EmulatorConfig:
    """The built-in demo tenant: key ``sk_demo_listsync``, user ``usr_demo``, List ``tbl_accounts``."""
    text = resources.files("listsync.emulator").joinpath("demo.yaml").read_text(encoding="utf-8")
    return EmulatorConfig.model_validate(yaml.safe_load(text))
