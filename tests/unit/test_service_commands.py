"""Which `tht` commands the client hands to the service (``SERVICE_COMMANDS``) and which
run in its own process: every CLI command is one or the other, and a misspelt command
is refused without starting a service for it."""

from __future__ import annotations

import os
import subprocess
import sys

import typer.main
from typer import _click as click
from typer.core import TyperGroup

from tht.cli.main import app
from tht.service.client import SERVICE_COMMANDS, is_local, runs_here


def _commands(command: click.core.Command, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if not isinstance(command, TyperGroup):
        return {path}
    context = click.core.Context(command)
    found: set[tuple[str, ...]] = set()
    for name in command.list_commands(context):
        sub = command.get_command(context, name)
        assert sub is not None
        found |= _commands(sub, (*path, name))
    return found


def test_every_command_runs_on_the_service_or_is_local():
    by_first_two_words = {path[:2] for path in _commands(typer.main.get_command(app))}
    local = {words for words in by_first_two_words if is_local(list(words))}
    single_word_here = {("audit",)}  # reads the accounts database only, no engine
    assert SERVICE_COMMANDS == by_first_two_words - local - single_word_here
    assert not any(runs_here([*words, "-c", "rt.yaml"], {}) for words in SERVICE_COMMANDS)
    assert all(runs_here([*words], {}) for words in local | single_word_here)


def test_a_misspelt_command_starts_no_service(tmp_path):
    for argv in (["service", "stop"], ["memory", "frobnicate", "-c", "rt.yaml"]):
        assert runs_here(argv, {})
        done = subprocess.run(
            [sys.executable, "-m", "tht", *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "THT_HOME": str(tmp_path), "THT_SERVICE": "auto"},
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and "No such command" in done.stdout, done
    assert list(tmp_path.iterdir()) == []  # no service, no embedded server, no socket
