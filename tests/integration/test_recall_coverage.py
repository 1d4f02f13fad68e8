"""The coverage signal of recall reads each seed's indexed text from the archive row:
it must be exactly the text the point was indexed with, at the card's current revision."""

from __future__ import annotations

import pytest

from tests.factories import card
from tht.memory.embedding import HashingEmbedder
from tht.memory.index import EdgeIndex
from tht.memory.model import card_id_to_uuid
from tht.memory.projection import indexed_text
from tht.memory.projector import IndexProjector
from tht.memory.recall_service import RecallQuery, RecallService, _indexed_card
from tht.memory.service import MemoryService, WorkspaceService

DEPS = [{"database": "dwh", "schema": "sales", "table": "orders", "column": "shipDate"},
        {"database": "dwh", "schema": "sales", "table": "order_lines"},
        {"database": "dwh"}]


@pytest.fixture
def services(archive, tmp_path):
    WorkspaceService(archive).create("acme", "en")
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, HashingEmbedder(64))
    yield MemoryService(archive, projector), RecallService(archive, index, projector.embedder, projector), projector
    index.close()


@pytest.mark.parametrize("family, fields", [
    ("sql_rule", {"sql": "SELECT max(shipDate) FROM orders", "concepts": ["shipping", "lead time"],
                  "context": "Orders shipped late", "dependencies": DEPS}),
    ("solved_question", {"scope": "Sales", "content": "Per customer", "dependencies": DEPS[:1]}),
    ("domain_clarification", {}),
])
def test_the_archive_row_gives_the_indexed_text(services, archive, family, fields):
    memory, _, _ = services
    saved = memory.create_card("acme", card(family, **fields)).card
    key = card_id_to_uuid(saved.id)
    with archive.transaction("acme") as tx:
        read = tx.seed_facts([key], [key])
    rebuilt = indexed_text(_indexed_card(read.fields[key], read.facts[key][1].dependencies))
    assert rebuilt == indexed_text(saved)


def test_an_edit_is_recalled_with_the_terms_of_its_new_text(services):
    memory, recall, projector = services
    saved = memory.create_card("acme", card(title="Late shipments", content="shipDate after promised date")).card
    first = recall.recall("acme", "late shipments", "search", database="dwh", schema="sales", query=RecallQuery())
    assert [r.card.id for r in first] == [saved.id]
    edited = memory.update_card("acme", saved.id, card(title="Early deliveries",
                                                      content="deliveryDate before promised date")).card
    second = recall.recall("acme", "early deliveries", "search", database="dwh", schema="sales",
                           query=RecallQuery())
    assert [(r.card.id, r.card.revision) for r in second] == [(saved.id, 2)]
    encoder = projector.encoder("en")
    terms = {key[1]: value for key, value in recall._terms.items() if key[0] == card_id_to_uuid(saved.id)}
    assert terms[1] == frozenset(encoder.encode_document(indexed_text(saved)).indices)
    assert terms[2] == frozenset(encoder.encode_document(indexed_text(edited)).indices) != terms[1]
