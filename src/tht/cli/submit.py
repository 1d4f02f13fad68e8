"""``submit``: runs the command a parser built (a name of ``tht.commands.table`` and its
arguments) where it runs, the service or this process, and prints its one JSON
document. Both parsers of ``tht`` end here: Typer's (``tht.cli.main``) and the
agent's recall lines' (``tht.cli.entry``). Standard library only besides the service's
client, so a command the service runs costs the client no more.
"""

from __future__ import annotations

import os
import sys
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from tht.commands import table
from tht.errors import Interrupted, ThothError
from tht.service import client

if TYPE_CHECKING:
    from pathlib import Path

# the token of the command line being run (None: the operator)
TOKEN: ContextVar[str | None] = ContextVar("tht_cli_token", default=None)


def path(value: Path | str | None) -> str | None:
    return None if value is None else str(value)


def recall_arguments(
    question: str | None, config: str, filters: str | None, **more: str | None
) -> dict[str, Any]:
    """A recall command's typed arguments, from either parser: what is not given is
    left out."""
    args = {"question": question, "config": config, "filters": filters, **more}
    return {key: value for key, value in args.items() if value is not None}


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


def unexpected(exc: Exception) -> ThothError:
    """The last line of defence: an error no layer expected is said on stderr and
    answered as one JSON document, never a traceback on stdout."""
    print(f"unexpected error: {exc!r}", file=sys.stderr)
    if os.environ.get("THT_DEBUG") == "1":
        import traceback

        traceback.print_exc()
    return ThothError(f"internal error ({type(exc).__name__}); rerun with THT_DEBUG=1 for details")


def reader_gone() -> int:
    """The reader of stdout went away (`tht memory export ... | head`): no traceback,
    and none either when Python flushes stdout at exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141  # as a shell reports a command that SIGPIPE ended
