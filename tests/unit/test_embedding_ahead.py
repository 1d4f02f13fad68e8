"""Query embeddings computed ahead of the recalls of a benchmark run: each question is
embedded once (by the thread ahead or by the caller), never more than ``lookahead``
questions beyond the caller, and nothing runs ahead of an embedder without a query
cache. Real embedders (hashing), their own call counts."""

from __future__ import annotations

import time

from tht.memory.embedding import CachedQueryEmbedder, HashingEmbedder
from tht.memory.embedding.ahead import embedding_ahead

QUESTIONS = [f"question number {n}" for n in range(40)]


def _until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_every_question_is_embedded_once_and_answered_as_without_the_thread() -> None:
    inner = HashingEmbedder(32)
    embedder = CachedQueryEmbedder(inner)
    vectors = []
    with embedding_ahead(embedder, QUESTIONS) as ahead:
        for question in QUESTIONS:
            vectors.append(embedder.embed_query(question))
            ahead.done()
    assert inner.calls == len(QUESTIONS)  # the thread's and the caller's, each once
    assert embedder.cache.misses == len(QUESTIONS)
    assert vectors == [HashingEmbedder(32).embed_query(q) for q in QUESTIONS]


def test_the_thread_stays_within_its_lookahead_and_ends_with_the_block() -> None:
    inner = HashingEmbedder(32)
    embedder = CachedQueryEmbedder(inner)
    with embedding_ahead(embedder, QUESTIONS, lookahead=3) as ahead:
        assert _until(lambda: len(embedder.cache) == 3)
        time.sleep(0.05)  # room for a fourth, were the bound not kept
        assert len(embedder.cache) == 3
        assert (inner.model_id, inner.known_dimension, QUESTIONS[3]) not in embedder.cache
        ahead.done()
        assert _until(lambda: len(embedder.cache) == 4)
    calls = inner.calls
    time.sleep(0.05)
    assert inner.calls == calls == 4  # stopped: the other 36 are never embedded


def test_without_a_query_cache_nothing_runs_ahead() -> None:
    inner = HashingEmbedder(32)
    with embedding_ahead(inner, QUESTIONS) as ahead:
        time.sleep(0.05)
        assert inner.calls == 0
        ahead.done()
