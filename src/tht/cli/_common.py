"""What the parsers of ``tht`` share: the common options, and ``submit``, which runs the
command a parser built (a name of ``tht.commands.table`` and its arguments) where it
runs: the service, or this process.

The parsers only parse: what a command does is its application function in
``tht.commands``, whichever face calls it. Nothing here imports more than the standard
library and Typer, so the client stays light when the service runs the command.
"""

from __future__ import annotations

import os
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any

import typer

from tht.commands import table
from tht.errors import Interrupted, ThothError
from tht.service import client

ConfigOption = Annotated[
    Path,
    typer.Option("-c", "--config", help="Runtime file (YAML): workspace, database, schema, ..."),
]

IdempotencyKeyOption = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="A key of yours (e.g. a UUID): run again with the same key and the same input, the"
        " command prints the first answer instead of doing it twice (kept 24 h); with other input"
        " it fails with idempotency_key_reused",
    ),
]

JsonFlag = Annotated[
    bool, typer.Option("--json", help="Accepted for compatibility: output is always JSON")
]

# the token of the command line being run (None: the operator)
TOKEN: ContextVar[str | None] = ContextVar("tht_cli_token", default=None)


def path(value: Path | str | None) -> str | None:
    return None if value is None else str(value)


def configure_logging() -> None:
    import logging

    level = os.environ.get("THT_LOG_LEVEL")
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, (level or "WARNING").upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if level is None:
        # the pool warns at each failed reconnection while a command waits for PostgreSQL;
        # the command's one JSON error says the outcome (THT_LOG_LEVEL shows them again)
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def submit(name: str, args: dict[str, Any]) -> int:
    """Run command ``name`` with ``args``: its stdout is this process's, an error one
    JSON document there; returns the exit code. A command the table keeps out of the
    service runs here as the operator, whatever the token."""
    found = table.command(name)
    token = TOKEN.get() if found is None or found.remote else None
    output = client.StdoutWriter()
    ran_here = False

    def here() -> tuple[int, str]:
        nonlocal ran_here
        ran_here = True
        from tht.commands.context import CommandContext
        from tht.commands.dispatch import run

        configure_logging()
        return run(name, args, CommandContext(token=token)), ""

    try:
        code, stdout = client.send(name, args, token, env=os.environ, write=output, here=here)
    except KeyboardInterrupt:
        if ran_here:
            error = Interrupted(
                "interrupted: the command was cancelled (its transaction rolled back)",
                details={"detached": False},
            )
        elif not client.handed_over():
            error = Interrupted(
                "interrupted before the command reached the service: nothing ran",
                details={"detached": False},
            )
        else:
            error = Interrupted(
                "interrupted: the command was handed to the service and goes on there (detached);"
                " its result is not shown",
                details={"detached": True},
            )
        client.emit(error.to_dict())
        return error.exit_code
    except ThothError as exc:
        if output.last not in ("", "\n"):  # the error document on a line of its own
            output("\n")
        client.emit(exc.to_dict())
        return exc.exit_code
    output.finish(stdout)
    return code
