"""The client's side of a command: where it runs, and the request that carries it.

Standard library only until it knows the command must run in this process. A command
(a name of ``tht.commands.table`` and its arguments) runs:

- with ``THT_SERVICE=off``, and for the operator's commands that manage the process or
  the embedded server themselves (the table's non-remote ones): here;
- ``THT_SERVICE_URL`` set: in that service over HTTP, with a token (never here);
- otherwise the installation's Unix socket (``$THT_HOME/run/service.sock``); with no
  service there and the embedded engines (no ``THT_CATALOG_*``), a service is started
  in the background (``THT_SERVICE=auto``, the default) and used; with external
  engines the command runs here unless ``THT_SERVICE=auto`` asks for a local service.

The command keeps its one JSON document on stdout and its exit code wherever it runs;
its stdout streams back as the service writes it (events of at most ``CHUNK_CHARS``,
the service blocked while the client has not read them). The request carries the
command's name and arguments as JSON, never a command line. The files its arguments
name (the table's ``files``: a runtime file, a card, cases, a signed request, a
password file, or ``-`` for standard input) are read here and sent with it, so the
service reads nothing of the client's file system but the workflow's session
directories. The file an import names is not read here on the Unix socket: the client
opens it and passes the open descriptor (SCM_RIGHTS), which the service reads, streamed,
whatever its size (standard input or a pipe is first copied to a temporary file: the
import reads its file twice). Over HTTP it is sent like the others: all of them,
base64-encoded, within the request body's limit (``MAX_HTTP_BODY_BYTES``).
"""

from __future__ import annotations

import binascii
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from tht import __version__
from tht.commands import table
from tht.errors import (
    InvalidInput,
    ServiceLost,
    ServiceTimeout,
    ServiceUnavailable,
    ServiceUntrusted,
    ServiceVersionMismatch,
    ThothError,
)
from tht.service import paths

MAX_FILE_BYTES = 16 * 1024 * 1024  # the largest file sent as bytes (all of them over HTTP)
MAX_PASSED_FILES = 4  # descriptors one request may carry over the socket
# The largest request body the service's HTTP face reads (tht.web.guard, set to
# tht.memory.model.MAX_DOCUMENT_BYTES; the client must not import the model): over
# HTTP a command's files, base64-encoded, must fit in it.
MAX_HTTP_BODY_BYTES = 1024 * 1024
DEFAULT_IDLE_SECONDS = 900
DEFAULT_TIMEOUT_SECONDS = 60.0  # silence from the service (it sends a heartbeat every few seconds)
START_TIMEOUT_SECONDS = 60.0
_handed_over = False  # the command reached the service: Ctrl-C then detaches rather than cancels
# Errors the service's HTTP face answers before running the command.
_HTTP_EXIT = {400: 2, 401: 5, 403: 5, 404: 3, 409: 10, 413: 2, 415: 2, 422: 2, 429: 10, 503: 10}


Write = Callable[[str], None]


def emit(document: Any) -> None:
    sys.stdout.write(json.dumps(document, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def handed_over() -> bool:
    """Whether a command reached the service: Ctrl-C then detaches rather than cancels."""
    return _handed_over


def _external_engines(env: Mapping[str, str]) -> bool:
    return any(key.startswith("THT_CATALOG_") for key in env)


def read_token(args: list[str], env: Mapping[str, str]) -> tuple[list[str], str | None]:
    """``--token-file F`` (a global option, before the command) or ``THT_TOKEN_FILE``,
    else ``THT_TOKEN``; the option is removed from the arguments."""
    rest, path = [], env.get("THT_TOKEN_FILE")
    words = iter(args)
    for arg in words:
        if arg == "--token-file":
            path = next(words, "")
        elif arg.startswith("--token-file="):
            path = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if path is not None:
        try:
            with open(path) as handle:
                return rest, handle.read().strip()
        except OSError as exc:
            raise InvalidInput(f"cannot read the token file {path}: {exc.strerror}") from exc
    return rest, (env.get("THT_TOKEN") or "").strip() or None


# --- the request ---------------------------------------------------------------------


class SentFile(TypedDict, total=False):
    """A named file as the request carries it (``CommandContext.read_bytes`` reads it
    back): its bytes base64-encoded, the position of its open descriptor among those
    the request passes on the socket, or why it could not be read."""

    data: str
    fd: int
    error: str
    errno: int


def _read(path: str, stdin_data: list[bytes | None]) -> SentFile:
    try:
        if path == "-":
            data = stdin_data[0]
            if data is None:
                data = stdin_data[0] = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return {"error": exc.strerror or str(exc), "errno": exc.errno or 0}
    return {"data": binascii.b2a_base64(data, newline=False).decode("ascii")}


def _open_for_passing(path: str, stdin_data: list[bytes | None]) -> tuple[SentFile, int | None]:
    """The file an import names, opened here to pass its descriptor (the client's
    permissions apply, and the service never opens a path of this machine). A regular
    file is passed as it is; standard input, a pipe or a device is first copied into an
    unlinked temporary file, since the import reads its file twice."""
    try:
        if path == "-":
            data = stdin_data[0]
            spool = tempfile.TemporaryFile(prefix="tht-import-")
            if data is None:
                while block := sys.stdin.buffer.read(1 << 20):
                    spool.write(block)
            else:
                spool.write(data)
            spool.flush()
            return {}, _detach(spool)
        handle = open(path, "rb")
        if stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return {}, _detach(handle)
        with handle:
            spool = tempfile.TemporaryFile(prefix="tht-import-")
            while block := handle.read(1 << 20):
                spool.write(block)
            spool.flush()
            return {}, _detach(spool)
    except OSError as exc:
        return {"error": exc.strerror or str(exc), "errno": exc.errno or 0}, None


def _detach(handle: Any) -> int:
    """The descriptor of an open file object, which no longer closes it."""
    fd = os.dup(handle.fileno())
    handle.close()
    return fd


def close_passed(request: dict[str, Any]) -> None:
    """Close the descriptors a request passes (its sender's copies)."""
    for fd in request.pop("fds", None) or ():
        try:
            os.close(fd)
        except OSError:
            pass


def build_request(
    name: str,
    args: dict[str, Any],
    token: str | None,
    *,
    stdin: bytes | None = None,
    pass_files: bool = False,
) -> dict[str, Any]:
    """Command ``name`` as the service runs it: its arguments, the working directory,
    the bytes of the files its arguments name (the table says which: the service reads
    no file nor variable of the client's). ``stdin``: the bytes a ``-`` file stands
    for (None: this process's standard input). ``pass_files`` (the Unix socket): the
    file an import names is opened and its descriptor listed under ``fds`` (not JSON:
    the socket passes it beside the request; ``close_passed`` closes it)."""
    cwd = os.getcwd()
    files: dict[str, SentFile] = {}
    stdin_data: list[bytes | None] = [stdin]
    fds: list[int] = []
    found = table.command(name)
    for path, passable in found.named_files(args) if found is not None else ():
        key = "-" if path == "-" else os.path.normpath(os.path.join(cwd, path))
        if key in files:
            continue
        if passable and pass_files:
            files[key], fd = _open_for_passing(path, stdin_data)
            if fd is not None:
                files[key]["fd"] = len(fds)
                fds.append(fd)
            continue
        files[key] = _read(path, stdin_data)
    request: dict[str, Any] = {
        "protocol": paths.PROTOCOL,
        "version": __version__,
        "command": name,
        "args": args,
        "cwd": cwd,
        "files": files,
        "token": token,
    }
    if fds:
        request["fds"] = fds
    return request


# --- talking to the service over its Unix socket -----------------------------------------


def _check_trust(home: str) -> None:
    for path, directory in ((paths.run_dir(home), True), (paths.socket_path(home), False)):
        reason = paths.untrusted_reason(path, directory=directory)
        if reason:
            raise ServiceUntrusted(
                f"refusing the service socket: {reason}", details={"path": str(path)}
            )


def _connect(home: str, timeout: float) -> socket.socket | None:
    """A connection to a live service, or None when none listens (no socket, or a
    stale one left by a killed service)."""
    _check_trust(home)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(paths.socket_path(home))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.ENOENT, errno.ECONNREFUSED):
            return None
        raise ServiceUnavailable(f"cannot reach the service: {exc.strerror}") from exc
    return sock


def _exchange(sock: socket.socket, request: dict[str, Any], write: Write) -> tuple[int, str]:
    """Send one request (with the descriptors it passes); copy progress to stderr and
    stdout to ``write`` as they come; return the exit code and the rest of stdout."""
    global _handed_over
    with sock:
        line = json.dumps({k: v for k, v in request.items() if k != "fds"}).encode() + b"\n"
        fds = request.get("fds") or []
        try:
            if fds:
                sent = socket.send_fds(sock, [line], fds)
                if sent < len(line):  # sendall sends even nothing: EPIPE once the service,
                    sock.sendall(line[sent:])  # having read it all, answered and closed
            else:
                sock.sendall(line)
        except OSError as exc:
            refused = _early_answer(sock)
            if refused is not None:  # answered before reading: service_busy
                return refused
            raise ServiceLost(f"the service connection broke: {exc.strerror}") from exc
        _handed_over = True
        reader = sock.makefile("rb")
        while True:
            try:
                line = reader.readline()
            except TimeoutError as exc:
                raise ServiceTimeout(
                    "the service did not answer in time (THT_SERVICE_TIMEOUT seconds);"
                    " the command may still complete there"
                ) from exc
            except OSError as exc:
                raise ServiceLost(f"the service connection broke: {exc.strerror}") from exc
            if not line:
                raise ServiceLost(
                    "the service closed the connection before answering (it stopped or died);"
                    " the next command starts a new one"
                )
            answer = _event(line, write)
            if answer is not None:
                return answer


def _early_answer(sock: socket.socket) -> tuple[int, str] | None:
    """The answer the service sent before it read the request (a refusal), if any."""
    try:
        sock.settimeout(1.0)
        line = sock.makefile("rb").readline()
        event = json.loads(line) if line else None
    except (OSError, ValueError):
        return None
    if isinstance(event, dict) and "exit" in event:
        return int(event["exit"]), str(event.get("stdout", ""))
    return None


def _operation(sock: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
    """The service's one-line answer to an operation (``status``, ``health``,
    ``shutdown``); its refusal of the connection (``service_busy``, sent before it read
    anything) raised as the error it names."""
    with sock:
        try:
            sock.sendall(json.dumps(request).encode() + b"\n")
        except OSError:
            pass  # refused before reading: the answer waits in the socket
        try:
            answer = sock.makefile("rb").readline()
        except OSError as exc:
            raise ServiceLost(f"the service connection broke: {exc.strerror}") from exc
    reply = json.loads(answer) if answer else {}
    if "exit" in reply:
        try:
            document = json.loads(reply.get("stdout") or "")
        except ValueError:
            document = None
        raise ThothError.from_dict(document, exit_code=int(reply["exit"]))
    return reply if isinstance(reply, dict) else {}


def _event(line: bytes, write: Write) -> tuple[int, str] | None:
    """One event from the service: progress goes to stderr, a piece of stdout to
    ``write``; the last one is the command's exit code and the rest of its stdout."""
    event = json.loads(line)
    if "stderr" in event:
        sys.stderr.write(event["stderr"])
        sys.stderr.flush()
    elif "exit" in event:
        return int(event["exit"]), event.get("stdout", "")
    elif "stdout" in event:
        write(event["stdout"])
    return None


class StdoutWriter:
    """The client's stdout as the command's pieces arrive; ``finish`` ends it with a
    newline as the command's own process would (a document without one gets one)."""

    def __init__(self) -> None:
        self.last = ""

    def __call__(self, text: str) -> None:
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            self.last = text[-1]

    def finish(self, rest: str) -> None:
        self(rest)
        if self.last not in ("", "\n"):
            self("\n")


def stop_service(home: str, token: str | None = None, timeout: float = paths.STOP_SECONDS) -> bool:
    """Ask the service to stop and wait for it to go; False if none was running."""
    sock = _connect(home, timeout)
    if sock is None:
        return False
    reply = _operation(sock, {"op": "shutdown", "token": token})
    if "error" in reply:
        raise ThothError.from_dict(reply, exit_code=5)
    _wait_gone(home, timeout)
    return True


def running_service(home: str, timeout: float = 5.0) -> dict[str, Any] | None:
    """What the running service says of itself (its pid, whether it serves the pages
    and at which URL, whether it was auto-started, ...), asked on its socket; None
    when none runs. Never starts one."""
    sock = _connect(home, timeout)
    if sock is None:
        return None
    status = _operation(sock, {"op": "status"}).get("status")
    if not isinstance(status, dict):
        raise ServiceLost("the service closed the connection without answering")
    return status


def service_health(home: str, timeout: float = 30.0) -> tuple[int, dict[str, Any]] | None:
    """The running service's ``/healthz`` answer (HTTP status, document), asked on its
    socket; None when no service runs."""
    sock = _connect(home, timeout)
    if sock is None:
        return None
    reply = _operation(sock, {"op": "health"})
    if not isinstance(reply.get("health"), dict):
        raise ServiceLost("the service closed the connection without answering")
    return int(reply["http_status"]), reply["health"]


def _wait_gone(home: str, timeout: float) -> None:
    lock = os.path.join(paths.run_dir(home), "service.lock")
    deadline = time.monotonic() + timeout
    with open(lock, "a+") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(handle, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServiceTimeout("the service did not stop in time") from None
                time.sleep(0.05)


def start_service(
    home: str, env: Mapping[str, str], timeout: float = START_TIMEOUT_SECONDS
) -> None:
    """Start a headless service in the background, unless one is (or just got) running.

    ``start.lock`` serializes starters: the second of two racing commands finds the
    first one's service when it gets the lock. The service itself holds
    ``service.lock`` for its life, so a second service refuses to run."""
    folder = paths.make_run_dir(home)
    _check_trust(home)
    with open(os.path.join(folder, "start.lock"), "a+") as starting:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(starting, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(
                        "another command has been starting the service for too long"
                    ) from None
                time.sleep(0.02)
        probe = _connect(home, 5.0)
        if probe is not None:
            probe.close()
            return
        idle = env.get("THT_SERVICE_IDLE_TIMEOUT", str(DEFAULT_IDLE_SECONDS))
        import subprocess

        log = open(os.path.join(folder, "service.log"), "ab")
        with log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tht.service", "--idle-timeout", idle, "--auto-started"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
                env={**env, "THT_HOME": home},
            )
        while time.monotonic() < deadline:
            probe = _connect(home, 5.0)
            if probe is not None:
                probe.close()
                return
            if process.poll() is not None:
                break
            time.sleep(0.02)
        log_path = os.path.join(folder, "service.log")
        tail = _log_tail(log_path)
        raise ServiceUnavailable(
            "the service did not start" + (f": {tail}" if tail else ""),
            details={"log": log_path, "exit": process.poll()},
        )


def _log_tail(log: str) -> str:
    try:
        with open(log, errors="replace") as handle:
            lines = handle.read().strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def connect_or_start(
    home: str, *, auto: bool, env: Mapping[str, str], timeout: float
) -> socket.socket | None:
    """A connection to the installation's service, starting one when ``auto``; None
    when none runs and none may be started (the command then runs here)."""
    sock = _connect(home, timeout)
    if sock is None and auto:
        start_service(home, env)
        sock = _connect(home, timeout)
        if sock is None:
            raise ServiceUnavailable("the service started but does not accept connections")
    return sock


def run_on_socket(
    home: str,
    sock: socket.socket,
    request: dict[str, Any],
    *,
    auto: bool,
    env: Mapping[str, str],
    timeout: float,
    write: Write,
) -> tuple[int, str]:
    """Run the request on the service's socket: stdout streams to ``write``; returns
    the exit code and the rest of stdout (an error document when it was refused). The
    descriptors the request passes are closed at the end."""
    try:
        code, stdout = _exchange(sock, request, write)
        mismatch = _mismatch(stdout) if code == ServiceVersionMismatch.exit_code else None
        if mismatch is not None and auto and mismatch.get("auto_started"):
            # An idle service of an earlier build: replace it, once.
            stop_service(home, request.get("token"))
            start_service(home, env)
            restarted = _connect(home, timeout)
            if restarted is None:
                raise ServiceUnavailable("the service restarted but does not accept connections")
            code, stdout = _exchange(restarted, request, write)
        return code, stdout
    finally:
        close_passed(request)


def _mismatch(stdout: str) -> dict[str, Any] | None:
    try:
        error = json.loads(stdout)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return error.get("details") or {} if error.get("code") == ServiceVersionMismatch.code else None


# --- talking to a service over HTTP ------------------------------------------------------


def run_over_http(
    url: str, request: dict[str, Any], timeout: float, write: Write
) -> tuple[int, str]:
    """Run the request in the service at ``url``: stdout streams to ``write``; returns
    the exit code and the rest of stdout."""
    global _handed_over
    import http.client
    from urllib.parse import urlsplit

    if not request.get("token"):
        raise InvalidInput(
            "THT_SERVICE_URL needs a token: set THT_TOKEN, THT_TOKEN_FILE or --token-file"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"THT_SERVICE_URL must be an http(s) URL, not '{url}'")
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    body = json.dumps({k: v for k, v in request.items() if k != "token"}).encode()
    if len(body) > MAX_HTTP_BODY_BYTES:
        sizes = {
            name: len(sent.get("data", "")) * 3 // 4 for name, sent in request["files"].items()
        }
        raise InvalidInput(
            f"the command's files ({', '.join(sizes)}) do not fit in a request over HTTP"
            f" (THT_SERVICE_URL): its body may carry {MAX_HTTP_BODY_BYTES >> 20} MiB, about"
            f" {MAX_HTTP_BODY_BYTES * 3 // 4 >> 10} KiB of files once base64-encoded. Run it on the"
            " service's machine, where the Unix socket (THT_SERVICE_URL unset) passes an"
            " import's file of any size, or split the file",
            details={"limit": MAX_HTTP_BODY_BYTES, "body": len(body), "files": sizes},
        )
    connection = connection_class(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request(
            "POST",
            parts.path.rstrip("/") + "/api/cli",
            body=body,
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {request['token']}",
            },
        )
        _handed_over = True
        response = connection.getresponse()
        if response.status != 200:
            text = response.read().decode("utf-8", "replace")
            try:
                json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                raise ServiceUnavailable(
                    f"the service at {url} answered HTTP {response.status}"
                ) from None
            return _HTTP_EXIT.get(response.status, ServiceUnavailable.exit_code), text.strip()
        while True:
            line = response.readline()
            if not line:
                raise ServiceLost(f"the service at {url} closed the connection before answering")
            answer = _event(line, write)
            if answer is not None:
                return answer
    except TimeoutError as exc:
        raise ServiceTimeout(f"the service at {url} did not answer in time") from exc
    except (ConnectionError, http.client.HTTPException, OSError) as exc:
        if isinstance(exc, ThothError):
            raise
        raise ServiceUnavailable(f"cannot reach the service at {url}: {exc}") from exc
    finally:
        connection.close()


# --- where a command runs ---------------------------------------------------------------


Here = Callable[[], tuple[int, str]]


def send(
    name: str,
    args: dict[str, Any],
    token: str | None,
    *,
    env: Mapping[str, str],
    write: Write,
    here: Here,
    stdin: bytes | None = None,
) -> tuple[int, str]:
    """Run command ``name`` where it runs (see the module's docstring): its stdout goes
    to ``write`` as it arrives; returns the exit code and the rest of its stdout. ``here``
    runs it in this process, when it runs here."""
    found = table.command(name)
    if env.get("THT_SERVICE", "auto").lower() == "off" or found is None or not found.remote:
        return here()
    timeout = float(env.get("THT_SERVICE_TIMEOUT") or DEFAULT_TIMEOUT_SECONDS)
    if env.get("THT_SERVICE_URL"):
        return run_over_http(
            env["THT_SERVICE_URL"], build_request(name, args, token, stdin=stdin), timeout, write
        )
    mode = env.get("THT_SERVICE", "").lower()
    auto = mode == "auto" or (mode == "" and not _external_engines(env))
    home = paths.default_home(env)
    sock = connect_or_start(home, auto=auto, env=env, timeout=timeout)
    if sock is None:  # before reading anything: standard input stays the command's
        return here()
    return run_on_socket(
        home,
        sock,
        build_request(name, args, token, stdin=stdin, pass_files=True),
        auto=auto,
        env=env,
        timeout=timeout,
        write=write,
    )
