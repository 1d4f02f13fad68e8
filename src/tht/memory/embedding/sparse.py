"""BM25 sparse vectors computed on the client with Qdrant Edge's tokenizer, for both
engines: one tokenizer, so the embedded and the server index agree. The collection's
sparse vector carries the IDF modifier, so vectors here hold term frequencies only."""

from __future__ import annotations

from typing import NamedTuple

import qdrant_edge

from tht.errors import ConfigurationError

# Workspace language -> Qdrant's language name (stop words and Snowball stemmer).
LANGUAGES = {"en": "english", "it": "italian"}


class SparseVector(NamedTuple):
    indices: list[int]
    values: list[float]


class SparseEncoder:
    def __init__(self, language: str) -> None:
        if language not in LANGUAGES:
            raise ConfigurationError(
                f"no BM25 settings for language '{language}' (expected one of {', '.join(LANGUAGES)})",
                details={"language": language},
            )
        self.language = language
        config = qdrant_edge.Bm25Config(language=LANGUAGES[language])
        self._bm25 = qdrant_edge.Bm25(config)
        # Part of the projection fingerprint: other settings mean other vectors.
        self.settings_id = (
            f"bm25:{LANGUAGES[language]}:k={config.k:g}:b={config.b:g}:avg_len={config.avg_len:g}"
        )

    def encode_document(self, text: str) -> SparseVector:
        return _plain(self._bm25.embed_document(text))

    def encode_query(self, text: str) -> SparseVector:
        return _plain(self._bm25.embed_query(text))


def _plain(vector: qdrant_edge.SparseVector) -> SparseVector:
    return SparseVector(list(vector.indices), list(vector.values))
