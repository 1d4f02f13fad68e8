"""Projections embedded ahead: an import embeds its records as it reads them, before
their archive batch is written, and indexes them once written (``AheadWrites``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from tht.memory.index.port import InPlaceGeneration
from tht.memory.indexing.pipeline import ChunkPipeline
from tht.memory.indexing.target import IndexTarget, Prepared, ProjectionInputs
from tht.memory.model import Card
from tht.memory.projection_format import ProjectedCard


class AheadWrites:
    def __init__(self, target: IndexTarget, chunks: ChunkPipeline) -> None:
        self.target = target
        self.chunks = chunks

    def inputs_of(self, cards: Sequence[ProjectedCard], language: str) -> ProjectionInputs:
        """What the projections of these cards (written or not yet) are computed from:
        their indexed texts, symptoms, embedder inputs and BM25 vectors."""
        return self.target.inputs(cards, language)

    def embed_inputs(self, inputs: ProjectionInputs) -> list[Prepared]:
        """The vectors of ``inputs_of``: one embedding call, outside every lock."""
        return self.target.vectors(inputs)

    def write_embedded(
        self, workspace: str, language: str, prepared: dict[uuid.UUID, Prepared]
    ) -> tuple[int, list[uuid.UUID]]:
        """Index cards whose vectors were computed before: each card is read, and its
        point written only if its indexed text and symptom are the ones embedded and
        its revision is still the one read (under the lock, as a rebuild's chunk).
        Returns how many were indexed and the cards left for ``sync`` (another text,
        edited or deleted meanwhile)."""
        target = self.target
        target.ensure_collection()
        ids = list(prepared)
        with target.archive.transaction(workspace) as tx:
            found = tx.cards(ids, links=False)
        cards: list[Card] = []
        items: list[Prepared] = []
        left: list[uuid.UUID] = []
        for card_uuid in ids:
            card, item = found.get(card_uuid), prepared[card_uuid]
            if card is not None and target.embedded_as_now(card, item):
                cards.append(card)
                items.append(item)
            else:
                left.append(card_uuid)
        if not cards:
            return 0, left
        report, edited = self.chunks.write_chunk(
            workspace,
            InPlaceGeneration(target.index, workspace),
            target.fingerprint(language),
            cards,
            items,
        )
        return report.indexed, left + edited
