"""Recall filters as an engine-neutral condition tree over the point payload.

One translation of ``recall_filters`` semantics, which each adapter maps onto its
engine's filter classes; the contract tests check every engine against
``card_matches``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tht.memory.recall_filters import RecallFilters

DEP_LEVELS = ("database", "schema", "table", "column")


@dataclass(frozen=True)
class Match:
    """The field equals ``value``, or, for an array, contains it."""

    key: str
    value: str


@dataclass(frozen=True)
class MatchAny:
    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class IsNull:
    key: str


@dataclass(frozen=True)
class IsEmpty:
    """The field is missing, null or an empty array."""

    key: str


@dataclass(frozen=True)
class All:
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class Nested:
    """One element of the array ``key`` satisfies every condition of ``filter``."""

    key: str
    filter: All


Condition = Match | MatchAny | IsNull | IsEmpty | All | AnyOf | Nested


def workspace_condition(workspace: str) -> All:
    return All((Match("workspace", workspace),))


def recall_condition(filters: RecallFilters) -> All:
    conditions: list[Condition] = [
        Match("workspace", filters.workspace),
        MatchAny("family", tuple(filters.families)),
    ]
    if filters.scope is not None:
        conditions.append(Match("scope", filters.scope))
    conditions.extend(Match("concepts", concept) for concept in filters.concepts)
    levels = [(level, wanted) for level, wanted in zip(DEP_LEVELS, filters.physical()) if wanted is not None]
    if levels:
        # A nested condition, not one per level on "deps[].x": the levels must hold
        # in the same dependency. A null level covers the descendants.
        one_dependency = All(tuple(AnyOf((Match(level, wanted), IsNull(level))) for level, wanted in levels))
        conditions.append(AnyOf((IsEmpty("deps"), Nested("deps", one_dependency))))
    return All(tuple(conditions))
