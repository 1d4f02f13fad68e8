"""Keeping the search index in step with the archive: propagate, retry, rebuild, check.

Every step reads the CURRENT archive state under the workspace's advisory lock, so a
late propagation can never overwrite a newer projection, and retry or rebuild can
never restore an earlier edit or a deleted card. A projection is recorded (revision
and fingerprint) and the card's pending operation cleared only after the index
accepted the write; on failure the operation stays, with its error, for retry.
Embedding, the slow part, runs before the lock, on a plain read of the cards: under
the lock only vectors of the text the card still has are written (see ``sync``).
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from tht.backoff import doubling_delay
from tht.errors import Conflict, Interrupted, NotFound, ThothError
from tht.faults import crash_point, pause_point, simulated_outage
from tht.memory.archive.port import Archive, ArchiveTx, RecordedProjection
from tht.memory.embedding import (
    Embedder,
    EmbedderUnavailable,
    InputCut,
    SparseEncoder,
    SparseVector,
)
from tht.memory.index import IndexDrift, IndexPoint, IndexUnavailable, SearchIndex
from tht.memory.index.port import (
    IndexGeneration,
    InPlaceGeneration,
    begin_generation,
    encode_points,
    stores_symptoms,
)
from tht.memory.model import Card, card_id_to_uuid, uuid_to_card_id
from tht.memory.projection import (
    KnownFormat,
    ProjectedCard,
    card_facts,
    fingerprint,
    indexed_text,
)
from tht.memory.service import IndexOutcome
from tht.memory.stages import Stage, hand_over, start_stage, take_over

log = logging.getLogger(__name__)
Progress = Callable[[int, int], None]
BATCH = 256  # cards per locked transaction in drains and repairs: edits wait at most one
# Cards per read, embedding and locked write in rebuilds: a multiple of the embedders'
# batch (32); an edit waits for at most one chunk's write (not its embedding).
CHUNK = 512
# An embedder that embeds its batches one after another (in-process, ~5 cards/s on two
# cores) gets a chunk in parts of four batches, each written as soon as embedded: the
# rebuild's progress then moves every few seconds instead of once a chunk (minutes).
# Its batches run one after another either way; an embedder with batches in flight
# (remote) keeps whole chunks. A part of several batches keeps batching across cards
# and both vector kinds: a card's symptom shares its text's batch run, so 100 cards of
# 128 texts are 4 calls, not one per 32 cards and kind.
SEQUENTIAL_PART = 128
OPTIMIZE_EVERY = 20_000  # points written between two indexings of a rebuild's segments
# An import's last stretch: compacted while the import writes it (``ImportCompactions``)
IMPORT_TAIL = OPTIMIZE_EVERY // 4
NO_REVISION = 0
# Reads and embeddings outside the lock before the last round embeds under it.
ROUNDS = 3
# The service compacts a workspace's plain points once no save has reached it for this
# long: never during a stream of saves, whose points would go plain again at once.
QUIET_SECONDS = 60.0
# A compaction that failed (a full disk, say) is tried again by the service after this
# long, then twice as long each time, up to COMPACTION_RETRY_MAX: a retry copies the
# workspace's whole shard, so not every round.
COMPACTION_RETRY_SECONDS = 300.0
COMPACTION_RETRY_MAX = 3600.0


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


# check re-embeds this many indexed cards and compares them with the stored vectors;
# the same text gives the same vector up to float noise (batching), far above this.
VECTOR_SAMPLE = 100
MIN_COSINE = 0.99


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


class IndexProjector:
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
        # what the cross-process rebuild lock is named after: the index's collection
        self.collection = collection
        # the embedder profile this projector embeds with (None: whatever the workspace's)
        self.profile = profile
        self._encoders: dict[str, SparseEncoder] = {}
        self._collection_ready = False
        self._rebuilding: set[str] = set()  # workspaces being rebuilt or compacted here
        self._importing: dict[str, int] = {}  # workspaces being imported here: how many
        # workspaces whose compaction failed: when to try again, and how many failures
        self._compaction_retries: dict[str, tuple[float, int]] = {}
        self._upkept = False  # the upkeep ran once: it took up what earlier processes left
        self._rebuild_lock = threading.Lock()

    # --- the projection format ---------------------------------------------------

    def encoder(self, language: str) -> SparseEncoder:
        if language not in self._encoders:
            self._encoders[language] = SparseEncoder(language)
        return self._encoders[language]

    def of(self, workspace: str) -> IndexProjector:
        """The projector of ``workspace``: this one serves every workspace it is given
        (``WorkspaceProjector`` gives each workspace the projector of its profile)."""
        return self

    def known_format_of(self, workspace: str, language: str) -> KnownFormat:
        return self.known_format(language)

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

    def ensure_collection(self) -> None:
        if simulated_outage("index"):
            raise IndexUnavailable(
                "the search index is unavailable (an outage simulated by THT_OUTAGE_FILE)"
            )
        if not self._collection_ready:
            self.index.ensure_collection(self.embedder.dimension)
            self._collection_ready = True

    # --- one batch of cards --------------------------------------------------------

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
        if len(todo) > CHUNK:  # a bulk projection (an import): the rebuild's pipeline first
            report, todo = self._sync_in_bulk(workspace, todo)
        for round_ in range(1, ROUNDS + 1):
            if not todo:
                break
            last = round_ == ROUNDS
            unavailable: IndexUnavailable | EmbedderUnavailable | None = None
            prepared: dict[uuid.UUID, Prepared] = {}
            try:
                self.ensure_collection()
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
        try:
            self.ensure_collection()
            with self.archive.transaction(workspace) as tx:
                language = tx.require_workspace().language
            report = self._project(
                workspace, language, InPlaceGeneration(self.index, workspace), card_uuids, _ignore
            )
        except (IndexUnavailable, EmbedderUnavailable):
            return SyncReport(), card_uuids  # the rounds record the failure on every card
        current = self.fingerprint(language)
        with self.archive.transaction(workspace) as tx:
            states = tx.projection_states(card_uuids)
        left = [i for i in card_uuids if i not in states or not states[i].current(current)]
        return report, left

    def compact(
        self,
        workspace: str,
        starting: Callable[[int], None] | None = None,
        *,
        least: int | None = None,
    ) -> dict[str, Any] | None:
        """After an import: let an engine that does not index what was written on its
        own replace the serving points by an indexed copy (``EdgeIndex.compact``: when
        ``least`` or, by default, its own threshold of points are plain), unless a
        rebuild of the workspace runs (it switches to indexed points anyway).
        ``starting`` hears the points to copy when it starts. Returns what it copied
        and how long it took, or, when it failed, why and in how many seconds the
        service's upkeep tries again (``compact_quiet``); None: nothing to do. A
        failure costs recall speed only (the points are written): it is logged."""
        compact = getattr(self.index, "compact", None)
        if compact is None:
            return None
        with self._rebuild_lock:
            if workspace in self._rebuilding:
                return None
            self._rebuilding.add(workspace)
        started = time.perf_counter()
        try:
            points = compact(workspace, starting, least=least)
        except IndexUnavailable as exc:
            with self._rebuild_lock:
                failures = self._compaction_retries.get(workspace, (0.0, 0))[1] + 1
                delay = doubling_delay(failures, COMPACTION_RETRY_SECONDS, COMPACTION_RETRY_MAX)
                self._compaction_retries[workspace] = (time.monotonic() + delay, failures)
            log.warning(
                "the index of workspace %s stays unindexed: %s; tried again in %d s",
                workspace,
                exc.message,
                delay,
            )
            return {"failed": exc.message, "retry_in_seconds": round(delay)}
        finally:
            with self._rebuild_lock:
                self._rebuilding.discard(workspace)
        with self._rebuild_lock:
            self._compaction_retries.pop(workspace, None)
        if not points:
            return None
        return {"points": points, "seconds": round(time.perf_counter() - started, 3)}

    def owes_compaction(self, workspace: str) -> bool:
        """An earlier process left the workspace's index to compact (written since its
        last compaction, or a compaction interrupted: ``EdgeIndex.owed_compactions``)."""
        return workspace in getattr(self.index, "owed_compactions", list)()

    @contextmanager
    def importing(self, workspace: str) -> Iterator[None]:
        """An import of the workspace runs: ``compact_quiet`` leaves it alone (the
        import compacts as it goes and when it ends, ``ImportCompactions``, not at
        every pause of a slow embedder)."""
        with self._rebuild_lock:
            self._importing[workspace] = self._importing.get(workspace, 0) + 1
        try:
            yield
        finally:
            with self._rebuild_lock:
                self._importing[workspace] -= 1
                if not self._importing[workspace]:
                    del self._importing[workspace]

    def compact_quiet(self, quiet: float | None = None) -> dict[str, dict[str, Any]]:
        """The service's upkeep, between its retry rounds: compact (``compact``) each
        workspace that saves wrote and that no save has reached for ``quiet`` seconds
        (default ``QUIET_SECONDS``), unless an import of it runs, and each workspace
        whose compaction failed once its retry is due; in its first round, also each
        workspace an earlier process wrote since its last compaction or left half
        compacted (``owed_compactions``: the service was stopped meanwhile). Imports
        compact on their own; without this, what saves write would stay searched by
        brute force until a rebuild. Returns what was compacted, per workspace."""
        settled = getattr(self.index, "settled_writes", None)
        if settled is None:  # an engine that indexes on its own
            return {}
        if not self._upkept:
            self._upkept = True
            left: list[str] = getattr(self.index, "owed_compactions", list)()
            with self._rebuild_lock:
                for workspace in left:
                    self._compaction_retries.setdefault(workspace, (0.0, 0))
        now = time.monotonic()
        with self._rebuild_lock:
            due = {w for w, (at, _) in self._compaction_retries.items() if at <= now}
        compacted = {}
        for workspace in sorted(due.union(settled(QUIET_SECONDS if quiet is None else quiet))):
            with self._rebuild_lock:
                if workspace in self._importing:
                    continue
            if (done := self.compact(workspace)) is not None and "failed" not in done:
                compacted[workspace] = done
                log.info("compacted the index of workspace %s: %s", workspace, done)
        return compacted

    def _prepare(self, workspace: str, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, Prepared]:
        """The cards' vectors from their current state, computed outside every lock
        (a plain read, then the embedder)."""
        with self.archive.transaction(workspace) as tx:
            language = tx.require_workspace().language
            cards = tx.cards(card_uuids)
        present = [cards[i] for i in card_uuids if i in cards]
        if not present:
            return {}
        prepared = self._embed(present, language)
        crash_point("projector.after_embedding")
        return {
            card_id_to_uuid(card.id): item for card, item in zip(present, prepared, strict=True)
        }

    def _embed(self, cards: list[Card], language: str) -> list[Prepared]:
        return self._vectors(self._inputs(cards, language))

    def _inputs(self, cards: Sequence[ProjectedCard], language: str) -> ProjectionInputs:
        """What the cards' projections are computed from, and their BM25 vectors (which
        need no embedder)."""
        texts = [indexed_text(card) for card in cards]
        # An explained error also gets a symptom projection, its error text (the
        # context), where the engine keeps one.
        symptoms = [_symptom(card, self.index) for card in cards]
        encoder = self.encoder(language)
        # BM25 indexes the whole text: only the dense input is bounded (the encoder
        # takes ~3 ms for 100 000 characters, one word of 20 000 included).
        return ProjectionInputs(
            texts,
            symptoms,
            [self.embedder.bound(text) for text in texts],
            [encoder.encode_document(text) for text in texts],
        )

    def _vectors(self, inputs: ProjectionInputs) -> list[Prepared]:
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

    def _write(
        self,
        workspace: str,
        card_uuids: list[uuid.UUID],
        prepared: dict[uuid.UUID, Prepared],
        unavailable: IndexUnavailable | EmbedderUnavailable | None,
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
                    held.enter_context(self.index.session())
                except IndexUnavailable as exc:
                    unavailable = exc
            with self.archive.transaction(workspace, lock=True) as tx:
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
        unavailable: IndexUnavailable | EmbedderUnavailable | None,
        embed_changed: bool,
    ) -> tuple[SyncReport, list[uuid.UUID]]:
        workspace = tx.require_workspace()
        language = workspace.language
        current = self.fingerprint(language)
        cards = tx.cards(card_uuids)
        operations = tx.operations_for(card_uuids)
        present = [cards[i] for i in card_uuids if i in cards]
        gone = [i for i in card_uuids if i not in cards]
        changed: list[uuid.UUID] = []
        try:
            if unavailable is not None:
                raise unavailable
            if self.profile is not None and workspace.embedder != self.profile:
                # another process switched the workspace's embedder since this one read
                # it: these vectors are of the profile it left; the work stays pending,
                # for a projection with the new one
                raise IndexUnavailable(
                    f"the embedder of workspace '{workspace.id}' is now '{workspace.embedder}'"
                    f" (was '{self.profile}' when this projection began): projected again",
                    details={"workspace": workspace.id, "embedder": workspace.embedder},
                )
            ready: list[tuple[Card, Prepared]] = []
            stale = []
            for card in present:
                item = prepared.get(card_id_to_uuid(card.id))
                if (
                    item is not None
                    and item.text == indexed_text(card)
                    and item.symptom == _symptom(card, self.index)
                ):
                    ready.append((card, item))
                else:
                    stale.append(card)
            if stale and embed_changed:
                ready += zip(stale, self._embed(stale, language), strict=True)
            elif stale:
                # Edited since it was embedded: that edit's own propagation may already
                # have written it (then nothing is left to do), else embed it again.
                states = tx.projection_states([card_id_to_uuid(card.id) for card in stale])
                changed = [i for i, state in states.items() if not state.current(current)]
            if ready:
                self.index.upsert(_points(ready, current))
            if gone:
                self.index.delete(workspace.id, gone)
            crash_point("projector.after_index_write")
        except (IndexUnavailable, EmbedderUnavailable) as exc:
            # Saved, index update incomplete: every card keeps (or gets) its pending
            # operation, with the error, and stays out of recall until retried.
            for card in present:
                if card_id_to_uuid(card.id) not in operations:
                    tx.enqueue(card_id_to_uuid(card.id), "upsert", card.revision)
            for card_uuid in gone:
                if card_uuid not in operations:
                    tx.enqueue(card_uuid, "delete", NO_REVISION)
            tx.record_failure(card_uuids, exc.message)
            return SyncReport(failed=card_uuids, error=exc.message), []
        _record(tx, current, ready)
        if gone:
            tx.forget_projections(gone)
            for card_uuid in gone:
                tx.clear_operation(card_uuid, operations.get(card_uuid, ("delete", NO_REVISION))[1])
        crash_point("projector.after_clear_operation")
        return SyncReport(indexed=len(ready), deleted=len(gone)), changed

    # --- entry points ----------------------------------------------------------------

    def propagate(self, workspace: str, card_uuid: uuid.UUID) -> IndexOutcome:
        """After a committed mutation: bring this card's projection up to date."""
        report = self.sync(workspace, [card_uuid])
        operation = "delete" if report.deleted else "upsert"
        if report.failed:
            with self.archive.transaction(workspace) as tx:
                pending = tx.operations_for([card_uuid]).get(card_uuid, (operation, 0))[0]
            return IndexOutcome("pending", pending, report.error)
        return IndexOutcome("current", operation)

    def retry(self, workspace: str, card_id: str) -> IndexOutcome:
        """Retry a card's projection from its current state: re-index the card, or
        remove the point of a deleted card. Never restores anything."""
        card_uuid = card_id_to_uuid(card_id)
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            known = tx.projection_states([card_uuid]) or tx.operations_for([card_uuid])
        if not known:
            raise NotFound(
                f"card {card_id} does not exist in workspace '{workspace}' and has no pending index work",
                details={"id": card_id},
            )
        return self.propagate(workspace, card_uuid)

    def drain(self, workspace: str) -> dict[str, Any]:
        """Retry every pending operation of the workspace, oldest first."""
        report = SyncReport()
        attempted: set[uuid.UUID] = set()
        while True:
            with self.archive.transaction(workspace) as tx:
                tx.require_workspace()
                batch = [
                    i for i in tx.operation_ids(limit=BATCH + len(attempted)) if i not in attempted
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
        _raise_if_failed(report, summary)
        return summary

    def rebuild(self, workspace: str, progress: Progress | None = None) -> dict[str, Any]:
        """See ``_rebuild``; one at a time per workspace (a second one would write the
        same generation and switch it twice)."""
        with self.rebuilding(workspace):
            return self._rebuild(workspace, progress)

    def rebuilding_now(self, workspace: str) -> bool:
        """Whether this projector is rebuilding (or compacting, or switching) the
        workspace's projection: recall reads the serving generation meanwhile."""
        with self._rebuild_lock:
            return workspace in self._rebuilding

    @contextmanager
    def rebuilding(self, workspace: str) -> Iterator[None]:
        """Hold the workspace as being rebuilt into this projector's collection: a
        rebuild, a compaction or an embedder switch, one at a time in this process and
        across every process on the archive (service replicas: an advisory lock, which
        a process that dies releases); ``Conflict`` otherwise."""
        with self._rebuild_lock:
            if workspace in self._rebuilding:
                raise _rebuild_running(workspace)
            self._rebuilding.add(workspace)
        try:
            with self.archive.held(f"rebuild:{self.collection}:{workspace}") as taken:
                if not taken:
                    raise _rebuild_running(workspace, elsewhere=True)
                yield
        finally:
            with self._rebuild_lock:
                self._rebuilding.discard(workspace)

    def _rebuild(self, workspace: str, progress: Progress | None) -> dict[str, Any]:
        """Re-index every card of the workspace from the archive into a new generation
        of its projection, beside the one serving recall, and switch to it at the end
        (engines without generations are rewritten in place, see ``begin_generation``);
        remove points of deleted cards; then project the outbox's pending work.

        Saves keep working meanwhile: they reach the new generation themselves (written
        to both in this process) or through the outbox. Interrupted, the next rebuild
        takes the same generation up again and skips the cards it already holds at their
        current projection. Idempotent."""
        started = time.perf_counter()
        self.ensure_collection()
        # a damaged shard of this workspace is replaced, never a reason to refuse
        replaced = self.index.discard_unreadable(workspace)
        generation = begin_generation(self.index, workspace)
        with self.archive.transaction(workspace) as tx:
            language = tx.require_workspace().language
            revisions = tx.card_revisions()
        current = self.fingerprint(language)
        held = {record.id: record for record in generation.records()}
        skipped = {
            i
            for i, record in held.items()
            if generation.resumable
            and record.revision == revisions.get(i)
            and record.fingerprint == current
        }
        todo = sorted(i for i in revisions if i not in skipped)
        total = len(revisions)
        done = [len(skipped)]

        def projected(count: int) -> None:
            done[0] += count
            if progress:
                progress(done[0], total)

        if progress:
            progress(done[0], total)
        try:
            report = self._project(workspace, language, generation, todo, projected)
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted: the rebuild of workspace '{workspace}' stopped after {done[0]} of"
                f" {total} cards; run `tht memory index` again to "
                + (
                    "resume it (the cards already projected are skipped)"
                    if generation.resumable
                    else "start it over"
                ),
                details={
                    "workspace": workspace,
                    "cards": total,
                    "projected": done[0],
                    "resumable": generation.resumable,
                    "resume": "tht memory index",
                    "detached": False,
                },
            ) from None
        # points of cards deleted since (in place: every point of a card that is gone)
        with self.archive.transaction(workspace) as tx:
            existing = tx.card_revisions()
        orphans = [i for i in held if i not in existing]
        generation.delete(orphans)
        report.deleted += len(orphans)
        crash_point("index.before_optimize")
        generation.switch()
        # the outbox: saves that could not reach the new generation (another process
        # held the index), and work left pending by failures before the rebuild
        with self.archive.transaction(workspace) as tx:
            pending = tx.operation_ids(limit=1_000_000)
        for start in range(0, len(pending), BATCH):
            report.add(self.sync(workspace, pending[start : start + BATCH]))
        seconds = time.perf_counter() - started
        summary = {
            "workspace": workspace,
            "cards": total,
            "indexed": report.indexed,
            "skipped_current": len(skipped),
            "removed_points": report.deleted,
            "failed": len(report.failed),
            "generation": "new" if generation.resumable else "in_place",
            "seconds": round(seconds, 3),
            "cards_per_second": round(report.indexed / seconds, 1) if seconds else None,
        }
        if replaced:
            summary["replaced_unreadable"] = replaced
        _raise_if_failed(report, summary)
        return summary

    def _project(
        self,
        workspace: str,
        language: str,
        generation: IndexGeneration,
        todo: list[uuid.UUID],
        projected: Callable[[int], None],
        unrecorded: dict[uuid.UUID, RecordedProjection] | None = None,
    ) -> SyncReport:
        """The rebuild's pipeline, three stages joined by bounded queues, so the embedder
        never waits for the archive or the index, nor for work that needs no embedder:
        a thread reads the cards in chunks and computes their texts, embedder inputs
        and BM25 vectors; this thread only embeds (a remote embedder gets the next
        chunk's batches as soon as the last ones are sent; one that embeds a batch at a
        time gets each chunk in parts, see ``SEQUENTIAL_PART``); a thread builds each
        chunk's (or part's) points and writes them in one locked transaction (points in
        bulk, projections and cleared operations in one statement each). With
        ``unrecorded``, the points are only written, and what the archive would record of
        them is kept there (an embedder switch records them all at once, when it
        switches)."""
        report = SyncReport()
        current = self.fingerprint(language)
        stop = threading.Event()
        loaded: queue.Queue[tuple[list[Card], ProjectionInputs] | None] = queue.Queue(maxsize=2)
        embedded: queue.Queue[tuple[list[Card], list[Prepared]] | None] = queue.Queue(maxsize=2)
        failures: list[BaseException] = []

        def read() -> None:
            try:
                for start in range(0, len(todo), CHUNK):
                    ids = todo[start : start + CHUNK]
                    with self.archive.transaction(workspace) as tx:
                        found = tx.cards(ids, links=False)
                    cards = [found[i] for i in ids if i in found]
                    if not hand_over(loaded, (cards, self._inputs(cards, language)), stop):
                        return
            except BaseException as exc:
                failures.append(exc)
                stop.set()
            finally:
                hand_over(loaded, None, stop)

        def index_segments() -> None:
            try:
                generation.optimize()
            except BaseException as exc:
                failures.append(exc)
                stop.set()

        def write() -> None:
            written = 0
            indexing: Stage | None = None
            try:
                while (item := take_over(embedded, stop)) is not None:
                    cards, prepared = item
                    if unrecorded is None:
                        report.add(
                            self._write_chunk(workspace, generation, current, cards, prepared)[0]
                        )
                    else:
                        self._write_unrecorded(generation, current, cards, prepared, unrecorded)
                        report.indexed += len(cards)
                    crash_point("index.after_batch")
                    projected(len(cards))
                    pause_point("index.after_batch")
                    written += len(cards)
                    if written >= OPTIMIZE_EVERY and (indexing is None or not indexing.running()):
                        # index the full segments while writing and embedding go on (an
                        # Edge generation holds the writes back meanwhile, see EdgeGeneration)
                        indexing = start_stage(index_segments, "rebuild-index")
                        written = 0
            except BaseException as exc:
                failures.append(exc)
                stop.set()
            finally:
                if indexing is not None:
                    indexing.wait()  # the switch (or the next rebuild) finds it open

        threads = [start_stage(read, "rebuild-read"), start_stage(write, "rebuild-write")]
        try:
            chunks = iter(lambda: take_over(loaded, stop), None)
            for cards, inputs in (part for c in chunks for part in self._embedding_parts(*c)):
                item = (cards, self._vectors(inputs) if cards else [])
                crash_point("projector.after_embedding")
                if not hand_over(embedded, item, stop):
                    break
            hand_over(embedded, None, stop)
            while not threads[1].wait(0.1):  # a wait that Ctrl-C can interrupt
                pass
        finally:
            stop.set()  # the writer ends its chunk's transaction, the reader its read
            for thread in threads:
                thread.wait()
        if failures:
            raise failures[0]
        return report

    def _embedding_parts(
        self, cards: list[Card], inputs: ProjectionInputs
    ) -> Iterator[tuple[list[Card], ProjectionInputs]]:
        """A read chunk as the embedding stage takes it: whole for an embedder with
        batches in flight, else in parts of ``SEQUENTIAL_PART`` cards."""
        if getattr(self.embedder, "concurrency", 1) > 1 or len(cards) <= SEQUENTIAL_PART:
            yield cards, inputs
            return
        for start in range(0, len(cards), SEQUENTIAL_PART):
            part = slice(start, start + SEQUENTIAL_PART)
            yield (
                cards[part],
                ProjectionInputs(
                    inputs.texts[part],
                    inputs.symptoms[part],
                    inputs.cuts[part],
                    inputs.sparse[part],
                ),
            )

    def _write_chunk(
        self,
        workspace: str,
        generation: IndexGeneration,
        current: str,
        cards: list[Card],
        prepared: list[Prepared],
    ) -> tuple[SyncReport, list[uuid.UUID]]:
        """Under the workspace's lock: the chunk's points, those of cards still at the
        revision embedded (a card edited since was projected by its own save, or waits
        in the outbox), their recorded projections and cleared operations. The points
        are built before the lock is taken. Returns the report and the cards left out
        (edited or deleted since they were read)."""
        pairs = list(zip(cards, prepared, strict=True))
        points = encode_points(self.index, _points(pairs, current))
        with self.index.session(), self.archive.transaction(workspace, lock=True) as tx:
            if self.profile is not None and tx.require_workspace().embedder != self.profile:
                raise Conflict(
                    f"the embedder of workspace '{workspace}' was switched (by another"
                    f" process) while it was projected with '{self.profile}': run"
                    " `tht memory index` again",
                    details={"workspace": workspace, "embedder": self.profile},
                )
            now = tx.revisions_of([point.id for point in points])
            kept = [n for n, point in enumerate(points) if now.get(point.id) == point.revision]
            ready = [pairs[n] for n in kept]
            generation.upsert([points[n] for n in kept])
            crash_point("projector.after_index_write")
            _record(tx, current, ready)
            crash_point("projector.after_clear_operation")
        crash_point("projector.after_archive_commit")
        left = [point.id for point in points if now.get(point.id) != point.revision]
        return SyncReport(indexed=len(ready)), left

    def _write_unrecorded(
        self,
        generation: IndexGeneration,
        current: str,
        cards: list[Card],
        prepared: list[Prepared],
        unrecorded: dict[uuid.UUID, RecordedProjection],
    ) -> None:
        pairs = list(zip(cards, prepared, strict=True))
        points = encode_points(self.index, _points(pairs, current))
        with self.index.session():
            generation.upsert(points)
        unrecorded.update((r.card_uuid, r) for r in _recorded(pairs))

    # --- a workspace's embedder switched -----------------------------------------------

    def build_for_switch(
        self, workspace: str, progress: Progress | None = None
    ) -> tuple[str, dict[uuid.UUID, RecordedProjection]]:
        """Project every card of the workspace into a new generation of this
        projector's index (another profile's than the one serving its recall), switch
        this index to it, and record nothing: the workspace's recall goes on with its
        recorded profile meanwhile. Returns the fingerprint of these projections and
        what the archive must record of each card written (``finish_switch`` does,
        when the workspace switches to this profile). Held as a rebuild: one at a time
        per workspace."""
        with self.rebuilding(workspace):
            self.ensure_collection()
            self.index.discard_unreadable(workspace)
            generation = begin_generation(self.index, workspace)
            with self.archive.transaction(workspace) as tx:
                language = tx.require_workspace().language
                revisions = tx.card_revisions()
            current = self.fingerprint(language)
            todo = sorted(revisions)
            done = [0]

            def projected(count: int) -> None:
                done[0] += count
                if progress:
                    progress(done[0], len(todo))

            if progress:
                progress(0, len(todo))
            unrecorded: dict[uuid.UUID, RecordedProjection] = {}
            self._project(workspace, language, generation, todo, projected, unrecorded)
            stale = [record.id for record in generation.records() if record.id not in revisions]
            generation.delete(stale)
            generation.switch()
            return current, unrecorded

    # --- projections embedded ahead (an import) ------------------------------------

    def inputs_of(self, cards: Sequence[ProjectedCard], language: str) -> ProjectionInputs:
        """What the projections of these cards (written or not yet) are computed from:
        their indexed texts, symptoms, embedder inputs and BM25 vectors."""
        return self._inputs(cards, language)

    def embed_inputs(self, inputs: ProjectionInputs) -> list[Prepared]:
        """The vectors of ``inputs_of``: one embedding call, outside every lock."""
        return self._vectors(inputs)

    def write_embedded(
        self, workspace: str, language: str, prepared: dict[uuid.UUID, Prepared]
    ) -> tuple[int, list[uuid.UUID]]:
        """Index cards whose vectors were computed before (an import embeds its records
        as it reads them, before their archive batch is written): each card is read,
        and its point written only if its indexed text and symptom are the ones
        embedded and its revision is still the one read (under the lock, as a rebuild's
        chunk). Returns how many were indexed and the cards left for ``sync`` (another
        text, edited or deleted meanwhile)."""
        self.ensure_collection()
        ids = list(prepared)
        with self.archive.transaction(workspace) as tx:
            found = tx.cards(ids, links=False)
        cards: list[Card] = []
        items: list[Prepared] = []
        left: list[uuid.UUID] = []
        for card_uuid in ids:
            card, item = found.get(card_uuid), prepared[card_uuid]
            if (
                card is not None
                and item.text == indexed_text(card)
                and item.symptom == _symptom(card, self.index)
            ):
                cards.append(card)
                items.append(item)
            else:
                left.append(card_uuid)
        if not cards:
            return 0, left
        report, edited = self._write_chunk(
            workspace,
            InPlaceGeneration(self.index, workspace),
            self.fingerprint(language),
            cards,
            items,
        )
        return report.indexed, left + edited

    def check(self, workspace: str, repair: bool = False) -> dict[str, Any]:
        """Drift between archive and index: missing, stale, orphan and wrong-format points,
        and damaged vectors in a sample of the rest.
        Drift raises ``IndexDrift`` (exit 8) with the report in its details, unless
        ``repair`` fixed it."""
        with self.archive.transaction(workspace) as tx:
            language = tx.require_workspace().language
            cards = tx.card_revisions()
            pending = set(tx.operation_ids(limit=1_000_000))
        current = self.fingerprint(language)
        points = (
            {p.id: p for p in self.index.scroll_ids(workspace)}
            if self.index.collection_exists()
            else {}
        )
        drift = {
            "missing": sorted(i for i in cards if i not in points),
            "stale": sorted(i for i, r in cards.items() if i in points and points[i].revision != r),
            "wrong_fingerprint": sorted(
                i for i in cards if i in points and points[i].fingerprint != current
            ),
            "orphan": sorted(i for i in points if i not in cards),
        }
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
            todo = list(dict.fromkeys([i for ids in drift.values() for i in ids] + sorted(pending)))
            repaired = SyncReport()
            for start in range(0, len(todo), BATCH):
                repaired.add(self.sync(workspace, todo[start : start + BATCH]))
            report["repaired"] = {
                "indexed": repaired.indexed,
                "deleted": repaired.deleted,
                "failed": len(repaired.failed),
            }
            _raise_if_failed(repaired, report)
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

    def _damaged_vectors(
        self, workspace: str, projected: dict[uuid.UUID, int]
    ) -> tuple[list[uuid.UUID], int, str | None]:
        """A sample of the cards the index holds at their current projection, whose
        stored dense vectors do not survive a check: unreadable, not finite, zero, or
        far from the card's text embedded again (storage overwritten behind the engine's
        back still answers recall, wrongly). A sample keeps ``check`` cheap; run it
        again, or ``tht memory index``, to cover more."""
        sample = sorted(random.sample(sorted(projected), min(VECTOR_SAMPLE, len(projected))))
        if not sample:
            return [], 0, None
        stored = self.index.dense_vectors(workspace, sample)
        with self.archive.transaction(workspace) as tx:
            cards = tx.cards(sample)
        # a card edited since its point was read would compare its new text with the
        # old vector: left out, not reported
        sample = [i for i in sample if i in cards and cards[i].revision == projected[i]]
        fresh: list[list[float]] | None = None
        error = None
        try:
            fresh = self.embedder.embed_passages([indexed_text(cards[i]) for i in sample])
        except EmbedderUnavailable as exc:  # what needs no embedder is still checked
            error = f"stored vectors only checked for soundness: {exc.message}"
        damaged = [
            i
            for n, i in enumerate(sample)
            if not _sound_vector(
                stored.get(i), fresh[n] if fresh else None, self.embedder.dimension
            )
        ]
        return damaged, len(sample), error


class ImportCompactions:
    """An import's compactions, for an engine that indexes nothing on its own (Qdrant
    Edge, ``IndexProjector.compact``). Each time the import has indexed another
    ``OPTIMIZE_EVERY`` points, one runs in a thread of its own while the import goes
    on (the import's writes reach its copy as saves do); when the import ends, one
    more indexes what is left, down to one segment the engine indexes, so the
    workspace ends as indexed as one compaction after the last card would leave it.
    Only that last stretch waits, as at the end of a rebuild: a single compaction at
    the end would make the import wait for the index build of all it wrote.

    When the import says how many points it will index (``expected``), its last stretch
    is compacted too while it writes: once the rest to index falls under
    ``IMPORT_TAIL``, a compaction starts, which lasts about as long as that rest takes
    to write, so the end usually finds fewer plain points than the engine indexes and
    waits for nothing but the end of that compaction."""

    def __init__(
        self, projector: IndexProjector, workspace: str, expected: int | None = None
    ) -> None:
        self.projector = projector
        self.workspace = workspace
        self._since = 0  # points indexed since the last compaction started
        self._left = expected  # points still to index, when known
        self._running: Stage | None = None
        self._outcomes: list[dict[str, Any]] = []  # what each one in a thread returned
        # an earlier process's due (a rerun of an import interrupted while it compacted):
        # the end compacts even if this run indexes nothing
        self.owed = projector.owes_compaction(workspace)

    def indexed(self, points: int) -> None:
        """The import indexed ``points`` more (called by one thread)."""
        self._since += points
        before = self._left
        if before is not None:
            self._left = before - points
        if self._running and self._running.running():
            return
        # the rest just fell under the tail, and enough is plain since the last one
        tail = (
            before is not None
            and before - points <= IMPORT_TAIL < before
            and self._since >= IMPORT_TAIL
        )
        if self._since < OPTIMIZE_EVERY and not tail:
            return
        self._since = 0
        # the last stretch is compacted whatever the engine's threshold (down to what it
        # indexes), as the end would
        least = 1 if tail else None
        self._running = start_stage(lambda: self._compact(least), "import-compaction")

    def _compact(self, least: int | None) -> None:
        try:
            outcome = self.projector.compact(self.workspace, least=least)
        except ThothError as exc:  # the collection let go, say: the end tries again
            outcome = {"failed": exc.message}
        if outcome is not None:
            self._outcomes.append(outcome)

    def finish(
        self,
        starting: Callable[[int], None] | None = None,
        interrupted: threading.Event | None = None,
    ) -> dict[str, Any] | None:
        """Once the import wrote its last card: wait for the compaction running, then
        compact what is left. Returns the last one's outcome (``IndexProjector.compact``),
        after compactions while the import went on with how many ran and, in
        ``seconds``, how long the import waited here; None when none had anything to do.

        Raises KeyboardInterrupt as soon as ``interrupted`` is set (a Ctrl-C): the
        compaction is left to go on without the import (in a service), or to die with
        the command's process, its copy discarded by the next one; every card is
        written and searchable either way."""

        def wait(stage: Stage) -> None:
            while not stage.wait(0.1):
                if interrupted is not None and interrupted.is_set():
                    raise KeyboardInterrupt

        started = time.perf_counter()
        if self._running is not None:
            wait(self._running)
        during = [o for o in self._outcomes if "failed" not in o]
        ended: list[dict[str, Any] | BaseException | None] = []

        def compact() -> None:
            try:
                ended.append(
                    self.projector.compact(
                        self.workspace, starting, least=1 if during or self.owed else None
                    )
                )
            except BaseException as exc:
                ended.append(exc)

        wait(start_stage(compact, "import-compaction"))
        if isinstance(last := ended[0], BaseException):
            raise last
        if during:
            waited = round(time.perf_counter() - started, 3)
            return {**(last or during[-1]), "seconds": waited, "while_importing": len(during)}
        if last is None and self._outcomes:  # only failures, and nothing to do at the end
            return self._outcomes[-1]
        return last


def _rebuild_running(workspace: str, *, elsewhere: bool = False) -> Conflict:
    return Conflict(
        f"a rebuild of workspace '{workspace}' (or a compaction of its index, which ends an"
        " import and follows many saves, or a switch of its embedder) is already running"
        + (" in another process (another service replica)" if elsewhere else "")
        + "; wait for it",
        details={"workspace": workspace, **({"elsewhere": True} if elsewhere else {})},
    )


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


def _points(ready: list[tuple[Card, Prepared]], current: str) -> list[IndexPoint]:
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


def _recorded(ready: list[tuple[Card, Prepared]]) -> list[RecordedProjection]:
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


def _record(tx: ArchiveTx, current: str, ready: list[tuple[Card, Prepared]]) -> None:
    """The projections just written, and the operations they complete, in bulk."""
    tx.record_projections(current, _recorded(ready))
    tx.clear_operations({card_id_to_uuid(card.id): card.revision for card, _ in ready})


def _ignore(count: int) -> None:
    return None


def _raise_if_failed(report: SyncReport, summary: dict[str, Any]) -> None:
    """Work left pending is a failure for an operator command (exit code 8), with the
    summary of what did succeed in the details."""
    if report.failed:
        raise IndexUnavailable(
            f"{len(report.failed)} cards could not be indexed and stay pending: {report.error}",
            details=summary,
        )


def _symptom(card: ProjectedCard, index: SearchIndex) -> str | None:
    """The text of an explained error's symptom projection, where the engine keeps one."""
    if card.family == "explained_error" and card.context and stores_symptoms(index):
        return card.context
    return None
