"""Rebuilds of a workspace's projection, and the projection of every card with
another embedder profile (an embedder switch), into a new generation beside the one
serving recall."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tht.errors import Conflict, Interrupted
from tht.faults import crash_point
from tht.memory.archive.port import RecordedProjection
from tht.memory.index.port import IndexGeneration, PointRecord, begin_generation
from tht.memory.indexing.claims import WorkspaceClaims
from tht.memory.indexing.pipeline import ChunkPipeline
from tht.memory.indexing.target import IndexTarget, SyncReport, raise_if_failed
from tht.memory.indexing.writes import IndexWrites

Progress = Callable[[int, int], None]


@dataclass
class _Plan:
    """What a rebuild found when it began: the generation it writes, what that holds,
    the cards to project and those it skips (current in a resumed generation)."""

    generation: IndexGeneration
    language: str
    revisions: dict[uuid.UUID, int]
    held: dict[uuid.UUID, PointRecord]
    skipped: set[uuid.UUID]
    todo: list[uuid.UUID]
    progress: Progress | None
    done: list[int] = field(default_factory=lambda: [0])

    def projected(self, count: int) -> None:
        self.done[0] += count
        if self.progress:
            self.progress(self.done[0], len(self.revisions))


class Rebuilds:
    def __init__(
        self,
        target: IndexTarget,
        chunks: ChunkPipeline,
        writes: IndexWrites,
        claims: WorkspaceClaims,
    ) -> None:
        self.target = target
        self.chunks = chunks
        self.writes = writes
        self.claims = claims

    def rebuild(self, workspace: str, progress: Progress | None = None) -> dict[str, Any]:
        """See ``_rebuild``; one at a time per workspace (a second one would write the
        same generation and switch it twice)."""
        with self.rebuilding(workspace):
            return self._rebuild(workspace, progress)

    def rebuilding_now(self, workspace: str) -> bool:
        """Whether this projector is rebuilding (or compacting, or switching) the
        workspace's projection: recall reads the serving generation meanwhile."""
        return self.claims.claimed(workspace)

    @contextmanager
    def rebuilding(self, workspace: str) -> Iterator[None]:
        """Hold the workspace as being rebuilt into this projector's collection: a
        rebuild, a compaction or an embedder switch, one at a time in this process and
        across every process on the archive (service replicas: an advisory lock, which
        a process that dies releases); ``Conflict`` otherwise."""
        if not self.claims.claim(workspace):
            raise rebuild_running(workspace)
        try:
            held = self.target.archive.held(f"rebuild:{self.target.collection}:{workspace}")
            with held as taken:
                if not taken:
                    raise rebuild_running(workspace, elsewhere=True)
                yield
        finally:
            self.claims.release(workspace)

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
        self.target.ensure_collection()
        # a damaged shard of this workspace is replaced, never a reason to refuse
        replaced = self.target.index.discard_unreadable(workspace)
        plan = self._plan(workspace, progress)
        if progress:
            progress(plan.done[0], len(plan.revisions))
        try:
            report = self.chunks.project(
                workspace, plan.language, plan.generation, plan.todo, plan.projected
            )
        except KeyboardInterrupt:
            raise _interrupted(workspace, plan) from None
        # points of cards deleted since (in place: every point of a card that is gone)
        with self.target.archive.transaction(workspace) as tx:
            existing = tx.card_revisions()
        orphans = [i for i in plan.held if i not in existing]
        plan.generation.delete(orphans)
        report.deleted += len(orphans)
        crash_point("index.before_optimize")
        plan.generation.switch()
        # the outbox: saves that could not reach the new generation (another process
        # held the index), and work left pending by failures before the rebuild
        with self.target.archive.transaction(workspace) as tx:
            pending = tx.operation_ids(limit=1_000_000)
        report.add(self.writes.sync_in_batches(workspace, pending))
        summary = _summary(workspace, plan, report, time.perf_counter() - started)
        if replaced:
            summary["replaced_unreadable"] = replaced
        raise_if_failed(report, summary)
        return summary

    def _plan(self, workspace: str, progress: Progress | None) -> _Plan:
        generation = begin_generation(self.target.index, workspace)
        with self.target.archive.transaction(workspace) as tx:
            language = tx.require_workspace().language
            revisions = tx.card_revisions()
        current = self.target.fingerprint(language)
        held = {record.id: record for record in generation.records()}
        skipped = {
            i
            for i, record in held.items()
            if generation.resumable
            and record.revision == revisions.get(i)
            and record.fingerprint == current
        }
        todo = sorted(i for i in revisions if i not in skipped)
        plan = _Plan(generation, language, revisions, held, skipped, todo, progress)
        plan.done[0] = len(skipped)
        return plan

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
        target = self.target
        with self.rebuilding(workspace):
            target.ensure_collection()
            target.index.discard_unreadable(workspace)
            generation = begin_generation(target.index, workspace)
            with target.archive.transaction(workspace) as tx:
                language = tx.require_workspace().language
                revisions = tx.card_revisions()
            current = target.fingerprint(language)
            todo = sorted(revisions)
            done = [0]

            def projected(count: int) -> None:
                done[0] += count
                if progress:
                    progress(done[0], len(todo))

            if progress:
                progress(0, len(todo))
            unrecorded: dict[uuid.UUID, RecordedProjection] = {}
            self.chunks.project(workspace, language, generation, todo, projected, unrecorded)
            stale = [record.id for record in generation.records() if record.id not in revisions]
            generation.delete(stale)
            generation.switch()
            return current, unrecorded


def rebuild_running(workspace: str, *, elsewhere: bool = False) -> Conflict:
    return Conflict(
        f"a rebuild of workspace '{workspace}' (or a compaction of its index, which ends an"
        " import and follows many saves, or a switch of its embedder) is already running"
        + (" in another process (another service replica)" if elsewhere else "")
        + "; wait for it",
        details={"workspace": workspace, **({"elsewhere": True} if elsewhere else {})},
    )


def _interrupted(workspace: str, plan: _Plan) -> Interrupted:
    total, resumable = len(plan.revisions), plan.generation.resumable
    return Interrupted(
        f"interrupted: the rebuild of workspace '{workspace}' stopped after {plan.done[0]} of"
        f" {total} cards; run `tht memory index` again to "
        + ("resume it (the cards already projected are skipped)" if resumable else "start it over"),
        details={
            "workspace": workspace,
            "cards": total,
            "projected": plan.done[0],
            "resumable": resumable,
            "resume": "tht memory index",
            "detached": False,
        },
    )


def _summary(workspace: str, plan: _Plan, report: SyncReport, seconds: float) -> dict[str, Any]:
    return {
        "workspace": workspace,
        "cards": len(plan.revisions),
        "indexed": report.indexed,
        "skipped_current": len(plan.skipped),
        "removed_points": report.deleted,
        "failed": len(report.failed),
        "generation": "new" if plan.generation.resumable else "in_place",
        "seconds": round(seconds, 3),
        "cards_per_second": round(report.indexed / seconds, 1) if seconds else None,
    }
