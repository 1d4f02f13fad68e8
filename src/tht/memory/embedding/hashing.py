"""A deterministic embedder without a model, for tests and benchmarks only.

Words and character trigrams are hashed into a fixed number of signed buckets (the
"hashing trick") and the vector is L2-normalised, so texts sharing words or word
pieces are close. It knows nothing of meaning: it must be requested explicitly.
"""

from __future__ import annotations

import hashlib
import math
import re

from tht.memory.embedding.port import BatchingEmbedder

_WORD = re.compile(r"\w+", re.UNICODE)


# Its input bound, in characters: it has no model limit, but bounding it like the
# real providers lets tests exercise cut inputs cheaply (with a small ``max_chars``).
MAX_CHARS = 8192


class HashingEmbedder(BatchingEmbedder):
    def __init__(self, dimension: int = 256, max_chars: int = MAX_CHARS) -> None:
        super().__init__()
        if dimension < 2:
            raise ValueError("the hashing embedder needs at least 2 dimensions")
        if max_chars < 1:
            raise ValueError("the hashing embedder needs an input bound of at least 1 character")
        self.dimension = dimension
        self.max_input_chars = max_chars
        self.model_id = f"hashing-v1-{dimension}"
        self.known_dimension: int | None = dimension

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimension
        for feature in _features(text):
            # blake2b, not hash(): Python salts str hashes per process.
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimension
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector))
        if norm == 0.0:
            # Cosine distance is undefined for a zero vector; an empty text gets a
            # fixed unit vector instead.
            vector[0] = 1.0
            return vector
        return [v / norm for v in vector]


def _features(text: str) -> list[str]:
    features = []
    for word in _WORD.findall(text.lower()):
        features.append(f"w:{word}")
        padded = f"<{word}>"
        features.extend(f"c:{padded[i : i + 3]}" for i in range(len(padded) - 2))
    return features
