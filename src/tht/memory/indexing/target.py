"""What every job of the projector works on: one embedder profile's index, embedder
and projection format, and what each computes of a card (its inputs, vectors, point
and recorded projection)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tht.faults import simulated_outage
from tht.memory.archive.port import Archive, ArchiveTx, RecordedProjection
from tht.memory.embedding import Embedder, InputCut, SparseVector
from tht.memory.index import IndexPoint, IndexUnavailable, SearchIndex
from tht.memory.index.port import stores_symptoms
from tht.memory.model import Card, card_id_to_uuid
from tht.memory.projection_format import (
    ProjectedCard,
    ProjectionFormat,
    card_facts,
    indexed_text,
)

NO_REVISION = 0


@dataclass(frozen=True)
class Prepared:
    """A card's vectors, computed from ``text`` (its indexed text) and ``symptom``."""

    text: str
    symptom: str | None
    dense: Sequence[float]
    symptom_dense: Sequence[float] | None
    sparse: SparseVector
    embedded_chars: int | None  # the dense input's length when the embedder cut the text


@dataclass(frozen=True)
class ProjectionInputs:
    """Cards' indexed texts, symptoms, embedder inputs (``cuts``) and BM25 vectors."""

    texts: list[str]
    symptoms: list[str | None]
    cuts: list[InputCut]
    sparse: list[SparseVector]

    def part(self, cut: slice) -> ProjectionInputs:
        return ProjectionInputs(
            self.texts[cut], self.symptoms[cut], self.cuts[cut], self.sparse[cut]
        )


@dataclass
class SyncReport:
    indexed: int = 0
    deleted: int = 0
    failed: list[uuid.UUID] = field(default_factory=list)
    error: str | None = None

    def add(self, other: SyncReport) -> None:
        self.indexed += other.indexed
        self.deleted += other.deleted
        self.failed += other.failed
        self.error = other.error or self.error


class IndexTarget:
    """One embedder profile's projection: the archive, the index of its collection,
    its embedder and its format."""

    def __init__(
        self,
        archive: Archive,
        index: SearchIndex,
        embedder: Embedder,
        *,
        collection: str = "",
        profile: str | None = None,
    ) -> None:
        self.archive = archive
        self.index = index
        self.embedder = embedder
        self.format = ProjectionFormat(embedder)
        # what the cross-process rebuild lock is named after: the index's collection
        self.collection = collection
        # the embedder profile this projector embeds with (None: whatever the workspace's)
        self.profile = profile
        self._collection_ready = False

    def fingerprint(self, language: str) -> str:
        return self.format.fingerprint(language)

    def ensure_collection(self) -> None:
        if simulated_outage("index"):
            raise IndexUnavailable(
                "the search index is unavailable (an outage simulated by THT_OUTAGE_FILE)"
            )
        if not self._collection_ready:
            self.index.ensure_collection(self.embedder.dimension)
            self._collection_ready = True

    def language_of(self, workspace: str) -> str:
        with self.archive.transaction(workspace) as tx:
            return tx.require_workspace().language

    def symptom(self, card: ProjectedCard) -> str | None:
        """The text of an explained error's symptom projection, where the engine keeps one."""
        if card.family == "explained_error" and card.context and stores_symptoms(self.index):
            return card.context
        return None

    def embedded_as_now(self, card: ProjectedCard, item: Prepared) -> bool:
        """Whether ``item`` was embedded from the card's present text and symptom."""
        return item.text == indexed_text(card) and item.symptom == self.symptom(card)

    def inputs(self, cards: Sequence[ProjectedCard], language: str) -> ProjectionInputs:
        """What the cards' projections are computed from, and their BM25 vectors (which
        need no embedder)."""
        texts = [indexed_text(card) for card in cards]
        # An explained error also gets a symptom projection, its error text (the
        # context), where the engine keeps one.
        symptoms = [self.symptom(card) for card in cards]
        encoder = self.format.encoder(language)
        # BM25 indexes the whole text: only the dense input is bounded (the encoder
        # takes ~3 ms for 100 000 characters, one word of 20 000 included).
        return ProjectionInputs(
            texts,
            symptoms,
            [self.embedder.bound(text) for text in texts],
            [encoder.encode_document(text) for text in texts],
        )

    def vectors(self, inputs: ProjectionInputs) -> list[Prepared]:
        """The dense vectors: card texts and symptoms go in ONE embedding call, so
        batches run across cards and kinds."""
        vectors = self.embedder.embed_passages(
            [cut.text for cut in inputs.cuts] + [text for text in inputs.symptoms if text]
        )
        main, extra = vectors[: len(inputs.texts)], iter(vectors[len(inputs.texts) :])
        return [
            Prepared(text, symptom, dense, next(extra) if symptom else None, sparse, cut.chars)
            for text, symptom, dense, cut, sparse in zip(
                inputs.texts, inputs.symptoms, main, inputs.cuts, inputs.sparse, strict=True
            )
        ]

    def embed(self, cards: list[Card], language: str) -> list[Prepared]:
        return self.vectors(self.inputs(cards, language))


def points(ready: list[tuple[Card, Prepared]], current: str) -> list[IndexPoint]:
    return [
        IndexPoint(
            card_id_to_uuid(card.id),
            item.dense,
            item.sparse,
            card_facts(card),
            card.revision,
            current,
            item.symptom_dense,
        )
        for card, item in ready
    ]


def recorded(ready: list[tuple[Card, Prepared]]) -> list[RecordedProjection]:
    return [
        RecordedProjection(
            card_id_to_uuid(card.id),
            card.revision,
            item.sparse.indices,
            len(item.text),
            item.embedded_chars,
        )
        for card, item in ready
    ]


def record(tx: ArchiveTx, current: str, ready: list[tuple[Card, Prepared]]) -> None:
    """The projections just written, and the operations they complete, in bulk."""
    tx.record_projections(current, recorded(ready))
    tx.clear_operations({card_id_to_uuid(card.id): card.revision for card, _ in ready})


def raise_if_failed(report: SyncReport, summary: dict[str, Any]) -> None:
    """Work left pending is a failure for an operator command (exit code 8), with the
    summary of what did succeed in the details."""
    if report.failed:
        raise IndexUnavailable(
            f"{len(report.failed)} cards could not be indexed and stay pending: {report.error}",
            details=summary,
        )
