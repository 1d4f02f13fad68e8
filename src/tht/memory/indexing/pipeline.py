"""The rebuild's pipeline: cards read, embedded and written in chunks by three stages
joined by bounded queues, so the embedder never waits for the archive or the index,
nor for work that needs no embedder. Rebuilds, embedder switches and the bulk
projection of an import run through it."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterator

from tht.errors import Conflict
from tht.faults import crash_point, pause_point
from tht.memory.archive.port import RecordedProjection
from tht.memory.embedding import BatchingEmbedder
from tht.memory.embedding.query_cache import uncached
from tht.memory.index.port import IndexGeneration, encode_points
from tht.memory.indexing.target import (
    IndexTarget,
    Prepared,
    ProjectionInputs,
    SyncReport,
    points,
    record,
    recorded,
)
from tht.memory.model import Card
from tht.memory.stages import Stage, hand_over, start_stage, take_over

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

Loaded = tuple[list[Card], ProjectionInputs]
Embedded = tuple[list[Card], list[Prepared]]


class ChunkPipeline:
    """Projects many cards of a workspace into a generation of the index (see
    ``project``), and writes one chunk of embedded cards under the workspace's lock
    (``write_chunk``, also for an import's cards embedded ahead)."""

    def __init__(self, target: IndexTarget) -> None:
        self.target = target

    def project(
        self,
        workspace: str,
        language: str,
        generation: IndexGeneration,
        todo: list[uuid.UUID],
        projected: Callable[[int], None],
        unrecorded: dict[uuid.UUID, RecordedProjection] | None = None,
    ) -> SyncReport:
        """The three stages: a thread reads the cards in chunks and computes their
        texts, embedder inputs and BM25 vectors; this thread only embeds (a remote
        embedder gets the next chunk's batches as soon as the last ones are sent; one
        that embeds a batch at a time gets each chunk in parts, see
        ``SEQUENTIAL_PART``); a thread builds each chunk's (or part's) points and
        writes them in one locked transaction (points in bulk, projections and cleared
        operations in one statement each). With ``unrecorded``, the points are only
        written, and what the archive would record of them is kept there (an embedder
        switch records them all at once, when it switches)."""
        run = _PipelineRun(self, workspace, language, generation, projected, unrecorded)
        return run.run(todo)

    def embedding_parts(self, cards: list[Card], inputs: ProjectionInputs) -> Iterator[Loaded]:
        """A read chunk as the embedding stage takes it: whole for an embedder with
        batches in flight, else in parts of ``SEQUENTIAL_PART`` cards."""
        # the model's own concurrency, past the service's query-embedding cache
        embedder = uncached(self.target.embedder)
        in_flight = isinstance(embedder, BatchingEmbedder) and embedder.concurrency > 1
        if in_flight or len(cards) <= SEQUENTIAL_PART:
            yield cards, inputs
            return
        for start in range(0, len(cards), SEQUENTIAL_PART):
            part = slice(start, start + SEQUENTIAL_PART)
            yield cards[part], inputs.part(part)

    def write_chunk(
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
        target = self.target
        pairs = list(zip(cards, prepared, strict=True))
        built = encode_points(target.index, points(pairs, current))
        with target.index.session(), target.archive.transaction(workspace, lock=True) as tx:
            if target.profile is not None and tx.require_workspace().embedder != target.profile:
                raise Conflict(
                    f"the embedder of workspace '{workspace}' was switched (by another"
                    f" process) while it was projected with '{target.profile}': run"
                    " `tht memory index` again",
                    details={"workspace": workspace, "embedder": target.profile},
                )
            now = tx.revisions_of([point.id for point in built])
            kept = [n for n, point in enumerate(built) if now.get(point.id) == point.revision]
            ready = [pairs[n] for n in kept]
            generation.upsert([built[n] for n in kept])
            crash_point("projector.after_index_write")
            record(tx, current, ready)
            crash_point("projector.after_clear_operation")
        crash_point("projector.after_archive_commit")
        left = [point.id for point in built if now.get(point.id) != point.revision]
        return SyncReport(indexed=len(ready)), left

    def write_unrecorded(
        self,
        generation: IndexGeneration,
        current: str,
        cards: list[Card],
        prepared: list[Prepared],
        unrecorded: dict[uuid.UUID, RecordedProjection],
    ) -> None:
        pairs = list(zip(cards, prepared, strict=True))
        built = encode_points(self.target.index, points(pairs, current))
        with self.target.index.session():
            generation.upsert(built)
        unrecorded.update((r.card_uuid, r) for r in recorded(pairs))


class _PipelineRun:
    """One run of ``ChunkPipeline.project``: its queues, its stop signal and the
    first failure of a stage."""

    def __init__(
        self,
        pipeline: ChunkPipeline,
        workspace: str,
        language: str,
        generation: IndexGeneration,
        projected: Callable[[int], None],
        unrecorded: dict[uuid.UUID, RecordedProjection] | None,
    ) -> None:
        self.pipeline = pipeline
        self.target = pipeline.target
        self.workspace = workspace
        self.language = language
        self.generation = generation
        self.projected = projected
        self.unrecorded = unrecorded
        self.current = self.target.fingerprint(language)
        self.report = SyncReport()
        self.stop = threading.Event()
        self.loaded: queue.Queue[Loaded | None] = queue.Queue(maxsize=2)
        self.embedded: queue.Queue[Embedded | None] = queue.Queue(maxsize=2)
        self.failures: list[BaseException] = []

    def run(self, todo: list[uuid.UUID]) -> SyncReport:
        threads = [
            start_stage(lambda: self.read(todo), "rebuild-read"),
            start_stage(self.write, "rebuild-write"),
        ]
        try:
            self.embed()
            while not threads[1].wait(0.1):  # a wait that Ctrl-C can interrupt
                pass
        finally:
            self.stop.set()  # the writer ends its chunk's transaction, the reader its read
            for thread in threads:
                thread.wait()
        if self.failures:
            raise self.failures[0]
        return self.report

    def failed(self, exc: BaseException) -> None:
        self.failures.append(exc)
        self.stop.set()

    def read(self, todo: list[uuid.UUID]) -> None:
        target = self.target
        try:
            for start in range(0, len(todo), CHUNK):
                ids = todo[start : start + CHUNK]
                with target.archive.transaction(self.workspace) as tx:
                    found = tx.cards(ids, links=False)
                cards = [found[i] for i in ids if i in found]
                chunk = (cards, target.inputs(cards, self.language))
                if not hand_over(self.loaded, chunk, self.stop):
                    return
        except BaseException as exc:
            self.failed(exc)
        finally:
            hand_over(self.loaded, None, self.stop)

    def embed(self) -> None:
        chunks = iter(lambda: take_over(self.loaded, self.stop), None)
        parts = (part for c in chunks for part in self.pipeline.embedding_parts(*c))
        for cards, inputs in parts:
            item = (cards, self.target.vectors(inputs) if cards else [])
            crash_point("projector.after_embedding")
            if not hand_over(self.embedded, item, self.stop):
                break
        hand_over(self.embedded, None, self.stop)

    def index_segments(self) -> None:
        try:
            self.generation.optimize()
        except BaseException as exc:
            self.failed(exc)

    def write(self) -> None:
        written = 0
        indexing: Stage | None = None
        try:
            while (item := take_over(self.embedded, self.stop)) is not None:
                self.write_one(*item)
                written += len(item[0])
                if written >= OPTIMIZE_EVERY and (indexing is None or not indexing.running()):
                    # index the full segments while writing and embedding go on (an
                    # Edge generation holds the writes back meanwhile, see EdgeGeneration)
                    indexing = start_stage(self.index_segments, "rebuild-index")
                    written = 0
        except BaseException as exc:
            self.failed(exc)
        finally:
            if indexing is not None:
                indexing.wait()  # the switch (or the next rebuild) finds it open

    def write_one(self, cards: list[Card], prepared: list[Prepared]) -> None:
        pipeline, generation = self.pipeline, self.generation
        if self.unrecorded is None:
            written = pipeline.write_chunk(
                self.workspace, generation, self.current, cards, prepared
            )
            self.report.add(written[0])
        else:
            pipeline.write_unrecorded(generation, self.current, cards, prepared, self.unrecorded)
            self.report.indexed += len(cards)
        crash_point("index.after_batch")
        self.projected(len(cards))
        pause_point("index.after_batch")
