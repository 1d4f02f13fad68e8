"""Recall lifts the seeds whose whole title the question names (ours, measured by the
quality bench: docs/quality.md), on the real engines: the titles are read with the
seeds' facts, at the card's current revision, through the workspace's analyzer."""

from __future__ import annotations

import pytest

from tests.factories import card
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import HashingEmbedder
from tht.memory.index import EdgeIndex
from tht.memory.indexing import IndexProjector
from tht.memory.recall import RecallTuning
from tht.memory.recall_service import RecallQuery, RecallService

QUESTION = "Which refunds fall inside the refund window?"
CARDS = [
    (
        "Refunds inside an order",
        "Refunds that fall inside one order are summed; a refund lowers revenue.",
    ),
    ("Refunds by month", "Refunds fall inside the month the refund was issued."),
    ("Window functions", "Refunds per customer: a window function over the refund dates."),
    ("Disputed refunds", "A refund that falls inside a dispute carries a reason code."),
    ("Refund window", "Thirty days from delivery; later requests are exceptions for support."),
]


@pytest.fixture
def recalls(archive, tmp_path):
    WorkspaceService(archive).create("acme", "en")
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, HashingEmbedder(64))
    memory = MemoryService(archive, projector)
    ids = {
        title: memory.create_card("acme", card(title=title, content=content)).card.id
        for title, content in CARDS
    }

    def service(tuning: RecallTuning) -> RecallService:
        return RecallService(archive, index, projector.embedder, projector.format, tuning)

    def recall(tuning: RecallTuning, by: RecallService | None = None) -> list[str]:
        """The titles recall answers, by a new service (or ``by``)."""
        by = by or service(tuning)
        results = by.recall("acme", QUESTION, "search", query=RecallQuery(top=5))
        return [r.card.title for r in results]

    yield memory, ids, recall, service
    index.close()


def test_a_named_title_follows_the_first_card(recalls):
    _, _, recall, _ = recalls
    without = recall(RecallTuning(titles=False))
    assert without[-1] == "Refund window"  # it shares only its title with the question
    lifted = recall(RecallTuning())
    assert lifted[0] == without[0]  # the first card stays first
    assert lifted[1:] == ["Refund window", *without[1:-1]]


def test_the_title_recall_matches_is_the_current_one(recalls):
    memory, ids, recall, _ = recalls
    content = dict(CARDS)["Refund window"]
    memory.update_card("acme", ids["Refund window"], card(title="Return period", content=content))
    assert recall(RecallTuning())[-1] == "Return period"


def test_one_service_analyses_each_title_as_it_now_reads(recalls):
    # the service keeps each title's analysis: by the title's text, never by the card
    memory, ids, recall, service = recalls
    tuning = RecallTuning()
    kept = service(tuning)
    assert recall(tuning, kept)[1] == "Refund window"
    content = dict(CARDS)["Refund window"]
    memory.update_card("acme", ids["Refund window"], card(title="Return period", content=content))
    assert recall(tuning, kept)[-1] == "Return period"  # no longer named: not lifted
    memory.update_card("acme", ids["Refund window"], card(title="Refund window", content=content))
    assert recall(tuning, kept)[1] == "Refund window"


def test_a_title_that_defines_what_it_names_is_named_by_its_head(recalls):
    # the head of the card's own text as its title: the question names "refund
    # window", never the definition that follows the marker
    memory, ids, recall, _ = recalls
    content = dict(CARDS)["Refund window"]
    long_title = "Refund window refers to thirty days from delivery; later requests"
    memory.update_card("acme", ids["Refund window"], card(title=long_title, content=content))
    assert recall(RecallTuning(title_markers=()))[-1] == long_title
    lifted = recall(RecallTuning())
    assert lifted[1] == long_title
