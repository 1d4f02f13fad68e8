"""The query-embedding cache: a question asked again is embedded once, the cache stays
within its bound (least recently used first out), and vectors of one embedder are
never answered for another. Real embedders (hashing), their own call counts."""

from __future__ import annotations

import threading

import pytest

from tht.memory.embedding import (
    CachedQueryEmbedder,
    EmbedderUnavailable,
    HashingEmbedder,
    QueryEmbeddingCache,
    uncached,
)


class GatedHashing(HashingEmbedder):
    """The hashing embedder; each query embedding waits for ``gate`` (then counts)."""

    def __init__(self, dimension: int = 16) -> None:
        super().__init__(dimension)
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.fail: Exception | None = None

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        if query:
            self.started.set()
            self.gate.wait(10)
            if self.fail is not None:
                raise self.fail
        return super()._embed(texts, query=query)


def test_a_question_asked_again_is_embedded_once_and_answered_the_same() -> None:
    inner = HashingEmbedder(32)
    cached = CachedQueryEmbedder(inner)
    first = cached.embed_query("net revenue by region")
    again = cached.embed_query("net revenue by region")
    assert inner.calls == 1 and again == first == inner.embed_query("net revenue by region")
    assert again is not first  # a caller changing its list changes nothing kept
    again[0] = 99.0
    assert cached.embed_query("net revenue by region") == first
    assert cached.cache.hits == 2 and cached.cache.misses == 1


def test_the_exact_text_is_the_key() -> None:
    inner = HashingEmbedder(32)
    cached = CachedQueryEmbedder(inner)
    cached.embed_query("net revenue")
    cached.embed_query("Net revenue")
    cached.embed_query("net revenue ")
    assert inner.calls == 3


def test_passages_are_never_cached() -> None:
    inner = HashingEmbedder(32)
    cached = CachedQueryEmbedder(inner)
    cached.embed_passages(["a card"])
    cached.embed_passages(["a card"])
    assert inner.calls == 2 and len(cached.cache) == 0
    assert cached.model_id == inner.model_id and cached.dimension == 32
    assert cached.bound("x" * 10_000).chars == inner.bound("x" * 10_000).chars


def test_the_cache_keeps_at_most_its_bound_least_recently_used_out_first() -> None:
    inner = HashingEmbedder(16)
    cached = CachedQueryEmbedder(inner, QueryEmbeddingCache(entries=3))
    for question in ("a", "b", "c"):
        cached.embed_query(question)
    cached.embed_query("a")  # used again: "b" is now the least recently used
    cached.embed_query("d")
    assert len(cached.cache) == 3
    kept = {q for q in "abcd" if (inner.model_id, 16, q) in cached.cache}
    assert kept == {"a", "c", "d"}
    calls = inner.calls
    cached.embed_query("b")  # evicted: embedded again
    assert inner.calls == calls + 1


def test_the_key_holds_the_embedders_model_and_dimension() -> None:
    """One cache shared by two embedders: each gets its own vectors for one text."""
    shared = QueryEmbeddingCache()
    small, large = HashingEmbedder(16), HashingEmbedder(64)
    renamed = HashingEmbedder(16)
    renamed.model_id = "another-model"
    vectors = [
        CachedQueryEmbedder(embedder, shared).embed_query("net revenue")
        for embedder in (small, large, renamed)
    ]
    assert small.calls == large.calls == renamed.calls == 1
    assert len(vectors[0]) == 16 and len(vectors[1]) == 64
    assert len(shared) == 3
    assert CachedQueryEmbedder(small, shared).embed_query("net revenue") == vectors[0]
    assert small.calls == 1


def test_a_failure_is_not_kept_and_reaches_every_waiting_caller() -> None:
    inner = GatedHashing()
    cached = CachedQueryEmbedder(inner)
    inner.fail = EmbedderUnavailable("the embedder is down")
    inner.gate.clear()
    outcomes: list[object] = []

    def ask() -> None:
        try:
            outcomes.append(cached.embed_query("net revenue"))
        except EmbedderUnavailable as exc:
            outcomes.append(exc)

    first = threading.Thread(target=ask)
    first.start()
    assert inner.started.wait(10)
    second = threading.Thread(target=ask)
    second.start()
    inner.gate.set()
    first.join(10)
    second.join(10)
    assert len(outcomes) == 2 and all(isinstance(o, EmbedderUnavailable) for o in outcomes)
    assert len(cached.cache) == 0
    inner.fail = None
    assert len(cached.embed_query("net revenue")) == 16  # asked again: embedded now


def test_concurrent_asks_of_one_question_embed_it_once() -> None:
    inner = GatedHashing()
    cached = CachedQueryEmbedder(inner)
    inner.gate.clear()
    answers: list[list[float]] = []
    threads = [
        threading.Thread(target=lambda: answers.append(cached.embed_query("net revenue")))
        for _ in range(3)
    ]
    threads[0].start()
    assert inner.started.wait(10)
    for thread in threads[1:]:
        thread.start()
    inner.gate.set()
    for thread in threads:
        thread.join(10)
    assert inner.calls == 1 and len(answers) == 3 and answers[0] == answers[1] == answers[2]


def test_uncached_reaches_the_embedder_itself() -> None:
    inner = HashingEmbedder(16)
    cached = CachedQueryEmbedder(inner)
    assert uncached(cached) is inner and uncached(inner) is inner
    cached.embed_query("health check")
    uncached(cached).embed_query("health check")
    assert inner.calls == 2


def test_a_cache_holds_at_least_one_entry() -> None:
    with pytest.raises(ValueError):
        QueryEmbeddingCache(entries=0)
