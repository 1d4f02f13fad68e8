"""Commands run for a long-lived face (the MCP stdio server, the Python client): where
they run is decided as for the ``tht`` command, but each answer comes back as an exit
code and a JSON document instead of going to this process's stdout.

Standard library only until a command must run in this process: a face that talks to
the service never imports the engines.

- ``THT_SERVICE_URL`` set: the service over HTTP, with the token;
- otherwise the installation's Unix socket, auto-starting a service as the CLI does;
- ``THT_SERVICE=off``, or no service and none may be started (external engines): in
  this process, the operator unless a token is given. Unlike a command in a process
  of its own, the engines stay warm here for the runner's life (``close`` ends them).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tht.errors import ServiceUnavailable, ThothError
from tht.service import client


class CommandRunner:
    """Runs commands for one principal (``token``; None: the operator, which a service
    grants only to the installation's own user on its socket)."""

    def __init__(self, *, token: str | None = None, env: Mapping[str, str] | None = None):
        self.token = token
        self.env: Mapping[str, str] = os.environ if env is None else dict(env)
        self._engines: Any = None  # this process's engines, once a command ran here
        self._lock = threading.Lock()

    def run_command(
        self, name: str, args: dict[str, Any], *, stdin: bytes | None = None
    ) -> tuple[int, Any]:
        """Run command ``name`` (``tht.commands.table``) with ``args``; ``stdin``: the
        bytes a ``-`` file argument reads. Returns the exit code and the command's JSON
        document (an error document when it failed)."""
        code, stdout = self.run_command_text(name, args, stdin=stdin)
        try:
            return code, json.loads(stdout)
        except ValueError:
            error = ServiceUnavailable(
                "the command's answer is not one JSON document", details={"stdout": stdout[:500]}
            )
            return error.exit_code, error.to_dict()

    def run_command_text(
        self, name: str, args: dict[str, Any], *, stdin: bytes | None = None
    ) -> tuple[int, str]:
        """``run_command`` for a command whose stdout is not one document (an export's
        lines)."""
        output: list[str] = []
        code = self.run_command_streamed(name, args, output.append, stdin=stdin)
        return code, "".join(output)

    def run_command_streamed(
        self,
        name: str,
        args: dict[str, Any],
        write: Callable[[str], None],
        *,
        stdin: bytes | None = None,
    ) -> int:
        """Run command ``name``, its stdout given to ``write`` piece by piece as the
        command writes it (an export's lines, never held whole here); returns the exit
        code. A command refused before it ran writes its error document."""
        try:
            code, rest = client.send(
                name,
                args,
                self.token,
                env=self.env,
                write=write,
                # never this process's standard input: an MCP server's is its protocol
                stdin=b"" if stdin is None else stdin,
                here=lambda: self._run_here(name, args, stdin, write),
            )
        except ThothError as exc:
            code, rest = exc.exit_code, json.dumps(exc.to_dict())
        if rest:
            write(rest)
        return code

    def close(self) -> None:
        with self._lock:
            engines, self._engines = self._engines, None
        if engines is not None:
            engines.close()

    def _run_here(
        self, name: str, args: dict[str, Any], stdin: bytes | None, write: Callable[[str], None]
    ) -> tuple[int, str]:
        """The command in this process, as the service runs it, on engines kept warm."""
        from tht.commands.context import CommandContext
        from tht.commands.dispatch import run

        def write_stderr(text: str) -> None:
            sys.stderr.write(text)
            sys.stderr.flush()

        context = CommandContext(
            token=self.token,
            stdin=b"" if stdin is None else stdin,
            stdout=write,
            stderr=write_stderr,
            engines=self._services,
        )
        return run(name, args, context), ""

    @contextmanager
    def _services(self) -> Iterator[Any]:
        from tht.bootstrap import Engines

        with self._lock:
            if self._engines is None:
                self._engines = Engines(self.env)
            engines = self._engines
        yield engines.services()
