"""Connection limits of `tht serve`: how long a client may take, how many it may hold.

uvicorn's keep-alive timeout only runs between requests, and it is cancelled by the
first byte of the next one: nothing bounds a request whose head never completes (500
half-sent requests all stay open). The
protocol below adds that deadline and the head's size limit; the body's deadline is the ASGI guard's
(`tht.web.guard`), which can answer 408 through the app.

`limit_concurrency` answers 503 once that many connections or tasks are open, so a
flood of idle connections costs the server a bounded amount; the header deadline
then frees them. That cap is everybody's: half-sent request heads from one address
would hold the server at 503 for every other client until the deadline. So each
client address may hold at most ``max_connections_per_client`` of them: a connection
beyond it is answered 429 and closed at once, before it can send anything.

A reverse proxy (``--trusted-proxy``) speaks for many clients over its connections, so
its connections are not counted against its address; each request it forwards counts,
while in progress, against the client its ``X-Forwarded-For`` names. Documented in
docs/http-api.md ("Logins and limits").
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tht.errors import TooManyRequests

# The longest request head (h11's default limit, which this server used before):
# said here so the limit is visible and tested with the rest.
MAX_HEAD_BYTES = 16 * 1024


@dataclass(frozen=True)
class ServerLimits:
    header_timeout: float = (
        10.0  # seconds from connection (or the previous response) to a complete request head
    )
    body_timeout: float = 30.0  # seconds to send a whole body (enforced by the ASGI guard)
    keep_alive: int = 5  # seconds an idle keep-alive connection stays open
    max_connections: int = 200  # open connections or requests before new requests get 503
    # open connections (or, through a trusted proxy, requests in progress) of one client address
    max_connections_per_client: int = 50


ASGIApp = Any  # an ASGI application: (scope, receive, send) -> awaitable


class ClientSlots:
    """What each client address holds now: its open connections, or (forwarded by a
    trusted proxy) its requests in progress. One per server; used only on its event
    loop, so nothing here is locked."""

    def __init__(self, limit: int, proxies: Sequence[str] = ()) -> None:
        self.limit = limit
        self.proxies = tuple(proxies)
        self._networks = tuple(ipaddress.ip_network(p) for p in self.proxies)
        self._held: dict[str, int] = {}
        self._forwarding: dict[int, ASGIApp] = {}

    def is_proxy(self, host: str) -> bool:
        return bool(self._networks) and _in_networks(host, self._networks)

    def take(self, host: str) -> bool:
        held = self._held.get(host, 0)
        if held >= self.limit:
            return False
        self._held[host] = held + 1
        return True

    def release(self, host: str) -> None:
        held = self._held.get(host, 0) - 1
        if held > 0:
            self._held[host] = held
        else:
            self._held.pop(host, None)

    def refusal(self) -> TooManyRequests:
        return TooManyRequests(
            f"this client address holds {self.limit} connections or requests, its limit:"
            " finish or close one first",
            retry_after=1,
            details={"limit": self.limit},
        )

    def forwarding(self, app: ASGIApp) -> ASGIApp:
        """``app`` as a trusted proxy's requests reach it: the client its
        ``X-Forwarded-For`` names, holding a slot while the request is in progress."""
        found = self._forwarding.get(id(app))
        if found is None:
            found = self._forwarding[id(app)] = ProxyHeadersMiddleware(
                _RequestsPerClient(app, self), trusted_hosts=list(self.proxies)
            )
        return found


@functools.lru_cache(maxsize=4096)
def _in_networks(
    host: str, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in networks)


class _RequestsPerClient:
    def __init__(self, app: ASGIApp, slots: ClientSlots) -> None:
        self.app = app
        self.slots = slots

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        client = scope.get("client")
        if scope["type"] != "http" or not client:
            await self.app(scope, receive, send)
            return
        host = client[0]
        if not self.slots.take(host):
            error = self.slots.refusal()
            body = json.dumps(error.to_dict()).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": error.http_status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", str(error.retry_after).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.slots.release(host)


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (a C parser: the event loop's thread spends about
    0.2 ms less CPU a request than with the pure-Python h11 one), closing a connection whose request
    head is not complete within ``header_timeout`` seconds (a slowloris client, or a
    half-sent request), refusing a head longer than ``MAX_HEAD_BYTES`` with 400, and
    refusing a client address's connection beyond its share (``slots``)."""

    header_timeout: float = ServerLimits.header_timeout
    slots: ClientSlots | None = None
    _header_deadline: asyncio.TimerHandle | None = None
    _holder: str | None = None  # the client address this connection holds a slot of
    # between a response (or the connection's start) and the next complete request head
    _awaiting_head: bool = True
    _head_bytes: int = 0  # of the request head being received

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        host = self.client[0] if self.client else None
        if self.slots is not None and host is not None:
            if self.slots.is_proxy(host):
                self.app = self.slots.forwarding(self.app)
            elif self.slots.take(host):
                self._holder = host
            else:
                self._refuse(self.slots.refusal())
                return
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        if self._awaiting_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # a head still incomplete past the limit (one long line the parser keeps
        # buffering): refused as the parser refuses a malformed one
        if (
            self._awaiting_head
            and self._head_bytes > MAX_HEAD_BYTES
            and not self.transport.is_closing()
        ):
            self.send_400_response("Invalid HTTP request received.")

    def on_message_begin(self) -> None:
        self._awaiting_head = True
        self._head_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            # the parser stops and raises HttpParserCallbackError: uvicorn answers 400
            raise ValueError(f"request head longer than {MAX_HEAD_BYTES} bytes")

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        super().on_headers_complete()

    def _refuse(self, error: TooManyRequests) -> None:
        """Answered before the client sent anything, then closed: an HTTP client reads
        the answer when it sends its request."""
        body = json.dumps(error.to_dict()).encode()
        head = (
            "HTTP/1.1 429 Too Many Requests\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            f"retry-after: {error.retry_after}\r\n"
            "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # a pipelined request queued behind this one has its head already
        self._awaiting_head = not self.pipeline
        self._arm_header_deadline()  # the next request's head has the same time

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        if self._holder is not None and self.slots is not None:
            self.slots.release(self._holder)
            self._holder = None
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        if not self.transport.is_closing():
            self._header_deadline = self.loop.call_later(
                self.header_timeout, self._header_deadline_passed
            )

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_deadline_passed(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing() and self._awaiting_head:
            self.transport.close()


def trusted_proxies(values: Sequence[str]) -> tuple[str, ...]:
    """The reverse proxies whose ``X-Forwarded-For`` names the client, as addresses or
    networks (CIDR). Checked here because uvicorn keeps a malformed entry as a literal
    that never matches, which silently trusts nobody."""
    found = []
    for value in values:
        try:
            found.append(str(ipaddress.ip_network(value.strip(), strict=False)))
        except ValueError:
            raise ValueError(
                f"'{value}' is not an IP address or network (e.g. 127.0.0.1, 10.0.0.0/8)"
            ) from None
    return tuple(found)


def uvicorn_options(limits: ServerLimits, proxies: Sequence[str] = ()) -> dict[str, Any]:
    """The uvicorn.Config arguments that enforce ``limits`` (one server per call: the
    client slots are its own). ``X-Forwarded-For`` is read only on the connections of
    ``proxies`` (``trusted_proxies``), by the protocol (``ClientSlots.forwarding``):
    uvicorn's own default trusts loopback, so any local process could choose the client
    address that the login backoff counts."""
    protocol = type(
        "HeaderDeadlineHttpTools",
        (HeaderDeadlineProtocol,),
        {
            "header_timeout": limits.header_timeout,
            "slots": ClientSlots(limits.max_connections_per_client, proxies),
        },
    )
    return {
        "http": protocol,
        "timeout_keep_alive": limits.keep_alive,
        "limit_concurrency": limits.max_connections,
        "proxy_headers": False,
    }
