"""Concurrent writers in one workspace: 8 processes x 100 updates, no lost update."""

from __future__ import annotations

import multiprocessing

from tests.factories import card
from tht.errors import StaleRevision
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService

PROCESSES = 8
UPDATES = 100


def _append(
    memory: MemoryService, card_id: str, mark: str, conditional: bool, workspace: str = "acme"
) -> int:
    """Read-modify-write; with `conditional` the save names the revision it read."""
    conflicts = 0
    while True:
        current = memory.get_card(workspace, card_id)
        data = card(
            title=current.title,
            content=f"{current.content}\n{mark}",
            revision=current.revision if conditional else None,
        )
        try:
            memory.update_card(workspace, card_id, data)
            return conflicts
        except StaleRevision:
            conflicts += 1


def _writer(conninfo: str, worker: int, shared: str, own: str, blind: str, queue) -> None:
    archive = PostgresArchive(conninfo, max_connections=1).open()
    memory = MemoryService(archive)
    conflicts = 0
    for i in range(UPDATES):
        if i % 2 == 0:
            conflicts += _append(memory, shared, f"w{worker}-{i}", conditional=True)
        elif i % 4 == 1:
            conflicts += _append(memory, own, f"w{worker}-{i}", conditional=True)
        else:  # unconditional saves: serialized by the workspace lock, revision still exact
            memory.update_card("acme", blind, card(title="blind", content=f"w{worker}-{i}"))
    archive.close()
    queue.put(conflicts)


def test_eight_processes_lose_no_update(database, memory, workspaces):
    workspaces.create("acme", "en")
    shared = memory.create_card("acme", card(title="shared", content="start")).card.id
    blind = memory.create_card("acme", card(title="blind", content="start")).card.id
    own = [
        memory.create_card("acme", card(title=f"own {w}", content="start")).card.id
        for w in range(PROCESSES)
    ]

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    workers = [
        ctx.Process(target=_writer, args=(database.runtime, w, shared, own[w], blind, queue))
        for w in range(PROCESSES)
    ]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=300)
        assert p.exitcode == 0
    conflicts = sum(queue.get(timeout=5) for _ in workers)

    per_worker_shared = UPDATES // 2
    per_worker_own = len([i for i in range(UPDATES) if i % 4 == 1])
    per_worker_blind = UPDATES - per_worker_shared - per_worker_own

    final = memory.get_card("acme", shared)
    marks = final.content.splitlines()[1:]
    assert final.revision == 1 + PROCESSES * per_worker_shared
    assert sorted(marks) == sorted(
        f"w{w}-{i}" for w in range(PROCESSES) for i in range(0, UPDATES, 2)
    )
    for w in range(PROCESSES):
        mine = memory.get_card("acme", own[w])
        assert mine.revision == 1 + per_worker_own
        assert mine.content.splitlines()[1:] == [f"w{w}-{i}" for i in range(UPDATES) if i % 4 == 1]
    assert memory.get_card("acme", blind).revision == 1 + PROCESSES * per_worker_blind
    assert conflicts > 0  # the writers really did race on the shared card

    # every mutation left exactly its pending operation: one per card, at the card's revision
    ops = {op.card_id: op for op in memory.pending("acme")}
    assert set(ops) == {shared, blind, *own}
    for card_id, op in ops.items():
        assert (op.operation, op.revision) == ("upsert", memory.get_card("acme", card_id).revision)
