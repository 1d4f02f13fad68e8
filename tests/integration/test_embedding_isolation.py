"""Isolation of the embedding: every input is bounded by the embedder, the
cut is recorded with the projection and shown, and embedding runs outside every lock,
so a big card's embedding stalls neither another workspace nor its own workspace's
saves and recalls, and a late embedding never overwrites a newer projection.

Real PostgreSQL and a real Qdrant Edge index; a hashing embedder that the tests can
hold inside an embedding (events, no timing), since the model is not the point here.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.factories import card
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import HashingEmbedder
from tht.memory.index import EdgeIndex, IndexPoint
from tht.memory.indexing import IndexProjector
from tht.memory.model import CardIndex, card_id_to_uuid
from tht.memory.projection_format import indexed_text
from tht.memory.recall_service import RecallService

DWH = {"database": "dwh", "schema": "sales"}
WAIT = 60  # seconds: only ever reached when the behaviour under test is broken


class HeldEmbedder(HashingEmbedder):
    """The hashing embedder, except that a passage containing ``marker`` announces
    itself (``entered``) and is not embedded before ``release``: a slow embedding whose
    length the test decides."""

    def __init__(self, marker: str, **kwargs: Any) -> None:
        super().__init__(64, **kwargs)
        self.marker = marker
        self.entered = threading.Event()
        self.release = threading.Event()
        self.passages: list[str] = []

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        if not query:
            self.passages.extend(texts)
            if any(self.marker in text for text in texts) and not self.release.is_set():
                self.entered.set()
                assert self.release.wait(WAIT), "the test never released the embedding"
        return super()._embed(texts, query=query)


class RecordingIndex:
    """The real Edge index, recording every point written (what the projector wrote,
    in order): the engine itself does not hand vectors back."""

    def __init__(self, index: EdgeIndex) -> None:
        self._index = index
        self.written: list[IndexPoint] = []

    def upsert(self, points: list[IndexPoint]) -> None:
        self._index.upsert(points)
        self.written.extend(points)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)


class Stack:
    def __init__(self, archive, index, embedder) -> None:
        self.index = index
        self.embedder = embedder
        self.projector = IndexProjector(archive, index, embedder)
        self.memory = MemoryService(archive, self.projector)
        self.recall = RecallService(archive, index, embedder, self.projector.format)

    def recall_ids(self, workspace: str, question: str, kind: str = "search") -> list[str]:
        return [r.card.id for r in self.recall.recall(workspace, question, kind, **DWH)]


@pytest.fixture
def make_stack(archive, tmp_path):
    for workspace in ("acme", "beta"):
        WorkspaceService(archive).create(workspace, "en")
    opened = []

    def make(embedder) -> Stack:
        index = RecordingIndex(EdgeIndex(tmp_path / "edge", open_timeout=0.5))
        opened.append(index)
        return Stack(archive, index, embedder)

    yield make
    for index in opened:
        index.close()


def in_thread(target, *args) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(target(*args))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def finished(thread: threading.Thread, outcome: list) -> Any:
    thread.join(WAIT)
    assert not thread.is_alive(), "blocked: it waited for the held embedding"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def big_card(**overrides: Any):
    """The measured card: content, rationale and context of 20 000 characters and SQL
    of 49 000 (109 KB), one family that has all four."""
    fields = {
        "title": "Big rule",
        "content": ("revenue " * 2500)[:20_000],
        "rationale": ("refunds " * 2500)[:20_000],
        "context": ("ledger " * 3000)[:20_000],
        "sql": ("SELECT sum(net_amount) FROM sales.orders GROUP BY month;\n" * 900)[:49_000],
    }
    return card("sql_rule", **{**fields, **overrides})


def test_a_cut_embedding_is_recorded_shown_and_bm25_keeps_the_whole_text(make_stack):
    stack = make_stack(HashingEmbedder(64, max_chars=100))
    long = stack.memory.create_card(
        "acme", card(title="Long", content="fiscal " * 60 + "zanzibar")
    ).card
    short = stack.memory.create_card("acme", card(title="Short", content="fiscal year")).card

    shown = stack.memory.get_card("acme", long.id)
    assert shown.index == CardIndex(
        revision=1, current=True, indexed_chars=len(indexed_text(long)), embedded_chars=100
    )
    assert shown.as_json()["index"] == {
        "revision": 1,
        "current": True,
        "indexed_chars": len(indexed_text(long)),
        "embedded_chars": 100,
    }
    assert stack.memory.get_card("acme", short.id).index == CardIndex(
        revision=1, current=True, indexed_chars=len(indexed_text(short)), embedded_chars=None
    )
    # the point's dense vector is the bounded prefix's; BM25 still holds the whole text
    (point,) = [p for p in stack.index.written if p.id == card_id_to_uuid(long.id)]
    assert point.dense == stack.embedder.embed_passages([indexed_text(long)[:100]])[0]
    # a word past the cut: BM25 finds it in the long card only
    results = stack.recall.recall("acme", "zanzibar", "search", **DWH)
    bm25 = {r.card.id: r.as_json()["retrieval"]["bm25_rank"] for r in results}
    assert bm25[long.id] == 1 and bm25.get(short.id) is None

    # an edit that fits records that nothing was cut any more
    stack.memory.update_card("acme", long.id, card(title="Long", content="fiscal year"))
    assert stack.memory.get_card("acme", long.id).index.embedded_chars is None


def test_a_109_kb_card_saves_with_its_projection_current(make_stack):
    stack = make_stack(HashingEmbedder(64))
    saved = stack.memory.create_card("acme", big_card())
    assert saved.status == "saved" and saved.index.status == "current"
    text = indexed_text(saved.card)
    assert len(text) > 109_000
    shown = stack.memory.get_card("acme", saved.card.id)
    assert shown.index == CardIndex(
        revision=1, current=True, indexed_chars=len(text), embedded_chars=8192
    )
    assert stack.recall_ids("acme", "ledger refunds", "rules") == [saved.card.id]
    assert stack.projector.check("acme")["stale"] == []


def test_a_held_embedding_blocks_neither_other_workspaces_nor_its_own(make_stack):
    """While workspace acme's big card is being embedded: a save in beta, a save in
    acme itself and a recall in acme all complete (with the embedding inside the
    workspace lock, the last two waited for it)."""
    embedder = HeldEmbedder("BIG-A")
    stack = make_stack(embedder)
    existing = stack.memory.create_card(
        "acme", card(title="Fiscal year", content="fiscal year starts in April")
    ).card

    big, big_outcome = in_thread(stack.memory.create_card, "acme", big_card(title="BIG-A rule"))
    assert embedder.entered.wait(WAIT)

    other = finished(
        *in_thread(stack.memory.create_card, "beta", card(title="Beta", content="beta fiscal"))
    )
    same = finished(
        *in_thread(
            stack.memory.create_card, "acme", card(title="Calendar", content="fiscal calendar")
        )
    )
    found = finished(*in_thread(stack.recall_ids, "acme", "fiscal year"))
    assert other.index.status == same.index.status == "current"
    assert existing.id in found and same.card.id in found
    assert big.is_alive()  # all of it happened while the big card was still embedding

    embedder.release.set()
    saved = finished(big, big_outcome)
    assert saved.index.status == "current"
    assert stack.memory.get_card("acme", saved.card.id).index.current


@pytest.mark.parametrize(
    "edit_propagates", [True, False], ids=["edit-indexed-first", "edit-left-pending"]
)
def test_a_card_edited_while_embedded_ends_with_the_newer_revision(
    make_stack, archive, edit_propagates
):
    """The first save's embedding is held while the card is edited. Whether the edit's
    own propagation indexed it first or it was left pending, the card ends projected
    at the newer revision with the newer text's vector: never the older one."""
    embedder = HeldEmbedder("VERSION-ONE")
    stack = make_stack(embedder)
    created, outcome = in_thread(
        stack.memory.create_card, "acme", card(title="Rule", content="VERSION-ONE text")
    )
    assert embedder.entered.wait(WAIT)
    card_id = _only_card(archive)  # committed before its propagation began
    editor = (
        stack.memory if edit_propagates else MemoryService(archive)
    )  # without a projector: left pending
    edited = editor.update_card("acme", card_id, card(title="Rule", content="VERSION-TWO text"))
    assert edited.card.revision == 2

    embedder.release.set()
    first = finished(created, outcome)
    # the late save reports its card current: the newer revision is what is indexed
    assert first.index.status == "current"
    shown = stack.memory.get_card("acme", card_id)
    assert shown.index.revision == 2 and shown.index.current
    newer = indexed_text(edited.card)
    last = [p for p in stack.index.written if p.id == card_id_to_uuid(card_id)][-1]
    assert (last.revision, last.dense) == (2, stack.embedder.embed_passages([newer])[0])
    assert all(p.revision == 2 for p in stack.index.written if p.id == card_id_to_uuid(card_id))
    assert {p.id: p.revision for p in stack.index.scroll_ids("acme")} == {
        card_id_to_uuid(card_id): 2
    }
    assert stack.memory.pending("acme") == []
    assert stack.recall_ids("acme", "VERSION-TWO") == [card_id]


def _only_card(archive) -> str:
    with archive.transaction("acme") as tx:
        (card_uuid,) = tx.card_revisions()
    return f"mem-{card_uuid}"
