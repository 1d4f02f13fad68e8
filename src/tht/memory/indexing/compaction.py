"""Compactions of a workspace's index, for an engine that indexes nothing on its own
(Qdrant Edge, ``Compacting``): after an import (``ImportCompactions``), and by the
service's upkeep once saves settled (``Compactions.compact_quiet``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from tht.backoff import doubling_delay
from tht.errors import ThothError
from tht.memory.index import IndexUnavailable
from tht.memory.index.port import Compacting
from tht.memory.indexing import pipeline
from tht.memory.indexing.claims import WorkspaceClaims
from tht.memory.indexing.target import IndexTarget
from tht.memory.stages import Stage, start_stage

log = logging.getLogger(__name__)
# An import's last stretch: compacted while the import writes it (``ImportCompactions``)
IMPORT_TAIL = pipeline.OPTIMIZE_EVERY // 4
# The service compacts a workspace's plain points once no save has reached it for this
# long: never during a stream of saves, whose points would go plain again at once.
QUIET_SECONDS = 60.0
# A compaction that failed (a full disk, say) is tried again by the service after this
# long, then twice as long each time, up to COMPACTION_RETRY_MAX: a retry copies the
# workspace's whole shard, so not every round.
COMPACTION_RETRY_SECONDS = 300.0
COMPACTION_RETRY_MAX = 3600.0


class Compactions:
    def __init__(self, target: IndexTarget, claims: WorkspaceClaims) -> None:
        self.target = target
        self.claims = claims
        # workspaces whose compaction failed: when to try again, and how many failures
        self._retries: dict[str, tuple[float, int]] = {}
        self._upkept = False  # the upkeep ran once: it took up what earlier processes left

    def _engine(self) -> Compacting | None:
        return self.target.index.capabilities().compaction

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
        engine = self._engine()
        if engine is None or not self.claims.claim(workspace):
            return None
        started = time.perf_counter()
        try:
            points = engine.compact(workspace, starting, least=least)
        except IndexUnavailable as exc:
            return self._failed(workspace, exc)
        finally:
            self.claims.release(workspace)
        with self.claims.lock:
            self._retries.pop(workspace, None)
        if not points:
            return None
        return {"points": points, "seconds": round(time.perf_counter() - started, 3)}

    def _failed(self, workspace: str, exc: IndexUnavailable) -> dict[str, Any]:
        with self.claims.lock:
            failures = self._retries.get(workspace, (0.0, 0))[1] + 1
            delay = doubling_delay(failures, COMPACTION_RETRY_SECONDS, COMPACTION_RETRY_MAX)
            self._retries[workspace] = (time.monotonic() + delay, failures)
        log.warning(
            "the index of workspace %s stays unindexed: %s; tried again in %d s",
            workspace,
            exc.message,
            delay,
        )
        return {"failed": exc.message, "retry_in_seconds": round(delay)}

    def owes_compaction(self, workspace: str) -> bool:
        """An earlier process left the workspace's index to compact (written since its
        last compaction, or a compaction interrupted: ``EdgeIndex.owed_compactions``)."""
        engine = self._engine()
        return engine is not None and workspace in engine.owed_compactions()

    def importing(self, workspace: str) -> AbstractContextManager[None]:
        """An import of the workspace runs: ``compact_quiet`` leaves it alone (the
        import compacts as it goes and when it ends, ``ImportCompactions``, not at
        every pause of a slow embedder)."""
        return self.claims.importing(workspace)

    def compact_quiet(self, quiet: float | None = None) -> dict[str, dict[str, Any]]:
        """The service's upkeep, between its retry rounds: compact (``compact``) each
        workspace that saves wrote and that no save has reached for ``quiet`` seconds
        (default ``QUIET_SECONDS``), unless an import of it runs, and each workspace
        whose compaction failed once its retry is due; in its first round, also each
        workspace an earlier process wrote since its last compaction or left half
        compacted (``owed_compactions``: the service was stopped meanwhile). Imports
        compact on their own; without this, what saves write would stay searched by
        brute force until a rebuild. Returns what was compacted, per workspace."""
        engine = self._engine()
        if engine is None:  # an engine that indexes on its own
            return {}
        if not self._upkept:
            self._upkept = True
            left = engine.owed_compactions()
            with self.claims.lock:
                for workspace in left:
                    self._retries.setdefault(workspace, (0.0, 0))
        now = time.monotonic()
        with self.claims.lock:
            due = {w for w, (at, _) in self._retries.items() if at <= now}
        settled = engine.settled_writes(QUIET_SECONDS if quiet is None else quiet)
        compacted = {}
        for workspace in sorted(due.union(settled)):
            if self.claims.imported(workspace):
                continue
            if (done := self.compact(workspace)) is not None and "failed" not in done:
                compacted[workspace] = done
                log.info("compacted the index of workspace %s: %s", workspace, done)
        return compacted


class ImportCompactions:
    """An import's compactions, for an engine that indexes nothing on its own (Qdrant
    Edge, ``Compactions.compact``). Each time the import has indexed another
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
        self, compactions: Compactions, workspace: str, expected: int | None = None
    ) -> None:
        self.compactions = compactions
        self.workspace = workspace
        self._since = 0  # points indexed since the last compaction started
        self._left = expected  # points still to index, when known
        self._running: Stage | None = None
        self._outcomes: list[dict[str, Any]] = []  # what each one in a thread returned
        # an earlier process's due (a rerun of an import interrupted while it compacted):
        # the end compacts even if this run indexes nothing
        self.owed = compactions.owes_compaction(workspace)

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
        if self._since < pipeline.OPTIMIZE_EVERY and not tail:
            return
        self._since = 0
        # the last stretch is compacted whatever the engine's threshold (down to what it
        # indexes), as the end would
        least = 1 if tail else None
        self._running = start_stage(lambda: self._compact(least), "import-compaction")

    def _compact(self, least: int | None) -> None:
        try:
            outcome = self.compactions.compact(self.workspace, least=least)
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
        compact what is left. Returns the last one's outcome (``Compactions.compact``),
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
                    self.compactions.compact(
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
