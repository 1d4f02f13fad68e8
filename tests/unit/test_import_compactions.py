"""How an import's compactions are started while it writes and what its summary says
about them (``ImportCompactions``). The compactions themselves run against Qdrant Edge
in tests/integration/test_transfer.py; here the projector only records the calls."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tht.memory.indexing import ImportCompactions, pipeline
from tht.memory.indexing import compaction as compaction_module


class RecordingProjector:
    """Answers each ``compact`` call with the next scripted outcome; a compaction
    started in a thread waits for ``release`` (the test decides when it ends)."""

    def __init__(self, *outcomes: dict[str, Any] | None, owed: bool = False) -> None:
        self.outcomes = list(outcomes)
        self.owed = owed  # an earlier process left the workspace to compact
        self.calls: list[int | None] = []  # the ``least`` of each call
        self.release = threading.Event()
        self.release.set()

    def compact(self, workspace, starting=None, *, least=None):
        assert workspace == "acme"
        if threading.current_thread().name == "import-compaction":
            assert self.release.wait(10)
        self.calls.append(least)
        return self.outcomes.pop(0)

    def owes_compaction(self, workspace):
        return self.owed


@pytest.fixture(autouse=True)
def every_100(monkeypatch):
    monkeypatch.setattr(pipeline, "OPTIMIZE_EVERY", 100)


def test_one_compaction_at_a_time_each_time_enough_was_indexed():
    projector = RecordingProjector({"points": 120, "seconds": 1.0}, {"points": 400, "seconds": 2.0})
    compactions = ImportCompactions(projector, "acme")  # type: ignore[arg-type]
    projector.release.clear()
    compactions.indexed(60)
    assert compactions._running is None  # not yet 100
    compactions.indexed(60)
    running = compactions._running
    assert running is not None and running.is_alive()
    compactions.indexed(200)  # one is running: none started beside it
    assert compactions._running is running
    threading.Timer(0.3, projector.release.set).start()
    ended = compactions.finish()  # waits for the one running, then compacts the rest
    assert ended is not None and ended.pop("seconds") >= 0.3  # what the import waited
    assert ended == {"points": 400, "while_importing": 1}
    # the engine's own threshold while importing; at the end, what is left down to
    # what the engine indexes
    assert projector.calls == [None, 1]


def test_without_a_compaction_while_importing_the_end_keeps_the_engines_threshold():
    projector = RecordingProjector({"points": 90, "seconds": 1.5})
    compactions = ImportCompactions(projector, "acme")  # type: ignore[arg-type]
    compactions.indexed(90)
    assert compactions.finish() == {"points": 90, "seconds": 1.5}
    assert projector.calls == [None]
    assert ImportCompactions(RecordingProjector(None), "acme").finish() is None  # type: ignore[arg-type]


def test_a_compaction_an_earlier_process_owed_is_done_to_the_end_even_if_nothing_was_indexed():
    projector = RecordingProjector({"points": 150, "seconds": 0.5}, owed=True)
    compactions = ImportCompactions(projector, "acme")  # type: ignore[arg-type]
    assert compactions.owed  # the import's end compacts although it indexed nothing
    assert compactions.finish() == {"points": 150, "seconds": 0.5}
    assert projector.calls == [1]  # down to what the engine indexes, as its end would have
    assert not ImportCompactions(RecordingProjector(), "acme").owed  # type: ignore[arg-type]


def test_nothing_left_at_the_end_reports_the_last_one_and_that_the_import_waited_for_none():
    projector = RecordingProjector({"points": 100, "seconds": 3.0}, None)
    compactions = ImportCompactions(projector, "acme")  # type: ignore[arg-type]
    compactions.indexed(100)
    compactions._running.join()  # type: ignore[union-attr]
    ended = compactions.finish()
    assert ended is not None and ended.pop("seconds") < 1.0  # not the 3.0 of the thread
    assert ended == {"points": 100, "while_importing": 1}


def test_a_failure_is_reported_unless_a_later_compaction_did_the_work():
    failed = {"failed": "no space left", "retry_in_seconds": 300}
    compactions = ImportCompactions(RecordingProjector(failed, None), "acme")  # type: ignore[arg-type]
    compactions.indexed(100)
    assert compactions.finish() == failed  # the end had nothing it could index
    compactions = ImportCompactions(
        RecordingProjector(failed, {"points": 150, "seconds": 4.0}),  # type: ignore[arg-type]
        "acme",
    )
    compactions.indexed(100)
    assert compactions.finish() == {"points": 150, "seconds": 4.0}  # its threshold, not 1


def test_the_last_stretch_is_compacted_while_the_import_writes_it(monkeypatch):
    """Told how many points the import indexes, it starts one more compaction once the
    rest falls under IMPORT_TAIL (down to what the engine indexes, as the end would),
    so the end finds little or nothing left plain instead of a whole stretch."""
    monkeypatch.setattr(compaction_module, "IMPORT_TAIL", 25)
    projector = RecordingProjector(
        {"points": 100, "seconds": 1.0},
        {"points": 200, "seconds": 1.0},
        {"points": 230, "seconds": 1.0},
        None,  # the end: too few plain points left to index
    )
    compactions = ImportCompactions(projector, "acme", expected=250)  # type: ignore[arg-type]
    for points in (100, 100):
        compactions.indexed(points)
        compactions._running.join()  # type: ignore[union-attr]
    running = compactions._running
    compactions.indexed(20)  # 30 left: not yet the last stretch
    assert compactions._running is running
    compactions.indexed(10)  # 20 left
    assert compactions._running is not running
    compactions._running.join()  # type: ignore[union-attr]
    compactions.indexed(20)
    ended = compactions.finish()
    assert ended is not None and ended.pop("seconds") < 1.0
    assert ended == {"points": 230, "while_importing": 3}
    assert projector.calls == [None, None, 1, 1]


def test_a_due_compaction_can_be_the_last_stretch_and_none_without_the_size(monkeypatch):
    monkeypatch.setattr(compaction_module, "IMPORT_TAIL", 25)
    projector = RecordingProjector({"points": 100, "seconds": 1.0})
    compactions = ImportCompactions(projector, "acme", expected=120)  # type: ignore[arg-type]
    compactions.indexed(100)  # due, and 20 left: the last stretch's, down to what is indexed
    compactions._running.join()  # type: ignore[union-attr]
    compactions.indexed(10)  # still under the tail: none more
    assert projector.calls == [1]
    unknown = ImportCompactions(RecordingProjector(), "acme")  # type: ignore[arg-type]
    unknown.indexed(90)
    assert unknown._running is None


@pytest.mark.parametrize("held", ["while-importing", "at-the-end"])
def test_a_ctrl_c_ends_the_wait_for_a_compaction_not_the_compaction(held):
    projector = RecordingProjector({"points": 100, "seconds": 1.0}, {"points": 150, "seconds": 1.0})
    compactions = ImportCompactions(projector, "acme")  # type: ignore[arg-type]
    projector.release.clear()  # every compaction is held
    if held == "while-importing":
        compactions.indexed(100)
    interrupted = threading.Event()
    threading.Timer(0.3, interrupted.set).start()
    with pytest.raises(KeyboardInterrupt):
        compactions.finish(interrupted=interrupted)
    assert projector.calls == []  # the import stopped waiting; the compaction is still held
    projector.release.set()
