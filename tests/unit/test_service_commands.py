"""The command table (tht.commands.table): every `tht` command is one of its rows and
each row a command of the CLI, with its application function and input model; which
commands run in the service and which in the caller's own process; arguments checked
against the input model before anything runs; a misspelt command starts no service."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest
import typer.main
from typer import _click as click
from typer.core import TyperGroup

from tht import accounts
from tht.cli.main import app
from tht.commands import table
from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput, resolve, run
from tht.commands.table import COMMANDS


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


def test_the_cli_and_the_table_name_the_same_commands():
    parsed = {".".join(path) for path in _commands(typer.main.get_command(app))}
    assert parsed == set(COMMANDS)
    assert all(command.words == tuple(name.split(".")) for name, command in COMMANDS.items())


def test_only_the_process_commands_stay_out_of_the_service():
    assert {name for name, command in COMMANDS.items() if not command.remote} == {
        "serve",
        "mcp",
        "health",
        "service.status",
        "service.stop",
        "db.status",
        "db.stop",
        "memory.migrate",
    }
    # the ones that start or ask a process have no function: their parser runs them
    assert {name for name, command in COMMANDS.items() if command.function is None} == {
        "serve",
        "mcp",
        "health",
        "service.status",
        "service.stop",
    }
    assert all(
        command.capability == table.OPERATOR for command in COMMANDS.values() if not command.remote
    )


@pytest.mark.parametrize("name", sorted(n for n, c in COMMANDS.items() if c.function))
def test_each_row_names_its_function_and_input_model_and_its_arguments(name):
    command = COMMANDS[name]
    assert command.function is not None and command.input is not None
    function, model = resolve(command.function), resolve(command.input)
    assert issubclass(model, CommandInput)
    parameters = list(inspect.signature(function).parameters.values())
    assert [p.name for p in parameters] == ["ctx", "args"]
    assert parameters[1].annotation in (model.__name__, model)
    fields = set(model.model_fields)
    named = {*command.files, *command.passed, *(flag for flag, _ in command.raised_by)}
    if command.runtime is not None:
        named.add(command.runtime)
    if command.workspace not in (None, table.RUNTIME):
        named.add(command.workspace)
    assert named <= fields, named - fields
    if command.workspace == table.RUNTIME:  # the workspace of a runtime file it reads
        assert command.runtime is not None


def test_the_capabilities_are_the_accounts_ones():
    assert (table.READ, table.RECALL, table.PROPOSE, table.MANAGE) == (
        accounts.READ,
        accounts.RECALL,
        accounts.PROPOSE,
        accounts.MANAGE,
    )
    known = {*accounts.ROLE_PERMISSIONS["admin"], table.SIGNED, table.OPERATOR}
    assert {command.capability for command in COMMANDS.values()} <= known
    check = COMMANDS["memory.check"]
    assert check.capability_for({}) == accounts.READ
    assert check.capability_for({"repair": True}) == accounts.MANAGE


def test_the_parsers_constants_are_the_application_s():
    from tht.cli.accounts import ROLES
    from tht.cli.transfer import FORMATS
    from tht.memory.transfer.formats import FORMATS as MODEL_FORMATS

    assert ROLES == accounts.ROLES and FORMATS == MODEL_FORMATS


def test_the_files_a_command_names_are_the_ones_the_client_sends():
    create = COMMANDS["memory.create"]
    assert list(create.named_files({"config": "rt.yaml", "data": "-", "card_id": "x"})) == [
        ("rt.yaml", False),
        ("-", False),
    ]
    imported = COMMANDS["memory.import"]
    assert list(imported.named_files({"config": "rt.yaml", "file": "cards.jsonl"})) == [
        ("rt.yaml", False),
        ("cards.jsonl", True),
    ]
    assert list(COMMANDS["user.create"].named_files({"name": "a", "password_file": None})) == []


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("memory.search", {"config": "rt.yaml"}, "missing argument 'question'"),
        ("memory.search", {"config": "rt.yaml", "question": "q", "colour": 1}, "'colour'"),
        ("memory.delete", {"config": "rt.yaml", "card_id": "x", "revision": "two"}, "revision"),
        ("memory.list", ["-c", "rt.yaml"], "must be a JSON object"),
        ("memory.frobnicate", {}, "unknown command 'memory.frobnicate'"),
    ],
)
def test_arguments_that_do_not_fit_the_input_model_are_refused_before_anything_runs(
    name, args, message
):
    written: list[str] = []
    context = CommandContext(stdout=written.append, files={})  # reads no file, opens nothing
    assert run(name, args, context) == 2
    error = json.loads("".join(written))["error"]
    assert error["code"] == "invalid_input" and message in error["message"], error
    assert context.runtime is None and context.principal is None


def test_a_token_never_runs_the_operators_command():
    written: list[str] = []
    context = CommandContext(token="tht_anything", stdout=written.append, files={})
    assert run("demo", {}, context) == 5
    assert json.loads("".join(written))["error"]["code"] == "forbidden"


def _tht(home, *argv):
    return subprocess.run(
        [sys.executable, "-m", "tht", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "THT_HOME": str(home), "THT_SERVICE": "auto"},
        timeout=60,
        check=False,
    )


def test_a_misspelt_command_starts_no_service(tmp_path):
    for argv in (["servce", "stop"], ["memory", "frobnicate", "-c", "rt.yaml"]):
        done = _tht(tmp_path, *argv)
        assert done.returncode == 2 and "No such command" in done.stdout, done
    assert list(tmp_path.iterdir()) == []  # no service, no embedded server, no socket


def test_asking_about_the_service_never_starts_one(tmp_path):
    status = _tht(tmp_path, "service", "status")
    assert status.returncode == 0 and json.loads(status.stdout)["running"] is False, status
    stop = _tht(tmp_path, "service", "stop")
    assert stop.returncode == 0 and json.loads(stop.stdout)["stopped"] is False, stop
    assert list(tmp_path.iterdir()) == []
