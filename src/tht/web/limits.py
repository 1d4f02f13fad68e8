"""Connection limits of `tht serve`: how long a client may take, how many it may hold.

Measured before: 500 half-sent requests were all still open after 65 s. uvicorn's
keep-alive timeout only runs between requests, and it is cancelled by the first byte
of the next one; nothing bounds a request whose head never completes. The h11
protocol below adds that deadline; the body's deadline is the ASGI guard's
(`tht.web.guard`), which can answer 408 through the app.

`limit_concurrency` answers 503 once that many connections or tasks are open, so a
flood of idle connections costs the server a bounded amount; the header deadline
then frees them. Documented in docs/http-api.md ("Logins and limits").
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# h11's own default; said here so the limit is visible and tested with the rest.
MAX_HEAD_BYTES = 16 * 1024


@dataclass(frozen=True)
class ServerLimits:
    header_timeout: float = (
        10.0  # seconds from connection (or the previous response) to a complete request head
    )
    body_timeout: float = 30.0  # seconds to send a whole body (enforced by the ASGI guard)
    keep_alive: int = 5  # seconds an idle keep-alive connection stays open
    max_connections: int = 200  # open connections or requests before new requests get 503


class HeaderDeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not complete
    within ``header_timeout`` seconds (a slowloris client, or a half-sent request)."""

    header_timeout: float = ServerLimits.header_timeout
    _header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_header_deadline()  # the next request's head has the same time

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
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
        # IDLE: h11 has not seen a complete request head since the deadline was armed.
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
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
    """The uvicorn.Config arguments that enforce ``limits``. ``X-Forwarded-For`` is read
    only from ``proxies`` (``trusted_proxies``): uvicorn's own default trusts loopback,
    so any local process could choose the client address that the login backoff counts."""
    protocol = type(
        "HeaderDeadlineH11", (HeaderDeadlineH11Protocol,), {"header_timeout": limits.header_timeout}
    )
    return {
        "http": protocol,
        "timeout_keep_alive": limits.keep_alive,
        "limit_concurrency": limits.max_connections,
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES,
        "proxy_headers": bool(proxies),
        "forwarded_allow_ips": list(proxies),
    }
