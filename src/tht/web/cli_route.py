"""``POST /api/cli``: a ``tht`` command run by the service for a client that reaches it
over HTTP (``THT_SERVICE_URL`` and a token) instead of the local socket.

The body is the request the client sends on the socket (arguments, working directory,
the named files' bytes); the answer streams the same JSON events, one a line. The
token's principal runs the command with its capabilities: over HTTP nobody is the
operator.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from tht.errors import InvalidInput, Unauthenticated

_DONE = object()


def cli_router(run_command: Callable[..., None], check_token: Callable[[str], Any]) -> APIRouter:
    """``check_token``: refuses an unknown or expired token (401) before anything streams."""
    router = APIRouter()

    @router.post(
        "/api/cli",
        tags=["service"],
        summary="Run a tht command in the service (the CLI's HTTP face)",
        responses={
            200: {"description": "JSON events, one a line: stderr, alive, then exit and stdout"}
        },
    )
    async def run(request: Request) -> StreamingResponse:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("use 'Authorization: Bearer <token>'")
        await run_in_threadpool(check_token, token.strip())
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            raise InvalidInput("the body is not JSON") from exc
        if not isinstance(body, dict):
            raise InvalidInput("the body must be a JSON object")
        events: queue.Queue[Any] = queue.Queue()

        def work() -> None:
            try:
                run_command(body, events.put, operator=False, token=token.strip())
            finally:
                events.put(_DONE)

        threading.Thread(target=work, name="tht-http-cli", daemon=True).start()

        def stream() -> Iterator[bytes]:
            while (event := events.get()) is not _DONE:
                yield json.dumps(event, ensure_ascii=False).encode() + b"\n"

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    return router
