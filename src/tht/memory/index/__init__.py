"""The search index port and its adapters (Qdrant Edge, qdrant-client, pgvector).

The adapters are imported when first named: a process that never uses one does not
pay for its engine (qdrant-client alone costs 0.6-1 s of imports)."""

from tht.lazy import lazy_exports
from tht.memory.index.errors import (
    IndexBusy,
    IndexDrift,
    IndexIncompatible,
    IndexLost,
    IndexUnavailable,
)
from tht.memory.index.port import RRF_K, IndexHit, IndexPoint, PointRecord, SearchIndex

_ADAPTERS = {
    "EdgeIndex": "tht.memory.index.edge",
    "QdrantServerIndex": "tht.memory.index.qdrant_server",
    "PgVectorIndex": "tht.memory.index.pgvector",
}
__getattr__ = lazy_exports(__name__, _ADAPTERS)

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
