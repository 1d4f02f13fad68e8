"""`/healthz` and `tht health`: every dependency of the service, with its status.

The dependencies:

- ``archive`` (required): one round trip on a pooled runtime connection;
- one ``index`` per index adapter the service holds: the collection is reachable (for
  the embedded engine, held by this process);
- one ``embedder`` per embedder: one query embedded.

The archive is required: without it nothing works, and the answer is 503. The index
and the embedder are not (browsing and editing go on; saves leave retryable pending
work): their failure makes the answer ``degraded`` with 200.

A probe runs on a thread of its own, never on the thread (or the event loop) of the
request that asked: a request waits for it at most ``PROBE_SECONDS``, then reports the
dependency down. At most one probe of a dependency is in flight: a hung dependency
(an embedder that accepts and never answers, a stopped PostgreSQL) holds one thread,
however many requests ask, and the requests that come while it hangs are answered at
once. An answer serves every request for ``FRESH_SECONDS``, so a burst of health
checks costs one probe per dependency.

Who sees what: the statuses (overall, and each dependency's name, kind, whether it is
required, its status and a down one's error code) are for anyone; error messages (which
may name a URL), latencies, the probes' facts and the retry schedule only for the
operator and administrators (``detailed``). The
JSON shape is in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tht.errors import ThothError, first_line
from tht.faults import simulated_outage
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.embedding import Embedder, uncached
from tht.memory.index import IndexUnavailable, SearchIndex

PROBE_SECONDS = 2.0  # a probe that has not answered by then reports its dependency down
FRESH_SECONDS = 1.0  # how long a probe's answer serves the requests that follow
PUBLIC_FIELDS = ("name", "kind", "required", "status")  # what an anonymous caller sees


@dataclass(frozen=True)
class Dependency:
    """One thing the service needs, and how to look at it (``check`` raises when it is
    down, or returns facts for the detailed report)."""

    name: str
    kind: str  # archive, index, embedder: the error code of a timed-out probe is <kind>_unavailable
    required: bool
    check: Callable[[], dict[str, Any] | None]


def _outcome(check: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
    started = time.perf_counter()
    result: dict[str, Any] = {}
    try:
        result.update(check() or {})
        result["status"] = "ok"
    except ThothError as exc:
        result.update(status="down", error={"code": exc.code, "message": exc.message})
    except Exception as exc:  # a probe must answer, whatever the adapter raised
        result.update(
            status="down",
            error={"code": "internal_error", "message": f"{type(exc).__name__}: {first_line(exc)}"},
        )
    result["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return result


@dataclass
class _Probe:
    dependency: Dependency
    timeout: float = PROBE_SECONDS
    started: float = field(default_factory=time.monotonic)
    future: concurrent.futures.Future[dict[str, Any]] = field(
        default_factory=concurrent.futures.Future
    )
    finished: float | None = None

    @property
    def deadline(self) -> float:
        return self.started + self.timeout

    def run(self) -> None:
        self.future.set_running_or_notify_cancel()  # a waiter giving up cannot cancel it
        self.future.set_result(_outcome(self.dependency.check))
        self.finished = time.monotonic()  # fresh from now; until then, reused as in flight

    def result(self) -> dict[str, Any]:
        """The probe's answer, or (still running) the dependency reported down."""
        head = {
            "name": self.dependency.name,
            "kind": self.dependency.kind,
            "required": self.dependency.required,
        }
        if self.future.done():
            return {**head, **self.future.result()}
        waited = time.monotonic() - self.started
        return {
            **head,
            "status": "down",
            "error": {
                "code": f"{self.dependency.kind}_unavailable",
                "message": f"no answer within {self.timeout:g} s (probing for {waited:.1f} s)",
            },
            "latency_ms": round(waited * 1000, 2),
        }


class HealthProber:
    """Runs the probes: one thread per probe, at most one probe of a dependency (by
    name) in flight, each answer kept ``fresh`` seconds."""

    def __init__(self, *, timeout: float = PROBE_SECONDS, fresh: float = FRESH_SECONDS) -> None:
        self.timeout = timeout
        self.fresh = fresh
        self._lock = threading.Lock()
        self._probes: dict[str, _Probe] = {}

    def start(self, dependencies: list[Dependency]) -> list[_Probe]:
        """The probes answering for ``dependencies`` now: a fresh answer, the probe in
        flight, or a new probe started. Never waits."""
        now = time.monotonic()
        probes, started = [], []
        with self._lock:
            for dependency in dependencies:
                probe = self._probes.get(dependency.name)
                reusable = probe is not None and (
                    probe.finished is None or now - probe.finished < self.fresh
                )
                if probe is None or not reusable:
                    probe = _Probe(dependency, timeout=self.timeout)
                    self._probes[dependency.name] = probe
                    started.append(probe)
                probes.append(probe)
            named = {d.name for d in dependencies}
            for name in [n for n, p in self._probes.items() if n not in named and p.finished]:
                del self._probes[name]  # a dependency the service no longer holds
        for probe in started:
            threading.Thread(
                target=probe.run, name=f"tht-health:{probe.dependency.name}", daemon=True
            ).start()
        return probes


@dataclass(frozen=True)
class HealthReport:
    """The dependencies' results (detailed) and what the service adds to them."""

    checks: list[dict[str, Any]]
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def required_down(self) -> bool:
        return any(c["required"] and c["status"] != "ok" for c in self.checks)

    @property
    def archive_ok(self) -> bool:
        return any(c["kind"] == "archive" and c["status"] == "ok" for c in self.checks)

    @property
    def http_status(self) -> int:
        return 503 if self.required_down else 200

    @property
    def status(self) -> str:
        if self.required_down:
            return "unavailable"
        return "degraded" if any(c["status"] != "ok" for c in self.checks) else "ok"

    def document(self, *, detailed: bool) -> dict[str, Any]:
        if not detailed:
            return {"status": self.status, "dependencies": [_public(c) for c in self.checks]}
        return {"status": self.status, "dependencies": self.checks, **self.extra}


class HealthCheck:
    """What `/healthz` and `tht health` ask: ``dependencies`` names what to probe now
    (the engines the service holds), ``extra`` adds to the detailed report."""

    def __init__(
        self,
        dependencies: Callable[[], list[Dependency]],
        *,
        extra: Callable[[], Mapping[str, Any]] | None = None,
        prober: HealthProber | None = None,
    ) -> None:
        self._dependencies = dependencies
        self._extra = extra
        self.prober = prober or HealthProber()

    def report(self) -> HealthReport:
        """Waits (this thread) for each probe until its deadline at most."""
        probes = self.prober.start(self._dependencies())
        while waiting := _waiting(probes):
            concurrent.futures.wait(
                [p.future for p in waiting],
                timeout=_until_first_deadline(waiting),
                return_when=concurrent.futures.FIRST_COMPLETED,
            )
        return self._report(probes)

    async def report_async(self) -> HealthReport:
        """Waits (this task, holding no thread) for each probe until its deadline at most."""
        probes = self.prober.start(self._dependencies())
        while waiting := _waiting(probes):
            await asyncio.wait(
                [asyncio.wrap_future(p.future) for p in waiting],
                timeout=_until_first_deadline(waiting),
                return_when=asyncio.FIRST_COMPLETED,
            )
        return self._report(probes)

    def _report(self, probes: list[_Probe]) -> HealthReport:
        return HealthReport([p.result() for p in probes], self._extra() if self._extra else {})


def _public(check: dict[str, Any]) -> dict[str, Any]:
    """A dependency as anyone may see it: no message (it may name a URL), no timing."""
    shown = {k: check[k] for k in PUBLIC_FIELDS}
    if "error" in check:
        shown["error"] = {"code": check["error"]["code"]}
    return shown


def _waiting(probes: list[_Probe]) -> list[_Probe]:
    """The probes still running before their deadline: a probe past it is reported
    down at once (a hung dependency costs a request nothing once its first probe
    timed out)."""
    now = time.monotonic()
    return [p for p in probes if not p.future.done() and p.deadline > now]


def _until_first_deadline(probes: list[_Probe]) -> float:
    return max(0.0, min(p.deadline for p in probes) - time.monotonic())


def index_dependency(name: str, index: SearchIndex) -> Dependency:
    def check() -> dict[str, Any]:
        if simulated_outage("index"):  # as the projector sees it (tht.faults)
            raise IndexUnavailable("the search index is unavailable (a simulated outage)")
        with index.session():
            return {"collection": index.collection_exists()}

    return Dependency(name, "index", False, check)


def embedder_dependency(name: str, embedder: Embedder) -> Dependency:
    def check() -> dict[str, Any]:
        vector = uncached(embedder).embed_query("health check")  # the model, not a kept vector
        return {"model": embedder.model_id, "dimension": len(vector)}

    return Dependency(name, "embedder", False, check)


def archive_dependency(
    archive: PostgresArchive, before: Callable[[], None] | None = None
) -> Dependency:
    """``before``: run first, on the probe's thread (the service starts its stopped
    embedded PostgreSQL there)."""

    def check() -> None:
        if before is not None:
            before()
        archive.ping(PROBE_SECONDS)

    return Dependency("archive", "archive", True, check)


def dependencies_of(
    archive: PostgresArchive,
    indexes: Mapping[str, SearchIndex],
    embedders: Mapping[str, Embedder],
    *,
    before_archive: Callable[[], None] | None = None,
) -> list[Dependency]:
    return [
        archive_dependency(archive, before_archive),
        *(index_dependency(name, index) for name, index in indexes.items()),
        *(embedder_dependency(name, embedder) for name, embedder in embedders.items()),
    ]
