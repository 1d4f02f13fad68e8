"""What a card looks like in the search index: its indexed text, its filter facts and
the fingerprint of the projection format (``ProjectionFormat``: the embedder's model
and dimension, and the BM25 encoder of each language). No I/O but the embedder's
dimension, which a remote embedder may have to be asked for.

The fingerprint names everything that decides a point's vectors: embedder model and
dimension, BM25 settings (language included) and the version of the indexed-text
template. A card whose recorded fingerprint differs from the running one is stale and
excluded from recall until it is re-indexed; recall never falls back to dense-only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tht.memory.model import Card, Dependency, texts_in_order
from tht.memory.recall_filters import CardFacts

if TYPE_CHECKING:  # the embedding package (and the BM25 engine) only where it is used
    from tht.memory.embedding.port import Embedder
    from tht.memory.embedding.sparse import SparseEncoder

# Bump when indexed_text changes: every projection becomes stale.
TEXT_VERSION = "text-v2"
FORMAT = "hybrid-v1"


def fingerprint(model_id: str, dimension: int, sparse_settings: str) -> str:
    return f"{FORMAT}|{model_id}|{dimension}|{sparse_settings}|{TEXT_VERSION}"


@dataclass(frozen=True)
class KnownFormat:
    """The running projection format as far as it is known without asking the
    embedder, for browsing and pending work, which never wait for it: the fingerprint,
    or, while a remote embedder configured without its dimension has not answered in
    this process, every part of it but the dimension (a model keeps its dimension; the
    first answer makes the format whole again)."""

    pattern: str  # an anchored regular expression that PostgreSQL and Python read alike

    @classmethod
    def of(cls, model_id: str, dimension: int | None, sparse_settings: str) -> KnownFormat:
        if dimension is not None:
            return cls("^" + re.escape(fingerprint(model_id, dimension, sparse_settings)) + "$")
        head, tail = f"{FORMAT}|{model_id}|", f"|{sparse_settings}|{TEXT_VERSION}"
        return cls("^" + re.escape(head) + "[0-9]+" + re.escape(tail) + "$")

    def matches(self, recorded: str | None) -> bool:
        return recorded is not None and re.fullmatch(self.pattern, recorded) is not None


class ProjectionFormat:
    """The projection format of one embedder: the BM25 encoder of a language, and the
    fingerprint the points and recorded projections carry. What recall needs of the
    projection (its question is encoded and its hits verified the same way), shared
    with the projector of the same embedder."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._encoders: dict[str, SparseEncoder] = {}

    def encoder(self, language: str) -> SparseEncoder:
        if language not in self._encoders:
            from tht.memory.embedding.sparse import SparseEncoder

            self._encoders[language] = SparseEncoder(language)
        return self._encoders[language]

    def fingerprint(self, language: str) -> str:
        return fingerprint(
            self.embedder.model_id, self.embedder.dimension, self.encoder(language).settings_id
        )

    def known_format(self, language: str) -> KnownFormat:
        """The running format without a call to the embedder (browsing, pending work)."""
        return KnownFormat.of(
            self.embedder.model_id,
            self.embedder.known_dimension,
            self.encoder(language).settings_id,
        )


def qualified(dep: Dependency) -> str:
    return ".".join(part for part in (dep.database, dep.schema_name, dep.table, dep.column) if part)


# An identifier with a lower-case letter or digit followed by a capital: camelCase.
# (snake_case needs nothing: the BM25 tokenizer splits on underscores.)
_CAMEL_CASE = re.compile(r"\b[A-Za-z0-9]*[a-z0-9][A-Z][A-Za-z0-9]*\b")
_CAMEL_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def identifier_words(text: str) -> list[str]:
    """The words inside the text's camelCase identifiers, once each, in order of first
    appearance: ``buildUpPlaySpeed`` gives "build up play speed". Column names are
    written that way while questions use the words, which neither BM25's tokenizer nor
    the embedder's sub-words connect."""
    found: dict[str, None] = {}
    for identifier in _CAMEL_CASE.findall(text or ""):
        found.setdefault(" ".join(part.lower() for part in _CAMEL_PART.findall(identifier)), None)
    return list(found)


def searchable(text: str) -> str:
    """The text with the words of its camelCase identifiers appended: what BM25 sees
    of a question, the same expansion as the cards' indexed text."""
    words = identifier_words(text)
    return text + ("\n" + ", ".join(words) if words else "")


class IndexedCard(Protocol):
    """What ``indexed_text`` reads: a ``Card``, or the same fields from an archive row
    (read-only members, so that a frozen ``Card`` conforms). Besides these members it
    reads every text field of the model (TEXT_FIELDS) by name."""

    @property
    def title(self) -> str: ...
    @property
    def scope(self) -> str | None: ...
    @property
    def concepts(self) -> Sequence[str]: ...
    @property
    def dependencies(self) -> Sequence[Dependency]: ...


class ProjectedCard(IndexedCard, Protocol):
    """What a card's projection is computed from (its indexed text and, for an
    explained error, its symptom): a ``Card``, or a ``CardInput`` not yet written."""

    @property
    def family(self) -> str: ...
    @property
    def context(self) -> str | None: ...


# The texts in the order the indexed text lists them after the title; the scope
# follows them, labelled.
INDEXED_TEXTS = tuple(
    name
    for name in texts_in_order("question", "content", "context", "rationale", "sql")
    if name != "scope"
)


def indexed_text(card: IndexedCard) -> str:
    """Title, question, content, context, rationale, exemplar SQL (and any other text
    field), scope, concepts and qualified physical dependencies, then the words of the
    camelCase identifiers among them: what both the dense and the BM25 branch see."""
    parts = [card.title, *(getattr(card, name) for name in INDEXED_TEXTS)]
    if card.scope:
        parts.append(f"Scope: {card.scope}")
    if card.concepts:
        parts.append("Concepts: " + ", ".join(card.concepts))
    if card.dependencies:
        # both the qualified name and its last part, so "orders.id" and "id" both match
        names = [qualified(d) for d in card.dependencies]
        leaves = [d.column or d.table or d.schema_name or d.database for d in card.dependencies]
        parts.append(
            "Depends on: " + ", ".join(names) + " (" + ", ".join(dict.fromkeys(leaves)) + ")"
        )
    return searchable("\n".join(part for part in parts if part))


def card_facts(card: Card) -> CardFacts:
    return CardFacts(
        workspace=card.workspace,
        family=card.family,
        scope=card.scope,
        concepts=tuple(card.concepts),
        dependencies=tuple(card.dependencies),
    )
