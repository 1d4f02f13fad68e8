"""The dense embedding port and the batching every provider shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

# Bounded so one request stays small for an HTTP provider and one native call does
# not hold the model lock for long.
BATCH_SIZE = 32


class Embedder(Protocol):
    """Turns text into dense vectors. ``model_id`` and ``dimension`` go into the
    projection fingerprint: changing either makes existing projections stale."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed_passages(self, texts: list[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


class BatchingEmbedder(ABC):
    """Splits work into batches of at most ``BATCH_SIZE`` and counts the underlying
    calls, so batching is observable in tests."""

    def __init__(self) -> None:
        self.calls = 0

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH_SIZE):
            vectors.extend(self._call(texts[start:start + BATCH_SIZE], query=False))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._call([text], query=True)[0]

    def _call(self, texts: list[str], *, query: bool) -> list[list[float]]:
        self.calls += 1
        return self._embed(texts, query=query)

    @abstractmethod
    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        """Embed one batch (at most ``BATCH_SIZE`` texts)."""
