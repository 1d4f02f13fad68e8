"""One run of a ``tht`` command: who asked, where its files and output go, and which
engines it uses.

In a process of its own the command reads its files, writes to this process's stdout
and stderr and builds its engines. In the service many commands run at once on
threads: each gets an invocation carrying the client's working directory, the bytes of
the files it named (or, for a file passed on the socket, the service's copy of the
client's open descriptor), its output sinks, its principal (a token, or the operator) and the
service's warm engines. The commands read all of it from here, never from ``sys``.
"""

from __future__ import annotations

import base64
import io
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import IO, Any

from tht.errors import InvalidInput

Sink = Callable[[str], None]


def _write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


@dataclass
class Invocation:
    token: str | None = (
        None  # None: the operator (in-process, or the installation's own user on the socket)
    )
    cwd: str | None = None  # the client's working directory, when the command came from a client
    files: dict[str, dict[str, Any]] | None = (
        None  # what the client read or opened for it: path -> data, fd or error
    )
    stdout: Sink = _write_stdout
    stderr: Sink = _write_stderr
    # the service's engines (None: a command in its own process): () -> Services
    services: Callable[..., AbstractContextManager[Any]] | None = None
    capability: str | None = None  # what the command needs (tht.cli.capabilities)
    # standard input's bytes when a long-lived face (MCP, the Python client) runs the
    # command in its own process: its real standard input is not the command's
    stdin: bytes | None = None
    principal: Any = None  # the token's principal once checked (None: the operator)


_current: ContextVar[Invocation] = ContextVar("tht_invocation", default=Invocation())  # noqa: B039 - never mutated


def current() -> Invocation:
    return _current.get()


@contextmanager
def invoked(invocation: Invocation) -> Iterator[Invocation]:
    token = _current.set(invocation)
    try:
        yield invocation
    finally:
        _current.reset(token)


def resolve(path: str | os.PathLike[str]) -> str:
    """A path the user typed, relative to the client's working directory."""
    cwd = current().cwd
    return os.path.normpath(os.path.join(cwd, os.fspath(path))) if cwd else os.fspath(path)


def read_bytes(path: str | os.PathLike[str], limit: int) -> bytes:
    """At most ``limit + 1`` bytes of a file the command names ('-': standard input),
    from the client's copy when it came from a client. Raises OSError like open()."""
    files = current().files
    name = os.fspath(path)
    if files is None:
        if name == "-":
            given = current().stdin
            return given[: limit + 1] if given is not None else sys.stdin.buffer.read(limit + 1)
        with open(name, "rb") as handle:
            return handle.read(limit + 1)
    sent = _sent(files, name)
    if "fd" in sent:
        with _PassedFile(sent["fd"]) as handle:
            return handle.read(limit + 1)
    return base64.b64decode(sent["data"])[: limit + 1]


def passed_file(
    path: str | os.PathLike[str], buffer_size: int = io.DEFAULT_BUFFER_SIZE
) -> Callable[[], IO[bytes]] | None:
    """For a file the client passed open on the socket, a way to read it from its
    beginning, as often as needed (each reader has its own position: the file is read
    with pread, streamed, whatever its size); None when the client sent its bytes or the
    command runs in its own process. Raises OSError like open() when the client could
    not open it."""
    files = current().files
    if files is None:
        return None
    sent = _sent(files, os.fspath(path))
    if "fd" not in sent:
        return None
    fd = sent["fd"]
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise OSError(0, "not a regular file")
    return lambda: io.BufferedReader(_PassedFile(fd), buffer_size=buffer_size)


def _sent(files: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    sent = files.get("-" if name == "-" else resolve(name))
    if sent is None:
        raise InvalidInput(
            f"{name} was not sent with the command (only -c, --data, --cases, --request,"
            " --password-file files and the file an import names are)"
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


def write_stdout(text: str) -> None:
    current().stdout(text)


def progress(message: str) -> None:
    current().stderr(message + "\n")
