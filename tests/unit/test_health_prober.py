"""The health probes' bookkeeping, with checks that block until told: one probe of a
dependency in flight, its answer shared while fresh, a hung one reported down without
another probe, and what an anonymous caller sees."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from tht.errors import ArchiveUnavailable
from tht.service.health import Dependency, HealthCheck, HealthProber


class Gate:
    """A check that waits until ``release`` (a hung dependency), counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.opened = threading.Event()
        self.fail = False

    def check(self) -> dict:
        self.calls += 1
        self.opened.wait()
        if self.fail:
            raise ArchiveUnavailable("the memory archive (PostgreSQL) at db.internal is down")
        return {"facts": 1}

    def release(self) -> None:
        self.opened.set()


def run_async(coroutine_function):
    """``asyncio.run`` on a thread of its own: a browser test's Playwright may keep an
    event loop running on this process's main thread for the whole session."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine_function()).result()


def test_a_hung_probe_is_reported_down_and_never_started_twice():
    gate = Gate()
    health = HealthCheck(
        lambda: [Dependency("embedder:m", "embedder", False, gate.check)],
        prober=HealthProber(timeout=0.2, fresh=60),
    )
    first = health.report()
    assert first.status == "degraded" and first.http_status == 200
    (embedder,) = first.checks
    assert embedder["status"] == "down" and embedder["error"]["code"] == "embedder_unavailable"
    assert "no answer within 0.2 s" in embedder["error"]["message"]
    for _ in range(20):  # while it hangs: reported down, no second probe
        assert health.report().checks[0]["status"] == "down"
        assert run_async(health.report_async).checks[0]["status"] == "down"
    assert gate.calls == 1
    gate.release()
    finished = threading.Event()
    health.prober._probes["embedder:m"].future.add_done_callback(lambda _: finished.set())
    assert finished.wait(10)
    # once it answered, its answer serves every request while fresh
    answered = [health.report().checks[0] for _ in range(20)]
    assert all(c["status"] == "ok" and c["facts"] == 1 for c in answered)
    assert gate.calls == 1


def test_a_stale_answer_is_probed_again_and_the_archive_is_required():
    gate = Gate()
    gate.release()
    health = HealthCheck(
        lambda: [Dependency("archive", "archive", True, gate.check)],
        prober=HealthProber(timeout=5, fresh=0),
    )
    assert health.report().status == "ok"
    gate.fail = True
    down = health.report()  # fresh for no time: a new probe
    assert gate.calls == 2
    assert (down.status, down.http_status) == ("unavailable", 503)
    # anyone sees the status and the code; the message (a host name here) is the details'
    assert down.document(detailed=False) == {
        "status": "unavailable",
        "dependencies": [
            {
                "name": "archive",
                "kind": "archive",
                "required": True,
                "status": "down",
                "error": {"code": "archive_unavailable"},
            }
        ],
    }
    detailed = down.document(detailed=True)["dependencies"][0]
    assert "db.internal" in detailed["error"]["message"] and "latency_ms" in detailed


def test_a_dependency_no_longer_held_is_forgotten():
    gates = {"embedder:a": Gate(), "embedder:b": Gate()}
    for gate in gates.values():
        gate.release()
    names = ["embedder:a", "embedder:b"]
    prober = HealthProber(timeout=5, fresh=60)
    health = HealthCheck(
        lambda: [Dependency(n, "embedder", False, gates[n].check) for n in names], prober=prober
    )
    assert [c["name"] for c in health.report().checks] == ["embedder:a", "embedder:b"]
    names.remove("embedder:a")
    assert [c["name"] for c in health.report().checks] == ["embedder:b"]
    assert set(prober._probes) == {"embedder:b"}
