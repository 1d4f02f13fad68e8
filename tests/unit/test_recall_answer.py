"""The compact recall answer an agent reads: no null or empty field, no title that its
content already says, dependencies as names, a similarity instead of the ranking score."""

from __future__ import annotations

from tht.memory.recall_answer import compact_answer


def full_card(**overrides):
    card = {
        "id": "mem-1",
        "family": "sql_rule",
        "revision": 3,
        "title": "Gas stations in CZE",
        "content": "Gas stations in CZE: gasstations.Country = 'CZE'.",
        "scope": "",
        "rationale": None,
        "concepts": [],
        "dependencies": [
            {"database": "fin", "schema": "public", "table": "gasstations", "column": "Country"},
            {"database": "other", "schema": "public", "table": "loan", "column": None},
        ],
        "created_at": "2026-12-04T10:00:00Z",
        "origin": {"kind": "manual"},
        "imported": False,
        "score": 0.0164,
        "retrieval": {"via": "direct", "similarity": 0.873, "dense_rank": 1, "sparse_rank": None},
    }
    return {**card, **overrides}


def test_a_card_keeps_what_an_agent_needs_and_nothing_empty():
    (card,) = compact_answer({"results": [full_card()]}, "fin", "public")["results"]
    assert card == {
        "id": "mem-1",
        "family": "sql_rule",
        "similarity": 0.873,
        "content": "Gas stations in CZE: gasstations.Country = 'CZE'.",
        "depends_on": ["gasstations.Country", "other.public.loan"],
        "revision": 3,
    }


def test_a_title_the_content_does_not_say_is_kept():
    (card,) = compact_answer({"results": [full_card(title="Czech stations")]}, "fin", "public")[
        "results"
    ]
    assert card["title"] == "Czech stations"


def test_a_linked_card_says_where_it_came_from_and_an_import_is_marked():
    linked = full_card(
        imported=True,
        retrieval={"via": "link", "path": ["mem-0", "mem-1"], "meanings": ["requires"]},
    )
    (card,) = compact_answer({"results": [linked]}, "fin", "public")["results"]
    assert card["linked_from"] == "mem-0" and card["link"] == "requires"
    assert card["imported"] is True and "similarity" not in card


def test_an_exact_error_match_is_marked_and_the_answer_keeps_its_other_keys():
    matched = full_card(retrieval={"via": "error_signature"})
    answer = compact_answer(
        {"results": [matched], "error_signature": "x", "exact": [], "explain": None},
        "fin",
        "public",
    )
    assert answer["results"][0]["exact_error_match"] is True
    assert answer["error_signature"] == "x" and "exact" not in answer and "explain" not in answer


def test_an_answer_that_found_nothing_keeps_its_empty_results():
    assert compact_answer({"results": [], "explain": None}, "fin", "public") == {"results": []}
