"""The web server under hostile clients, against uvicorn configured as `tht serve`
configures it and the real PostgreSQL: oversized and slow bodies, half-sent requests,
connection floods."""

from __future__ import annotations

import hashlib
import json
import selectors
import socket
import threading
import time

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.factories import card_document, installation_of
from tests.integration.service_support import wait_for
from tests.integration.web_support import ORIGIN, serving
from tht import accounts
from tht.bootstrap import build_services
from tht.cli.main import main
from tht.errors import PortInUse, TooManyRequests, Unauthenticated
from tht.memory.model import MAX_DOCUMENT_BYTES
from tht.web.app import WebSettings, create_app
from tht.web.guard import public_origins, served_origins
from tht.web.limits import ServerLimits, trusted_proxies
from tht.web.server import listen

MIB = 1 << 20


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


@pytest.mark.parametrize(
    "path, authorized",
    [("/api/session", False), ("/api/workspaces/ws-a/memory", True), ("/no/such/page", False)],
)
def test_chunked_body_is_refused_at_the_limit_not_after_the_last_chunk(world, path, authorized):
    extra = [f"Authorization: Bearer {world.tokens['admin_a']}"] if authorized else []
    chunk = f"{MIB:x}\r\n".encode() + b" " * MIB + b"\r\n"
    with serving(world.client.app, ServerLimits()) as (host, port):
        client = RawClient(host, port)
        client.send(
            head(
                "POST",
                path,
                host,
                port,
                "Content-Type: application/json",
                "Transfer-Encoding: chunked",
                *extra,
            )
        )
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
        client.send(
            head(
                "POST",
                "/api/session",
                host,
                port,
                "Content-Type: application/json",
                f"Content-Length: {300 * MIB}",
            )
        )
        assert client.closed.wait(timeout=30)
        client.close()
    assert client.status() == 413


def test_body_at_the_limit_is_still_accepted(world):
    body = b'{"name": "admin_a", "password": "' + b"x" * (MAX_DOCUMENT_BYTES - 100) + b'"}'
    response = world.client.post(
        "/api/session", content=body, headers={"Content-Type": "application/json"}
    )
    assert (
        response.status_code == 422
    )  # read whole and judged by the route (password too long), not by size


# --- slow and half-open requests ----------------------------------------------------

SHORT = ServerLimits(header_timeout=1.0, body_timeout=1.0, keep_alive=1, max_connections=4)
GRACE = 5.0  # seconds beyond the timeout the test allows for scheduling on a busy machine


def short_app(world):
    return create_app(world.services, WebSettings(body_timeout=SHORT.body_timeout))


def test_half_sent_request_head_is_closed_within_the_header_timeout(world):
    with serving(short_app(world), SHORT) as (host, port):
        half = RawClient(host, port)
        half.send(
            f"POST /api/session HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: appl".encode()
        )
        silent = RawClient(host, port)  # connected, never says anything
        assert half.closed.wait(timeout=SHORT.header_timeout + GRACE), "half-sent head still open"
        assert silent.closed.wait(timeout=SHORT.header_timeout + GRACE), (
            "silent connection still open"
        )
        half.close()
        silent.close()


def test_slow_request_head_is_closed_even_while_bytes_trickle_in(world):
    with serving(short_app(world), SHORT) as (host, port):
        slow = RawClient(host, port)
        slow.send(f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
        for _ in range(
            int((SHORT.header_timeout + GRACE) / 0.2)
        ):  # a header line every 0.2 s (slowloris)
            if slow.closed.wait(timeout=0.2) or not slow.send(b"X-Slow: 1\r\n"):
                break
        assert slow.closed.wait(timeout=1), "a trickling head kept the connection open"
        slow.close()
    assert slow.status() is None


def test_half_sent_body_gets_408_within_the_body_timeout(world):
    with serving(short_app(world), SHORT) as (host, port):
        client = RawClient(host, port)
        client.send(
            head(
                "POST",
                "/api/session",
                host,
                port,
                "Content-Type: application/json",
                "Content-Length: 100",
            )
            + b'{"name": '
        )
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


def connect_from(source: str, host: str, port: int) -> socket.socket:
    """A TCP connection from ``source`` (another loopback address: another client)."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(30)
    sock.connect((host, port))
    return sock


def answer_of(sock: socket.socket) -> bytes:
    """What the server sends until it closes (a reset ends it too)."""
    received = bytearray()
    try:
        while data := sock.recv(65536):
            received.extend(data)
    except OSError:
        pass
    return bytes(received)


def get_from(source: str, host: str, port: int, *extra: str) -> int | None:
    with connect_from(source, host, port) as sock:
        sock.sendall(head("GET", "/healthz", host, port, "Connection: close", *extra))
        line = answer_of(sock).split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 else None


def test_half_sent_heads_from_one_address_do_not_hold_the_server_for_the_others(world):
    """230 half-sent request heads from one address used to fill the 200 connections
    of the global cap: every other client got 503 until the head deadline."""
    limits = ServerLimits(header_timeout=60)  # the held ones stay held while the test looks
    share = limits.max_connections_per_client
    with serving(world.client.app, limits) as (host, port):
        flood = [connect_from("127.0.0.2", host, port) for _ in range(230)]
        for sock in flood:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            except OSError:
                pass  # refused and closed already
        closed: set[int] = set()
        selector = selectors.DefaultSelector()
        for i, sock in enumerate(flood):
            selector.register(sock, selectors.EVENT_READ, i)
        deadline = time.monotonic() + 30
        while len(closed) < 230 - share and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=1):
                answer_of(flood[key.data])  # the refused ones are answered and closed
                selector.unregister(key.fileobj)
                closed.add(key.data)
        assert len(closed) == 230 - share
        assert closed == set(range(share, 230))  # the first ones are held, the rest refused
        # another client is served; the flooding address is refused at once, answered 429
        assert get_from("127.0.0.1", host, port) == 200
        with connect_from("127.0.0.2", host, port) as refused:
            answer = answer_of(refused)
        assert answer.startswith(b"HTTP/1.1 429 ")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "too_many_requests"
        # a connection the address closes gives its slot back
        flood[0].close()
        assert wait_for(lambda: get_from("127.0.0.2", host, port) == 200, 30)
        for sock in flood:
            sock.close()


def test_a_trusted_proxy_is_not_one_client_each_client_it_forwards_is(world):
    """The proxy's connections are not counted against its address (it speaks for
    many clients); each forwarded request counts, while in progress, against the client
    its X-Forwarded-For names."""
    limits = ServerLimits(max_connections_per_client=2)
    with serving(world.client.app, limits, ("127.0.0.1",)) as (host, port):
        held = []
        for _ in range(2):  # two requests in progress for 203.0.113.9: half-sent bodies
            client = connect_from("127.0.0.1", host, port)
            client.sendall(
                head(
                    "POST",
                    "/api/session",
                    host,
                    port,
                    "Content-Type: application/json",
                    "Content-Length: 100",
                    "X-Forwarded-For: 203.0.113.9",
                )
                + b'{"name": '
            )
            held.append(client)
        forwarded = "X-Forwarded-For: 203.0.113.9"
        assert wait_for(lambda: get_from("127.0.0.1", host, port, forwarded) == 429, 30)
        # the proxy holds more than two connections; another client it forwards is served
        assert get_from("127.0.0.1", host, port, "X-Forwarded-For: 203.0.113.10") == 200
        # a client that is no proxy is counted by its connections, whatever it forwards
        direct = [connect_from("127.0.0.2", host, port) for _ in range(2)]
        assert get_from("127.0.0.2", host, port, "X-Forwarded-For: 203.0.113.11") == 429
        for client in held:
            client.close()
        assert wait_for(lambda: get_from("127.0.0.1", host, port, forwarded) == 200, 30)
        for sock in direct:
            sock.close()


def test_request_head_growing_past_the_limit_is_refused(world):
    with serving(short_app(world), SHORT) as (host, port):
        client = RawClient(host, port)
        # h11 judges the size of an incomplete head: one that keeps growing without its end
        client.send(
            f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
            + b"X-Padding: x\r\n" * 2000
        )
        assert client.closed.wait(timeout=10)
        client.close()
    assert client.status() == 400


# --- login flooding and timing --------------------------------------------------------

PASSWORD = "correct horse battery"


def log_in(client, name: str, password: str):
    return client.post(
        "/api/session", json={"name": name, "password": password}, headers={"Origin": ORIGIN}
    )


def failures_recorded(database, **where: str) -> int:
    ((column, value),) = where.items()
    with psycopg.connect(database.superuser) as conn:
        return conn.execute(
            f"SELECT count(*) FROM thoth_memory.login_attempts WHERE {column} = %s", (value,)
        ).fetchone()[0]


@pytest.fixture
def scrypt_calls(monkeypatch):
    calls = []
    real = hashlib.scrypt

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(accounts.hashlib, "scrypt", counting)
    return calls


def test_wrong_passwords_meet_a_backoff_shared_through_postgresql(
    world, database, tmp_path, scrypt_calls
):
    for _ in range(accounts.USER_FREE_FAILURES):
        assert log_in(world.client, "admin_a", "wrong password!!").status_code == 401
    assert failures_recorded(database, user_name="admin_a") == accounts.USER_FREE_FAILURES
    scrypt_calls.clear()
    refused = log_in(world.client, "admin_a", PASSWORD)  # even the right password waits
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "too_many_requests"
    assert int(refused.headers["Retry-After"]) >= 1
    assert scrypt_calls == []  # a refused attempt costs no hash
    # another instance of the service on the same database counts the same failures
    other = build_services(
        env=database.env(),
        installation=installation_of(index=str(tmp_path / "other-index")),
    )
    try:
        with pytest.raises(TooManyRequests):
            other.accounts.sessions.by_password("admin_a", PASSWORD, "another-instance-client")
    finally:
        other.close()
    with psycopg.connect(database.superuser) as conn:  # the backoff's time passes
        conn.execute(
            "UPDATE thoth_memory.login_attempts SET failed_at = failed_at - interval '5 minutes'"
        )
    assert log_in(world.client, "admin_a", PASSWORD).status_code == 200
    assert failures_recorded(database, user_name="admin_a") == 0  # forgiven by the successful login


def test_one_client_trying_many_names_meets_the_backoff(world):
    for i in range(accounts.CLIENT_FREE_FAILURES):
        assert log_in(world.client, f"nobody{i}", "wrong password!!").status_code == 401
    assert log_in(world.client, "nobody-new", "wrong password!!").status_code == 429
    with TestClient(world.client.app, base_url=ORIGIN, client=("192.0.2.7", 40000)) as elsewhere:
        assert log_in(elsewhere, "nobody-new", "wrong password!!").status_code == 401


@pytest.mark.parametrize(
    "proxies, recorded",
    [((), "127.0.0.1"), (("127.0.0.1",), "203.0.113.9"), (("10.0.0.0/8",), "127.0.0.1")],
)
def test_the_client_address_comes_from_x_forwarded_for_only_from_a_trusted_proxy(
    world, database, proxies, recorded
):
    """A local process is no proxy: unless told, the client the backoff counts is the
    TCP peer, whatever X-Forwarded-For says (uvicorn alone trusts loopback)."""
    with serving(world.client.app, ServerLimits(), proxies) as (host, port):
        client = RawClient(host, port)
        body = b'{"name": "nobody", "password": "wrong password!!"}'
        client.send(
            head(
                "POST",
                "/api/session",
                host,
                port,
                f"Origin: {ORIGIN}",
                "Content-Type: application/json",
                f"Content-Length: {len(body)}",
                "X-Forwarded-For: 203.0.113.9",
                "Connection: close",
            )
            + body
        )
        assert client.closed.wait(timeout=30)
        client.close()
    assert client.status() == 401, bytes(client.received[:300])
    assert failures_recorded(database, client=recorded) == 1


def test_trusted_proxies_must_be_addresses_or_networks():
    assert trusted_proxies([" 127.0.0.1", "10.1.2.3/8", "::1"]) == (
        "127.0.0.1/32",
        "10.0.0.0/8",
        "::1/128",
    )
    with pytest.raises(ValueError, match="not an IP address or network"):
        trusted_proxies(["proxy.example"])


def test_password_hashing_runs_in_bounded_slots(world, monkeypatch, database):
    monkeypatch.setattr(accounts, "HASHING_WAIT_SECONDS", 0.1)
    held = 0
    while accounts._hashing.acquire(blocking=False):  # a flood holding every slot
        held += 1
    try:
        assert held == accounts.HASHING_SLOTS
        busy = log_in(world.client, "admin_a", PASSWORD)
        assert busy.status_code == 429 and busy.headers["Retry-After"] == "1"
        # other requests are not held up by the queue of logins
        assert (
            world.client.get("/api/workspaces", headers=world.bearer("admin_a")).status_code == 200
        )
    finally:
        for _ in range(held):
            accounts._hashing.release()
    assert failures_recorded(database, user_name="admin_a") == 0  # not judged: no failure counted
    assert log_in(world.client, "admin_a", PASSWORD).status_code == 200


@pytest.mark.parametrize(
    "name, password, status",
    [
        ("ghost", "wrong password!!", 401),  # no such user
        ("admin_b", "wrong password!!", 401),  # a user with a token only
        ("admin_a", "wrong password!!", 401),  # a password user, wrong password
        ("admin_a", PASSWORD, 200),  # a password user, right password
    ],
)
def test_every_password_login_costs_exactly_one_scrypt(world, scrypt_calls, name, password, status):
    assert log_in(world.client, name, password).status_code == status
    assert len(scrypt_calls) == 1


# --- restart after a kill ---------------------------------------------------------------


async def hello(scope, receive, send):
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


def test_port_probe_accepts_a_port_in_time_wait_and_refuses_a_live_listener(tmp_path):
    with serving(hello, ServerLimits()) as (host, port):
        with pytest.raises(PortInUse):
            listen(host, port, tmp_path).close()  # the server still listens
        client = RawClient(host, port)
        client.send(head("GET", "/", host, port, "Connection: close"))
        assert client.closed.wait(timeout=10)  # the server closed first: its end is in TIME-WAIT
        client.close()
    assert client.status() == 200
    listen(host, port, tmp_path).close()  # a restart right after is not blocked for a minute


# --- security headers and the Origin check ----------------------------------------------

SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
    "referrer-policy": "same-origin",
}


def boom() -> dict:
    raise RuntimeError("an unexpected failure")


@pytest.mark.parametrize("secure", [False, True])
def test_every_response_carries_the_security_headers(world, secure):
    app = create_app(world.services, WebSettings(secure=secure, public_origins=(ORIGIN,)))
    app.add_api_route("/api/boom", boom)  # an unexpected exception: the 500 path
    admin = {**world.bearer("admin_a"), "Content-Type": "application/json"}
    base = "/api/workspaces/ws-a/memory"
    cases = [
        ("GET", "/login", {}, None, 200),
        ("GET", "/static/app.js", {}, None, 200),
        ("GET", base, {}, None, 401),
        ("GET", base, {"Authorization": "Bearer nope"}, None, 401),
        ("GET", "/api/workspaces/ws-b/memory", world.bearer("admin_a"), None, 403),
        ("GET", "/api/nowhere", {}, None, 404),
        ("GET", "/admin/nowhere", {}, None, 404),
        ("POST", base, admin, "{not json", 422),
        ("POST", base, {**admin, "Content-Type": "text/plain"}, "{}", 415),
        ("POST", base, admin, "x" * (MAX_DOCUMENT_BYTES + 1), 413),
        ("GET", "/api/boom", {}, None, 500),
    ]
    with TestClient(app, base_url=ORIGIN, raise_server_exceptions=False) as client:
        for method, path, headers, body, status in cases:
            response = client.request(method, path, headers=headers, content=body)
            assert response.status_code == status, (
                method,
                path,
                response.status_code,
                response.text[:200],
            )
            got = {k: response.headers.get(k) for k in SECURITY_HEADERS}
            assert got == SECURITY_HEADERS, (method, path, status, got)
            assert "frame-ancestors 'none'" in response.headers.get(
                "content-security-policy", ""
            ), (path, status)
            hsts = response.headers.get("strict-transport-security")
            assert (hsts is not None and "max-age=" in hsts) if secure else hsts is None, (
                path,
                status,
                hsts,
            )


def test_origin_is_checked_against_the_public_origins_not_the_request_host(world):
    token = login_token(world.client)
    path = "/api/workspaces/ws-a/memory"
    forged = {
        "Host": "evil.example:18800",
        "Origin": "http://evil.example:18800",
        "Sec-Fetch-Site": "same-origin",
        "X-CSRF-Token": token,
        "Content-Type": "application/json",
    }
    before = world.snapshot()
    refused = world.client.post(path, json=card_document(title="from evil"), headers=forged)
    assert refused.status_code == 403 and refused.json()["error"]["details"]["reason"] == "origin"
    assert world.snapshot() == before
    accepted = world.client.post(
        path,
        json=card_document(title="from us"),
        headers={"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin", "X-CSRF-Token": token},
    )
    assert accepted.status_code == 201  # the positive control


def test_a_configured_public_origin_replaces_the_default(world):
    app = create_app(
        world.services, WebSettings(public_origins=public_origins(["HTTPS://Thoth.Example:443/"]))
    )
    with TestClient(app, base_url=ORIGIN) as client:
        token = login_token(client)
        path = "/api/workspaces/ws-a/memory"
        write = {"Sec-Fetch-Site": "same-origin", "X-CSRF-Token": token}
        assert (
            client.post(path, json=card_document(), headers={**write, "Origin": ORIGIN}).status_code
            == 403
        )
        assert (
            client.post(
                path, json=card_document(), headers={**write, "Origin": "https://thoth.example"}
            ).status_code
            == 201
        )


def test_public_origin_defaults_and_normalization():
    assert served_origins("http", "127.0.0.1", 8765) == (
        "http://127.0.0.1:8765",
        "http://localhost:8765",
        "http://[::1]:8765",
    )
    assert served_origins("https", "thoth.example", 443) == ("https://thoth.example",)
    assert served_origins("http", "10.0.0.5", 18800) == ("http://10.0.0.5:18800",)
    assert public_origins(["https://a.example:8443", "http://B.example:80"]) == (
        "https://a.example:8443",
        "http://b.example",
    )
    for bad in (
        "a.example",
        "https://a.example/admin",
        "ftp://a.example",
        "null",
        "https://u@a.example",
    ):
        with pytest.raises(ValueError):
            public_origins([bad])


def test_serve_passes_public_origins_and_limits(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr("tht.web.server.run_server", lambda **kwargs: seen.update(kwargs))
    code = main(
        [
            "serve",
            "--public-origin",
            "https://thoth.example",
            "--public-origin",
            "https://b.example:8443",
            "--header-timeout",
            "2",
            "--body-timeout",
            "3",
            "--max-connections",
            "50",
            "--max-connections-per-client",
            "8",
        ]
    )
    assert code in (0, None)
    assert seen["public_origins"] == ("https://thoth.example", "https://b.example:8443")
    assert seen["limits"] == ServerLimits(
        header_timeout=2, body_timeout=3, max_connections=50, max_connections_per_client=8
    )
    assert main(["serve", "--public-origin", "thoth.example"]) != 0
    assert "invalid_configuration" in capsys.readouterr().out


def login_token(client) -> str:
    response = log_in(client, "admin_a", PASSWORD)
    assert response.status_code == 200, response.text
    return response.json()["csrf_token"]


def test_a_burst_of_concurrent_guesses_gets_no_more_than_the_free_failures(world):
    outcomes: list[str] = []

    def guess() -> None:
        try:
            world.services.accounts.sessions.by_password(
                "admin_a", "wrong password!!", "burst-client"
            )
        except TooManyRequests:
            outcomes.append("429")
        except Unauthenticated:
            outcomes.append("401")

    threads = [threading.Thread(target=guess) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == 16
    # attempts that hash side by side (one per slot) may see the same count
    assert outcomes.count("401") <= accounts.USER_FREE_FAILURES + accounts.HASHING_SLOTS - 1, (
        outcomes
    )
