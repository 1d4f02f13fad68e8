"""A save's projection, its retry and the drain of a workspace's outbox.

Every step reads the CURRENT archive state under the workspace's advisory lock, so a
late propagation can never overwrite a newer projection, and a retry can never
restore an earlier edit or a deleted card. A projection is recorded (revision and
fingerprint) and the card's pending operation cleared only after the index accepted
the write; on failure the operation stays, with its error, for retry. Embedding, the
slow part, runs before the lock, on a plain read of the cards: under the lock only
vectors of the text the card still has are written (see ``IndexWrites.sync``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from tht.errors import NotFound
from tht.faults import crash_point
from tht.memory.archive.port import ArchiveTx
from tht.memory.card_store import IndexOutcome
from tht.memory.embedding import EmbedderUnavailable
from tht.memory.index import IndexUnavailable
from tht.memory.index.port import InPlaceGeneration
from tht.memory.indexing import pipeline
from tht.memory.indexing.pipeline import ChunkPipeline
from tht.memory.indexing.target import (
    NO_REVISION,
    IndexTarget,
    Prepared,
    SyncReport,
    points,
    raise_if_failed,
    record,
)
from tht.memory.model import Card, Workspace, card_id_to_uuid, uuid_to_card_id

BATCH = 256  # cards per locked transaction in drains and repairs: edits wait at most one
# Reads and embeddings outside the lock before the last round embeds under it.
ROUNDS = 3

Unavailable = IndexUnavailable | EmbedderUnavailable


@dataclass
class _Locked:
    """One locked write's cards: present (with their vectors where still current) or
    gone, and their pending operations."""

    card_uuids: list[uuid.UUID]
    present: list[Card]
    gone: list[uuid.UUID]
    operations: dict[uuid.UUID, tuple[str, int]]
    ready: list[tuple[Card, Prepared]] = field(default_factory=list)
    stale: list[Card] = field(default_factory=list)


class IndexWrites:
    """Brings cards' projections up to date: after a save (``propagate``), on an
    operator's retry, for a workspace's outbox (``drain``) and for any batch of cards
    (``sync``)."""

    def __init__(self, target: IndexTarget, chunks: ChunkPipeline) -> None:
        self.target = target
        self.chunks = chunks

    def sync(self, workspace: str, card_uuids: Sequence[uuid.UUID]) -> SyncReport:
        """Make the index hold exactly the current archive state of these cards.

        Embedding takes time in proportion to the cards (up to a model input each), so
        it runs outside every lock: the cards are read and embedded first, then, under
        the workspace's lock, read again and written to the index only where the text
        embedded is still the card's text (the vectors are a function of the text;
        revision and filter facts come from the locked read). A card edited meanwhile
        is embedded again from its new state, for ``ROUNDS`` rounds; the last round
        embeds what still changed under the lock: progress is certain, and a card
        edited that often costs the lock one bounded embedding per card."""
        card_uuids = list(dict.fromkeys(card_uuids))
        report = SyncReport()
        todo = card_uuids
        if len(todo) > pipeline.CHUNK:  # a bulk projection (an import): the pipeline first
            report, todo = self._sync_in_bulk(workspace, todo)
        for round_ in range(1, ROUNDS + 1):
            if not todo:
                break
            last = round_ == ROUNDS
            unavailable: Unavailable | None = None
            prepared: dict[uuid.UUID, Prepared] = {}
            try:
                self.target.ensure_collection()
                if not last:
                    prepared = self._prepare(workspace, todo)
            except (IndexUnavailable, EmbedderUnavailable) as exc:
                unavailable = exc
            done, todo = self._write(workspace, todo, prepared, unavailable, embed_changed=last)
            report.add(done)
        return report

    def _sync_in_bulk(
        self, workspace: str, card_uuids: list[uuid.UUID]
    ) -> tuple[SyncReport, list[uuid.UUID]]:
        """Many cards through the rebuild's pipeline (embedding overlapped with bulk
        writes) into the serving index; returns what it did and the cards it left to
        ``sync``'s own rounds: deleted or edited meanwhile, or all if it failed."""
        target = self.target
        try:
            target.ensure_collection()
            language = target.language_of(workspace)
            generation = InPlaceGeneration(target.index, workspace)
            report = self.chunks.project(workspace, language, generation, card_uuids, _ignore)
        except (IndexUnavailable, EmbedderUnavailable):
            return SyncReport(), card_uuids  # the rounds record the failure on every card
        current = target.fingerprint(language)
        with target.archive.transaction(workspace) as tx:
            states = tx.projection_states(card_uuids)
        left = [i for i in card_uuids if i not in states or not states[i].current(current)]
        return report, left

    def _prepare(self, workspace: str, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, Prepared]:
        """The cards' vectors from their current state, computed outside every lock
        (a plain read, then the embedder)."""
        with self.target.archive.transaction(workspace) as tx:
            language = tx.require_workspace().language
            cards = tx.cards(card_uuids)
        present = [cards[i] for i in card_uuids if i in cards]
        if not present:
            return {}
        prepared = self.target.embed(present, language)
        crash_point("projector.after_embedding")
        return {
            card_id_to_uuid(card.id): item for card, item in zip(present, prepared, strict=True)
        }

    def _write(
        self,
        workspace: str,
        card_uuids: list[uuid.UUID],
        prepared: dict[uuid.UUID, Prepared],
        unavailable: Unavailable | None,
        embed_changed: bool,
    ) -> tuple[SyncReport, list[uuid.UUID]]:
        """Under the workspace's lock: write the prepared vectors of the cards whose text
        is still the one embedded, delete the points of deleted cards, record it all.
        Returns the report and the cards that changed since they were embedded (none
        when ``embed_changed``: those are embedded here)."""
        # The index before the archive lock, as recall does (search, then verification
        # under the lock): one lock order, so an embedded index held by a reader can
        # never wait on a writer that waits on it.
        with ExitStack() as held:
            if unavailable is None:
                try:
                    held.enter_context(self.target.index.session())
                except IndexUnavailable as exc:
                    unavailable = exc
            with self.target.archive.transaction(workspace, lock=True) as tx:
                report, changed = self._write_locked(
                    tx, card_uuids, prepared, unavailable, embed_changed
                )
            if not report.failed:
                crash_point("projector.after_archive_commit")
            return report, changed

    def _write_locked(
        self,
        tx: ArchiveTx,
        card_uuids: list[uuid.UUID],
        prepared: dict[uuid.UUID, Prepared],
        unavailable: Unavailable | None,
        embed_changed: bool,
    ) -> tuple[SyncReport, list[uuid.UUID]]:
        workspace = tx.require_workspace()
        current = self.target.fingerprint(workspace.language)
        cards = tx.cards(card_uuids)
        locked = _Locked(
            card_uuids,
            present=[cards[i] for i in card_uuids if i in cards],
            gone=[i for i in card_uuids if i not in cards],
            operations=tx.operations_for(card_uuids),
        )
        try:
            if unavailable is not None:
                raise unavailable
            self._check_profile(workspace)
            changed = self._write_points(tx, workspace, current, locked, prepared, embed_changed)
        except (IndexUnavailable, EmbedderUnavailable) as exc:
            return _keep_pending(tx, locked, exc.message), []
        record(tx, current, locked.ready)
        if locked.gone:
            tx.forget_projections(locked.gone)
            for card_uuid in locked.gone:
                done = locked.operations.get(card_uuid, ("delete", NO_REVISION))[1]
                tx.clear_operation(card_uuid, done)
        crash_point("projector.after_clear_operation")
        return SyncReport(indexed=len(locked.ready), deleted=len(locked.gone)), changed

    def _check_profile(self, workspace: Workspace) -> None:
        profile = self.target.profile
        if profile is not None and workspace.embedder != profile:
            # another process switched the workspace's embedder since this one read
            # it: these vectors are of the profile it left; the work stays pending,
            # for a projection with the new one
            raise IndexUnavailable(
                f"the embedder of workspace '{workspace.id}' is now '{workspace.embedder}'"
                f" (was '{profile}' when this projection began): projected again",
                details={"workspace": workspace.id, "embedder": workspace.embedder},
            )

    def _write_points(
        self,
        tx: ArchiveTx,
        workspace: Workspace,
        current: str,
        locked: _Locked,
        prepared: dict[uuid.UUID, Prepared],
        embed_changed: bool,
    ) -> list[uuid.UUID]:
        """The points of the cards present, the deletions of those gone; returns the
        cards changed since they were embedded (left to the next round)."""
        target = self.target
        for card in locked.present:
            item = prepared.get(card_id_to_uuid(card.id))
            if item is not None and target.embedded_as_now(card, item):
                locked.ready.append((card, item))
            else:
                locked.stale.append(card)
        changed: list[uuid.UUID] = []
        if locked.stale and embed_changed:
            embedded = target.embed(locked.stale, workspace.language)
            locked.ready += zip(locked.stale, embedded, strict=True)
        elif locked.stale:
            # Edited since it was embedded: that edit's own propagation may already
            # have written it (then nothing is left to do), else embed it again.
            states = tx.projection_states([card_id_to_uuid(card.id) for card in locked.stale])
            changed = [i for i, state in states.items() if not state.current(current)]
        if locked.ready:
            target.index.upsert(points(locked.ready, current))
        if locked.gone:
            target.index.delete(workspace.id, locked.gone)
        crash_point("projector.after_index_write")
        return changed

    # --- entry points ----------------------------------------------------------------

    def propagate(self, workspace: str, card_uuid: uuid.UUID) -> IndexOutcome:
        """After a committed mutation: bring this card's projection up to date."""
        report = self.sync(workspace, [card_uuid])
        operation = "delete" if report.deleted else "upsert"
        if report.failed:
            with self.target.archive.transaction(workspace) as tx:
                pending = tx.operations_for([card_uuid]).get(card_uuid, (operation, 0))[0]
            return IndexOutcome("pending", pending, report.error)
        return IndexOutcome("current", operation)

    def retry(self, workspace: str, card_id: str) -> IndexOutcome:
        """Retry a card's projection from its current state: re-index the card, or
        remove the point of a deleted card. Never restores anything."""
        card_uuid = card_id_to_uuid(card_id)
        with self.target.archive.transaction(workspace) as tx:
            tx.require_workspace()
            known = tx.projection_states([card_uuid]) or tx.operations_for([card_uuid])
        if not known:
            raise NotFound(
                f"card {card_id} does not exist in workspace '{workspace}' and has no pending index work",
                details={"id": card_id},
            )
        return self.propagate(workspace, card_uuid)

    def drain(self, workspace: str, settled: float = 0.0) -> dict[str, Any]:
        """Retry every pending operation of the workspace, oldest first (with
        ``settled``, those untouched for that many seconds)."""
        report = SyncReport()
        attempted: set[uuid.UUID] = set()
        while True:
            with self.target.archive.transaction(workspace) as tx:
                tx.require_workspace()
                batch = [
                    i
                    for i in tx.operation_ids(limit=BATCH + len(attempted), settled=settled)
                    if i not in attempted
                ]
            if not batch:
                break
            attempted.update(batch)
            report.add(self.sync(workspace, batch[:BATCH]))
        summary = {
            "workspace": workspace,
            "indexed": report.indexed,
            "deleted": report.deleted,
            "failed": [uuid_to_card_id(i) for i in report.failed],
        }
        raise_if_failed(report, summary)
        return summary

    def sync_in_batches(self, workspace: str, card_uuids: Sequence[uuid.UUID]) -> SyncReport:
        """``sync`` of many cards, ``BATCH`` at a time (each batch one locked write)."""
        report = SyncReport()
        for start in range(0, len(card_uuids), BATCH):
            report.add(self.sync(workspace, card_uuids[start : start + BATCH]))
        return report


def _keep_pending(tx: ArchiveTx, locked: _Locked, error: str) -> SyncReport:
    """Saved, index update incomplete: every card keeps (or gets) its pending
    operation, with the error, and stays out of recall until retried."""
    for card in locked.present:
        if card_id_to_uuid(card.id) not in locked.operations:
            tx.enqueue(card_id_to_uuid(card.id), "upsert", card.revision)
    for card_uuid in locked.gone:
        if card_uuid not in locked.operations:
            tx.enqueue(card_uuid, "delete", NO_REVISION)
    tx.record_failure(locked.card_uuids, error)
    return SyncReport(failed=locked.card_uuids, error=error)


def _ignore(count: int) -> None:
    return None
