"""`tht memory export` reads one snapshot: cards created, edited or deleted while it
runs (between its batches) leave the file as the workspace was when it started, and
the file re-imports whole. Against the real archive, with writers in other
transactions while the export's snapshot is open."""

from __future__ import annotations

import json

import pytest

from tests.factories import card
from tht.errors import ThothError
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService
from tht.memory.model import card_id_to_uuid
from tht.memory.transfer import service as transfer_service
from tht.memory.transfer.service import CardTransfer


def _documents(archive, workspace="acme"):
    chunks: list[str] = []
    CardTransfer(archive).export(workspace, "jsonl", chunks.append)
    return [json.loads(line) for line in "".join(chunks).splitlines()]


def test_export_is_one_snapshot_while_others_write(
    cli, runtime_file, archive, tmp_path, monkeypatch
):
    for name in ("acme", "copy"):
        assert cli("workspace", "create", name, "--language", "en").code == 0
    memory = MemoryService(archive)
    created = [
        memory.create_card("acme", card(title=f"Card {i}", content=f"Content {i}.")).card
        for i in range(10)
    ]
    ids = sorted((c.id for c in created), key=card_id_to_uuid)  # the export's order
    first, edited, deleted = ids[0], ids[-2], ids[-1]
    # the first batch's first card links to the last batch's last card
    memory.update_card(
        "acme",
        first,
        card(title="Card first", links=[{"target": deleted, "meaning": "see also"}]),
    )
    before = {d["id"]: d for d in _documents(archive)}
    assert sorted(before, key=card_id_to_uuid) == ids

    written: list[str] = []
    seen: list[tuple[int, int | None]] = []
    added: list[str] = []

    def write(text: str) -> None:
        written.append(text)
        if len(written) == 1:  # after the first batch: others write, each committed
            for i in range(3):
                links = [{"target": first, "meaning": "see also"}]
                links.append({"target": deleted, "meaning": "example"})
                new = memory.create_card("acme", card(title=f"New {i}", links=links)).card
                added.append(new.id)
            memory.update_card("acme", edited, card(title="Edited meanwhile"))
            memory.delete_card("acme", deleted)

    monkeypatch.setattr(transfer_service, "BATCH", 4)  # 10 cards: three batches
    summary = CardTransfer(archive).export(
        "acme", "jsonl", write, lambda _phase, done, total: seen.append((done, total))
    )
    assert len(written) == 3  # 10 cards in batches of 4: the writes came between batches
    documents = [json.loads(line) for line in "".join(written).splitlines()]
    exported = {d["id"]: d for d in documents}
    assert summary["cards"] == 10
    assert seen == [(4, 10), (8, 10), (10, 10)]
    # the workspace as it was when the export started, document for document
    assert [d["id"] for d in documents] == ids
    assert exported == before
    assert deleted in exported and not set(added) & set(exported)
    assert exported[edited]["title"] != "Edited meanwhile"
    assert {link["target"] for d in documents for link in d["links"]} <= set(exported)
    # the writes were not blocked by the open snapshot: they are all there now
    now = {d["id"]: d for d in _documents(archive)}
    assert set(now) == (set(ids) - {deleted}) | set(added)
    assert now[edited]["title"] == "Edited meanwhile"

    path = tmp_path / "snapshot.jsonl"
    path.write_text("".join(written))
    imported = cli("memory", "import", str(path), "-c", runtime_file("copy"))
    assert imported.code == 0, imported.document
    assert imported.document["created"] == 10
    copy = {d["title"]: d for d in _documents(archive, "copy")}
    assert sorted(copy) == sorted(d["title"] for d in documents)
    (link,) = copy["Card first"]["links"]
    assert link["target_title"] == exported[deleted]["title"]


def test_a_snapshot_refuses_writes_and_leaves_the_pooled_connection_as_it_was(cli, database):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    archive = PostgresArchive(database.runtime, max_connections=1).open()
    try:
        with pytest.raises(ThothError, match="read-only transaction"):
            with archive.transaction("acme", snapshot=True) as tx:
                tx.insert_workspace("other", "en")
        with pytest.raises(ValueError, match="no workspace lock"):
            with archive.transaction("acme", snapshot=True, lock=True):
                pass
        with archive.transaction("acme", snapshot=True) as tx:
            assert tx.workspace() is not None
        # the one pooled connection: the next transaction is the default one again
        with archive.connection() as conn:
            assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
            assert conn.execute("SHOW transaction_read_only").fetchone() == ("off",)
            conn.rollback()
        memory = MemoryService(archive)
        assert memory.create_card("acme", card(title="Written after")).card.title == (
            "Written after"
        )
    finally:
        archive.close()
