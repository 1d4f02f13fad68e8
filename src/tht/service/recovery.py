"""Pending index work is retried by the service, not left for a person.

After a crash (kill -9) the outbox holds projections nobody is running; without the
service they would wait for an operator's `tht memory retry`. The service runs a
``PendingRetrier``: at start and then every ``period`` seconds it looks at each
workspace's outbox (``projection_ops``) and drains it with ``IndexProjector.drain``
(the same code as an operator's retry: it reads only current archive state).

- It drains only the operations untouched for at least ``period`` seconds: a save's
  own index update follows its commit within milliseconds, in the process (or replica)
  that saved; an operation that young is most likely that update in flight, and
  draining it too would do its work twice, or race it.

- A workspace whose drain fails waits ``backoff_delay(failures)``: ``base`` seconds,
  doubled per consecutive failure, at most ``cap`` (5, 10, 20, ... 300 s by default);
  a success resets it. Each workspace has its own schedule: a failing one never delays
  another.
- Never two drains of one workspace at once: one thread drains, and a session-level
  advisory lock per workspace keeps other service instances (external engines, behind a
  load balancer) from draining it at the same time; an instance that finds it taken
  skips it until its next turn.
- Only the projections the service uses are retried: the pages' configuration (`tht
  serve -c`) and those of the runtime files its commands named; a retry with another
  embedder would write points of another format.
- ``stop()`` ends the loop between two drains; ``state()`` tells what is scheduled
  (the page's pending list still shows what is left, from the archive).

After each round it also keeps the embedded index searchable at speed
(``IndexProjector.compact_quiet``): Qdrant Edge has no background optimizer, so what
saves write stays in plain segments, searched by brute force; a workspace with enough
of them that no save has reached for a minute is compacted into an indexed copy, as an
import ends (docs/benchmarks.md gives what a compaction costs); the next drain waits
for it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from tht.backoff import doubling_delay
from tht.errors import ThothError
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.stages import Stage, start_stage
from tht.sqlfiles import named_queries

if TYPE_CHECKING:
    from tht.memory.indexing import IndexProjector

log = logging.getLogger("tht.service.recovery")

BASE_SECONDS = 5.0
CAP_SECONDS = 300.0
PERIOD_SECONDS = 30.0
NO_PROJECTION_SECONDS = 1.0


def backoff_delay(failures: int, base: float = BASE_SECONDS, cap: float = CAP_SECONDS) -> float:
    """Seconds before the next attempt after ``failures`` consecutive failed drains."""
    return doubling_delay(failures, base, cap)


@dataclass
class _Schedule:
    failures: int = 0
    next_attempt: float = 0.0  # time.monotonic()
    last_error: str | None = None


def _queries() -> dict[str, str]:
    return named_queries("tht.memory.archive", "sql/recovery.sql")


class PendingRetrier:
    def __init__(
        self,
        archive: PostgresArchive,
        projectors: Callable[[], list[IndexProjector]],
        projector_of: Callable[[str], IndexProjector],
        *,
        base: float = BASE_SECONDS,
        cap: float = CAP_SECONDS,
        period: float = PERIOD_SECONDS,
    ) -> None:
        self.archive = archive
        self.projectors = projectors  # the projections in use, asked anew each round
        self.projector_of = projector_of  # a workspace's own (its embedder profile's)
        self.base, self.cap, self.period = base, cap, period
        self._schedules: dict[str, _Schedule] = {}
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._thread: Stage | None = None
        self._lock = threading.Lock()

    # --- life ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = start_stage(self._run, "tht-pending-retry")

    def request_stop(self) -> None:
        """End the loop: a drain in progress finishes its batch, none starts."""
        self._stopped.set()
        self._wake.set()

    def wait(self, timeout: float) -> bool:
        """True once the loop has ended (within ``timeout``)."""
        if self._thread is None:
            return True
        return self._thread.wait(timeout)  # an event, not join (python/cpython#90882)

    def stop(self, timeout: float = 30.0) -> None:
        self.request_stop()
        self.wait(timeout)

    def state(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            return {
                workspace: {
                    "failures": s.failures,
                    "next_attempt_in": round(max(0.0, s.next_attempt - now), 1),
                    "last_error": s.last_error,
                }
                for workspace, s in self._schedules.items()
                if s.failures
            }

    # --- the loop --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped.is_set():
            period = self.period
            try:
                if self.run_once() is None:
                    # no projection in use yet (the service has just started): look again soon
                    period = min(self.period, NO_PROJECTION_SECONDS)
            except Exception as exc:  # the loop outlives any one failure (archive down, ...)
                log.warning("pending index work not retried this round: %s", exc)
            self.upkeep()
            now = time.monotonic()
            with self._lock:
                due = [s.next_attempt for s in self._schedules.values() if s.failures]
            pause = min([period, *(max(0.0, t - now) for t in due)])
            self._wake.wait(max(0.05, pause))
            self._wake.clear()

    def run_once(self) -> dict[str, str] | None:
        """One round: drain every workspace that has pending work and whose backoff has
        passed. Returns what happened per workspace (``drained``, ``failed``,
        ``skipped``: another drain of it runs elsewhere); None without a projection."""
        from tht.memory.card_store import WorkspaceService

        projectors = self.projectors()
        if not projectors:
            return None
        outcome: dict[str, str] = {}
        for workspace in WorkspaceService(self.archive).list():
            if self._stopped.is_set():
                break
            with self._lock:
                schedule = self._schedules.setdefault(workspace.id, _Schedule())
                if schedule.next_attempt > time.monotonic():
                    continue
            with self.archive.transaction(workspace.id) as tx:
                if not tx.operation_ids(limit=1, settled=self.period):
                    schedule.failures, schedule.last_error = 0, None
                    continue
            outcome[workspace.id] = self._drain(workspace.id)
        return outcome

    def upkeep(self) -> None:
        """Compact what saves left unindexed (see the module's docstring; the projector
        logs what it compacted); a failure costs recall speed only: logged."""
        for projector in self.projectors():
            if self._stopped.is_set():
                break
            try:
                projector.compact_quiet()
            except Exception as exc:
                log.warning("the index was not compacted this round: %s", exc)

    def _drain(self, workspace: str) -> str:
        schedule = self._schedules[workspace]
        with self.archive.connection() as conn:
            conn.autocommit = True
            try:
                # session-level, on a connection of its own: held for the whole drain,
                # which runs its own transactions on other connections
                taken = conn.execute(
                    _queries()["drain_try_lock"], {"workspace": workspace}
                ).fetchone()
                if not (taken and taken[0]):
                    return "skipped"
                try:
                    self.projector_of(workspace).drain(workspace, settled=self.period)
                finally:
                    conn.execute(_queries()["drain_unlock"], {"workspace": workspace})
            except ThothError as exc:
                with self._lock:
                    schedule.failures += 1
                    delay = backoff_delay(schedule.failures, self.base, self.cap)
                    schedule.next_attempt = time.monotonic() + delay
                    schedule.last_error = exc.message
                log.info(
                    "pending index work of workspace %s: still pending (%s); next try in %.1f s",
                    workspace,
                    exc.message,
                    delay,
                )
                return "failed"
            finally:
                with contextlib.suppress(psycopg.Error):  # a broken one leaves the pool
                    conn.autocommit = False
        with self._lock:
            schedule.failures, schedule.next_attempt, schedule.last_error = 0, 0.0, None
        log.info("pending index work of workspace %s: retried", workspace)
        return "drained"
