"""A question's numbers written as words meet BM25 as digits too, on the real engines
(ours, measured by the quality bench: docs/quality.md): the question's BM25 query, and
with it coverage and named titles, reads "nineteen" as "nineteen 19"."""

from __future__ import annotations

import pytest

from tests.factories import card
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import HashingEmbedder
from tht.memory.index import EdgeIndex
from tht.memory.indexing import IndexProjector
from tht.memory.recall import RecallTuning
from tht.memory.recall_service import RecallQuery, RecallService

CARDS = [
    ("Points threshold", "Counted only above 19 points."),
    ("Carrier codes", "Carriers have three letter codes."),
    ("Race date", "Race date refers to races.date, the day of the race."),
    ("Race name", "Race name refers to races.name, such as the Australian Grand Prix."),
    ("Lap of a race", "A lap of a race is one row of lapTimes for each driver."),
]


@pytest.fixture
def recall(archive, tmp_path):
    WorkspaceService(archive).create("acme", "en")
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, HashingEmbedder(64))
    memory = MemoryService(archive, projector)
    for title, content in CARDS:
        memory.create_card("acme", card(title=title, content=content))

    def recall(question: str, tuning: RecallTuning) -> dict[str, int | None]:
        service = RecallService(archive, index, projector.embedder, projector.format, tuning)
        results = service.recall("acme", question, "search", query=RecallQuery(top=4))
        return {r.card.title: r.hit.bm25_rank if r.hit else None for r in results}

    yield recall
    index.close()


def test_a_number_written_as_a_word_meets_bm25_as_digits(recall):
    question = "who scored above nineteen"
    off = recall(question, RecallTuning(number_words=False))
    assert off.get("Points threshold") is None  # returned by the dense branch only, or not at all
    on = recall(question, RecallTuning())
    assert on["Points threshold"] == 1  # "19": BM25's first hit


def test_a_card_that_writes_the_word_still_meets_it(recall):
    # "three" is the only term the question shares with the card: the word stays
    # beside its digits, so BM25 still finds it first
    question = "who has three"
    off = recall(question, RecallTuning(number_words=False))
    on = recall(question, RecallTuning())
    assert off["Carrier codes"] == on["Carrier codes"] == 1


def test_digits_in_the_question_are_read_as_before(recall):
    # the rule only adds digits: a question that writes them finds the card either way
    question = "who scored above 19"
    assert recall(question, RecallTuning(number_words=False))["Points threshold"] == 1
    assert recall(question, RecallTuning())["Points threshold"] == 1
