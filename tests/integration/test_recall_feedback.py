"""Feedback from the dense neighbours across languages (RecallTuning,
``feedback_across_languages``): a question in another language than the workspace's
gets, as a further seed signal, the coverage of the terms of its first dense
neighbours, so that a card written in the neighbours' words comes up although the
question shares none of them. On real PostgreSQL and Qdrant Edge."""

from __future__ import annotations

import pytest

from tests.factories import card
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import HashingEmbedder
from tht.memory.index import EdgeIndex
from tht.memory.indexing import IndexProjector
from tht.memory.recall import RecallTuning
from tht.memory.recall_service import RecallQuery, RecallService

QUESTION = "which driver won the race of Monza in 2009"
CARDS = {
    # the question's names: the dense branch's first neighbour
    "neighbour": ("Monza 2009", "Gara di Monza 2009: vincitore e pilota in classifica"),
    "other": ("Stagione 2009", "Stagione 2009 con le scuderie iscritte"),
    # the neighbour's own words, none of the question's
    "sibling": ("Vincitore", "vincitore pilota classifica"),
    # more cards in the neighbour's words: "other" falls behind them all in feedback
    **{
        f"filler{n}": ("Classifica", words)
        for n, words in enumerate(
            ["gara pilota", "classifica gara", "pilota classifica", "vincitore gara"]
        )
    },
}


@pytest.fixture
def italian(archive, tmp_path):
    WorkspaceService(archive).create("pista", "it")
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, HashingEmbedder(256))
    memory = MemoryService(archive, projector)
    ids = {
        key: memory.create_card("pista", card(title=title, content=content)).card.id
        for key, (title, content) in CARDS.items()
    }
    yield archive, index, projector, ids
    index.close()


def _recalled(italian, tuning: RecallTuning, question: str = QUESTION, top: int = 4) -> list[str]:
    archive, index, projector, ids = italian
    names = {card_id: key for key, card_id in ids.items()}
    service = RecallService(archive, index, projector.embedder, projector.format, tuning)
    results = service.recall("pista", question, "search", query=RecallQuery(top=top))
    return [names[r.card.id] for r in results]


def test_the_dense_neighbours_words_lift_a_card_across_languages(italian):
    plain = RecallTuning(feedback_across_languages=0)
    # without feedback the seeds follow the dense rank (BM25 weight 0 across languages)
    assert _recalled(italian, plain) == ["neighbour", "other", "filler3", "sibling"]
    # one neighbour lends its words: the cards written in them (all covering them whole,
    # in dense order: filler3 2nd, sibling 3rd) against "other", which holds none (7th):
    # filler3 1/63 + 0.5/62 > other 1/62 + 0.5/67 > sibling 1/64 + 0.5/63
    lifted = RecallTuning(feedback_across_languages=1)
    assert _recalled(italian, lifted) == ["neighbour", "filler3", "other", "sibling"]


def test_a_question_in_the_workspaces_language_gets_no_feedback(italian):
    question = "quale pilota ha vinto la gara di Monza nel 2009"
    on, off = RecallTuning(feedback_across_languages=1), RecallTuning(feedback_across_languages=0)
    everything = len(CARDS)
    assert _recalled(italian, on, question, everything) == (
        _recalled(italian, off, question, everything)
    )
    # the same setting does move the English question on these very cards (not vacuous).
    # Feedback in the workspace's language (``feedback``) was tried and rejected; its
    # effect is covered by tests/unit/test_seed_order.py: on these cards many ties are
    # ordered by the random card ids, so an order here would be a coin toss.
    assert _recalled(italian, on) != _recalled(italian, off)


def test_a_tuning_can_search_more_seeds_than_the_spec_never_fewer(italian, monkeypatch):
    """``seeds_at_least`` (the bench's rejected ``ours+seeds100``): the engine is asked
    for that many seeds when the spec's count (3 x top, at least 20) is smaller."""
    archive, index, projector, _ = italian
    asked: list[int] = []
    search = index.hybrid_search

    def recorded(dense, sparse, filters, limit):
        asked.append(limit)
        return search(dense, sparse, filters, limit)

    monkeypatch.setattr(index, "hybrid_search", recorded)
    for tuning in (RecallTuning(), RecallTuning(seeds_at_least=60), RecallTuning(seeds_at_least=5)):
        service = RecallService(archive, index, projector.embedder, projector.format, tuning)
        found = service.recall("pista", QUESTION, "search", query=RecallQuery(top=10))
        assert found
    assert asked == [30, 60, 30]
