"""The accounts' lifecycle rules that need no database: token lifetimes, the audit's
--since, and the capability of every new command (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tht.accounts import MANAGE, token_lifetime
from tht.commands.accounts import parse_since
from tht.commands.table import COMMANDS
from tht.errors import InvalidInput


@pytest.mark.parametrize(
    "text, seconds",
    [("12h", 12 * 3600), ("30d", 30 * 86400), ("8w", 56 * 86400), ("NEVER", None), (" 1d ", 86400)],
)
def test_token_lifetimes(text, seconds):
    assert token_lifetime(text) == seconds


def test_the_default_lifetime_is_90_days_unless_configured(monkeypatch):
    monkeypatch.delenv("THT_TOKEN_EXPIRES_IN", raising=False)
    assert token_lifetime(None) == token_lifetime("") == 90 * 86400
    monkeypatch.setenv("THT_TOKEN_EXPIRES_IN", "never")
    assert token_lifetime(None) is None
    monkeypatch.setenv("THT_TOKEN_EXPIRES_IN", "soon")
    with pytest.raises(InvalidInput):  # a bad default is refused, never taken as "never"
        token_lifetime(None)


@pytest.mark.parametrize("text", ["0d", "-1d", "30", "30 days", "1y", "10001d", "forever", "1.5d"])
def test_bad_lifetimes_are_invalid_input_naming_the_field(text):
    with pytest.raises(InvalidInput) as refused:
        token_lifetime(text)
    assert refused.value.details == {"field": "expires_in"}


def test_since_takes_dates_times_and_spans():
    assert parse_since(None) is None
    assert parse_since("2026-12-01") == datetime(2026, 12, 1, tzinfo=UTC)
    assert parse_since("2026-12-01T10:00+01:00") == datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert abs(parse_since("24h") - (datetime.now(UTC) - timedelta(hours=24))) < timedelta(
        seconds=5
    )
    with pytest.raises(InvalidInput):
        parse_since("last week")


@pytest.mark.parametrize(
    "name", ["user.grant", "user.revoke", "user.role", "user.token.rotate", "user.delete", "audit"]
)
def test_every_new_command_is_an_admins(name):
    assert COMMANDS[name].capability == MANAGE and COMMANDS[name].remote


@pytest.mark.parametrize(
    "command",
    [
        ["user", "grant"],
        ["user", "revoke"],
        ["user", "role"],
        ["user", "token", "rotate"],
        ["user", "delete"],
        ["audit"],
    ],
    ids=" ".join,
)
def test_every_new_command_has_help(command, capsys):
    from tht.cli.main import main

    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage" in out and len(out.splitlines()) > 3
