"""The search index port and its adapters (Qdrant Edge, qdrant-client, pgvector).

Every name is imported when first read: a process that never uses an adapter does not
pay for its engine (qdrant-client alone costs 0.6-1 s of imports), and one that only
reads the engines' table (``tht.memory.index.engines``: the CLI's help) pays for
none of the port either."""

from typing import TYPE_CHECKING

from tht.lazy import lazy_exports

if TYPE_CHECKING:
    from tht.memory.index.edge import EdgeIndex
    from tht.memory.index.errors import (
        IndexBusy,
        IndexDrift,
        IndexIncompatible,
        IndexLost,
        IndexUnavailable,
    )
    from tht.memory.index.pgvector import PgVectorIndex
    from tht.memory.index.port import RRF_K, IndexHit, IndexPoint, PointRecord, SearchIndex
    from tht.memory.index.qdrant_server import QdrantServerIndex

_ERRORS = "tht.memory.index.errors"
_PORT = "tht.memory.index.port"
_EXPORTS = {
    "EdgeIndex": "tht.memory.index.edge",
    "QdrantServerIndex": "tht.memory.index.qdrant_server",
    "PgVectorIndex": "tht.memory.index.pgvector",
    "IndexBusy": _ERRORS,
    "IndexDrift": _ERRORS,
    "IndexIncompatible": _ERRORS,
    "IndexLost": _ERRORS,
    "IndexUnavailable": _ERRORS,
    "RRF_K": _PORT,
    "IndexHit": _PORT,
    "IndexPoint": _PORT,
    "PointRecord": _PORT,
    "SearchIndex": _PORT,
}
__getattr__ = lazy_exports(__name__, _EXPORTS)

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
