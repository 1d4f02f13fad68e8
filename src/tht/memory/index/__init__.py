"""The search index port and its adapters (Qdrant Edge, qdrant-client, pgvector).

The adapters are imported when first named: a process that never uses one does not
pay for its engine (qdrant-client alone costs 0.6-1 s of imports)."""

from typing import Any

from tht.memory.index.errors import IndexBusy, IndexDrift, IndexIncompatible, IndexLost, IndexUnavailable
from tht.memory.index.port import RRF_K, IndexHit, IndexPoint, PointRecord, SearchIndex

_ADAPTERS = {"EdgeIndex": "tht.memory.index.edge", "QdrantServerIndex": "tht.memory.index.qdrant_server",
             "PgVectorIndex": "tht.memory.index.pgvector"}


def __getattr__(name: str) -> Any:
    if name in _ADAPTERS:
        import importlib

        return getattr(importlib.import_module(_ADAPTERS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "RRF_K",
    "EdgeIndex",
    "IndexBusy",
    "IndexDrift",
    "IndexHit",
    "IndexIncompatible",
    "IndexLost",
    "IndexPoint",
    "IndexUnavailable",
    "PgVectorIndex",
    "PointRecord",
    "QdrantServerIndex",
    "SearchIndex",
]
