"""BM25 sparse vectors computed on the client with Qdrant Edge's tokenizer, for both
engines: one tokenizer, so the embedded and the server index agree. The collection's
sparse vector carries the IDF modifier, so vectors here hold term frequencies only."""

from __future__ import annotations

import re
from functools import cache
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


_WORD = re.compile(r"[^\W\d_]+")


@cache
def _analyzer(language: str) -> qdrant_edge.Bm25:
    return qdrant_edge.Bm25(qdrant_edge.Bm25Config(language=LANGUAGES[language]))


@cache
def is_stopword(word: str, language: str) -> bool:
    """Whether BM25's analyzer of ``language`` drops the word (its stop-word list)."""
    return not _analyzer(language).embed_query(word).indices


def text_language(text: str) -> str | None:
    """The language (of ``LANGUAGES``) whose stop words the text uses most, or None when
    no language has at least two and more than any other: a question says "the", "of",
    "what" or "il", "di", "quale" long before it says anything else."""
    words = [w.lower() for w in _WORD.findall(text)]
    counts = {language: sum(1 for w in words if is_stopword(w, language)) for language in LANGUAGES}
    best = max(counts.values())
    winners = [language for language, count in counts.items() if count == best]
    return winners[0] if best >= 2 and len(winners) == 1 else None


def without_stopwords(text: str, language: str) -> str:
    """The text without the stop words of ``language``: what an analyzer of another
    language would otherwise keep as terms ("the" in an Italian workspace)."""
    return _WORD.sub(lambda m: " " if is_stopword(m.group().lower(), language) else m.group(), text)
