"""The engine-neutral recall condition means what ``card_matches`` means.

A small evaluator gives the conditions Qdrant's semantics (a match on an array means
"contains", a nested condition needs one element to satisfy all of its conditions);
the contract tests then check the real engines against the same function.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tht.memory.embedding import SparseVector
from tht.memory.index import filters as f
from tht.memory.index.port import IndexPoint
from tht.memory.model import FAMILIES, Dependency
from tht.memory.recall_filters import CardFacts, RecallFilters, card_matches


def holds(condition: f.Condition, payload: dict[str, Any]) -> bool:
    match condition:
        case f.Match(key, value):
            found = payload.get(key)
            return value in found if isinstance(found, list) else found == value
        case f.MatchAny(key, values):
            found = payload.get(key)
            return any(v in values for v in found) if isinstance(found, list) else found in values
        case f.IsNull(key):
            return key in payload and payload[key] is None
        case f.IsEmpty(key):
            return payload.get(key) in (None, [])
        case f.All(conditions):
            return all(holds(c, payload) for c in conditions)
        case f.AnyOf(conditions):
            return any(holds(c, payload) for c in conditions)
        case f.Nested(key, inner):
            return any(holds(inner, element) for element in payload.get(key) or [])
    raise TypeError(condition)


def maybe(values: list[str]) -> st.SearchStrategy[str | None]:
    return st.none() | st.sampled_from(values)


@st.composite
def dependencies(draw: st.DrawFn) -> Dependency:
    database = draw(st.sampled_from(["d1", "d2"]))
    schema = draw(maybe(["s1", "s2"]))
    table = draw(maybe(["t1", "t2"])) if schema else None
    column = draw(maybe(["c1", "c2"])) if table else None
    return Dependency.model_validate(
        {"database": database, "schema": schema, "table": table, "column": column}
    )


cards = st.builds(
    CardFacts,
    workspace=st.sampled_from(["w1", "w2"]),
    family=st.sampled_from(FAMILIES),
    scope=maybe(["sales", "finance"]),
    concepts=st.lists(st.sampled_from(["revenue", "tax", "churn"]), unique=True, max_size=3).map(
        tuple
    ),
    dependencies=st.lists(dependencies(), max_size=3).map(tuple),
)

recall_filters = st.builds(
    RecallFilters,
    workspace=st.sampled_from(["w1", "w2"]),
    families=st.lists(st.sampled_from(FAMILIES), unique=True, max_size=4).map(tuple),
    scope=maybe(["sales", "finance"]),
    concepts=st.lists(st.sampled_from(["revenue", "tax", "churn"]), unique=True, max_size=2).map(
        tuple
    ),
    database=maybe(["d1", "d2"]),
    schema_name=maybe(["s1", "s2"]),
    table=maybe(["t1", "t2"]),
    column=maybe(["c1", "c2"]),
)


def payload_of(card: CardFacts) -> dict[str, Any]:
    return IndexPoint(uuid.uuid4(), [1.0], SparseVector([], []), card, 1, "fp").payload()


@settings(max_examples=500, deadline=None)
@given(card=cards, filters=recall_filters)
def test_recall_condition_agrees_with_card_matches(card: CardFacts, filters: RecallFilters) -> None:
    assert holds(f.recall_condition(filters), payload_of(card)) == card_matches(card, filters)


def test_unrelated_dependencies_do_not_combine() -> None:
    card = CardFacts(
        "w1",
        "sql_rule",
        None,
        (),
        (
            Dependency.model_validate(
                {"database": "d", "schema": "s", "table": "orders", "column": "id"}
            ),
            Dependency.model_validate(
                {"database": "d", "schema": "s", "table": "customers", "column": "name"}
            ),
        ),
    )
    wanted = RecallFilters("w1", FAMILIES, table="orders", column="name")
    assert not holds(f.recall_condition(wanted), payload_of(card))


def test_payload_keeps_every_dependency_level() -> None:
    card = CardFacts(
        "w1", "sql_rule", "sales", ("revenue",), (Dependency.model_validate({"database": "d"}),)
    )
    payload = payload_of(card)
    assert payload["deps"] == [{"database": "d", "schema": None, "table": None, "column": None}]
    assert set(payload) == {
        "workspace",
        "family",
        "scope",
        "concepts",
        "deps",
        "dep_paths",
        "dep_prefixes",
        "revision",
        "fingerprint",
    }
    assert payload["dep_paths"] == payload["dep_prefixes"] == ['["d"]']


def test_gaps_in_the_physical_filter_fall_back_to_one_nested_dependency() -> None:
    gap = RecallFilters("w1", ("sql_rule",), table="t1")  # no database bound
    assert isinstance(f.physical_condition(gap).conditions[1], f.Nested)
    prefix = RecallFilters("w1", ("sql_rule",), database="d", schema_name="s", table="t")
    assert not any(isinstance(c, f.Nested) for c in f.physical_condition(prefix).conditions)


def test_workspace_condition_is_only_the_workspace() -> None:
    assert f.workspace_condition("w1") == f.All((f.Match("workspace", "w1"),))
