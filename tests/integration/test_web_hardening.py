"""The web server under hostile clients, against uvicorn configured as `tht serve`
configures it and the real PostgreSQL: oversized and slow bodies, half-sent requests,
connection floods."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.integration.web_support import build_world, serving
from tht.memory.model import MAX_DOCUMENT_BYTES
from tht.web.app import WebSettings, create_app
from tht.web.limits import ServerLimits

MIB = 1 << 20


@pytest.fixture
def world(database, tmp_path):
    world = build_world(database, tmp_path)
    yield world
    world.client.close()
    world.services.close()


class RawClient:
    """One HTTP/1.1 connection written by hand; a thread reads whatever comes back
    until the server closes it."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.received = bytearray()
        self.closed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while data := self.sock.recv(65536):
                self.received.extend(data)
        except OSError:
            pass  # reset: the server closed with our unread bytes in its buffer
        self.closed.set()

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def status(self) -> int | None:
        line = bytes(self.received).split(b"\r\n", 1)[0].split()
        return int(line[1]) if len(line) > 1 else None

    def close(self) -> None:
        self.sock.close()


def head(method: str, path: str, host: str, port: int, *extra: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("path, authorized", [("/api/session", False), ("/api/workspaces/ws-a/memory", True),
                                              ("/no/such/page", False)])
def test_chunked_body_is_refused_at_the_limit_not_after_the_last_chunk(world, path, authorized):
    extra = [f"Authorization: Bearer {world.tokens['admin_a']}"] if authorized else []
    chunk = f"{MIB:x}\r\n".encode() + b" " * MIB + b"\r\n"
    with serving(world.client.app, ServerLimits()) as (host, port):
        client = RawClient(host, port)
        client.send(head("POST", path, host, port, "Content-Type: application/json",
                         "Transfer-Encoding: chunked", *extra))
        sent = 0
        while sent < 300 and client.send(chunk):
            sent += 1
        assert client.closed.wait(timeout=30), "the server kept the connection open"
        client.close()
    assert client.status() == 413, bytes(client.received[:300])
    # The server stopped reading at the limit: the socket buffers hold a few MiB at most.
    assert sent < 30, sent


def test_declared_length_beyond_the_limit_is_refused_before_the_body(world):
    with serving(world.client.app, ServerLimits()) as (host, port):
        client = RawClient(host, port)
        client.send(head("POST", "/api/session", host, port, "Content-Type: application/json",
                         f"Content-Length: {300 * MIB}"))
        assert client.closed.wait(timeout=30)
        client.close()
    assert client.status() == 413


def test_body_at_the_limit_is_still_accepted(world):
    body = b'{"name": "admin_a", "password": "' + b"x" * (MAX_DOCUMENT_BYTES - 100) + b'"}'
    response = world.client.post("/api/session", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422  # read whole and judged by the route (password too long), not by size


# --- slow and half-open requests ----------------------------------------------------

SHORT = ServerLimits(header_timeout=1.0, body_timeout=1.0, keep_alive=1, max_connections=4)
GRACE = 5.0  # seconds beyond the timeout the test allows for scheduling on a busy machine


def short_app(world):
    return create_app(world.services, WebSettings(body_timeout=SHORT.body_timeout))


def test_half_sent_request_head_is_closed_within_the_header_timeout(world):
    with serving(short_app(world), SHORT) as (host, port):
        half = RawClient(host, port)
        half.send(f"POST /api/session HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: appl".encode())
        silent = RawClient(host, port)  # connected, never says anything
        assert half.closed.wait(timeout=SHORT.header_timeout + GRACE), "half-sent head still open"
        assert silent.closed.wait(timeout=SHORT.header_timeout + GRACE), "silent connection still open"
        half.close()
        silent.close()


def test_slow_request_head_is_closed_even_while_bytes_trickle_in(world):
    with serving(short_app(world), SHORT) as (host, port):
        slow = RawClient(host, port)
        slow.send(f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
        for _ in range(int((SHORT.header_timeout + GRACE) / 0.2)):  # a header line every 0.2 s (slowloris)
            if slow.closed.wait(timeout=0.2) or not slow.send(b"X-Slow: 1\r\n"):
                break
        assert slow.closed.wait(timeout=1), "a trickling head kept the connection open"
        slow.close()
    assert slow.status() is None


def test_half_sent_body_gets_408_within_the_body_timeout(world):
    with serving(short_app(world), SHORT) as (host, port):
        client = RawClient(host, port)
        client.send(head("POST", "/api/session", host, port, "Content-Type: application/json",
                         "Content-Length: 100") + b'{"name": ')
        assert client.closed.wait(timeout=SHORT.body_timeout + GRACE), "half-sent body still open"
        client.close()
    assert client.status() == 408


def test_keep_alive_connection_is_answered_then_reused_then_closed_when_idle(world):
    with serving(short_app(world), SHORT) as (host, port):
        client = RawClient(host, port)
        for _ in range(2):  # the deadline rearms after each response: a second request still works
            client.send(head("GET", "/healthz", host, port))
        assert client.closed.wait(timeout=SHORT.keep_alive + GRACE)
        client.close()
    assert bytes(client.received).count(b"HTTP/1.1 200 OK") == 2


def test_connections_beyond_the_cap_get_503(world):
    with serving(short_app(world), SHORT) as (host, port):
        idle = [RawClient(host, port) for _ in range(SHORT.max_connections)]
        for client in idle:
            client.send(b"GET /healthz HTTP/1.1\r\n")
        extra = RawClient(host, port)
        extra.send(head("GET", "/healthz", host, port, "Connection: close"))
        assert extra.closed.wait(timeout=10)
        for client in [*idle, extra]:
            client.close()
    assert extra.status() == 503


def test_request_head_growing_past_the_limit_is_refused(world):
    with serving(short_app(world), SHORT) as (host, port):
        client = RawClient(host, port)
        # h11 judges the size of an incomplete head: one that keeps growing without its end
        client.send(f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n".encode() + b"X-Padding: x\r\n" * 2000)
        assert client.closed.wait(timeout=10)
        client.close()
    assert client.status() == 400
