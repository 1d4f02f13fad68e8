"""Every ``tht`` command, declared once: its name, its input model and application
function (dotted paths, imported only where the command runs), what it prints, the
capability a token's principal needs, whether the service may run it, and which of
its arguments name files the client reads and sends with it.

Standard library only: the command-line client reads this table to know where a
command runs and which files to send, without importing what the command needs.

Adding a command: its function and input model in a module of ``tht.commands``, one
row here, and its parser in ``tht.cli``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# The capabilities of tht.accounts (their values: that module imports the engines'
# models, which the client must not); tests/unit/test_command_table.py keeps them equal.
READ = "memory.read"
RECALL = "memory.recall"
PROPOSE = "memory.propose"
MANAGE = "memory.manage"
SIGNED = "signed"  # the authority is the request's signature, checked by the command
OPERATOR = "operator"  # whoever holds THT_HOME: never a token's principal

DOCUMENT = "document"  # one JSON document on stdout
LINES = "lines"  # lines streamed on stdout as they are written (an export)

RUNTIME = "runtime"  # the command's workspace is its runtime file's


@dataclass(frozen=True)
class Command:
    """One command. ``function`` and ``input`` are ``module:name`` paths; a command
    without a function (``serve``, ``mcp``, ``health``, ``service status|stop``) starts
    or asks a process and its parser runs it."""

    name: str  # "memory.search": the words of `tht memory search`
    capability: str
    function: str | None = None
    input: str | None = None
    output: str = DOCUMENT
    remote: bool = True  # False: only ever in the caller's own process
    runtime: str | None = "config"  # the argument naming the runtime file
    workspace: str | None = RUNTIME  # where the workspace is named: RUNTIME, an argument, None
    files: tuple[str, ...] = ()  # arguments naming files the client reads and sends
    passed: tuple[str, ...] = ()  # an argument naming a file passed open on the socket
    # (a flag, the capability the command needs when it is set): `check --repair` repairs
    raised_by: tuple[tuple[str, str], ...] = ()

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(self.name.split("."))

    def capability_for(self, args: Mapping[str, Any]) -> str:
        for flag, capability in self.raised_by:
            if args.get(flag):
                return capability
        return self.capability

    def named_files(self, args: Mapping[str, Any]) -> Iterator[tuple[str, bool]]:
        """The paths of the files ``args`` names (``-``: standard input), each with
        whether it may be passed open rather than sent as bytes."""
        for names, passed in ((self.files, False), (self.passed, True)):
            for name in names:
                value = args.get(name)
                if isinstance(value, str | os.PathLike):
                    yield os.fspath(value), passed


def _row(module: str, name: str, capability: str, **fields: Any) -> Command:
    """A command whose function is ``tht.commands.<module>:<name as an identifier>``
    and whose input model is that name in CamelCase with ``In``."""
    identifier = name.replace(".", "_").replace("-", "_")
    model = "".join(part.capitalize() for part in identifier.split("_")) + "In"
    path = f"tht.commands.{module}"
    return Command(
        name, capability, function=f"{path}:{identifier}", input=f"{path}:{model}", **fields
    )


_CONFIG = ("config",)
_WITH_DATA = ("config", "data")

COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (
        # --- cards -------------------------------------------------------------------------
        _row("memory", "memory.list", READ, files=_CONFIG),
        _row("memory", "memory.show", READ, files=_CONFIG),
        _row("memory", "memory.create", MANAGE, files=_WITH_DATA),
        _row("memory", "memory.update", MANAGE, files=_WITH_DATA),
        _row("memory", "memory.delete", MANAGE, files=_CONFIG),
        _row("memory", "memory.pending", READ, files=_CONFIG),
        _row("memory", "memory.retry", MANAGE, files=_CONFIG),
        _row("memory", "memory.index", MANAGE, files=_CONFIG),
        _row("memory", "memory.check", READ, files=_CONFIG, raised_by=(("repair", MANAGE),)),
        _row("memory", "memory.admin", SIGNED, runtime=None, workspace="workspace", files=_CONFIG),
        # --- recall ------------------------------------------------------------------------
        _row("recall", "memory.search", RECALL, files=_CONFIG),
        _row("recall", "memory.solved-search", RECALL, files=_CONFIG),
        _row("recall", "memory.rules", RECALL, files=_CONFIG),
        _row("recall", "memory.eval", RECALL, files=("config", "cases")),
        # --- the workflow's side -----------------------------------------------------------
        _row("workflow", "memory.propose", PROPOSE, files=_WITH_DATA),
        _row("workflow", "memory.summary", PROPOSE, files=_CONFIG),
        _row("workflow", "memory.review-apply", SIGNED, files=("config", "request")),
        _row("workflow", "memory.solved-index", PROPOSE, files=_CONFIG),
        # --- bulk --------------------------------------------------------------------------
        _row("transfer", "memory.import", MANAGE, files=_CONFIG, passed=("file",)),
        _row("transfer", "memory.export", READ, files=_CONFIG, output=LINES),
        _row("transfer", "memory.imports.list", READ, files=_CONFIG),
        _row("transfer", "memory.imports.undo", MANAGE, files=_CONFIG),
        # --- curation: the benchmark and the gaps (the recall log is every agent's questions)
        *(
            _row("curation", name, MANAGE, files=files)
            for name, files in (
                ("memory.benchmark.add", _CONFIG),
                ("memory.benchmark.import", ("config", "file")),
                ("memory.benchmark.list", _CONFIG),
                ("memory.benchmark.remove", _CONFIG),
                ("memory.benchmark.run", _CONFIG),
                ("memory.benchmark.runs", _CONFIG),
                ("memory.benchmark.show", _CONFIG),
                ("memory.gaps", _CONFIG),
                ("memory.recalls", _CONFIG),
            )
        ),
        # --- workspaces --------------------------------------------------------------------
        _row("workspaces", "workspace.create", MANAGE, runtime=None, workspace=None),
        _row("workspaces", "workspace.list", READ, runtime=None, workspace=None),
        _row("workspaces", "workspace.show", READ, runtime=None, workspace="workspace_id"),
        _row("workspaces", "workspace.embedder", MANAGE, runtime=None, workspace="workspace_id"),
        # --- accounts ----------------------------------------------------------------------
        *(
            _row("accounts", name, MANAGE, runtime=None, workspace=None, files=files)
            for name, files in (
                ("user.create", ("password_file",)),
                ("user.list", ()),
                ("user.grant", ()),
                ("user.revoke", ()),
                ("user.role", ()),
                ("user.token.rotate", ()),
                ("user.delete", ()),
                ("audit", ()),
            )
        ),
        # --- the physical Catalog ----------------------------------------------------------
        _row("catalog", "catalog.bind", MANAGE, files=_CONFIG),
        _row("catalog", "catalog.sync", MANAGE, files=_CONFIG),
        _row("catalog", "catalog.retry", MANAGE, files=_CONFIG),
        _row("catalog", "catalog.forget", MANAGE, files=_CONFIG),
        _row("catalog", "catalog.runs", READ, files=_CONFIG),
        _row("catalog", "catalog.show", READ, files=_CONFIG),
        _row("catalog", "catalog.status", READ, files=_CONFIG),
        # --- the operator's --------------------------------------------------------------
        # the demo workspace is loaded by the service when one runs: it owns the index
        _row("operator", "demo", OPERATOR, runtime=None, workspace=None),
        # the process, the embedded server and the schema: in the operator's own process
        *(
            _row("operator", name, OPERATOR, remote=False, runtime=None, workspace=None)
            for name in ("memory.migrate", "db.status", "db.stop")
        ),
        *(
            Command(name, OPERATOR, remote=False, runtime=None, workspace=None)
            for name in ("serve", "mcp", "health", "service.status", "service.stop")
        ),
    )
}


def command(name: object) -> Command | None:
    """The command of that name (None: no command, or not a name)."""
    return COMMANDS.get(name) if isinstance(name, str) else None
