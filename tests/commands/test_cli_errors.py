"""What reaches a user of the command line when things go wrong: one line, never a traceback or a key."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from listsync.cli import main

from ..support import LiveEmulator, read_jsonl

SECRET = "sk_live_ECHOED_abc123"


def sync_argv(source: Path, base_url: str, *more: str) -> list[str]:
    return [
        "sync-people", "--source", str(source), "--base-url", base_url, "--table-id", "tbl_accounts",
        "--map", "domain=account_domain", "--map", "email=email", "--map", "first=first_name", *more,
    ]  # fmt: skip


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", SECRET)


@pytest.fixture
def demo_url(live_emulator: Callable[..., LiveEmulator], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LISTSYNC_API_KEY", "sk_demo_listsync")
    return live_emulator().url


@pytest.fixture
def contacts(tmp_path: Path) -> Path:
    path = tmp_path / "contacts.csv"
    path.write_text("domain,email,first\nacme.com,ann@acme.com,Ann\n", encoding="utf-8")
    return path


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(
    contacts: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing the command expects: a failure deep in the read of the extract.
    monkeypatch.setattr("listsync.extract.sources.read_csv", lambda *args, **kwargs: iter([1 / 0]))

    assert main(sync_argv(contacts, "http://127.0.0.1:9")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "ZeroDivisionError: division by zero (--debug shows where it came from)" in err

    with pytest.raises(ZeroDivisionError):
        main([*sync_argv(contacts, "http://127.0.0.1:9"), "--debug"])


def test_a_key_the_service_echoes_back_is_masked(
    contacts: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def echoing(request: httpx.Request) -> httpx.Response:
        header = request.headers["Authorization"]
        return httpx.Response(401, json={"success": False, "error": f"Invalid API key in '{header}'"})

    real_client = httpx.Client

    def client_with_echoing_transport(*args: object, **kwargs: object) -> httpx.Client:
        kwargs["transport"] = httpx.MockTransport(echoing)
        return real_client(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx, "Client", client_with_echoing_transport)

    status = main(sync_argv(contacts, "https://api.example.com", "--api-key", SECRET))

    captured = capsys.readouterr()
    assert status == 1
    assert SECRET not in captured.out + captured.err
    assert "Invalid API key in 'Bearer ***'" in captured.err


@pytest.mark.parametrize(
    ("text", "encoding", "options"),
    [
        ("domain,email,first\nacme.com,ren\u00e9@acme.com,Ren\u00e9\n", "latin-1", ["--encoding", "latin-1"]),
        ("domain,email,first\nacme.com,ren\u00e9@acme.com,Ren\u00e9\n", "utf-16", []),  # its BOM says so
        ("\ufeffdomain,email,first\nacme.com,ren\u00e9@acme.com,Ren\u00e9\n", "utf-8", []),
    ],
    ids=["latin-1", "utf-16-bom", "utf-8-bom"],
)
def test_extracts_in_other_encodings_are_read(
    demo_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    encoding: str,
    options: list[str],
) -> None:
    path = tmp_path / "contacts.csv"
    path.write_bytes(text.encode(encoding))

    assert main([*sync_argv(path, demo_url, "--dry-run"), *options]) == 0

    plan = read_jsonl(json.loads(capsys.readouterr().out)["plan_path"])
    assert plan[0]["changes"]["first_name"]["after"] == "Ren\u00e9"


def test_an_extract_not_in_its_encoding_names_the_option(
    demo_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "contacts.csv"
    path.write_bytes("domain,email,first\nacme.com,ren\u00e9@acme.com,Ren\u00e9\n".encode("latin-1"))

    assert main(sync_argv(path, demo_url, "--dry-run")) == 1

    err = capsys.readouterr().err
    assert f"{path} is not utf-8-sig text" in err and "--encoding" in err
    assert "Traceback" not in err


def test_an_unknown_encoding_is_a_usage_error(contacts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*sync_argv(contacts, "http://127.0.0.1:9", "--dry-run"), "--encoding", "klingon"]) == 2
    assert "--encoding: unknown encoding 'klingon'" in capsys.readouterr().err
