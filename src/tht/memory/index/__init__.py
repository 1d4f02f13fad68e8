"""The search index port and its Qdrant adapters (Qdrant Edge, qdrant-client)."""

from tht.memory.index.edge import EdgeIndex
from tht.memory.index.errors import IndexBusy, IndexDrift, IndexIncompatible, IndexLost, IndexUnavailable
from tht.memory.index.port import RRF_K, IndexHit, IndexPoint, PointRecord, SearchIndex
from tht.memory.index.qdrant_server import QdrantServerIndex

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
    "PointRecord",
    "QdrantServerIndex",
    "SearchIndex",
]
