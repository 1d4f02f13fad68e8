"""Request hygiene below the framework: body size and time limits, media type, and the
security headers of every response.

A pure ASGI middleware, not an `@app.middleware("http")` one: that kind reads the body
with `await request.body()`, whole, before any check could stop it (a chunked body has
no Content-Length to refuse up front; 300 MiB were buffered before the 413). Here the
body is read message by message, counted, and refused as soon as it passes the limit,
with `Connection: close` so the server stops reading the rest. The same deadline bounds
how long a client may take to send it (a slow or half-sent body holds a connection and
a task).

The accepted body (at most the limit) is then replayed to the app, for every route,
before authentication: an unauthenticated client gets no further than an
authenticated one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from tht.errors import PayloadTooLarge, RequestTimeout, ThothError, UnsupportedMediaType

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'"
)
HSTS = "max-age=31536000"


def security_headers(*, secure: bool) -> list[tuple[str, str]]:
    """The headers every response carries (pages, API, errors alike)."""
    headers = [
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "same-origin"),
        ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
        ("Cache-Control", "no-store"),
    ]
    if (
        secure
    ):  # only over HTTPS: a browser ignores it on plain HTTP, and it must not pin a dev host
        headers.append(("Strict-Transport-Security", HSTS))
    return headers


def normalized_origin(url: str) -> str | None:
    """``scheme://host[:port]`` as a browser sends it in Origin (lower case, no default
    port, no path); None for anything else ("null", a path, a user name)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username
        or parts.password
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def served_origins(scheme: str, host: str, port: int) -> tuple[str, ...]:
    """The public origins of a server bound to ``host:port`` when none is configured:
    that address, and for a loopback address its other loopback names too (a browser
    on the same machine may use either)."""
    loopback = ("127.0.0.1", "localhost", "::1")
    hosts = loopback if host in loopback else (host,)
    return tuple(
        o
        for o in (
            normalized_origin(f"{scheme}://{f'[{h}]' if ':' in h else h}:{port}") for h in hosts
        )
        if o
    )


def public_origins(urls: Iterable[str]) -> tuple[str, ...]:
    """Configured origins, normalized; ValueError names one that is not an origin."""
    origins = []
    for url in urls:
        origin = normalized_origin(url)
        if origin is None:
            raise ValueError(f"'{url}' is not an origin (scheme://host[:port])")
        origins.append(origin)
    return tuple(origins)


class _Refused(Exception):
    def __init__(self, error: ThothError) -> None:
        self.error = error


class _ClientGone(Exception):
    pass


class RequestGuard:
    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, body_timeout: float, secure: bool
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in security_headers(secure=secure)
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._with_security_headers(send)
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        try:
            length = headers.get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
                raise _Refused(
                    PayloadTooLarge(f"the body is larger than {self.max_body_bytes} bytes")
                )
            body = await self._read_body(receive)
            self._check_media_type(scope, headers, body)
        except _Refused as refused:
            # The rest of the body is not read: the connection cannot carry another request.
            close = isinstance(refused.error, (PayloadTooLarge, RequestTimeout))
            await self._respond(send, refused.error, close=close)
            return
        except _ClientGone:
            return
        await self.app(scope, self._replay(body, receive), send)

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.body_timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                # a deadline on this task, not wait_for's task of its own per message
                async with asyncio.timeout(remaining):
                    message = await receive()
            except TimeoutError:
                raise _Refused(
                    RequestTimeout(f"the body did not arrive within {self.body_timeout:g} seconds")
                ) from None
            if message["type"] == "http.disconnect":
                raise _ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _Refused(
                    PayloadTooLarge(f"the body is larger than {self.max_body_bytes} bytes")
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    def _check_media_type(scope: Scope, headers: dict[bytes, bytes], body: bytes) -> None:
        if scope["method"] in SAFE_METHODS or not scope["path"].startswith("/api") or not body:
            return
        media = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
        if media != "application/json":
            raise _Refused(
                UnsupportedMediaType(f"the body must be application/json, not '{media or 'none'}'")
            )

    @staticmethod
    def _replay(body: bytes, receive: Receive) -> Receive:
        delivered = False

        async def replayed() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later calls wait for the disconnect, as the server's would

        return replayed

    def _with_security_headers(self, send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [
                    *message.get("headers", []),
                    *((k, v) for k, v in self.headers if k not in present),
                ]
            await send(message)

        return sending

    @staticmethod
    async def _respond(send: Send, error: ThothError, *, close: bool) -> None:
        body = json.dumps(error.to_dict()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": error.http_status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
