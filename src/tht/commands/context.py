"""What a command runs with: its principal, its runtime file, its engines, where its
output goes and the files its client sent.

In a process of its own a command reads its files itself, writes to this process's
stdout and stderr and builds its engines. In the service many commands run at once on
threads: each gets a context carrying the client's working directory, the bytes of
the files it named (or, for a file passed on the socket, the service's copy of the
client's open descriptor), its output sinks, its principal and the service's warm
engines. A command reads all of it from its context, never from ``sys``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from tht import collector
from tht.errors import InvalidInput

if TYPE_CHECKING:
    from tht.accounts import Principal
    from tht.bootstrap import Services
    from tht.memory.idempotency import IdempotencyKey
    from tht.settings import RuntimeConfig

Sink = Callable[[str], None]
# a file as the client sent it: path -> {"data": base64} | {"fd": n} | {"error", "errno"}
SentFiles = dict[str, dict[str, Any]]


def write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


@contextmanager
def built_services() -> Iterator[Services]:
    """Engines of this command's own, closed after it."""
    from tht.bootstrap import build_services

    services = build_services()
    try:
        yield services
    finally:
        services.close()


@dataclass
class CommandContext:
    """One run of a command. ``principal`` None is the operator (no token: this
    process holds THT_HOME or the database credentials, or the installation's own
    user on the service's socket)."""

    token: str | None = None
    cwd: str | None = None  # the client's working directory, when a client sent the command
    files: SentFiles | None = None  # None: the command reads this process's files
    stdin: bytes | None = None  # what '-' reads when this process's stdin is not the command's
    stdout: Sink = write_stdout
    stderr: Sink = write_stderr
    # the engines: the service's warm ones, or None to build this command's own
    engines: Callable[[], AbstractContextManager[Services]] | None = None
    principal: Principal | None = None
    runtime: RuntimeConfig | None = None
    _stack: ExitStack = field(default_factory=ExitStack, repr=False)
    _services: Services | None = field(default=None, repr=False)

    @classmethod
    def serving(cls, services: Services, principal: Principal | None) -> CommandContext:
        """A command's function run by a face that holds the services and has resolved
        the principal itself (an HTTP route): the same function the command runs."""
        context = cls(principal=principal)
        context._services = services
        return context

    # --- engines ---------------------------------------------------------------------

    @property
    def services(self) -> Services:
        """The application services, opened on first use and closed when the command
        ends (a command that fails before it needs them opens nothing)."""
        if self._services is None:
            self._services = self._stack.enter_context((self.engines or built_services)())
            collector.started()  # a command run as a program: its start ends here
        return self._services

    def close(self) -> None:
        self._services = None
        self._stack.close()

    @property
    def workspace(self) -> str:
        """The runtime file's workspace."""
        if self.runtime is None:
            raise InvalidInput("this command needs a runtime file (-c)")
        return self.runtime.workspace

    def idempotency(self, key: str | None) -> IdempotencyKey | None:
        """The command's idempotency key (None: it sent none), scoped to its principal."""
        from tht.memory.idempotency import IdempotencyKey

        return IdempotencyKey.given(key, self.principal.user if self.principal else None)

    # --- output ----------------------------------------------------------------------

    def emit(self, document: Any) -> None:
        self.stdout(json.dumps(document, ensure_ascii=False, default=str) + "\n")

    def progress(self, message: str) -> None:
        self.stderr(message + "\n")

    # --- the files the command names -------------------------------------------------

    def resolve(self, path: str | os.PathLike[str]) -> str:
        """A path the user typed, relative to the client's working directory."""
        cwd = self.cwd
        return os.path.normpath(os.path.join(cwd, os.fspath(path))) if cwd else os.fspath(path)

    def read_bytes(self, path: str | os.PathLike[str], limit: int) -> bytes:
        """At most ``limit + 1`` bytes of a file the command names ('-': standard
        input), from the client's copy when it came from a client. Raises OSError like
        open()."""
        name = os.fspath(path)
        if self.files is None:
            if name == "-":
                given = self.stdin
                return given[: limit + 1] if given is not None else sys.stdin.buffer.read(limit + 1)
            with open(name, "rb") as handle:
                return handle.read(limit + 1)
        sent = self._sent(name)
        if "fd" in sent:
            with _PassedFile(sent["fd"]) as handle:
                return handle.read(limit + 1)
        return base64.b64decode(sent["data"])[: limit + 1]

    def read_text(self, path: str, limit: int) -> str:
        """A UTF-8 text file of at most ``limit`` bytes, or standard input with '-'."""
        try:
            raw = self.read_bytes(path, limit)
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror}") from exc
        if len(raw) > limit:
            raise InvalidInput(f"{path} is larger than {limit} bytes")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{path} is not UTF-8 text") from exc

    def read_document(self, path: str) -> Any:
        """A JSON document from a file, or from standard input with '-'."""
        from tht.memory.model import MAX_DOCUMENT_BYTES
        from tht.validation import parse_json

        return parse_json(
            self.read_text(path, MAX_DOCUMENT_BYTES), "standard input" if path == "-" else path
        )

    def passed_file(
        self, path: str | os.PathLike[str], buffer_size: int = io.DEFAULT_BUFFER_SIZE
    ) -> Callable[[], IO[bytes]] | None:
        """For a file the client passed open on the socket, a way to read it from its
        beginning, as often as needed (each reader has its own position: the file is
        read with pread, streamed, whatever its size); None when the client sent its
        bytes or the command runs in its own process. Raises OSError like open() when
        the client could not open it."""
        if self.files is None:
            return None
        sent = self._sent(os.fspath(path))
        if "fd" not in sent:
            return None
        fd = sent["fd"]
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        return lambda: io.BufferedReader(_PassedFile(fd), buffer_size=buffer_size)

    def _sent(self, name: str) -> dict[str, Any]:
        assert self.files is not None
        sent = self.files.get("-" if name == "-" else self.resolve(name))
        if sent is None:
            raise InvalidInput(
                f"{name} was not sent with the command (only the files its arguments name are)"
            )
        if "error" in sent:
            raise OSError(int(sent.get("errno") or 0), str(sent["error"]))
        return sent


class _PassedFile(io.RawIOBase):
    """A passed descriptor read from its start with pread: readers do not share an
    offset, and closing one leaves the descriptor to the service (which closes it when
    the command ends)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = os.pread(self._fd, len(buffer), self._offset)
        buffer[: len(data)] = data
        self._offset += len(data)
        return len(data)
