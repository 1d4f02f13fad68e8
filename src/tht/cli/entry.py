"""The ``tht`` program's entry. An agent's recall lines (`tht memory search`, `rules`,
`solved-search` with their plain options) are parsed here, without Typer; every other
line, and any recall line this reading is not sure of, goes to the Typer CLI
(``tht.cli.main``), which answers help and errors.

Why: through the service, a recall's wall time is mostly the client's start, and
importing Typer was about 35 ms of 85-100 (the service's recall about 10). Both
parsers end in ``submit`` with the same typed arguments (a test holds them to it over
many lines, and the options named here to Typer's).
"""

from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple

from tht import collector
from tht.cli.submit import TOKEN, reader_gone, recall_arguments, submit, unexpected
from tht.errors import ThothError
from tht.service import client

CONFIG = ("-c", "--config")  # the runtime file: `-c value`, `--config value`, `--config=value`
FLAGS = ("--json",)  # accepted for compatibility, carries nothing


class RecallLine(NamedTuple):  # not a dataclass: its import is 3-4 ms of a recall line
    command: str  # its name in tht.commands.table
    question_required: bool
    options: tuple[str, ...]  # the options taking a value, besides the runtime file


RECALL_LINES = {
    "search": RecallLine("memory.search", True, ("--filters", "--session", "--explain", "--view")),
    "solved-search": RecallLine("memory.solved-search", True, ("--filters", "--explain", "--view")),
    "rules": RecallLine(
        "memory.rules", False, ("--filters", "--session", "--error", "--explain", "--view")
    ),
}


def recall_line(args: list[str]) -> tuple[str, dict[str, Any]] | None:
    """The command and typed arguments of a recall line in its plain form: one
    question, each option once as ``--name value`` or ``--name=value`` (``-c value``
    for the runtime file), no value that looks like an option. None for anything else
    (help, a repeated or unknown option, a missing value or question, ``--``...), which
    Typer then reads, as it reads every line."""
    if len(args) < 2 or args[0] != "memory" or args[1] not in RECALL_LINES:
        return None
    line = RECALL_LINES[args[1]]
    values: dict[str, str] = {}
    questions: list[str] = []
    words = iter(args[2:])
    for word in words:
        if not word.startswith("-"):
            questions.append(word)
            continue
        if word in FLAGS:
            continue
        name, equals, value = ("--config", "", "") if word == "-c" else word.partition("=")
        if (name != "--config" and name not in line.options) or name in values:
            return None
        if not equals:
            following = next(words, None)
            if following is None or following.startswith("-"):
                return None
            value = following
        values[name] = value
    config = values.pop("--config", "")
    if len(questions) > 1 or not config or (line.question_required and not questions):
        return None
    from pathlib import PurePath  # as Typer's Path normalizes it ("./a//b" is "a/b")

    more = {name.removeprefix("--"): value for name, value in values.items()}
    filters = more.pop("filters", None)
    question = questions[0] if questions else None
    return line.command, recall_arguments(question, str(PurePath(config)), filters, **more)


def main(argv: list[str] | None = None, *, token: str | None = None) -> int:
    """``tht``: as ``tht.cli.main.main``, with the agent's recall lines read here."""
    if argv is None:  # run as the program: the collector waits out the start
        collector.hold_during_start()
    line = sys.argv[1:] if argv is None else list(argv)
    try:
        args, given = client.read_token(line, os.environ)
    except ThothError:
        args, given = [], None  # the CLI says it
    found = recall_line(args)
    if found is None:
        from tht.cli.main import run_line

        return run_line(line, token)
    bound = TOKEN.set(token if token is not None else given)
    try:
        return submit(*found)
    except BrokenPipeError:
        return reader_gone()
    except Exception as exc:
        error = exc if isinstance(exc, ThothError) else unexpected(exc)
        client.emit(error.to_dict())
        return error.exit_code
    finally:
        TOKEN.reset(bound)
