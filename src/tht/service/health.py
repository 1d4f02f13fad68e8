"""`/healthz`: every dependency of the service, with its status and latency.

Measured before: `/healthz` answered ``{"status": "ok"}`` with PostgreSQL stopped. Now
each dependency is probed on each request:

- ``archive`` (required): one round trip on a pooled runtime connection, bounded by
  ``PROBE_SECONDS``;
- one ``index`` per index adapter the service holds: the collection is reachable (for
  the embedded engine, held by this process);
- one ``embedder`` per embedder: one query embedded.

The archive is required: without it nothing works, and the answer is 503. The index
and the embedder are not (browsing and editing go on; saves leave retryable pending
work): their failure makes the answer ``degraded`` with 200. The JSON shape is in
docs/reliability.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from tht.errors import ThothError, first_line
from tht.faults import simulated_outage
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.embedding import Embedder
from tht.memory.index import IndexUnavailable, SearchIndex

PROBE_SECONDS = 2.0


def _probe(
    name: str, kind: str, required: bool, check: Callable[[], dict[str, Any] | None]
) -> dict[str, Any]:
    started = time.perf_counter()
    result: dict[str, Any] = {"name": name, "kind": kind, "required": required}
    try:
        result.update(check() or {})
        result["status"] = "ok"
    except ThothError as exc:
        result.update(status="down", error={"code": exc.code, "message": exc.message})
    except Exception as exc:  # a probe must answer, whatever the adapter raised
        result.update(
            status="down",
            error={"code": "internal_error", "message": f"{type(exc).__name__}: {first_line(exc)}"},
        )
    result["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return result


def _index_check(index: SearchIndex) -> Callable[[], dict[str, Any]]:
    def check() -> dict[str, Any]:
        if simulated_outage("index"):  # as the projector sees it (tht.faults)
            raise IndexUnavailable("the search index is unavailable (a simulated outage)")
        with index.session():
            return {"collection": index.collection_exists()}

    return check


def _embedder_check(embedder: Embedder) -> Callable[[], dict[str, Any]]:
    def check() -> dict[str, Any]:
        vector = embedder.embed_query("health check")
        return {"model": embedder.model_id, "dimension": len(vector)}

    return check


def check_health(
    archive: PostgresArchive,
    indexes: Mapping[str, SearchIndex],
    embedders: Mapping[str, Embedder],
) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the document of ``/healthz``."""
    checks = [
        _probe("archive", "archive", True, lambda: archive.ping(PROBE_SECONDS)),
        *(_probe(name, "index", False, _index_check(i)) for name, i in indexes.items()),
        *(_probe(name, "embedder", False, _embedder_check(e)) for name, e in embedders.items()),
    ]
    required_down = any(c["required"] and c["status"] != "ok" for c in checks)
    any_down = any(c["status"] != "ok" for c in checks)
    status = "unavailable" if required_down else "degraded" if any_down else "ok"
    return (503 if required_down else 200), {"status": status, "dependencies": checks}
