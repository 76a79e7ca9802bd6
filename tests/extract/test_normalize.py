"""Normalisation rules: a table of messy inputs and what each becomes (or why it is rejected)."""

from __future__ import annotations

import re
import sys
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

import pandas as pd
import phonenumbers
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from listsync.client.errors import ListSyncError
from listsync.extract import ColumnMappingError, ExtractError, TooManyRejectsError
from listsync.extract.contact_rules import (
    check_region,
    normalize_domain,
    normalize_email,
    normalize_phone,
    normalize_profile_url,
)
from listsync.extract.csv_reader import ARROW_TEXT
from listsync.extract.normalize import (
    _NANP_SHORTCUT,
    NORMALIZATION_VERSION,
    PYTHON_WHITESPACE,
    _fast_phones,
    normalize_column,
)
from listsync.extract.text_rules import NormalizationError, normalize_text, text_bytes
from listsync.extract.value_rules import (
    MAX_JSON_DEPTH,
    normalize_personas,
    normalize_timestamp,
    parse_bool,
    parse_connection_paths,
    parse_json,
    to_json_value,
)

UTC = timezone.utc
phone_us = partial(normalize_phone, default_region="US")
phone_gb = partial(normalize_phone, default_region="GB")
timestamp_paris = partial(normalize_timestamp, naive_timezone="Europe/Paris")

# (rule, messy input, normalised output)
NORMALISED: list[tuple[Any, Any, Any]] = [
    (normalize_domain, "Example.COM", "example.com"),
    (normalize_domain, "  https://www.example.com/about?x=1  ", "example.com"),
    (normalize_domain, "http://shop.example.co.uk:8080/", "shop.example.co.uk"),
    (normalize_domain, "example.com.", "example.com"),
    (normalize_domain, "//example.com/path", "example.com"),
    (normalize_domain, "https://user:pw@example.com", "example.com"),
    (normalize_domain, "Bücher.de", "xn--bcher-kva.de"),
    (normalize_domain, "www.例え.jp", "xn--r8jz45g.jp"),
    (normalize_domain, "xn--bcher-kva.de", "xn--bcher-kva.de"),
    (normalize_domain, "my-company.io#team", "my-company.io"),
    (normalize_domain, "www.www.example.com", "example.com"),
    (normalize_email, "  Jane.Doe@Example.COM ", "jane.doe@example.com"),
    (normalize_email, "mailto:sales@example.com", "sales@example.com"),
    (normalize_email, "o'brien+crm@example.ie", "o'brien+crm@example.ie"),
    (normalize_email, "jürgen@bücher.de", "jürgen@xn--bcher-kva.de"),
    (phone_us, "(415) 555-2671", "+14155552671"),
    (phone_us, "+1 415-555-2671", "+14155552671"),
    (phone_us, "415.555.2671", "+14155552671"),
    (phone_us, 4155552671, "+14155552671"),
    (phone_gb, "020 7946 0958", "+442079460958"),
    (phone_us, "+44 20 7946 0958", "+442079460958"),
    (phone_gb, "00 33 1 42 68 53 00", "+33142685300"),
    (phone_us, "011 33 1 42 68 53 00", "+33142685300"),
    (normalize_profile_url, "network.example.com/in/jane-doe/", "https://network.example.com/in/jane-doe"),
    (
        normalize_profile_url,
        "HTTP://WWW.Network.Example.com/in/Jane?trk=abc#x",
        "https://www.network.example.com/in/Jane",
    ),
    (normalize_profile_url, "https://network.example.com:443/in/jane", "https://network.example.com/in/jane"),
    (normalize_personas, "Champion, economic_buyer", ["champion", "economic_buyer"]),
    (normalize_personas, '["Decision Maker", "champion"]', ["decision_maker", "champion"]),
    (normalize_personas, "technical-evaluator,,champion,CHAMPION, ", ["technical_evaluator", "champion"]),
    (normalize_personas, ["Economic Buyer"], ["economic_buyer"]),
    (normalize_personas, "procurement", ["procurement"]),
    (parse_bool, "Yes", True),
    (parse_bool, " n ", False),
    (parse_bool, "TRUE", True),
    (parse_bool, "0", False),
    (parse_bool, 1, True),
    (parse_bool, "off", False),
    (normalize_timestamp, "2024-05-01T10:00:00Z", datetime(2024, 5, 1, 10, tzinfo=UTC)),
    (normalize_timestamp, "2024-05-01 10:00:00", datetime(2024, 5, 1, 10, tzinfo=UTC)),
    (
        normalize_timestamp,
        "2024-05-01T12:00:00+02:00",
        datetime(2024, 5, 1, 12, tzinfo=timezone(timedelta(hours=2))),
    ),
    (normalize_timestamp, "2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
    (timestamp_paris, "2024-05-01T10:00:00", datetime(2024, 5, 1, 10, tzinfo=ZoneInfo("Europe/Paris"))),
    (normalize_timestamp, date(2024, 2, 29), datetime(2024, 2, 29, tzinfo=UTC)),
    (
        parse_connection_paths,
        '[{"userId": " usr_1 ", "source": "Network", "degree": "1ST"}]',
        [{"userId": "usr_1", "source": "network", "degree": "1st"}],
    ),
    (parse_json, '{"a": [1, 2.5, null]}', {"a": [1, 2.5, None]}),
    (to_json_value, Decimal("12.00"), 12),
    (to_json_value, Decimal("12.5"), 12.5),
]

# (rule, messy input, words the reason must contain)
REJECTED: list[tuple[Any, Any, str]] = [
    (normalize_domain, "localhost", "has no dot"),
    (normalize_domain, "192.168.0.1", "IP address"),
    (normalize_domain, "jane@example.com", "looks like an e-mail address"),
    (normalize_domain, "exa mple.com", "contains spaces"),
    (normalize_domain, "-bad-.com", "not a valid host name"),
    (normalize_domain, "example.com-", "not a valid host name"),
    (normalize_domain, "example.7up", "not a valid host name"),
    (normalize_domain, "https://", "has no host name"),
    (normalize_domain, "   ", "empty"),
    (normalize_email, "jane.doe", "exactly one @"),
    (normalize_email, "jane@", "nothing after the @"),
    (normalize_email, "@example.com", "nothing before the @"),
    (normalize_email, "jane..doe@example.com", "invalid part before the @"),
    (normalize_email, "jane doe@example.com", "contains spaces"),
    (normalize_email, "jane@example", "has no dot"),
    (normalize_email, "a@b@example.com", "exactly one @"),
    (normalize_email, '"jane"@example.com', "invalid part before the @"),
    (phone_us, "not a phone", "cannot be read"),
    (phone_us, "12", "wrong number of digits"),
    (phone_us, "+1 415 555 2671 ext. 12", "extension"),
    (phone_us, 4.15e9, "must be text"),
    (phone_gb, "00004150000", "ambiguous"),
    (normalize_profile_url, "ftp://network.example.com/in/jane", "http or https"),
    (normalize_profile_url, "https://network.example.com/", "no path"),
    (normalize_profile_url, "https://localhost/in/jane", "invalid host"),
    (normalize_personas, "champion!", "only letters"),
    (normalize_personas, '["champion", 3]', "list of strings"),
    (normalize_personas, '["champion"', "do not parse"),
    (parse_bool, "maybe", "not a boolean"),
    (parse_bool, 2, "not a boolean"),
    (normalize_timestamp, "01/05/2024", "not ISO 8601"),
    (normalize_timestamp, 1714557600, "ISO 8601 string"),
    (normalize_timestamp, "yesterday", "not ISO 8601"),
    (parse_connection_paths, '{"userId": "usr_1"}', "JSON array"),
    (parse_connection_paths, "[1]", "must be an object"),
    (parse_connection_paths, "[{", "not valid JSON"),
    (parse_json, "{'a': 1}", "not valid JSON"),
    (to_json_value, float("inf"), "finite"),
    (to_json_value, b"\x00", "binary"),
]


def test_the_table_has_enough_cases() -> None:
    assert len(NORMALISED) + len(REJECTED) >= 40


@pytest.mark.parametrize(("rule", "raw", "expected"), NORMALISED)
def test_messy_input_is_normalised(rule: Any, raw: Any, expected: Any) -> None:
    result = rule(raw)
    assert result == expected
    if isinstance(expected, datetime):
        assert result.utcoffset() == expected.utcoffset()


@pytest.mark.parametrize(("rule", "raw", "reason"), REJECTED)
def test_bad_input_is_rejected_with_a_reason(rule: Any, raw: Any, reason: str) -> None:
    with pytest.raises(NormalizationError, match=reason):
        rule(raw)


def test_errors_belong_to_the_package_error_tree() -> None:
    assert issubclass(NormalizationError, ValueError)
    for error in (NormalizationError, ExtractError, TooManyRejectsError, ColumnMappingError):
        assert issubclass(error, ListSyncError)
    assert isinstance(NORMALIZATION_VERSION, str) and NORMALIZATION_VERSION


def test_unknown_default_region_fails_with_the_parameter_name() -> None:
    with pytest.raises(ValueError, match="default_region 'XX'"):
        normalize_phone("4155552671", default_region="XX")


def test_unknown_naive_timezone_fails_with_the_parameter_name() -> None:
    with pytest.raises(ValueError, match="naive_timezone 'Mars/Olympus'"):
        normalize_timestamp("2024-05-01", naive_timezone="Mars/Olympus")


def test_column_keeps_positions_missing_values_and_reasons() -> None:
    series = pd.Series([" A@Example.com", None, "  ", "bad", "ü@bücher.de", "A@example.com"], dtype=object)
    result = normalize_column(series, normalize_email)
    assert result.values == ["a@example.com", None, None, None, "ü@xn--bcher-kva.de", "a@example.com"]
    assert set(result.errors) == {3}
    assert "exactly one @" in result.errors[3]


def test_a_text_rule_over_text_gives_arrow_strings_and_other_rules_python_values() -> None:
    series = pd.Series([" A@Example.com", None, "bad", "ü@bücher.de"], dtype=object)
    result = normalize_column(series, normalize_email)
    assert result.text is not None
    assert result.text.type == pa.string()
    assert result.text.to_pylist() == ["a@example.com", None, None, "ü@xn--bcher-kva.de"]
    assert [result.value(position) for position in range(4)] == result.values
    listed = result.in_python()
    assert listed.text is None and listed.values == result.values and listed.errors == result.errors
    flags = normalize_column(pd.Series(["yes", "no"], dtype=object), parse_bool)
    assert flags.text is None and flags.values == [True, False]


def test_column_of_typed_values_uses_the_scalar_rule() -> None:
    series = pd.Series([4155552671, "(415) 555-2671", 12], dtype=object)
    result = normalize_column(series, phone_us)
    assert result.values == ["+14155552671", "+14155552671", None]
    assert list(result.errors) == [2]


# Text built from the characters that make domains and e-mails interesting.
messy_text = st.lists(
    st.sampled_from([*"abcXYZ019.-_@:/?#+ ü例'\"İK\x1c\t", "www.", "https://", ".com", "@"]), max_size=12
).map("".join)


@given(st.lists(st.one_of(messy_text, st.none()), max_size=30))
def test_vectorised_domains_agree_with_the_scalar_rule(values: list[str | None]) -> None:
    _check_column_matches_rule(values, normalize_domain)


@given(st.lists(st.one_of(messy_text, st.text(), st.none()), max_size=30))
def test_vectorised_text_agrees_with_the_scalar_rule(values: list[str | None]) -> None:
    _check_column_matches_rule(values, normalize_text)


plausible_emails = st.from_regex(
    r" ?[A-Za-z0-9._+'-]{1,10}@[A-Za-z0-9ü.-]{1,10}\.[a-zA-Z]{2,4} ?", fullmatch=True
)


@given(st.lists(st.one_of(messy_text, plausible_emails, st.none()), max_size=30))
def test_vectorised_emails_agree_with_the_scalar_rule(values: list[str | None]) -> None:
    _check_column_matches_rule(values, normalize_email)


def _check_column_matches_rule(values: list[str | None], rule: Any) -> None:
    result = normalize_column(pd.Series(values, dtype=object), rule)
    # The same text as a CSV chunk Arrow's parser read gives the same result.
    as_arrow = normalize_column(pd.Series(values, dtype=ARROW_TEXT), rule)
    assert (as_arrow.values, as_arrow.errors) == (result.values, result.errors)
    for position, value in enumerate(values):
        if value is None or not value.strip():
            assert result.values[position] is None and position not in result.errors
            continue
        try:
            expected = rule(value)
        except NormalizationError as exc:
            assert result.errors.get(position) == str(exc)
            assert result.values[position] is None
        else:
            assert result.values[position] == expected
            assert position not in result.errors
            assert rule(expected) == expected  # idempotent: the column cache relies on it


@pytest.mark.parametrize(
    ("rule", "distinct"),
    [
        (
            normalize_domain,
            [
                "https://www.Acme.com/about",
                "acme.com",
                "bad domain",
                "globex.io.",
                "",
                None,
                "x@y.com",
                "ü.de",
            ],
        ),
        (phone_us, ["(415) 555-2671", "+1 415 555 2671", "12", "not a phone", "+44 20 7946 0958", None, " "]),
    ],
)
def test_a_long_column_of_repeated_values_gets_the_rule_at_every_place(
    rule: Any, distinct: list[str | None]
) -> None:
    # Long enough for each distinct value to be normalised once and spread back to its places.
    values = [distinct[(place * 7) % len(distinct)] for place in range(3_000)]
    for dtype in (object, ARROW_TEXT):
        result = normalize_column(pd.Series(values, dtype=dtype), rule)
        for place, value in enumerate(values):
            if value is None or not value.strip():
                assert result.values[place] is None and place not in result.errors
                continue
            try:
                expected = rule(value)
            except NormalizationError as exc:
                assert (result.values[place], result.errors.get(place)) == (None, str(exc))
            else:
                assert (result.values[place], place in result.errors) == (expected, False)


phone_text = st.lists(
    st.sampled_from([*"0123456789 ()-.+x/", "415", "555", "2671", "ext", "+1", "+44", "00"]), max_size=10
).map("".join)


@given(st.lists(st.one_of(phone_text, st.none()), max_size=30), st.sampled_from(["US", "GB", "FR"]))
def test_phone_column_agrees_with_the_scalar_rule(values: list[str | None], region: str) -> None:
    _check_column_matches_rule(values, partial(normalize_phone, default_region=region))


north_american_keys = st.one_of(
    st.from_regex(r"\+?1?[0-9]{8,11}", fullmatch=True),
    st.sampled_from(
        ["2015550123", "+12015550123", "1015550123", "+11015550123", "0115550123", "+1201555012"]
    ),
)


@given(st.lists(north_american_keys, max_size=20), st.sampled_from(["US", "us", "CA", "GB", "FR"]))
def test_north_american_shortcut_agrees_with_phonenumbers(keys: list[str], region: str) -> None:
    assert _NANP_SHORTCUT  # the shortcut is on with the installed phonenumbers, so this test bites
    shortcut = _fast_phones(pa.array(keys, type=pa.string()), check_region(region)).to_pylist()
    for key, decided in zip(keys, shortcut, strict=True):
        if decided is not None:
            assert decided == normalize_phone(key, default_region=region)


international_keys = st.builds(
    lambda code, national: f"+{code}{national}",
    st.sampled_from(sorted(phonenumbers.COUNTRY_CODE_TO_REGION_CODE)),
    st.from_regex(r"[0-9]{1,18}", fullmatch=True),
)


@given(st.lists(international_keys, max_size=20), st.sampled_from(["US", "GB", "DE"]))
def test_international_shortcut_agrees_with_phonenumbers(keys: list[str], region: str) -> None:
    shortcut = _fast_phones(pa.array(keys, type=pa.string()), check_region(region)).to_pylist()
    for key, decided in zip(keys, shortcut, strict=True):
        if decided is not None:
            assert decided == normalize_phone(key, default_region=region)


def test_international_shortcut_decides_the_common_european_numbers() -> None:
    keys = ["+442079460000", "+4930123456789", "+33612345678", "+4402079460000", "+3906123456"]
    decided = _fast_phones(pa.array(keys, type=pa.string()), "US").to_pylist()
    # Their own E.164 form; a national prefix or a leading zero is left to phonenumbers.
    assert decided == [*keys[:3], None, None]


north_american_layouts = st.builds(
    lambda digits, layout: layout.format(a=digits[:3], b=digits[3:6], c=digits[6:]),
    st.from_regex(r"[0-9]{10}", fullmatch=True),
    st.sampled_from(
        ["{a}{b}{c}", "({a}) {b}-{c}", "+1 {a} {b} {c}", "1-{a}-{b}-{c}", "+1{a}.{b}.{c}", "+{a}{b}"]
    ),
)


@given(
    st.lists(st.one_of(north_american_layouts, phone_text, st.none()), max_size=30),
    st.sampled_from(["US", "us", "CA", "GB"]),
)
def test_north_american_numbers_in_a_column_agree_with_the_scalar_rule(
    values: list[str | None], region: str
) -> None:
    _check_column_matches_rule(values, partial(normalize_phone, default_region=region))


def test_phone_rule_without_options_or_with_an_unknown_region_behaves_as_the_rule() -> None:
    series = pd.Series(["(201) 555-0123", "+1 201 555 0123"], dtype=object)
    assert normalize_column(series, normalize_phone).values == ["+12015550123", "+12015550123"]
    with pytest.raises(ValueError, match="default_region"):
        normalize_column(series, partial(normalize_phone, default_region="XX"))


def test_short_numbers_are_not_keyed_by_their_digits() -> None:
    # phonenumbers reads "01" but not "0 1": below three digits the layout matters.
    rule = partial(normalize_phone, default_region="DE")
    result = normalize_column(pd.Series(["0 1", "01"], dtype=object), rule)
    assert list(result.errors) == [0]
    assert result.values[1] == rule("01")


def test_one_number_in_several_layouts_gets_each_reason_quoting_its_own_text() -> None:
    series = pd.Series(["(415) 555-2671", "415.555.2671", "12", "1-2"], dtype=object)
    result = normalize_column(series, phone_us)
    assert result.values[:2] == ["+14155552671", "+14155552671"]
    assert "'12'" in result.errors[2] and "'1-2'" in result.errors[3]


def test_rows_get_their_own_copies_of_list_values() -> None:
    result = normalize_column(pd.Series(["champion", "champion"], dtype=object), normalize_personas)
    result.values[0].append("changed")
    assert result.values[1] == ["champion"]
    again = normalize_column(pd.Series(["champion"], dtype=object), normalize_personas)
    assert again.values[0] == ["champion"]


def test_blank_text_is_missing_by_the_same_measure_as_str_strip() -> None:
    assert set(PYTHON_WHITESPACE) == {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    series = pd.Series(["\x1c", "\u3000 ", " a@b.com\x1f", ""], dtype=object)
    result = normalize_column(series, normalize_email)
    assert result.values == [None, None, "a@b.com", None]
    assert result.errors == {}


# --- text no rule takes, JSON the service cannot take (A32) -------------------------------


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("An\x00n", "U+0000 (NUL)"),
        ("Ac\x1bme", "U+001B (ESC)"),
        ("An\x0bn", "U+000B (VT)"),
        ("\x07bell", "U+0007 (BEL)"),
        ("end\x7f", "U+007F (DEL)"),
        ("A\ud800", "lone surrogate U+D800"),
    ],
)
def test_a_control_character_or_a_lone_surrogate_is_refused_by_every_rule(value: str, named: str) -> None:
    for rule in (normalize_text, to_json_value, parse_json, normalize_domain):
        with pytest.raises(NormalizationError, match=re.escape(named)):
            rule(value)
    # The column runner gives the same reason, on its vectorised path (text) and per value (mixed).
    for column in ([value, "ok"], [value, 1]):
        result = normalize_column(pd.Series(column, dtype=object), normalize_text)
        assert named in result.errors[0] and 1 not in result.errors


def test_tabs_and_line_breaks_are_text_and_whitespace_controls_trim_like_spaces() -> None:
    assert normalize_text("An\tn\r\nB") == "An\tn\r\nB"
    assert normalize_email(" a@b.com\x0b") == "a@b.com"
    assert normalize_text("a\x1c ") == "a"  # among the trailing whitespace, not only last
    result = normalize_column(pd.Series(["A\tB", "\x0cC\x0c", "C\x0cD"], dtype=object), normalize_text)
    assert result.values[:2] == ["A\tB", "C"] and list(result.errors) == [2]


def test_json_nested_deeper_than_the_limit_is_refused_without_recursing_to_death() -> None:
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    for text in ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "[" * 100_000 + "]" * 100_000):
        with pytest.raises(NormalizationError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
            parse_json(text)
    deep: Any = []
    for _ in range(MAX_JSON_DEPTH + 5):
        deep = {"a": deep}
    with pytest.raises(NormalizationError, match="nested deeper"):
        to_json_value(deep)


def test_a_json_number_that_overflows_to_infinity_is_refused_like_infinity() -> None:
    for text in ("1e400", '{"n": -1e400}', "Infinity"):
        with pytest.raises(NormalizationError):
            parse_json(text)
    assert parse_json("1e300") == 1e300


def test_a_lone_surrogate_within_json_is_refused_other_controls_are_data() -> None:
    assert to_json_value({"note": "a\x00b"}) == {"note": "a\x00b"}
    with pytest.raises(NormalizationError, match=re.escape("lone surrogate U+DFFF")):
        to_json_value({"note": ["a\udfff"]})


@given(
    st.lists(st.none() | st.text(max_size=5)),
    st.integers(0, 10),
    st.integers(0, 10),
    st.sampled_from([pa.string(), pa.large_string()]),
)
def test_the_bytes_of_a_slice_of_text_are_its_values_alone(
    values: list[str | None], start: int, length: int, kind: pa.DataType
) -> None:
    # A slice shares the whole column's buffer: the bytes looked at are the slice's values only.
    sliced = pa.array(values, kind).slice(start, length)
    expected = b"".join(value.encode() for value in values[start : start + length] if value)
    assert text_bytes(sliced).tobytes() == expected
