"""Request headers the routes declare. Apart from web/schemas.py, which the MCP tools
import for their argument models: importing FastAPI there would slow every `tht mcp`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header

# Mutations accept a client's idempotency key (tht.memory.idempotency, docs/reliability.md).
IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=r"^[!-~]{1,255}$",
        description=(
            "A retry with the same key and the same request answers the first result without"
            " doing it again (24 h, per principal and workspace); with another request: 409"
            " idempotency_key_reused"
        ),
    ),
]
