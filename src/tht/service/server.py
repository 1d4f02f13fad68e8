"""The service: one process per installation that owns the engines and runs commands.

It keeps the archive's connection pool, the index adapters (the only opener of the
embedded Qdrant Edge index) and the embedders warm, and serves:

- the installation's Unix socket (``$THT_HOME/run/service.sock``, in a 0700 directory):
  one JSON request a line (a command's name and its arguments, ``tht.commands.table``;
  with the descriptors of the files it passes, SCM_RIGHTS),
  answered by JSON events (``{"stderr": ...}`` progress, ``{"alive": true}``
  heartbeats, ``{"stdout": ...}`` pieces of the command's output as it writes them,
  then ``{"exit": N, "stdout": ...}`` with the rest). A piece is sent when it reaches
  ``CHUNK_CHARS``, and the command waits while the client has not read it: the
  service holds at most a piece and the socket's buffers of any command's output;
- with ``tht serve``, also the pages and the HTTP API (``POST /api/cli`` runs a
  command for a token over HTTP).

Who may do what: a socket peer that is the installation's own user (or root) and sends
no token is the operator, exactly as if it ran the command itself with THT_HOME; with a
token, the token's principal and its capabilities (``tht.commands.table``). A peer of
another user must send a token.
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import json
import logging
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tht import __version__, collector
from tht.commands import table
from tht.errors import (
    Conflict,
    InvalidInput,
    PayloadTooLarge,
    RequestTimeout,
    ServiceBusy,
    ServiceUnavailable,
    ServiceVersionMismatch,
    ThothError,
    Unauthenticated,
)
from tht.faults import pause_point
from tht.service import paths
from tht.service.client import MAX_PASSED_FILES

if TYPE_CHECKING:  # imported when the service starts: the client's path stays light
    from tht.bootstrap import Engines, Services
    from tht.db.embedded import EmbeddedPostgres
    from tht.installation import Installation
    from tht.service.health import Dependency, HealthCheck
    from tht.service.recovery import PendingRetrier

log = logging.getLogger("tht.service")

MAX_REQUEST_BYTES = 64 * 1024 * 1024  # a command's small files travel base64-encoded inside
# A peer of another user sends no more before its token is checked: what HTTP admits
# (tht.memory.model.MAX_DOCUMENT_BYTES, said here so the client's path stays light).
MAX_PEER_REQUEST_BYTES = 1_048_576
PEER_REQUEST_SECONDS = 30.0  # a peer of another user sends its whole request within this
MAX_CONNECTIONS = 128  # connections at once; beyond: service_busy at once, nothing read
MAX_PEER_CONNECTIONS = 64  # of which peers of other users: the operator keeps room
CHUNK_CHARS = 64 * 1024  # stdout is sent in pieces of this size (the last one shorter)
HEARTBEAT_SECONDS = 5.0
YOUNG_OBJECTS = 10_000  # the cyclic collector's youngest generation in a service (settle_heap)
POOL_CONNECTIONS = 16  # concurrent commands that reach PostgreSQL at once
DRAIN_SECONDS = paths.DRAIN_SECONDS  # how long a stopping service lets running work finish
BUILD_CHECK_SECONDS = 2.0  # how often the service looks at the installed code's stamp
DATABASE_CHECK_SECONDS = 2.0  # how often it looks whether its embedded PostgreSQL runs

Send = Callable[[dict[str, Any]], None]


class ServiceRunning(Conflict):
    code = "service_running"
    default_message = "a service already runs for this THT_HOME"


class Service:
    """The engines and the socket of one installation (``home``)."""

    def __init__(
        self,
        home: Path,
        *,
        idle_timeout: float = 0,
        auto_started: bool = False,
        web: bool = False,
        installation: Installation | None = None,
        max_connections: int = MAX_CONNECTIONS,
        max_peer_connections: int = MAX_PEER_CONNECTIONS,
        peer_request_seconds: float = PEER_REQUEST_SECONDS,
    ) -> None:
        self.home = home
        self.max_connections = max_connections
        self.max_peer_connections = max_peer_connections
        self.peer_request_seconds = peer_request_seconds
        self.run_dir = Path(paths.run_dir(home))
        self.idle_timeout = idle_timeout  # 0: never exit when idle
        self.auto_started = auto_started
        self.web = web
        # the installation's configuration (`tht serve -c`, else $THT_CONFIG or
        # $THT_HOME/config.yaml): read when the service starts, never from a request
        self.installation = installation
        self.url: str | None = None  # the pages' address, when it serves them
        self.build = paths.build_stamp()
        self.build_changed = False
        self.engines: Engines | None = None
        self.on_stop: Callable[[], None] | None = None  # how a stop request ends the process
        self._lock_file: IO[str] | None = None
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._active = 0
        # the open connections (by id): whether each one's peer is the operator
        self._connections: dict[int, bool] = {}
        self._connections_lock = threading.Lock()
        self._last_activity = time.monotonic()
        self._state = threading.Condition()
        # the embedded PostgreSQL, when the archive is the embedded one
        self._embedded: EmbeddedPostgres | None = None
        self.retrier: PendingRetrier | None = None  # retries pending index work
        self._health_check: HealthCheck | None = None
        self.stopped = threading.Event()

    # --- life --------------------------------------------------------------------------

    def acquire(self) -> None:
        """Become the installation's service, or raise ``ServiceRunning``."""
        folder = Path(paths.make_run_dir(self.home))
        reason = paths.untrusted_reason(str(folder), directory=True)
        if reason:
            raise InvalidInput(f"cannot run the service: {reason}")
        handle = open(folder / "service.lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ServiceRunning(details=self.describe_running()) from None
        self._lock_file = handle

    def describe_running(self) -> dict[str, Any] | None:
        try:
            running = json.loads((self.run_dir / "service.json").read_text())
        except (OSError, ValueError):
            return None
        return running if isinstance(running, dict) else None  # written by `start`: a dict

    def open(self) -> None:
        """Start the embedded PostgreSQL and open the archive's pool: what another
        service of the installation may hold too, so this runs before one is asked to
        stop (``take_over``), and a start that cannot reach its archive stops nothing.
        The index and the embedders open on first use."""
        from tht.bootstrap import Engines, embedded_database

        if self.engines is None:
            self._embedded = embedded_database()
            self.engines = Engines(
                installation=self.installation, max_connections=POOL_CONNECTIONS, holder="service"
            )
            self.engines.check_schemas()  # a database another version migrated: refused here

    def start(self) -> None:
        """Open the engines (``open``, unless done), then listen (a stale socket of a
        killed service is replaced: holding the lock proves nobody else serves it)."""
        from tht.service.recovery import PendingRetrier

        self.open()
        engines = self.open_engines()
        path = Path(paths.socket_path(self.home))
        path.unlink(missing_ok=True)
        service = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                service.handle_connection(self.request)

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True
            request_queue_size = 128

            def process_request(self, request: Any, client_address: Any) -> None:
                # on the accepting thread: a refused connection costs no thread
                if not service.admit(request):
                    self.shutdown_request(request)
                    return
                try:
                    super().process_request(request, client_address)
                except BaseException:
                    service.release(request)
                    raise

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    service.release(request)

        old_umask = os.umask(0o177)  # the socket is born 0600
        try:
            self._server = Server(str(path), Handler)
        finally:
            os.umask(old_umask)
        status = self.status()
        tmp = self.run_dir / "service.json.partial"
        tmp.write_text(json.dumps(status))
        os.replace(tmp, self.run_dir / "service.json")
        threading.Thread(target=self._server.serve_forever, name="tht-socket", daemon=True).start()
        threading.Thread(target=self._watch_build, name="tht-build", daemon=True).start()
        if self._embedded is not None:
            threading.Thread(target=self._watch_database, name="tht-database", daemon=True).start()
        self.retrier = PendingRetrier(
            engines.archive,
            lambda: engines.in_use()[2],
            lambda workspace: engines.projection(engines.profile_of(workspace))[0],
            period=engines.installation.pending_work.retry_seconds,
        )
        self.retrier.start()
        if self.idle_timeout > 0:
            threading.Thread(target=self._watch_idle, name="tht-idle", daemon=True).start()
        log.info("service %s listening on %s", os.getpid(), path)

    def open_engines(self) -> Engines:
        """The engines ``start`` opened."""
        if self.engines is None:
            raise ServiceUnavailable("the service has not started: its engines are not open")
        return self.engines

    @property
    def health_check(self) -> HealthCheck:
        """``/healthz`` and ``tht health``: the archive (its embedded server started again
        first, if it stopped: on the probe's thread), each index and embedder in use;
        the detailed report adds the pending work being retried."""
        if self._health_check is None:
            from tht.service.health import HealthCheck

            self._health_check = HealthCheck(self._dependencies, extra=self._retries)
        return self._health_check

    def health(self, *, detailed: bool = True) -> tuple[int, dict[str, Any]]:
        report = self.health_check.report()
        return report.http_status, report.document(detailed=detailed)

    def _dependencies(self) -> list[Dependency]:
        from tht.service.health import dependencies_of

        engines = self.open_engines()
        indexes, embedders, _ = engines.in_use()
        return dependencies_of(
            engines.archive, indexes, embedders, before_archive=self._ensure_database
        )

    def _retries(self) -> dict[str, Any]:
        return {"pending_retries": self.retrier.state()} if self.retrier is not None else {}

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "protocol": paths.PROTOCOL,
            "build": self.build,
            "web": self.web,
            **({"url": self.url} if self.url else {}),
            "auto_started": self.auto_started,
            "idle_timeout": self.idle_timeout,
            "socket": paths.socket_path(self.home),
            "active": self._active,
            # settle_heap's
            "collector": {
                "frozen_objects": gc.get_freeze_count(),
                "thresholds": gc.get_threshold(),
            },
        }

    def request_stop(self) -> None:
        if self.on_stop is not None:
            self.on_stop()
        else:
            self.stopped.set()

    def close(self) -> None:
        """Stop listening, let running commands and the retrier finish (one bounded
        drain), close the engines. A stage that keeps the stop waiting is logged."""
        self.stopped.set()  # ends the watchers
        deadline = time.monotonic() + DRAIN_SECONDS
        retrier, self.retrier = self.retrier, None
        if retrier is not None:
            retrier.request_stop()  # it finishes its batch while the commands finish
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._state:
            if not self._state.wait_for(
                lambda: self._active == 0, timeout=max(0.0, deadline - time.monotonic())
            ):
                log.warning("stopping with %d command(s) still running", self._active)
        if retrier is not None and not retrier.wait(max(0.0, deadline - time.monotonic())):
            log.warning("stopping while the pending-work retrier still runs")
        if self._lock_file is not None:  # ours to remove: another service may hold them
            Path(paths.socket_path(self.home)).unlink(missing_ok=True)
            (self.run_dir / "service.json").unlink(missing_ok=True)
        started = time.monotonic()
        try:
            if self.engines is not None:
                self.engines.close()
        finally:
            if time.monotonic() - started > 5.0:
                log.warning("closing the engines took %.1f s", time.monotonic() - started)
            if self._lock_file is not None:
                self._lock_file.close()  # releases the lock
                self._lock_file = None

    def _watch_idle(self) -> None:
        pause = min(5.0, max(0.05, self.idle_timeout / 4))
        while not self.stopped.wait(pause):
            with self._state:
                idle = (
                    self._active == 0
                    and time.monotonic() - self._last_activity >= self.idle_timeout
                )
            if idle:
                log.info("idle for %s s: stopping", self.idle_timeout)
                self.request_stop()
                return

    @contextmanager
    def _activity(self) -> Iterator[None]:
        with self._state:
            self._active += 1
        try:
            yield
        finally:
            with self._state:
                self._active -= 1
                self._last_activity = time.monotonic()
                self._state.notify_all()

    # --- requests ------------------------------------------------------------------------

    def admit(self, connection: socket.socket) -> bool:
        """Count ``connection`` in, or answer it ``service_busy`` at once (nothing read):
        beyond ``max_connections``, or for a peer of another user beyond
        ``max_peer_connections``, so that such peers never fill the operator's room."""
        operator = _peer_is_operator(connection)
        with self._connections_lock:
            total = len(self._connections)
            peers = sum(1 for is_operator in self._connections.values() if not is_operator)
            if total < self.max_connections and (operator or peers < self.max_peer_connections):
                self._connections[id(connection)] = operator
                return True
        limit = self.max_connections if operator else self.max_peer_connections
        busy = ServiceBusy(
            f"the service holds {limit} connections{'' if operator else ' of other users'},"
            " its limit: retry later",
            details={"limit": limit},
        )
        try:
            connection.settimeout(1.0)  # an empty buffer takes one line at once
            connection.sendall(
                _event_line({"exit": busy.exit_code, "stdout": json.dumps(busy.to_dict())})
            )
        except OSError:
            pass
        return False

    def release(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.pop(id(connection), None)

    def handle_connection(self, connection: socket.socket) -> None:
        write_lock = threading.Lock()

        def send(event: dict[str, Any]) -> None:
            data = _event_line(event)
            with write_lock:
                try:
                    connection.sendall(data)
                except OSError:
                    pass  # the client went away (Ctrl-C): the command goes on, detached

        fds: list[int] = []
        try:
            self._answer(connection, send, fds)
        finally:
            for fd in fds:  # the client's files: closed whether the command used them or not
                os.close(fd)

    def _answer(self, connection: socket.socket, send: Send, fds: list[int]) -> None:
        # A peer of another user must send a token: until it is checked, it may send no
        # more than an HTTP client, nor take longer. The operator's own commands are not
        # timed: the client reads the files it sends (standard input too) once connected.
        operator = _peer_is_operator(connection)
        try:
            line = _receive_request(
                connection,
                fds,
                max_bytes=MAX_REQUEST_BYTES if operator else MAX_PEER_REQUEST_BYTES,
                seconds=None if operator else self.peer_request_seconds,
            )
            if not line:
                return
            request = json.loads(line)
            if not isinstance(request, dict):
                raise InvalidInput("the request must be a JSON object")
        except (ValueError, ThothError) as exc:
            error = exc if isinstance(exc, ThothError) else InvalidInput("the request is not JSON")
            send({"exit": error.exit_code, "stdout": json.dumps(error.to_dict())})
            return
        except OSError:
            return  # the client went away while sending
        op = request.get("op", "run")
        if op == "status":
            send({"status": self.status()})
        elif op == "health":  # what /healthz answers, for a service without the web face
            http_status, document = self.health(detailed=operator)
            send({"health": document, "http_status": http_status})
        elif op == "shutdown":
            if operator and not request.get("token"):
                send({"stopping": True})
                self.request_stop()
            else:
                send(Unauthenticated("only the installation's user may stop the service").to_dict())
        else:
            self.run_command(request, send, operator=operator, fds=fds)

    def run_command(
        self,
        request: dict[str, Any],
        send: Send,
        *,
        operator: bool,
        token: str | None = None,
        fds: list[int] | None = None,
    ) -> None:
        """Run one ``tht`` command for a client; ``token`` (HTTP) or the request's token
        names the principal; without one, only the operator may run it. ``fds``: the
        descriptors the request passed on the socket (None over HTTP: no file may be
        passed so). Its stdout goes to ``send`` in pieces as it is written; ``send``
        may block (a slow reader): the command then waits."""
        output = _Chunks(send)
        with self._activity():
            code, refusal = self._run(
                request,
                send,
                output,
                operator=operator,
                token=token or request.get("token"),
                fds=fds,
            )
        send({"exit": code, "stdout": refusal or output.rest()})

    def _run(
        self,
        request: dict[str, Any],
        send: Send,
        output: _Chunks,
        *,
        operator: bool,
        token: str | None,
        fds: list[int] | None,
    ) -> tuple[int, str]:
        """The command's exit code, and its error document when it was refused before
        it ran (its output otherwise went to ``output``)."""
        from tht.commands.context import CommandContext
        from tht.commands.dispatch import run

        mismatch = self._mismatch(request)
        if mismatch is not None:
            return _refusal(
                ServiceVersionMismatch(
                    f"{mismatch}: stop the service (pid {os.getpid()}: `tht service stop`); an"
                    " auto-started one is replaced by the next command",
                    details={
                        "service": __version__,
                        "client": request.get("version"),
                        "pid": os.getpid(),
                        "auto_started": self.auto_started,
                    },
                )
            )
        name = request.get("command")
        command = table.command(name)
        if command is None:
            return _refusal(
                InvalidInput(f"unknown command {json.dumps(name)}", details={"command": name})
            )
        if not command.remote:
            return _refusal(
                InvalidInput(
                    f"`tht {' '.join(command.words)}` manages a process, the embedded server"
                    " or the schema: it runs in its own process, never in the service",
                    details={"command": name},
                )
            )
        if not operator and not token:
            return _refusal(
                Unauthenticated("a token is required (THT_TOKEN, THT_TOKEN_FILE or --token-file)")
            )
        try:
            files = _passed_files(request.get("files"), fds)
        except InvalidInput as exc:
            return _refusal(exc)
        self._ensure_database()
        context = CommandContext(
            token=token or None,
            cwd=str(request.get("cwd") or "/"),
            files=files,
            stdout=output.write,
            stderr=lambda text: send({"stderr": text}),
            engines=self._services,
        )
        done = threading.Event()
        threading.Thread(target=self._heartbeat, args=(send, done), daemon=True).start()
        try:
            code = run(command.name, request.get("args"), context)
        finally:
            done.set()
        return code, ""

    def _ensure_database(self) -> None:
        """Start the embedded PostgreSQL again when it was stopped (`tht db stop`): a
        command would otherwise answer archive_unavailable until the service restarts.
        Its pid file is the cheap sign."""
        if self._embedded is None or self._embedded.running:
            return
        log.warning("the embedded PostgreSQL is not running: starting it")
        try:
            self._embedded.ensure_running()
        except ThothError as exc:  # the command then reports the archive as unavailable
            log.error("cannot start the embedded PostgreSQL: %s", exc.message)

    def _watch_database(self) -> None:
        """The web pages and the API reach the archive without a command: the embedded
        PostgreSQL is started again here, off any request, when it stopped."""
        while not self.stopped.wait(DATABASE_CHECK_SECONDS):
            self._ensure_database()

    def _mismatch(self, request: dict[str, Any]) -> str | None:
        if request.get("protocol") != paths.PROTOCOL or request.get("version") != __version__:
            return (
                f"the running service is thoth-memory {__version__} (protocol {paths.PROTOCOL}), this command"
                f" {request.get('version')} (protocol {request.get('protocol')})"
            )
        if self.build_changed:
            return "the installed code changed since the running service started"
        return None

    def _watch_build(self) -> None:
        """Notice when the installed code changes under the running service (an upgrade
        or a new checkout in place), off the requests' path: walking the package takes
        1-12 ms."""
        while not self.stopped.wait(BUILD_CHECK_SECONDS):
            if paths.build_stamp() != self.build:
                self.build_changed = True
                return

    @staticmethod
    def _heartbeat(send: Send, done: threading.Event) -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            send({"alive": True})

    @contextmanager
    def _services(self) -> Iterator[Services]:
        yield self.open_engines().services()


class _Chunks:
    """A command's stdout, sent in pieces of ``CHUNK_CHARS`` as it is written (a large
    write, such as an export's batch, is cut: each piece waits for the reader)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._pending = ""
        self._lock = threading.Lock()  # one writer at a time: the pieces keep their order

    def write(self, text: str) -> None:
        with self._lock:
            if len(self._pending) + len(text) < CHUNK_CHARS:
                self._pending += text
                return
            text, start = self._pending + text, 0
            while len(text) - start >= CHUNK_CHARS:
                self._send({"stdout": text[start : start + CHUNK_CHARS]})  # waits for the reader
                pause_point("service.sent_stdout")  # a test looks while the command holds
                start += CHUNK_CHARS
            self._pending = text[start:]

    def rest(self) -> str:
        with self._lock:
            rest, self._pending = self._pending, ""
            return rest


def _receive_request(
    connection: socket.socket,
    fds: list[int],
    *,
    max_bytes: int = MAX_REQUEST_BYTES,
    seconds: float | None = None,
) -> bytes:
    """The request's line, and (into ``fds``) the descriptors passed with it; at most
    ``max_bytes``, received whole within ``seconds`` (None: no limit)."""
    received = bytearray()
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while True:
            if deadline is not None:
                connection.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                data, passed, flags, _ = socket.recv_fds(
                    connection, min(1 << 16, max_bytes + 1), MAX_PASSED_FILES
                )
            except TimeoutError:
                raise RequestTimeout(
                    f"the request did not arrive whole within {seconds:g} s",
                    details={"seconds": seconds, "received_bytes": len(received)},
                ) from None
            fds.extend(passed)
            if flags & socket.MSG_CTRUNC:
                raise InvalidInput(f"a request passes at most {MAX_PASSED_FILES} files")
            if not data:
                return bytes(received)
            end = data.find(b"\n")
            received += data if end < 0 else data[: end + 1]
            if len(received) > max_bytes:
                raise PayloadTooLarge(
                    f"the request is larger than {max_bytes} bytes",
                    details={"limit": max_bytes},
                )
            if end >= 0:
                return bytes(received)
    finally:
        if deadline is not None:
            connection.settimeout(None)  # the answer may wait for a slow reader


def _event_line(event: dict[str, Any]) -> bytes:
    return json.dumps(event, ensure_ascii=False).encode() + b"\n"


def _passed_files(sent: Any, fds: list[int] | None) -> dict[str, dict[str, Any]]:
    """The request's files, a passed one naming the service's copy of its descriptor.
    Over HTTP (``fds`` None) a file cannot be passed: a number there would name one of
    the service's own descriptors."""
    files: dict[str, dict[str, Any]] = {}
    for name, entry in (sent or {}).items():
        if not isinstance(entry, dict):
            raise InvalidInput(f"the request's file {name} is not an object")
        if "fd" in entry:
            index = entry["fd"]
            if fds is None:
                raise InvalidInput("files are passed as descriptors only on the Unix socket")
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(fds):
                raise InvalidInput(f"the request's file {name} names no passed descriptor")
            entry = {"fd": fds[index]}
        files[str(name)] = entry
    return files


def _refusal(error: ThothError) -> tuple[int, str]:
    """A command refused before it runs: its exit code and the error as its stdout."""
    return error.exit_code, json.dumps(error.to_dict())


def _peer_is_operator(connection: socket.socket) -> bool:
    """The peer runs as this process's user or as root (Linux: SO_PEERCRED). Elsewhere
    the socket's 0700 directory already admits only this user."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    try:
        _, uid, _ = struct.unpack(
            "3i", connection.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
        )
    except OSError:
        return False
    return uid in (os.geteuid(), 0)


TAKE_OVER_TRIES = 3  # an auto-started service a racing command starts meanwhile is stopped too


def take_over(
    home: Path, service: Service, *, wait: float = paths.STOP_SECONDS
) -> dict[str, Any] | None:
    """Become the service, first asking an auto-started (headless, idle-exiting) one to
    stop; a service someone runs on purpose (``tht serve``) is left alone. Returns what
    the stopped service's ``service.json`` said (None: none was running), so that a
    start that fails afterwards can leave one running again (``restore``).

    Call it once everything that can fail without the installation's exclusive
    resources has been checked (the port bound, the archive reached: ``Service.open``):
    the lock, the socket and the embedded index are all it then waits for."""
    from tht.service.client import stop_service

    replaced: dict[str, Any] | None = None
    for _ in range(TAKE_OVER_TRIES):
        try:
            service.acquire()
            return replaced
        except ServiceRunning as exc:
            running = exc.details or {}
            if not running.get("auto_started"):
                raise ServiceRunning(
                    f"a service already runs for {home} (pid {running.get('pid')}): stop it"
                    " first with `tht service stop`",
                    details=running,
                ) from None
        replaced = running
        stop_service(str(home), timeout=wait)
    service.acquire()  # a fourth racing start: ServiceRunning, nothing of ours was started
    return replaced


def restore(home: Path, replaced: dict[str, Any] | None) -> dict[str, Any] | None:
    """After a start that failed once it had stopped an auto-started service: start one
    again, as the next command would, so that a failed start leaves a service running.
    Returns the new one's ``service.json`` (None: nothing was replaced, or it did not
    start: the next command starts one)."""
    if replaced is None:
        return None
    from tht.service.client import start_service

    try:
        start_service(str(home), os.environ)
        document = json.loads((Path(paths.run_dir(home)) / "service.json").read_text())
    except (ThothError, OSError, ValueError) as exc:
        log.error("could not start the replaced auto-started service again: %s", exc)
        return None
    return document if isinstance(document, dict) else None


# --- `python -m tht.service`: the headless service ------------------------------------------


def settle_heap() -> None:
    """Move what the service built to start (modules, the app's routes and their
    validators, the engines) out of the cyclic garbage collector's reach. A service
    under load allocates steadily, so a full collection comes every second or two;
    under eight HTTP recall clients each one walked those 110 000-125 000 objects for
    45-100 ms while every request waited: the latency's tail. Frozen, they are never
    walked again (they live as long as the process anyway); what requests allocate
    is collected as before.

    And a young generation of ``YOUNG_OBJECTS``: each recall holds a thousand or so
    containers at once, so with Python's 700 the youngest generation was collected
    about once a request (under eight clients 1 300 times in 20 seconds, 0.26 ms each,
    and the next generation a tenth as often) for almost no garbage; at 10 000 a few
    times in 20 seconds."""
    gc.collect()  # before anything is frozen: frozen garbage is never collected
    # `tht serve` ran as a command: its start ends here (its held threshold restored
    # now, not by the first command the service runs)
    collector.started()
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, *gc.get_threshold()[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tht.service",
        description="The Thoth Memory service without pages (see `tht serve --no-web`).",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=0,
        help="exit after this many seconds without a command (0: never)",
    )
    parser.add_argument("--auto-started", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("THT_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return run_headless(
        Path(paths.default_home()), idle_timeout=args.idle_timeout, auto_started=args.auto_started
    )


def run_headless(
    home: Path,
    *,
    idle_timeout: float,
    auto_started: bool = False,
    announce: Callable[[dict[str, Any]], None] | None = None,
    installation: Installation | None = None,
) -> int:
    service = Service(
        home, idle_timeout=idle_timeout, auto_started=auto_started, installation=installation
    )
    replaced = None
    if not auto_started:
        service.open()  # before a running service is asked to stop
        try:
            replaced = take_over(home, service)
        except BaseException:
            service.close()
            raise
    else:
        try:
            service.acquire()
        except ServiceRunning:  # a racing starter won: its service serves this command too
            return 0
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: service.stopped.set())
    started = False
    try:
        service.start()
        started = True
        settle_heap()
        if announce is not None:
            announce(service.status())
        service.stopped.wait()
    finally:
        service.close()
        if not started:
            restore(home, replaced)
    return 0
