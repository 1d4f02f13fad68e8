"""Admin list: filters and text search over the whole archive, before pagination."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from tests.factories import card
from tht.memory.model import ListQuery, card_id_to_uuid


def page_ids(memory, workspace, **query):
    return [item.id for item in memory.list_cards(workspace, ListQuery(**query)).items]


def all_pages(memory, workspace, page_size, **query):
    ids, page, total = [], 1, None
    while True:
        result = memory.list_cards(workspace, ListQuery(page=page, page_size=page_size, **query))
        total = result.total
        if not result.items:
            return ids, total
        ids += [item.id for item in result.items]
        page += 1


@pytest.fixture
def corpus(memory, workspaces, database):
    """45 cards spread over families, concepts, dependencies and origins."""
    workspaces.create("acme", "en")
    workspaces.create("beta", "en")
    made = []
    for i in range(45):
        family = ["domain_clarification", "sql_rule", "explained_error"][i % 3]
        concepts = (
            ["order"] + (["customer"] if i % 2 == 0 else []) + (["invoice"] if i % 5 == 0 else [])
        )
        deps = [
            {
                "database": "dwh",
                "schema": "sales",
                "table": "orders" if i % 4 == 0 else "customers",
                "column": "id" if i % 5 != 1 else "name",
            }
        ]
        word = "shipment" if i % 6 == 0 else "payment"
        made.append(
            memory.create_card(
                "acme",
                card(
                    family, title=f"Card {i:02d} about {word}", concepts=concepts, dependencies=deps
                ),
            ).card
        )
    # noise in another workspace that must never be counted
    for i in range(5):
        memory.create_card("beta", card(title=f"Beta {i} shipment", concepts=["order"]))
    # identical timestamps make the id tie-breaker decide the order
    with psycopg.connect(database.migrator) as conn:
        conn.execute(
            "UPDATE thoth_memory.cards SET updated_at = '2026-01-01T00:00:00Z'"
            " WHERE workspace_id = 'acme' AND family = 'sql_rule'"
        )
    return made


def test_totals_and_pages_span_the_whole_archive(memory, corpus):
    ids, total = all_pages(memory, "acme", page_size=7)
    assert total == 45 and len(ids) == 45 and set(ids) == {c.id for c in corpus}


def test_sort_is_stable_across_pages_with_id_tie_breaker(memory, corpus):
    everything = page_ids(memory, "acme", page_size=100, family=["sql_rule"], sort="updated_at")
    paged, total = all_pages(memory, "acme", page_size=4, family=["sql_rule"], sort="updated_at")
    assert total == 15 and paged == everything
    assert everything == sorted(everything, key=lambda i: card_id_to_uuid(i), reverse=True)
    asc, _ = all_pages(
        memory, "acme", page_size=4, family=["sql_rule"], sort="updated_at", order="asc"
    )
    assert asc == list(reversed(everything))
    titles, _ = all_pages(memory, "acme", page_size=6, sort="title")
    assert titles == [c.id for c in sorted(corpus, key=lambda c: c.title)]


def test_combined_filters_match_a_reference_computation(memory, corpus):
    def reference(c):
        return (
            c.family in ("sql_rule", "explained_error")
            and {"order", "customer"} <= set(c.concepts)
            and any(d.table == "orders" and d.column == "id" for d in c.dependencies)
        )

    expected = {c.id for c in corpus if reference(c)}
    assert expected  # the corpus has matches on more than one page
    ids, total = all_pages(
        memory,
        "acme",
        page_size=2,
        family=["sql_rule", "explained_error"],
        concepts=["order", "customer"],
        database="dwh",
        table="orders",
        column="id",
    )
    assert total == len(expected) and set(ids) == expected and len(ids) == len(set(ids))


def test_dependency_filter_needs_one_dependency_to_match_every_level(memory, workspaces):
    workspaces.create("acme", "en")
    split = memory.create_card(
        "acme",
        card(
            dependencies=[
                {"database": "dwh", "schema": "sales", "table": "orders", "column": "id"},
                {"database": "dwh", "schema": "sales", "table": "customers", "column": "name"},
            ]
        ),
    ).card
    exact = memory.create_card(
        "acme",
        card(
            dependencies=[
                {"database": "dwh", "schema": "sales", "table": "orders", "column": "name"}
            ]
        ),
    ).card
    assert page_ids(memory, "acme", table="orders", column="name") == [exact.id]
    assert set(page_ids(memory, "acme", table="orders")) == {split.id, exact.id}


def test_text_search_uses_the_language_and_prefixes(memory, corpus):
    result = memory.list_cards("acme", ListQuery(q="shipments", page_size=3))  # stemmed
    expected = {c.id for c in corpus if "shipment" in c.title}
    assert result.total == len(expected) == 8
    ids, total = all_pages(memory, "acme", page_size=3, q="shipm")  # prefix of a word
    assert total == 8 and set(ids) == expected
    ids, total = all_pages(memory, "acme", page_size=3, q="shipment", concepts=["invoice"])
    assert set(ids) == {c.id for c in corpus if "shipment" in c.title and "invoice" in c.concepts}
    assert memory.list_cards("acme", ListQuery(q="!!!")).total == 0


def test_italian_workspace_stems_italian(memory, workspaces):
    workspaces.create("ita", "it")
    a = memory.create_card(
        "ita",
        card(title="Ordini evasi", content="Un ordine è evaso quando tutte le righe sono spedite."),
    ).card
    memory.create_card("ita", card(title="Fatture", content="Le fatture emesse."))
    assert page_ids(memory, "ita", q="ordine evaso") == [a.id]


def test_id_search_exact_and_prefix(memory, corpus):
    target = corpus[17]
    assert page_ids(memory, "acme", q=target.id) == [target.id]
    assert target.id in page_ids(memory, "acme", q=target.id[:12], page_size=100)
    assert page_ids(memory, "acme", q=target.id.upper()) == [target.id]


def test_origin_and_updated_date_range(memory, corpus, database):
    with psycopg.connect(database.migrator) as conn:
        conn.execute(
            "UPDATE thoth_memory.cards SET updated_at = '2025-06-15T12:00:00Z' WHERE id = %s",
            (card_id_to_uuid(corpus[0].id),),
        )
    assert page_ids(
        memory, "acme", updated_from=dt.date(2025, 6, 15), updated_to=dt.date(2025, 6, 15)
    ) == [corpus[0].id]
    assert page_ids(memory, "acme", updated_to=dt.date(2025, 12, 31)) == [corpus[0].id]
    assert memory.list_cards("acme", ListQuery(origin="workflow")).total == 0
    assert memory.list_cards("acme", ListQuery(origin="manual")).total == 45


def test_a_page_past_the_end_still_reports_the_total(memory, corpus):
    result = memory.list_cards("acme", ListQuery(page=50, page_size=10))
    assert result.items == [] and result.total == 45
