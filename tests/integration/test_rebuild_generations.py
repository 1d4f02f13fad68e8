"""Rebuilds that never block: `tht memory index` writes a new generation of the
workspace's projection beside the serving one and switches at the end; saves and
recall go on meanwhile; an interrupted rebuild resumes without embedding again what it
already projected; Ctrl-C says how to resume. The same scenarios run on every engine
with generations: Qdrant Edge (a shard folder per generation) and pgvector (a
generation number on every row)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import yaml
from qdrant_client import QdrantClient

from tests.factories import card, write_installation
from tests.full_disk import copies_run_out_of_space
from tht.errors import Conflict
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import HashingEmbedder
from tht.memory.embedding.query_cache import CachedQueryEmbedder
from tht.memory.index import EdgeIndex, QdrantServerIndex
from tht.memory.index.edge import EdgeGeneration
from tht.memory.index.engines import engine_names
from tht.memory.index.pgvector import PgVectorIndex
from tht.memory.indexing import IndexProjector
from tht.memory.indexing.pipeline import SEQUENTIAL_PART
from tht.memory.model import card_id_to_uuid, uuid_to_card_id
from tht.memory.recall_service import RecallQuery, RecallService
from tht.memory.stages import start_stage

CHUNK = 32  # the embedder's batch: one embedder call per chunk


class GatedEmbedder(HashingEmbedder):
    """The hashing embedder, with a hook run before each batch of passages that the
    thread named ``rebuilder`` (or, if unnamed, any thread) embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.hook = None
        self.rebuild_calls = 0

    def _embed(self, texts, *, query):
        if not query and self.hook is not None:
            self.rebuild_calls += 1
            self.hook(self.rebuild_calls)
        return super()._embed(texts, query=query)


@dataclass
class Engine:
    """An engine with generations, and how a test sees the generations of "acme"."""

    name: str
    open: Callable[[], Any]
    # the generation serving recall, and the one being built (None: no rebuild)
    serving: Callable[[Any], object]
    building: Callable[[Any], object]
    # what is stored for generations that neither serve nor are being built
    leftovers: Callable[[Any], list]
    config: str | None  # the installation's `index:` section (None: no command can use it)
    # whether a save of any process writes the generation being built (the state of the
    # generations is in the engine), not only a save of the rebuilding process (Edge)
    saves_reach_building: bool = True
    # the index as a new process would find it
    reopen: Callable[[Any], None] = lambda index: index.close()


def _edge(tmp_path, database) -> Engine:
    path = tmp_path / "edge"

    def building(index):
        pointer = folder(index) / "acme.building"
        return pointer.read_text().strip() if pointer.exists() else None

    def leftovers(index):
        keep = {index.workspace_path("acme").name, "acme.current", "acme.building", building(index)}
        keep.add("acme.written")  # saved since its last compaction: not a generation
        return sorted(p.name for p in folder(index).iterdir() if p.name not in keep)

    return Engine(
        "edge",
        lambda: EdgeIndex(path),
        lambda index: index.workspace_path("acme").name,
        building,
        leftovers,
        "{engine: edge}",
        saves_reach_building=False,
    )


def _pgvector(tmp_path, database) -> Engine:
    def state(index):
        with psycopg.connect(database.superuser) as conn:
            row = conn.execute(
                "SELECT serving, building FROM thoth_memory_pgvector.generations"
                " WHERE workspace_id = 'acme'"
            ).fetchone()
        return row or (0, None)

    def leftovers(index):
        serving, building = state(index)
        with psycopg.connect(database.superuser) as conn:
            return conn.execute(
                "SELECT DISTINCT generation FROM thoth_memory_pgvector.points"
                " WHERE workspace_id = 'acme' AND generation <> %(serving)s"
                "   AND generation IS DISTINCT FROM %(building)s"
                " UNION SELECT DISTINCT generation FROM thoth_memory_pgvector.document_frequencies"
                " WHERE workspace_id = 'acme' AND generation <> %(serving)s"
                "   AND generation IS DISTINCT FROM %(building)s",
                {"serving": serving, "building": building},
            ).fetchall()

    return Engine(
        "pgvector",
        lambda: PgVectorIndex(database.runtime),
        lambda index: state(index)[0],
        lambda index: state(index)[1],
        leftovers,
        "{engine: pgvector}",
    )


def _qdrant_local(tmp_path, database) -> Engine:
    """qdrant-client's local mode: one process holds its folder, so the test reads the
    generations through the index it writes with."""
    location = str(tmp_path / "qdrant")

    def points(index):
        records, _ = index.client.scroll(
            index.collection, limit=100_000, with_payload=["workspace", "generation"]
        )
        return [r.payload for r in records if r.payload.get("workspace") == "acme"]

    def leftovers(index):
        generations = index._generations("acme").written()
        return sorted({p.get("generation", 0) for p in points(index)} - set(generations))

    def reopen(index):
        index.close()
        index.client = QdrantClient(path=location)

    return Engine(
        "qdrant",
        lambda: QdrantServerIndex(QdrantClient(path=location)),
        lambda index: index._generations("acme").serving,
        lambda index: index._generations("acme").building,
        leftovers,
        None,
        reopen=reopen,
    )


# each engine of the installation's table (the qdrant engine's adapter on qdrant-client's
# local mode)
ENGINES = {"edge": _edge, "qdrant": _qdrant_local, "pgvector": _pgvector}
assert list(ENGINES) == engine_names()
# the engines a runtime file can name for a command in its own process (a Qdrant
# server's URL, not local mode)
COMMAND_ENGINES = ["edge", "pgvector"]


@pytest.fixture(params=sorted(ENGINES))
def engine(request, tmp_path, database) -> Engine:
    return ENGINES[request.param](tmp_path, database)


@pytest.fixture
def stack(archive, engine, monkeypatch):
    monkeypatch.setattr("tht.memory.indexing.pipeline.CHUNK", CHUNK)
    WorkspaceService(archive).create("acme", "en")
    index = engine.open()
    embedder = GatedEmbedder()
    projector = IndexProjector(archive, index, embedder)
    memory = MemoryService(archive, projector)
    recall = RecallService(archive, index, embedder, projector.format)
    cards = [
        memory.create_card("acme", card(title=f"Card {i}", content=f"topic{i} common words")).card
        for i in range(100)
    ]
    yield index, embedder, projector, memory, recall, cards
    index.close()


def found(recall, question):
    return [r.card.id for r in recall.recall("acme", question, "search", query=RecallQuery(top=5))]


def folder(index):
    return index.collection_path / "workspaces"


def test_a_save_and_a_recall_during_a_rebuild_succeed_and_the_switch_keeps_the_save(stack, engine):
    index, embedder, projector, memory, recall, cards = stack
    serving = engine.serving(index)
    paused, resume = threading.Event(), threading.Event()

    def hold_the_second_chunk(call):
        if threading.current_thread().name == "rebuilder" and call == 2:
            paused.set()
            assert resume.wait(60)

    embedder.hook = hold_the_second_chunk
    outcome = {}
    rebuilder = threading.Thread(
        target=lambda: outcome.update(summary=projector.rebuild("acme")), name="rebuilder"
    )
    rebuilder.start()
    try:
        assert paused.wait(60)
        # mid-rebuild: the serving generation answers, a save is indexed at once
        assert engine.serving(index) == serving
        assert found(recall, "topic7")[0] == cards[7].id
        saved = memory.create_card(
            "acme", card(title="Carrier codes", content="three letter carrier identifiers")
        )
        assert saved.index.status == "current"
        assert found(recall, "carrier identifiers")[0] == saved.card.id
        edited = memory.update_card(
            "acme", cards[90].id, card(title="Card 90", content="renamed subject zeta")
        )
        assert edited.index.status == "current"
        with pytest.raises(Conflict):  # one rebuild of a workspace at a time
            projector.rebuild("acme")
        if engine.name == "pgvector":
            # another process's save (its own adapter) writes both generations as well
            other_index = engine.open()
            other = MemoryService(
                memory.archive, IndexProjector(memory.archive, other_index, HashingEmbedder(64))
            )
            elsewhere = other.create_card(
                "acme", card(title="Fare basis", content="fare basis code letters")
            )
            other_index.close()
            assert elsewhere.index.status == "current"
        assert engine.building(index) not in (None, serving)
        if engine.name == "edge":
            building = [p.name for p in folder(index).iterdir() if p.name.startswith("acme.g")]
            assert len(building) == 1 and building[0] != serving
    finally:
        resume.set()
        rebuilder.join(120)
    summary = outcome["summary"]
    assert summary["failed"] == 0 and summary["generation"] == "new"
    # switched: the new generation serves, the old one is gone, nothing else is left
    assert engine.serving(index) != serving and engine.building(index) is None
    assert engine.leftovers(index) == []
    if engine.name == "edge":
        assert sorted(p.name for p in folder(index).iterdir()) == sorted(
            [index.workspace_path("acme").name, "acme.current", "acme.written"]
        )
    # the save and the edit made during the rebuild are in the new generation
    assert index.count("acme") == (102 if engine.name == "pgvector" else 101)
    if engine.name == "pgvector":
        assert found(recall, "fare basis letters")[0] == elsewhere.card.id
    assert found(recall, "carrier identifiers")[0] == saved.card.id
    assert found(recall, "zeta")[0] == cards[90].id
    assert found(recall, "topic7")[0] == cards[7].id
    # the new generation is what check reads: no drift, its stored vectors sound
    report = projector.check("acme")
    assert report["vectors_checked"] == 100 and report["damaged"] == []


def interrupt_after_two_chunks(embedder, projector):
    """A rebuild that fails (an injected error) once it wrote exactly two chunks."""
    two_chunks_written = threading.Event()

    def fail_on_the_third_chunk(call):
        if call == 3:
            assert two_chunks_written.wait(60)
            raise RuntimeError("injected failure")

    def progress(done, total):
        if done >= 2 * CHUNK:
            two_chunks_written.set()

    embedder.hook = fail_on_the_third_chunk
    with pytest.raises(RuntimeError, match="injected"):
        projector.rebuild("acme", progress)
    embedder.hook = lambda call: None
    embedder.rebuild_calls = 0


def test_an_interrupted_rebuild_resumes_without_embedding_again(stack, engine):
    index, embedder, projector, memory, recall, cards = stack
    serving = engine.serving(index)
    interrupt_after_two_chunks(embedder, projector)
    assert engine.serving(index) == serving  # no switch: the old generation serves
    building = engine.building(index)
    assert building not in (None, serving)
    assert found(recall, "topic7")[0] == cards[7].id
    engine.reopen(index)  # as a new process would find it

    # one card of the written chunks is edited meanwhile, by a process without the index
    # (its projection is left to the outbox): it must be embedded again
    first = min(cards, key=lambda c: card_id_to_uuid(c.id))
    offline = MemoryService(memory.archive)
    offline.update_card("acme", first.id, card(title="First", content="edited subject omega"))
    embedder.rebuild_calls = 0
    summary = projector.rebuild("acme")
    assert summary["skipped_current"] == 2 * CHUNK - 1 and summary["generation"] == "new"
    assert summary["indexed"] == 100 - summary["skipped_current"]
    assert embedder.rebuild_calls == math.ceil(summary["indexed"] / CHUNK)
    # the interrupted generation was taken up again and now serves; the old one is gone
    assert engine.serving(index) == building and engine.leftovers(index) == []
    assert index.count("acme") == 100
    assert found(recall, "omega")[0] == first.id
    # a complete rebuild starts a fresh generation: nothing is skipped
    assert projector.rebuild("acme")["skipped_current"] == 0


def test_a_card_deleted_before_the_resume_leaves_no_point(stack, engine):
    index, embedder, projector, memory, _, cards = stack
    interrupt_after_two_chunks(embedder, projector)
    engine.reopen(index)
    gone = min(cards, key=lambda c: card_id_to_uuid(c.id))  # in the first chunk: written
    memory.delete_card("acme", gone.id)
    summary = projector.rebuild("acme")
    # pgvector's and Qdrant's delete removed the point from both generations itself;
    # Edge's (a new process: the index closed) reached the serving shard only, the
    # rebuild removes it
    assert summary["failed"] == 0
    assert summary["removed_points"] == (0 if engine.saves_reach_building else 1)
    assert index.count("acme") == 99
    assert card_id_to_uuid(gone.id) not in {p.id for p in index.scroll_ids("acme")}


# --- the command, in its own process ------------------------------------------------------


@pytest.fixture
def command(database, tmp_path, archive, engine):
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env.update(database.env(), THT_HOME=str(tmp_path / "home"), THT_SERVICE="off")
    config = tmp_path / "rt.yaml"
    config.write_text("workspace: acme\ndatabase: dwh\nschema: sales\n")
    write_installation(tmp_path / "home", index=yaml.safe_load(engine.config))
    WorkspaceService(archive).create("acme", "en")
    offline = MemoryService(archive)  # saved, index work pending: the rebuild projects it
    for i in range(600):
        offline.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words"))

    def run(*extra_env, wait=True):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tht", "memory", "index", "-c", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, **dict(extra_env)},
        )
        return proc

    return run, str(config)


def finish(proc):
    out, err = proc.communicate(timeout=300)
    return proc.returncode, json.loads(out) if out.strip() else None, err


@pytest.mark.parametrize("engine", COMMAND_ENGINES, indirect=True)
def test_a_killed_rebuild_resumes_where_it_stopped(command):
    run, _ = command
    code, _, _ = finish(run(("THT_CRASH_AT", "index.after_batch")))
    # killed (os._exit) right after its first write: a part of the first chunk, the hashing
    # embedder taking one batch at a time
    assert code == 70
    code, summary, err = finish(run())
    assert code == 0, (summary, err)
    written = SEQUENTIAL_PART
    assert summary["skipped_current"] == written and summary["indexed"] == 600 - written
    assert f"resuming: {written}/600" in err


@pytest.mark.parametrize("engine", ["pgvector"], indirect=True)
def test_a_crash_right_after_the_switch_leaves_the_old_generation_to_the_next_rebuild(
    command, engine, database
):
    """pgvector switches in one transaction and deletes the replaced generation after
    it: a crash in between leaves those rows, never read, and the next rebuild deletes
    them before it begins its own generation."""
    run, _ = command
    assert finish(run())[0] == 0  # generation 1 serves
    code, _, _ = finish(run(("THT_CRASH_AT", "index.after_switch")))
    assert code == 70
    assert engine.serving(None) == 2 and engine.building(None) is None
    assert engine.leftovers(None) == [(1,)]  # replaced, not yet deleted
    index = PgVectorIndex(database.runtime, "thoth_memory")  # the command's collection
    assert index.count("acme") == 600  # the new generation serves, every card in it
    index.close()
    code, summary, err = finish(run())
    assert code == 0, (summary, err)
    assert summary["indexed"] == 600 and summary["skipped_current"] == 0
    assert engine.serving(None) == 3 and engine.leftovers(None) == []


REBUILD_ON_QDRANT_LOCAL = """
import json, sys
from qdrant_client import QdrantClient
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.embedding import HashingEmbedder
from tht.memory.index import QdrantServerIndex
from tht.memory.indexing import IndexProjector
from tht.memory.indexing.pipeline import SEQUENTIAL_PART

archive = PostgresArchive(sys.argv[1]).open()
index = QdrantServerIndex(QdrantClient(path=sys.argv[2]))
print(json.dumps(IndexProjector(archive, index, HashingEmbedder(64)).rebuild("acme")))
"""


def test_a_killed_rebuild_on_qdrant_local_mode_resumes_where_it_stopped(
    archive, database, tmp_path
):
    """A runtime file names a Qdrant server by its URL, so qdrant-client's local mode
    is rebuilt by a script in its own process, killed like the command is."""
    WorkspaceService(archive).create("acme", "en")
    offline = MemoryService(archive)
    for i in range(600):
        offline.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    location = str(tmp_path / "qdrant")

    def rebuild(**extra):
        proc = subprocess.run(
            [sys.executable, "-c", REBUILD_ON_QDRANT_LOCAL, database.runtime, location],
            capture_output=True,
            text=True,
            env={**env, "THT_SERVICE": "off", **extra},
            timeout=300,
        )
        return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None

    assert rebuild(THT_CRASH_AT="index.after_batch")[0] == 70  # after its first write
    code, summary = rebuild()
    assert code == 0, summary
    written = SEQUENTIAL_PART  # the hashing embedder takes one batch at a time
    assert summary["skipped_current"] == written and summary["indexed"] == 600 - written
    assert summary["generation"] == "new"
    index = QdrantServerIndex(QdrantClient(path=location))
    try:
        assert index.count("acme") == 600 and index._generations("acme").serving == 1
    finally:
        index.close()


@pytest.mark.parametrize("engine", COMMAND_ENGINES, indirect=True)
def test_ctrl_c_prints_how_to_resume(command, tmp_path):
    run, config = command
    marker = tmp_path / "paused"
    proc = run(("THT_PAUSE_AT", "index.after_batch"), ("THT_PAUSE_FILE", str(marker)))
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)  # the main thread takes the signal; the writer is held meanwhile
    marker.unlink()
    code, document, err = finish(proc)
    assert code == 130, (document, err)
    error = document["error"]
    assert error["code"] == "interrupted"
    assert error["details"]["resume"] == f"tht memory index -c {config}"
    written = SEQUENTIAL_PART  # the first write: the hashing embedder takes a batch at a time
    assert error["details"]["projected"] == written and error["details"]["cards"] == 600
    assert error["details"]["resumable"] is True
    code, summary, _ = finish(run())
    assert code == 0 and summary["skipped_current"] == written
    assert summary["indexed"] == 600 - written


@pytest.mark.parametrize("compacted", [False, True], ids=["few-unindexed", "compacted"])
def test_a_bulk_sync_projects_every_card_in_the_embedders_batches(
    archive, tmp_path, monkeypatch, compacted
):
    """``sync`` of many cards (an import's projection) runs the rebuild's pipeline:
    every card current, the embedder called once per full batch, deleted cards'
    points removed by the rounds that follow. With enough points left unindexed, the
    import's ``compact`` replaces the serving shard by an indexed copy (nothing is
    embedded again)."""
    if compacted:  # else the default: 1 099 plain vectors are too few to compact
        monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 1000)
    WorkspaceService(archive).create("acme", "en")
    offline = MemoryService(archive)  # saved, projection pending
    saved = [
        offline.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words")).card
        for i in range(1100)
    ]
    index = EdgeIndex(tmp_path / "edge")
    embedder = GatedEmbedder()
    projector = IndexProjector(archive, index, embedder)
    try:
        gone = saved.pop()
        offline.delete_card("acme", gone.id)
        embedder.hook = lambda call: None
        serving = index.workspace_path("acme")
        report = projector.sync("acme", [card_id_to_uuid(c.id) for c in [*saved, gone]])
        assert report.indexed == 1099 and report.deleted == 1 and not report.failed
        assert embedder.rebuild_calls == math.ceil(512 / 32) * 2 + math.ceil(75 / 32)
        assert index.count("acme") == 1099
        assert MemoryService(archive, projector).pending("acme") == []
        calls = embedder.rebuild_calls
        if not compacted:  # nor with a lower threshold: the engine would index none of them
            assert projector.compactions.compact("acme", least=1) is None
        projector.compactions.compact("acme")  # as an import ends
        assert embedder.rebuild_calls == calls
        assert (index.workspace_path("acme") != serving) is compacted
        assert not (index.workspace_path("acme").parent / "acme.building").exists()
        assert sorted(p.name for p in serving.parent.iterdir() if p.is_dir()) == [
            index.workspace_path("acme").name
        ]
        recall = RecallService(archive, index, embedder, projector.format)
        found = recall.recall("acme", "topic7 words", "search", query=RecallQuery(top=3))
        assert found[0].card.id == saved[7].id
    finally:
        index.close()


def _interrupted_compaction(archive, path, monkeypatch, embedder):
    """40 saved cards whose compaction was interrupted while indexing its copy: the
    child killed, and the process gone before it could discard the copy (as when the
    service is killed), so the copy is left, named as a compaction's."""
    WorkspaceService(archive).create("acme", "en")
    index = EdgeIndex(path)
    projector = IndexProjector(archive, index, embedder)
    service = MemoryService(archive, projector)
    saved = [
        service.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words")).card
        for i in range(40)
    ]
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 10)
    monkeypatch.setattr("tht.memory.index.edge.IN_PROCESS_OPTIMIZE_BYTES", 0)
    monkeypatch.setenv("THT_CRASH_AT", "edge.optimizing")  # the child dies: interrupted
    serving = index.workspace_path("acme")
    with monkeypatch.context() as gone:  # nothing runs after the child's death
        gone.setattr(EdgeIndex, "_discard_compaction", lambda self, workspace: True)
        failed = projector.compactions.compact("acme")  # logged; the points stay served
    assert failed is not None and failed["retry_in_seconds"] == 300, failed
    assert "indexing the embedded index's new generation" in failed["failed"]
    assert index.workspace_path("acme") == serving
    assert (serving.parent / "acme.building").exists()
    assert (serving.parent / "acme.compacting").read_text() == (
        serving.parent / "acme.building"
    ).read_text()
    monkeypatch.delenv("THT_CRASH_AT")
    return index, projector, serving, saved


def test_a_failed_compaction_removes_its_copy_at_once(archive, tmp_path, monkeypatch):
    """A compaction whose indexing fails (the engine wanted more disk than there was)
    removes its copy then, instead of leaving it on the full disk until the next
    compaction; the error is the engine's last line, not the child's traceback."""
    WorkspaceService(archive).create("acme", "en")
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, GatedEmbedder())
    service = MemoryService(archive, projector)
    try:
        for i in range(40):
            service.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words"))
        monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 10)
        monkeypatch.setattr("tht.memory.index.edge.IN_PROCESS_OPTIMIZE_BYTES", 0)
        monkeypatch.setenv("THT_CRASH_AT", "edge.optimizing")  # the child fails
        serving = index.workspace_path("acme")
        failed = projector.compactions.compact("acme")
        assert failed is not None and "(exit " in failed["failed"], failed
        assert "Traceback" not in failed["failed"], failed
        # no copy left; still owed, should the service stop before its retry
        assert sorted(p.name for p in serving.parent.iterdir()) == [
            serving.name,
            "acme.written",
        ], list(serving.parent.iterdir())
        assert index.workspace_path("acme") == serving and index.count("acme") == 40
        monkeypatch.delenv("THT_CRASH_AT")
        done = projector.compactions.compact("acme")
        assert done is not None and done["points"] == 40, done
    finally:
        index.close()


@pytest.mark.parametrize("left_by", ["this-process", "a-stopped-process"])
def test_an_interrupted_compaction_is_redone_by_the_next_one(
    archive, tmp_path, monkeypatch, left_by
):
    """Before, a compaction's generation left by an interruption made every later
    import skip compacting until someone ran `tht memory index`."""
    embedder = GatedEmbedder()
    index, projector, serving, saved = _interrupted_compaction(
        archive, tmp_path / "edge", monkeypatch, embedder
    )
    left = serving.parent / (serving.parent / "acme.building").read_text()
    if left_by == "a-stopped-process":
        index.close()
        index = EdgeIndex(tmp_path / "edge")
        projector = IndexProjector(archive, index, embedder)
    try:
        # a card deleted meanwhile: the old copy may have missed it, the new one cannot
        gone = saved[0]
        MemoryService(archive, projector).delete_card("acme", gone.id)
        embedder.hook = lambda call: None
        done = projector.compactions.compact("acme")
        assert done is not None and done["points"] == 39, done
        assert embedder.rebuild_calls == 0
        assert not left.exists() and index.workspace_path("acme") not in (serving, left)
        assert sorted(p.name for p in serving.parent.iterdir()) == [
            "acme.current",
            index.workspace_path("acme").name,
        ]
        assert index.count("acme") == 39
        assert card_id_to_uuid(gone.id) not in {r.id for r in index.scroll_ids("acme")}
    finally:
        index.close()


def test_the_service_redoes_a_compaction_an_earlier_process_left(archive, tmp_path, monkeypatch):
    """The service stopped while it compacted: nothing wrote the workspace since, so no
    save would bring it back, but the next service's first upkeep round finds the copy
    left (``.compacting``), discards it and compacts again, embedding nothing."""
    embedder = GatedEmbedder()
    index, _, serving, _ = _interrupted_compaction(
        archive, tmp_path / "edge", monkeypatch, embedder
    )
    left = serving.parent / (serving.parent / "acme.building").read_text()
    index.close()  # the service stops
    index = EdgeIndex(tmp_path / "edge")  # ... and a new one starts
    projector = IndexProjector(archive, index, embedder)
    try:
        assert index.owed_compactions() == ["acme"]
        embedder.hook = lambda call: None
        done = projector.compact_quiet()  # its first round; no save settled in this process
        assert set(done) == {"acme"} and done["acme"]["points"] == 40, done
        assert embedder.rebuild_calls == 0 and not left.exists()
        assert index.owed_compactions() == [] and index.count("acme") == 40
        assert projector.compact_quiet(quiet=0) == {}  # taken up once
    finally:
        index.close()


def test_a_copy_left_by_an_interrupted_compaction_goes_even_with_too_little_to_compact(
    archive, tmp_path, monkeypatch
):
    """Fewer plain points than the threshold: nothing to compact, but the copy an
    interrupted compaction left is removed all the same. Before, it held its disk
    space, and every later process listed the workspace as owed."""
    embedder = GatedEmbedder()
    index, _, serving, _ = _interrupted_compaction(
        archive, tmp_path / "edge", monkeypatch, embedder
    )
    left = serving.parent / (serving.parent / "acme.building").read_text()
    index.close()
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 1_000)  # 40 are plain
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, embedder)
    try:
        assert index.owed_compactions() == ["acme"]
        assert projector.compact_quiet() == {}  # nothing compacted
        assert not left.exists() and index.owed_compactions() == []
        assert index.count("acme") == 40 and embedder.rebuild_calls == 0
    finally:
        index.close()


@pytest.mark.parametrize("left_by", ["a-stop-before-the-upkeep", "a-failed-compaction"])
def test_the_next_service_compacts_what_the_stopped_one_left_unindexed(
    archive, tmp_path, monkeypatch, left_by
):
    """What the upkeep owes a workspace (its saves were not yet quiet, or its compaction
    failed and waits for a retry) used to live in the service's memory only: stopped
    meanwhile, the workspace stayed searched by brute force until written again. It is
    recorded beside the shard (``.written``) and the next service's first round does it;
    a workspace with too few plain points to compact is let go."""
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 10)
    disk_full = [left_by == "a-failed-compaction"]
    copies_run_out_of_space(monkeypatch, lambda target: disk_full[0])
    WorkspaceService(archive).create("acme", "en")
    WorkspaceService(archive).create("calm", "en")
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, GatedEmbedder())
    service = MemoryService(archive, projector)
    for i in range(20):
        service.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words"))
    service.create_card("calm", card(title="Alone"))
    if left_by == "a-failed-compaction":
        assert projector.compact_quiet(quiet=0) == {}  # acme failed: retried in 300 s ...
    serving = index.workspace_path("acme")
    index.close()  # ... by a service stopped first
    disk_full[0] = False
    index = EdgeIndex(tmp_path / "edge")  # the next one
    projector = IndexProjector(archive, index, GatedEmbedder())
    try:
        # calm was let go by the failed round, which found too few plain points there
        assert index.owed_compactions() == (
            ["acme"] if left_by == "a-failed-compaction" else ["acme", "calm"]
        )
        done = projector.compact_quiet()  # its first round; no save settled in this process
        assert set(done) == {"acme"} and done["acme"]["points"] == 20, done
        assert index.workspace_path("acme") != serving and index.count("acme") == 20
        assert index.owed_compactions() == []
        assert projector.compact_quiet(quiet=0) == {}
        MemoryService(archive, projector).create_card("calm", card(title="Again"))
        assert (serving.parent / "calm.written").exists()  # owed again, for a later process
    finally:
        index.close()


def test_an_interrupted_compaction_is_finished_by_a_rebuild_without_embedding(
    archive, tmp_path, monkeypatch
):
    embedder = GatedEmbedder()
    index, projector, serving, _ = _interrupted_compaction(
        archive, tmp_path / "edge", monkeypatch, embedder
    )
    try:
        embedder.hook = lambda call: None
        summary = projector.rebuild("acme")
        assert (summary["indexed"], summary["skipped_current"]) == (0, 40), summary
        assert embedder.rebuild_calls == 0
        assert index.workspace_path("acme") != serving and index.count("acme") == 40
        assert not (serving.parent / "acme.compacting").exists()
    finally:
        index.close()


def test_a_compaction_never_discards_what_an_interrupted_rebuild_built(
    archive, tmp_path, monkeypatch, caplog
):
    """A rebuild's generation (even one that took up a compaction's copy) holds
    embeddings a compaction cannot redo: it waits for `tht memory index`."""
    embedder = GatedEmbedder()
    index, projector, serving, _ = _interrupted_compaction(
        archive, tmp_path / "edge", monkeypatch, embedder
    )
    try:
        generation = index.begin_generation("acme")  # a rebuild takes the copy up ...
        assert not (serving.parent / "acme.compacting").exists()
        index.close()  # ... and is interrupted
        index = EdgeIndex(tmp_path / "edge")
        projector = IndexProjector(archive, index, embedder)
        with caplog.at_level("WARNING", logger="tht.memory.index.edge"):
            assert projector.compactions.compact("acme") is None
        assert "`tht memory index` finishes it" in caplog.text
        assert generation.path.exists() and index.workspace_path("acme") == serving
        embedder.hook = lambda call: None
        summary = projector.rebuild("acme")
        assert (summary["indexed"], summary["skipped_current"]) == (0, 40), summary
        assert index.workspace_path("acme") == generation.path
    finally:
        index.close()


def test_a_failed_compaction_is_tried_again_later(archive, tmp_path, monkeypatch, caplog):
    """A compaction that failed (the disk full while copying the shard, say) is not
    forgotten until the workspace is written again: the upkeep tries it again after
    COMPACTION_RETRY_SECONDS, then twice as long; the round's other workspaces are
    compacted meanwhile."""
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 10)
    WorkspaceService(archive).create("acme", "en")
    WorkspaceService(archive).create("beta", "en")
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, GatedEmbedder())
    service = MemoryService(archive, projector)
    monotonic, disk_full, later = time.monotonic, [True], [0.0]
    copies_run_out_of_space(
        monkeypatch, lambda target: disk_full[0] and target.name.startswith("acme.")
    )
    monkeypatch.setattr(time, "monotonic", lambda: monotonic() + later[0])
    try:
        for workspace in ("acme", "beta"):
            for i in range(20):
                service.create_card(workspace, card(title=f"Card {i}", content=f"topic{i} words"))
        serving = index.workspace_path("acme")
        with caplog.at_level("WARNING", logger="tht.memory.indexing.compaction"):
            assert set(projector.compact_quiet(quiet=0)) == {"beta"}
        # one line, not copytree's list of every file with both paths
        assert "No space left on device" in caplog.text and len(caplog.text) < 1_000
        assert "more files); tried again in 300 s" in caplog.text
        assert not list(serving.parent.glob("acme.g*"))  # no copy left behind
        assert projector.compact_quiet(quiet=0) == {}  # not due yet
        later[0] = 301
        caplog.clear()
        with caplog.at_level("WARNING", logger="tht.memory.indexing.compaction"):
            assert projector.compact_quiet(quiet=0) == {}  # due, and the disk is still full
        assert "tried again in 600 s" in caplog.text
        later[0] = 301 + 599
        assert projector.compact_quiet(quiet=0) == {}
        later[0], disk_full[0] = 301 + 601, False
        done = projector.compact_quiet(quiet=0)
        assert set(done) == {"acme"} and done["acme"]["points"] == 20, done
        assert index.workspace_path("acme") != serving and index.count("acme") == 20
        later[0] += 10_000
        assert projector.compact_quiet(quiet=0) == {}  # done: no retry left
    finally:
        index.close()


def test_the_service_upkeep_compacts_what_saves_left_once_they_settle(
    archive, tmp_path, monkeypatch
):
    """Saves alone used to leave their points in plain segments (searched by brute
    force) until a rebuild: the upkeep compacts a workspace no save has reached for
    ``QUIET_SECONDS``, never one being imported, and forgets it until written again."""
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 10)
    WorkspaceService(archive).create("acme", "en")
    WorkspaceService(archive).create("calm", "en")
    index = EdgeIndex(tmp_path / "edge")
    embedder = GatedEmbedder()
    projector = IndexProjector(archive, index, embedder)
    service = MemoryService(archive, projector)
    try:
        saved = [
            service.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words"))
            for i in range(40)
        ]
        assert all(s.status == "saved" for s in saved)
        service.create_card("calm", card(title="Alone"))  # too few plain points to compact
        serving = index.workspace_path("acme")
        assert projector.compact_quiet(quiet=60) == {}  # saved just now: not settled
        with projector.importing("acme"):
            assert projector.compact_quiet(quiet=0) == {}  # its import compacts it
        service.create_card("acme", card(title="Card 40", content="topic40 words"))
        embedder.hook = lambda call: None
        done = projector.compact_quiet(quiet=0)
        assert set(done) == {"acme"} and done["acme"]["points"] == 41, done
        assert embedder.rebuild_calls == 0  # a copy: nothing embedded again
        assert index.workspace_path("acme") != serving and index.count("acme") == 41
        assert projector.compact_quiet(quiet=0) == {}  # forgotten until written again
        recall = RecallService(archive, index, embedder, projector.format)
        found = recall.recall("acme", "topic7 words", "search", query=RecallQuery(top=1))
        assert found[0].card.id == saved[7].card.id
    finally:
        index.close()


def test_a_rebuild_goes_on_writing_while_its_segments_are_indexed(archive, tmp_path, monkeypatch):
    """The rebuild indexes its filled segments in a child process (the engine's optimize
    holds the GIL) from a thread of its own: the chunks after it are written meanwhile,
    held back by the closed generation and applied when it opens again."""
    monkeypatch.setattr("tht.memory.indexing.pipeline.CHUNK", 32)
    monkeypatch.setattr("tht.memory.indexing.pipeline.OPTIMIZE_EVERY", 64)
    monkeypatch.setattr("tht.memory.index.edge.IN_PROCESS_OPTIMIZE_BYTES", 0)
    marker = tmp_path / "optimizing"
    monkeypatch.setenv("THT_PAUSE_AT", "edge.optimizing")
    monkeypatch.setenv("THT_PAUSE_FILE", str(marker))
    WorkspaceService(archive).create("acme", "en")
    offline = MemoryService(archive)
    cards = [
        offline.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words")).card
        for i in range(300)
    ]
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, GatedEmbedder())
    progress: list[int] = []
    outcome: dict = {}
    rebuilding = threading.Thread(
        target=lambda: outcome.update(
            projector.rebuild("acme", lambda done, _: progress.append(done))
        )
    )
    rebuilding.start()
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():  # the first segments are being indexed, in a child
            assert rebuilding.is_alive() and time.monotonic() < deadline
            time.sleep(0.02)
        while not progress or progress[-1] < 300:  # ... and every chunk is written meanwhile
            assert time.monotonic() < deadline, progress
            time.sleep(0.02)
        assert marker.exists()  # the child still waits: the writes did not wait for it
    finally:
        while rebuilding.is_alive():  # the switch indexes once more: let every child go
            marker.unlink(missing_ok=True)
            rebuilding.join(0.05)
    try:
        assert outcome["indexed"] == 300, outcome
        assert index.count("acme") == 300
        recall = RecallService(archive, index, GatedEmbedder(), projector.format)
        found = recall.recall("acme", "topic42 words", "search", query=RecallQuery(top=1))
        assert found[0].card.id == cards[42].id
    finally:
        index.close()


class WaitingEmbedder(HashingEmbedder):
    """The hashing embedder, one batch at a time (as the in-process model embeds); from
    its ``wait_from``-th batch of passages on, it first waits for ``reported`` (at most
    a minute) and notes whether it came."""

    def __init__(self, reported: threading.Event, wait_from: int) -> None:
        super().__init__(64)
        self.reported, self.wait_from = reported, wait_from
        self.batches = 0
        self.saw_report: list[bool] = []

    def _embed(self, texts, *, query):
        if not query:
            self.batches += 1
            if self.batches >= self.wait_from:
                self.saw_report.append(self.reported.wait(60))
        return super()._embed(texts, query=query)


def test_a_rebuild_reports_progress_while_it_embeds_not_only_at_the_end(
    archive, tmp_path, database
):
    """200 cards fit in one read chunk; an embedder that takes a batch at a time gets
    them in parts, each written and reported before the rest is embedded: the progress
    moves while the rebuild runs (the last part's embedding waits for the first report)."""
    WorkspaceService(archive).create("acme", "en")
    index = _edge(tmp_path, database).open()
    reported = threading.Event()
    # parts of SEQUENTIAL_PART cards (four batches of 32): batch 5 embeds the last part
    embedder = WaitingEmbedder(reported, wait_from=5)
    projector = IndexProjector(archive, index, embedder)
    offline = MemoryService(archive)  # archive only: the rebuild indexes them
    for i in range(200):
        offline.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words"))
    counts: list[int] = []

    def progress(done: int, total: int) -> None:
        counts.append(done)
        if 0 < done < total:
            reported.set()

    try:
        summary = projector.rebuild("acme", progress)
    finally:
        index.close()
    assert summary["indexed"] == 200 and embedder.batches == 7
    assert embedder.saw_report == [True] * 3  # the second part's batches waited for it
    assert counts[0] == 0 and counts[-1] == 200 and counts == sorted(counts)
    assert SEQUENTIAL_PART in counts  # the first part reported before the rest embedded


class ConcurrentEmbedder(HashingEmbedder):
    """The hashing embedder with two batches in flight (as a remote provider is
    configured); notes how many texts each ``embed_passages`` call got."""

    def __init__(self) -> None:
        super().__init__(64)
        self.concurrency = 2
        self.passage_calls: list[int] = []

    def embed_passages(self, texts):
        self.passage_calls.append(len(texts))
        return super().embed_passages(texts)


def test_a_rebuild_gives_an_embedder_with_batches_in_flight_whole_chunks_past_the_query_cache(
    archive, tmp_path, database
):
    """The service wraps its embedder in the query-embedding cache; a rebuild still
    sees the model's concurrency and hands it the whole read chunk at once (its batches
    travel together) instead of parts of SEQUENTIAL_PART cards."""
    WorkspaceService(archive).create("acme", "en")
    index = _edge(tmp_path, database).open()
    embedder = ConcurrentEmbedder()
    projector = IndexProjector(archive, index, CachedQueryEmbedder(embedder))
    offline = MemoryService(archive)  # archive only: the rebuild indexes them
    for i in range(200):
        offline.create_card("acme", card(title=f"Card {i}", content=f"topic{i} words"))
    try:
        summary = projector.rebuild("acme", lambda done, total: None)
    finally:
        index.close()
    assert summary["indexed"] == 200
    assert embedder.passage_calls == [200] and SEQUENTIAL_PART < 200


def _bulk_cards(database, workspace: str, count: int, topic: str = "topic") -> list[str]:
    """``count`` cards written straight into the archive (as a bulk load would), their
    ids in order; card ``n`` is about ``<topic><n>``."""
    ids = [uuid.uuid4() for _ in range(count)]
    with psycopg.connect(database.runtime) as conn, conn.transaction():
        conn.execute("SET LOCAL ROLE thoth_memory_runtime")
        conn.execute("SELECT set_config('thoth.workspace', %s, true)", (workspace,))
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO thoth_memory.cards (workspace_id, id, family, language, title,"
                " content, scope, rationale, concepts, origin)"
                " VALUES (%s, %s, 'domain_clarification', 'en', %s, %s, 'Bench', 'why', '{}',"
                " 'manual')",
                [(workspace, i, f"Card {n}", f"{topic}{n} words") for n, i in enumerate(ids)],
            )
    return [uuid_to_card_id(i) for i in ids]


@pytest.mark.slow
def test_a_rebuild_switches_to_merged_segments_and_a_compaction_keeps_them_small(
    archive, database, tmp_path, monkeypatch
):
    """A rebuild's generation is written in segments of ``_MAX_SEGMENT_KB``, each
    indexed while the next is written; its switch merges them, since every search
    visits every segment. A compaction indexes what saves left in segments of
    ``_MAX_SEGMENT_KB`` again, without indexing the merged one again."""
    # 1536 dimensions: the engine indexes a segment from 10 MB (1 700 points) on, and
    # keeps segments under 13 MB (2 200 points); each 2 000 points written are indexed
    # before the next are written
    monkeypatch.setattr("tht.memory.indexing.pipeline.OPTIMIZE_EVERY", 2000)
    monkeypatch.setattr("tht.memory.index.edge._MAX_SEGMENT_KB", 13_000)

    def indexed_at_once(stage, name):
        started = start_stage(stage, name)
        if name == "rebuild-index":
            started.wait()
        return started

    monkeypatch.setattr("tht.memory.indexing.pipeline.start_stage", indexed_at_once)
    WorkspaceService(archive).create("acme", "en")
    ids = _bulk_cards(database, "acme", 9000)
    index = EdgeIndex(tmp_path / "edge")
    embedder = HashingEmbedder(1536)
    projector = IndexProjector(archive, index, embedder)

    def optimizers() -> dict:
        path = index.workspace_path("acme") / "edge_config.json"
        return json.loads(path.read_text())["optimizers"]

    try:
        written: list[int] = []
        real_switch = EdgeGeneration.switch

        def switch(generation):  # the generation's segments as the rebuild wrote them
            written.append(generation.shard.info().segments_count)
            real_switch(generation)

        monkeypatch.setattr(EdgeGeneration, "switch", switch)
        assert projector.rebuild("acme")["indexed"] == 9000
        with index.session():
            merged = index.shard("acme").info().segments_count
        assert written[0] >= 4 and merged <= 2, (written, merged)
        assert optimizers()["default_segment_number"] == 1
        assert optimizers()["max_segment_size"] >= 160_000 * 1536 * 4 // 1024
        recall = RecallService(archive, index, embedder, projector.format)
        found = recall.recall("acme", "topic4242 words", "search", query=RecallQuery(top=1))
        assert found[0].card.id == ids[4242]

        # what saves write: projected into the serving shard's plain segment
        fresh = _bulk_cards(database, "acme", 2000, topic="fresh")
        for start in range(0, 2000, 500):
            projector.sync("acme", [card_id_to_uuid(i) for i in fresh[start : start + 500]])
        assert index.compact("acme", least=1) == 11_000
        assert optimizers()["max_segment_size"] == 13_000  # not the merged size
        found = recall.recall("acme", "fresh42 words", "search", query=RecallQuery(top=1))
        assert found[0].card.id == fresh[42] and index.count("acme") == 11_000
    finally:
        index.close()
