"""What the index sees of a card and of a question: identifier words."""

from __future__ import annotations

from datetime import UTC, datetime

import qdrant_edge

from tht.memory.model import Card, Dependency
from tht.memory.projection_format import (
    TEXT_VERSION,
    fingerprint,
    identifier_words,
    indexed_text,
    searchable,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_camel_case_identifiers_give_their_words_once():
    text = "buildUpPlaySpeed, T1.CustomerID and buildUpPlaySpeed; eye_colour_id, CZK, TR001_10_11, iPhone"
    assert identifier_words(text) == ["build up play speed", "customer id", "i phone"]
    assert identifier_words("plain words, UPPER, snake_case") == []
    assert identifier_words("") == []


def test_searchable_appends_the_words_and_keeps_plain_text_unchanged():
    assert searchable("top buildUpPlaySpeed") == "top buildUpPlaySpeed\nbuild up play speed"
    assert searchable("the highest build up play speed") == "the highest build up play speed"


def test_question_words_meet_a_camel_case_column_in_bm25():
    bm25 = qdrant_edge.Bm25(qdrant_edge.Bm25Config(language="english"))
    card = Card(
        id="mem-00000000-0000-4000-8000-000000000001",
        workspace="w",
        family="sql_rule",
        origin="manual",
        title="Fast attacks",
        content="Fast attacks: buildUpPlaySpeed > 60.",
        scope="Football",
        rationale="Documented.",
        revision=1,
        created_at=NOW,
        updated_at=NOW,
        dependencies=[
            Dependency(
                database="db",
                schema="public",
                table="Team_Attributes",
                column="chanceCreationShooting",
            )
        ],
    )
    document = set(bm25.embed_document(indexed_text(card)).indices)
    for words in ("build up play speed", "chance creation shooting"):
        assert set(bm25.embed_query(words).indices) <= document, words


def test_the_text_version_is_in_the_fingerprint():
    assert TEXT_VERSION != "text-v1" and fingerprint("m", 3, "bm25").endswith("|" + TEXT_VERSION)
