"""The coverage signal of recall needs the BM25 terms of each seed's indexed text: the
projector records them with the projection; for a projection recorded before migration
006 (no terms), recall derives them from the archive row, which must give exactly the
text the point was indexed with, at the card's current revision."""

from __future__ import annotations

import psycopg
import pytest

from tests.factories import card
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import HashingEmbedder
from tht.memory.index import EdgeIndex
from tht.memory.indexing import IndexProjector
from tht.memory.model import card_id_to_uuid
from tht.memory.projection_format import indexed_text
from tht.memory.recall_service import RecallQuery, RecallService, _indexed_card

DEPS = [
    {"database": "dwh", "schema": "sales", "table": "orders", "column": "shipDate"},
    {"database": "dwh", "schema": "sales", "table": "order_lines"},
    {"database": "dwh"},
]


@pytest.fixture
def services(archive, tmp_path):
    WorkspaceService(archive).create("acme", "en")
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, HashingEmbedder(64))
    yield (
        MemoryService(archive, projector),
        RecallService(archive, index, projector.embedder, projector.format),
        projector,
    )
    index.close()


@pytest.mark.parametrize(
    "family, fields",
    [
        (
            "sql_rule",
            {
                "sql": "SELECT max(shipDate) FROM orders",
                "concepts": ["shipping", "lead time"],
                "context": "Orders shipped late",
                "dependencies": DEPS,
            },
        ),
        (
            "solved_question",
            {"scope": "Sales", "content": "Per customer", "dependencies": DEPS[:1]},
        ),
        ("domain_clarification", {}),
    ],
)
def test_the_archive_row_gives_the_indexed_text(services, archive, database, family, fields):
    memory, _, _ = services
    saved = memory.create_card("acme", card(family, **fields)).card
    key = card_id_to_uuid(saved.id)
    _forget_terms(database, key)  # as a projection recorded before 006
    with archive.transaction("acme") as tx:
        read = tx.seed_facts([key])
    assert key not in read.terms
    rebuilt = indexed_text(_indexed_card(read.fields[key], read.facts[key][1].dependencies))
    assert rebuilt == indexed_text(saved)


def _forget_terms(database, card_uuid) -> None:
    with psycopg.connect(database.migrator) as conn:
        conn.execute(
            "UPDATE thoth_memory.projections SET terms = NULL WHERE card_id = %s", (card_uuid,)
        )


def _recorded_terms(archive, card_uuid) -> frozenset[int]:
    with archive.transaction("acme") as tx:
        read = tx.seed_facts([card_uuid])
    assert read.fields == {}  # recorded terms: no fields read
    return read.terms[card_uuid]


def test_an_edit_is_recalled_with_the_terms_of_its_new_text(services, archive, database):
    memory, recall, projector = services
    encoder = projector.format.encoder("en")
    saved = memory.create_card(
        "acme", card(title="Late shipments", content="shipDate after promised date")
    ).card
    key = card_id_to_uuid(saved.id)
    assert _recorded_terms(archive, key) == frozenset(
        encoder.encode_document(indexed_text(saved)).indices
    )
    first = recall.recall(
        "acme", "late shipments", "search", database="dwh", schema="sales", query=RecallQuery()
    )
    assert [r.card.id for r in first] == [saved.id]
    edited = memory.update_card(
        "acme",
        saved.id,
        card(title="Early deliveries", content="deliveryDate before promised date"),
    ).card
    new_terms = _recorded_terms(archive, key)
    assert new_terms == frozenset(encoder.encode_document(indexed_text(edited)).indices)
    assert new_terms != frozenset(encoder.encode_document(indexed_text(saved)).indices)
    second = recall.recall(
        "acme", "early deliveries", "search", database="dwh", schema="sales", query=RecallQuery()
    )
    assert [(r.card.id, r.card.revision) for r in second] == [(saved.id, 2)]


def test_recall_orders_seeds_alike_with_recorded_and_derived_terms(services, database):
    """Coverage decides the seed order here: the same ranking whether the terms were
    recorded (006) or are derived from the archive rows (earlier projections)."""
    memory, recall, _ = services
    texts = [
        "monthly revenue by region",
        "revenue net of refunds",
        "refunds by month and region",
        "region codes",
        "monthly active customers",
    ]
    cards = [
        memory.create_card("acme", card(title=f"Card {n}", content=text)).card
        for n, text in enumerate(texts)
    ]

    def ranking() -> list[tuple[str, float]]:
        results = recall.recall(
            "acme",
            "monthly refunds by region",
            "search",
            database="dwh",
            schema="sales",
            query=RecallQuery(top=5),
        )
        return [(r.card.id, r.ranked.score) for r in results]

    recorded = ranking()
    assert len(recorded) == 5
    for saved in cards:
        _forget_terms(database, card_id_to_uuid(saved.id))
    assert ranking() == recorded
