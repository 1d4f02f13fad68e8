"""Why recall leaves a card out (tht.memory.recall_explain): the reasons, in the order
recall applies them."""

from __future__ import annotations

from dataclasses import dataclass

from tht.memory.model import Dependency
from tht.memory.recall_explain import exclusion, ranked
from tht.memory.recall_filters import CardFacts, RecallFilters

FINGERPRINT = "fp-1"
FILTERS = RecallFilters(
    workspace="acme",
    families=("domain_clarification",),
    database="dwh",
    schema_name="sales",
)


@dataclass(frozen=True)
class State:
    revision: int = 2
    projected_revision: int | None = 2
    fingerprint: str | None = FINGERPRINT
    operation: str | None = None


def facts(**overrides) -> CardFacts:
    values = {
        "workspace": "acme",
        "family": "domain_clarification",
        "scope": "Sales",
        "concepts": ("order",),
        "dependencies": (Dependency(database="dwh", schema="sales", table="orders"),),
    }
    return CardFacts(**{**values, **overrides})


def reason(card: CardFacts, state: State = State(), filters=FILTERS, decided=False):
    found = exclusion("mem-x", card, state, filters, FINGERPRINT, decided=decided)
    return None if found is None else (found.reason, found.details)


def test_an_eligible_card_has_no_exclusion():
    assert reason(facts()) is None
    assert reason(facts(dependencies=())) is None  # workspace-wide


def test_each_reason_and_its_details():
    assert reason(facts(family="sql_rule")) == (
        "family",
        {"family": "sql_rule", "recalled_families": ["domain_clarification"]},
    )
    scoped = RecallFilters(**{**FILTERS.__dict__, "scope": "Finance"})
    assert reason(facts(), filters=scoped) == ("scope", {"scope": "Sales", "filter": "Finance"})
    conceptual = RecallFilters(**{**FILTERS.__dict__, "concepts": ("order", "invoice")})
    assert reason(facts(), filters=conceptual) == ("concepts", {"missing": ["invoice"]})
    elsewhere = facts(dependencies=(Dependency(database="dwh", schema="acc", table="orders"),))
    assert reason(elsewhere) == (
        "binding",
        {
            "dependencies": [
                {"database": "dwh", "schema": "acc", "table": "orders", "column": None}
            ],
            "bound": {"database": "dwh", "schema": "sales"},
        },
    )
    tabled = RecallFilters(**{**FILTERS.__dict__, "table": "lines"})
    assert reason(facts(), filters=tabled)[0] == "filters"
    assert reason(facts(), decided=True) == ("decided", {})
    assert reason(facts(), State(operation="upsert")) == ("pending", {"operation": "upsert"})
    assert reason(facts(), State(projected_revision=1)) == (
        "not_indexed",
        {"revision": 2, "indexed_revision": 1, "current_format": True},
    )
    assert reason(facts(), State(fingerprint="old"))[0] == "not_indexed"


def test_the_first_reason_wins_in_recall_order():
    # a rule of another schema, decided and pending: the family is what excludes it first
    card = facts(
        family="sql_rule",
        dependencies=(Dependency(database="dwh", schema="acc"),),
    )
    assert reason(card, State(operation="delete"), decided=True)[0] == "family"
    assert reason(facts(dependencies=card.dependencies), decided=True)[0] == "binding"
    assert reason(facts(), State(operation="upsert"), decided=True)[0] == "decided"


def test_ranked_returned_or_below_the_cut():
    kept = ranked("mem-x", rank=3, top=5, dense_rank=2, bm25_rank=None, depth=30)
    assert kept.returned and kept.details == {"rank": 3, "dense_rank": 2, "bm25_rank": None}
    cut = ranked("mem-x", rank=None, top=5, dense_rank=40, bm25_rank=7, depth=1000)
    assert not cut.returned and cut.reason == "ranked_below_cut"
    assert cut.details == {"top": 5, "dense_rank": 40, "bm25_rank": 7, "depth": 1000}
    # eval asks with top 10 over a longer list: rank 12 is below the cut
    late = ranked("mem-x", rank=12, top=10, dense_rank=None, bm25_rank=9, depth=30)
    assert late.reason == "ranked_below_cut" and late.details["rank"] == 12
