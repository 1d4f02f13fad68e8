"""``POST /api/cli``: a ``tht`` command run by the service for a client that reaches it
over HTTP (``THT_SERVICE_URL`` and a token) instead of the local socket.

The body is the request the client sends on the socket (the command's name and its
arguments as JSON, the working directory, the bytes of the files they name: none is
passed as a descriptor over HTTP); the service validates the arguments against the
command's input model and refuses a command that is not the service's. The answer streams
the same JSON events, one a line, the command's stdout in pieces as it writes them.
At most ``QUEUED_EVENTS`` events wait for a slow reader: then the command waits too,
so the service's memory stays bounded whatever the output's size. A client that goes
away detaches the command, which runs to its end with its output dropped. The token's
principal runs the command with its capabilities: over HTTP nobody is the operator.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from tht.errors import InvalidInput, Unauthenticated

_DONE = object()
QUEUED_EVENTS = 16  # pieces of stdout (64 KiB each) waiting for the client, at most
_WAIT_SECONDS = 0.5  # how often a waiting side looks whether the other went away


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
        events: queue.Queue[Any] = queue.Queue(QUEUED_EVENTS)
        gone = threading.Event()  # the client went away: events are dropped

        def put(event: Any) -> None:
            while not gone.is_set():
                try:
                    events.put(event, timeout=_WAIT_SECONDS)
                    return
                except queue.Full:
                    pass

        def work() -> None:
            try:
                run_command(body, put, operator=False, token=token.strip(), fds=None)
            finally:
                put(_DONE)

        threading.Thread(target=work, name="tht-http-cli", daemon=True).start()

        def next_event() -> Any:
            while True:
                try:
                    return events.get(timeout=_WAIT_SECONDS)
                except queue.Empty:
                    if gone.is_set():
                        return _DONE

        async def stream() -> AsyncIterator[bytes]:
            try:
                while (event := await run_in_threadpool(next_event)) is not _DONE:
                    yield json.dumps(event, ensure_ascii=False).encode() + b"\n"
            finally:  # ended, or cancelled when the client went away
                gone.set()

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    return router
