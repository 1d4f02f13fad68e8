"""The dense embedding port and the batching and input bound every provider shares."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple, Protocol

# Bounded so one request stays small for an HTTP provider and one native call does
# not hold the model lock for long.
BATCH_SIZE = 32


class InputCut(NamedTuple):
    """What an embedder really embeds of a text: ``text`` is the text's first
    ``chars`` characters, or the whole text when ``chars`` is None."""

    text: str
    chars: int | None


class Embedder(Protocol):
    """Turns text into dense vectors. ``model_id`` and ``dimension`` go into the
    projection fingerprint: changing either makes existing projections stale.

    Every input is bounded by the model's own input limit (``bound``): the embedding
    of a text is the embedding of its bounded prefix, so a long card costs no more than
    a model window, and callers can record where it was cut."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    @property
    def known_dimension(self) -> int | None:
        """The dimension if it is known without a call to the provider (None: only
        asking it would tell), for what must never wait for the embedder."""
        ...

    def bound(self, text: str, *, query: bool = False) -> InputCut: ...

    def embed_passages(self, texts: list[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


class BatchingEmbedder(ABC):
    """Bounds every input, splits work into batches of at most ``BATCH_SIZE`` and
    counts the underlying calls, so batching is observable in tests.

    The bound: at most ``max_input_chars`` characters (a cheap cap, applied first so a
    tokenizer never sees a huge text), then, for a provider that counts tokens
    (``_tokens``), the longest prefix of at most ``max_input_tokens`` tokens.

    ``concurrency``: how many batches of one ``embed_passages`` call may be in flight
    at once (a remote provider: its model works on one batch while the next travels
    and the previous one is decoded here); 1 embeds them one after another."""

    max_input_chars: int | None = None
    max_input_tokens: int | None = None

    def __init__(self, concurrency: int = 1) -> None:
        self.calls = 0
        self.concurrency = concurrency
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def bound(self, text: str, *, query: bool = False) -> InputCut:
        cap = self.max_input_chars
        capped = text if cap is None or len(text) <= cap else text[:cap]
        limit = self.max_input_tokens
        if limit is not None:
            size = self._tokens(capped, query=query)
            if size is not None and size > limit:
                chars = _longest_prefix(
                    capped, lambda prefix: self._tokens(prefix, query=query) or 0, limit, size
                )
                return InputCut(capped[:chars], chars)
        return InputCut(capped, None if capped is text else len(capped))

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        bounded = [self.bound(text).text for text in texts]
        batches = [
            bounded[start : start + BATCH_SIZE] for start in range(0, len(bounded), BATCH_SIZE)
        ]
        vectors: list[list[float]] = []
        if self.concurrency <= 1 or len(batches) <= 1:
            for batch in batches:
                vectors.extend(self._call(batch, query=False))
            return vectors
        # Results in order; the first failure is raised once no batch of this call is
        # running any more (the ones not started yet are cancelled).
        self.calls += len(batches)
        pool = self._executor()
        futures: list[Future[list[list[float]]]] = [
            pool.submit(self._embed, batch, query=False) for batch in batches
        ]
        try:
            for future in futures:
                vectors.extend(future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            for future in futures:
                if not future.cancelled():
                    future.exception()  # wait for it, whatever it raised
            raise
        return vectors

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="embed")
            return self._pool

    def close(self) -> None:
        """Ends the threads of concurrent batches (a provider with a client closes it too)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def embed_query(self, text: str) -> list[float]:
        return self._call([self.bound(text, query=True).text], query=True)[0]

    def _call(self, texts: list[str], *, query: bool) -> list[list[float]]:
        self.calls += 1
        return self._embed(texts, query=query)

    def _tokens(self, text: str, *, query: bool) -> int | None:
        """The model's input length of ``text`` in tokens (specials and the query or
        passage prefix included), or None for a provider that cannot count them."""
        return None

    @abstractmethod
    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        """Embed one batch (at most ``BATCH_SIZE`` texts, each within the bound)."""


def _longest_prefix(text: str, size: Callable[[str], int], limit: int, whole: int) -> int:
    """The length of the longest prefix of ``text`` whose ``size`` is within ``limit``,
    given that the whole text's size ``whole`` is not. Token counts grow nearly in
    proportion to characters, so probes alternate between interpolation (close in one
    or two steps) and bisection (which bounds the worst case to twice log2 of the
    length). A prefix ending inside a word can count one token more or less than its
    neighbours; the answer is always a prefix that was measured to fit."""
    lo, hi = 0, len(text)
    size_lo, size_hi = size(""), whole
    interpolate = True
    while hi - lo > 1:
        if interpolate and size_hi > size_lo:
            mid = lo + (hi - lo) * (limit - size_lo) // (size_hi - size_lo)
        else:
            mid = (lo + hi) // 2
        mid = min(max(mid, lo + 1), hi - 1)
        measured = size(text[:mid])
        if measured <= limit:
            lo, size_lo = mid, measured
        else:
            hi, size_hi = mid, measured
        interpolate = not interpolate
    return lo
