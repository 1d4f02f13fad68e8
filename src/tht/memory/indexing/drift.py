"""The drift check of a workspace's projection against the archive: missing, stale,
orphan and wrong-format points, and damaged vectors in a sample of the rest."""

from __future__ import annotations

import math
import random
import uuid
from typing import Any

from tht.memory.embedding import EmbedderUnavailable
from tht.memory.index import IndexDrift
from tht.memory.index.port import PointRecord
from tht.memory.indexing.target import IndexTarget, raise_if_failed
from tht.memory.indexing.writes import IndexWrites
from tht.memory.model import uuid_to_card_id
from tht.memory.projection_format import indexed_text

# check re-embeds this many indexed cards and compares them with the stored vectors;
# the same text gives the same vector up to float noise (batching), far above this.
VECTOR_SAMPLE = 100
MIN_COSINE = 0.99


class DriftCheck:
    def __init__(self, target: IndexTarget, writes: IndexWrites) -> None:
        self.target = target
        self.writes = writes

    def check(self, workspace: str, repair: bool = False) -> dict[str, Any]:
        """Drift between archive and index: missing, stale, orphan and wrong-format points,
        and damaged vectors in a sample of the rest.
        Drift raises ``IndexDrift`` (exit 8) with the report in its details, unless
        ``repair`` fixed it."""
        target = self.target
        with target.archive.transaction(workspace) as tx:
            language = tx.require_workspace().language
            cards = tx.card_revisions()
            pending = set(tx.operation_ids(limit=1_000_000))
        current = target.fingerprint(language)
        points = (
            {p.id: p for p in target.index.scroll_ids(workspace)}
            if target.index.collection_exists()
            else {}
        )
        drift = _drift(cards, points, current)
        projected = {
            i: r
            for i, r in cards.items()
            if i in points and points[i].revision == r and points[i].fingerprint == current
        }
        damaged, checked, vector_error = self._damaged_vectors(workspace, projected)
        drift["damaged"] = damaged
        report: dict[str, Any] = {
            "workspace": workspace,
            "cards": len(cards),
            "points": len(points),
            "pending": len(pending),
            **{kind: [uuid_to_card_id(i) for i in ids] for kind, ids in drift.items()},
            "vectors_checked": checked,
        }
        if vector_error:
            report["vectors_error"] = vector_error
        if repair:
            self._repair(workspace, drift, pending, report)
        elif any(drift.values()):
            # A drifted index answers recall wrongly: an operator's check (and its exit
            # code) must not read as healthy. The report travels in the details.
            found = ", ".join(
                f"{len(ids)} {kind.replace('_', ' ')}" for kind, ids in drift.items() if ids
            )
            raise IndexDrift(
                f"the search index of workspace '{workspace}' has drifted from the archive ({found});"
                " run `tht memory check --repair` or `tht memory index`",
                details=report,
            )
        return report

    def _repair(
        self,
        workspace: str,
        drift: dict[str, list[uuid.UUID]],
        pending: set[uuid.UUID],
        report: dict[str, Any],
    ) -> None:
        todo = list(dict.fromkeys([i for ids in drift.values() for i in ids] + sorted(pending)))
        repaired = self.writes.sync_in_batches(workspace, todo)
        report["repaired"] = {
            "indexed": repaired.indexed,
            "deleted": repaired.deleted,
            "failed": len(repaired.failed),
        }
        raise_if_failed(repaired, report)

    def _damaged_vectors(
        self, workspace: str, projected: dict[uuid.UUID, int]
    ) -> tuple[list[uuid.UUID], int, str | None]:
        """A sample of the cards the index holds at their current projection, whose
        stored dense vectors do not survive a check: unreadable, not finite, zero, or
        far from the card's text embedded again (storage overwritten behind the engine's
        back still answers recall, wrongly). A sample keeps ``check`` cheap; run it
        again, or ``tht memory index``, to cover more."""
        target = self.target
        sample = sorted(random.sample(sorted(projected), min(VECTOR_SAMPLE, len(projected))))
        if not sample:
            return [], 0, None
        stored = target.index.dense_vectors(workspace, sample)
        with target.archive.transaction(workspace) as tx:
            cards = tx.cards(sample)
        # a card edited since its point was read would compare its new text with the
        # old vector: left out, not reported
        sample = [i for i in sample if i in cards and cards[i].revision == projected[i]]
        fresh: list[list[float]] | None = None
        error = None
        try:
            fresh = target.embedder.embed_passages([indexed_text(cards[i]) for i in sample])
        except EmbedderUnavailable as exc:  # what needs no embedder is still checked
            error = f"stored vectors only checked for soundness: {exc.message}"
        damaged = [
            i
            for n, i in enumerate(sample)
            if not _sound_vector(
                stored.get(i), fresh[n] if fresh else None, target.embedder.dimension
            )
        ]
        return damaged, len(sample), error


def _drift(
    cards: dict[uuid.UUID, int], points: dict[uuid.UUID, PointRecord], current: str
) -> dict[str, list[uuid.UUID]]:
    return {
        "missing": sorted(i for i in cards if i not in points),
        "stale": sorted(i for i, r in cards.items() if i in points and points[i].revision != r),
        "wrong_fingerprint": sorted(
            i for i in cards if i in points and points[i].fingerprint != current
        ),
        "orphan": sorted(i for i in points if i not in cards),
    }


def _sound_vector(stored: list[float] | None, fresh: list[float] | None, dimension: int) -> bool:
    if stored is None or len(stored) != dimension or not all(math.isfinite(x) for x in stored):
        return False
    norm = math.sqrt(sum(x * x for x in stored))
    if norm == 0 or not math.isfinite(norm):
        return False
    if fresh is None:
        return True
    fresh_norm = math.sqrt(sum(x * x for x in fresh))
    cosine = (
        sum(a * b for a, b in zip(stored, fresh, strict=True)) / (norm * fresh_norm)
        if fresh_norm
        else 0.0
    )
    return cosine >= MIN_COSINE
