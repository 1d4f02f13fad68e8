"""``tht`` commands run for a long-lived face (the MCP stdio server, the Python client):
where they run is decided as for the ``tht`` command, but each answer comes back as an
exit code and a JSON document instead of going to this process's stdout.

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
from tht.service import client, paths


class CommandRunner:
    """Runs ``tht`` commands for one principal (``token``; None: the operator, which a
    service grants only to the installation's own user on its socket)."""

    def __init__(self, *, token: str | None = None, env: Mapping[str, str] | None = None):
        self.token = token
        self.env: dict[str, str] | os._Environ[str] = os.environ if env is None else dict(env)
        self._engines: Any = None  # this process's engines, once a command ran here
        self._lock = threading.Lock()

    def run(self, argv: list[str], *, stdin: bytes | None = None) -> tuple[int, Any]:
        """Run ``tht <argv>``; ``stdin``: the bytes a ``-`` file option reads. Returns the
        exit code and the command's JSON document (an error document when it failed)."""
        code, stdout = self.run_text(argv, stdin=stdin)
        try:
            return code, json.loads(stdout)
        except ValueError:
            error = ServiceUnavailable(
                "the command's answer is not one JSON document", details={"stdout": stdout[:500]}
            )
            return error.exit_code, error.to_dict()

    def run_text(self, argv: list[str], *, stdin: bytes | None = None) -> tuple[int, str]:
        """``run`` for a command whose stdout is not one document (an export's lines)."""
        output: list[str] = []
        code = self.run_streamed(argv, output.append, stdin=stdin)
        return code, "".join(output)

    def run_streamed(
        self, argv: list[str], write: Callable[[str], None], *, stdin: bytes | None = None
    ) -> int:
        """Run ``tht <argv>``, its stdout given to ``write`` piece by piece as the
        command writes it (an export's lines, never held whole here); returns the exit
        code. A command refused before it ran writes its error document."""
        try:
            code, rest = self._dispatch(argv, stdin, write)
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

    # --- where it runs ----------------------------------------------------------------

    def _dispatch(
        self, argv: list[str], stdin: bytes | None, write: Callable[[str], None]
    ) -> tuple[int, str]:
        env = self.env
        if env.get("THT_SERVICE", "auto").lower() == "off":
            return self._run_here(argv, stdin, write)
        timeout = float(env.get("THT_SERVICE_TIMEOUT") or client.DEFAULT_TIMEOUT_SECONDS)
        if env.get("THT_SERVICE_URL"):
            return client.run_over_http(
                env["THT_SERVICE_URL"], self._request(argv, stdin), timeout, write
            )
        mode = env.get("THT_SERVICE", "").lower()
        auto = mode == "auto" or (mode == "" and not client._external_engines(env))
        home = paths.default_home(env)
        sock = client.connect_or_start(home, auto=auto, env=env, timeout=timeout)
        if sock is None:
            return self._run_here(argv, stdin, write)
        return client.run_on_socket(
            home,
            sock,
            self._request(argv, stdin, pass_files=True),
            auto=auto,
            env=env,
            timeout=timeout,
            write=write,
        )

    def _request(
        self, argv: list[str], stdin: bytes | None, *, pass_files: bool = False
    ) -> dict[str, Any]:
        # never this process's standard input: an MCP server's is its protocol
        return client.build_request(
            argv, self.token, stdin=b"" if stdin is None else stdin, pass_files=pass_files
        )

    def _run_here(
        self, argv: list[str], stdin: bytes | None, write: Callable[[str], None]
    ) -> tuple[int, str]:
        """The command in this process, as the service runs it, on engines kept warm."""
        from tht.cli.invocation import Invocation, invoked
        from tht.cli.main import main as cli_main

        def write_stderr(text: str) -> None:
            sys.stderr.write(text)
            sys.stderr.flush()

        invocation = Invocation(
            token=self.token,
            stdin=stdin,
            stdout=write,
            stderr=write_stderr,
            services=self._services,
        )
        with invoked(invocation):
            code = cli_main(argv)
        return code, ""

    @contextmanager
    def _services(self) -> Iterator[Any]:
        from tht.bootstrap import Engines

        with self._lock:
            if self._engines is None:
                self._engines = Engines(self.env)
            engines = self._engines
        yield engines.services()


def agent_command(
    command: str,
    config: str,
    *,
    question: str | None = None,
    filters: Mapping[str, Any] | None = None,
    session: str | None = None,
    error: str | None = None,
    explain: str | None = None,
    data: Any = None,
) -> tuple[list[str], bytes | None]:
    """An agent's ``tht memory <command>`` (search, rules, solved-search, propose,
    summary) as a command line and the bytes of its standard input: options first,
    then ``--`` and the question, which may start with a dash."""
    argv = ["memory", command, "-c", config]
    if filters:
        argv.append("--filters=" + json.dumps(dict(filters), ensure_ascii=False))
    if session is not None:
        argv.append(f"--session={session}")
    if error is not None:
        argv.append(f"--error={error}")
    if explain is not None:
        argv.append(f"--explain={explain}")
    stdin = None
    if data is not None:
        argv += ["--data", "-"]
        stdin = json.dumps(data, ensure_ascii=False).encode()
    if question is not None:
        argv += ["--", question]
    return argv, stdin
