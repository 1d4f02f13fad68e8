"""Recall filters as an engine-neutral condition tree over the point payload.

One translation of ``recall_filters`` semantics, which each adapter maps onto its
engine's filter classes; the contract tests check every engine against
``card_matches``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tht.memory.index.port import dependency_path
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


def recall_condition(filters: RecallFilters, *, tenant: bool = True) -> All:
    """``tenant=False`` leaves out the workspace, for an engine whose storage is
    already the workspace's alone (Edge: one shard per workspace)."""
    conditions: list[Condition] = [Match("workspace", filters.workspace)] if tenant else []
    conditions.append(MatchAny("family", tuple(filters.families)))
    if filters.scope is not None:
        conditions.append(Match("scope", filters.scope))
    conditions.extend(Match("concepts", concept) for concept in filters.concepts)
    physical = physical_condition(filters)
    if physical is not None:
        conditions.append(physical)
    return All(tuple(conditions))


def physical_condition(filters: RecallFilters) -> Condition | None:
    """One dependency must satisfy every given level; an absent level in the
    dependency covers its descendants; a card without dependencies matches."""
    wanted = filters.physical()
    given = [value for value in wanted if value is not None]
    if not given:
        return None
    if all(value is not None for value in wanted[: len(given)]):
        # The usual case: the given levels are a prefix F (database, schema, table...).
        # A dependency path P matches iff P is a prefix of F or F is a prefix of P,
        # both keyword lookups on payload indexes.
        prefix = given  # the first len(given) levels, none of them None
        return AnyOf(
            (
                IsEmpty("dep_paths"),
                MatchAny(
                    "dep_paths",
                    tuple(dependency_path(prefix[:n]) for n in range(1, len(prefix) + 1)),
                ),
                Match("dep_prefixes", dependency_path(prefix)),
            )
        )
    # Gaps in the given levels (no database bound, say): a nested condition, so the
    # levels hold in the same dependency, with IsNull for the shallower ones.
    levels = [
        (level, value) for level, value in zip(DEP_LEVELS, wanted, strict=True) if value is not None
    ]
    one_dependency = All(
        tuple(AnyOf((Match(level, value), IsNull(level))) for level, value in levels)
    )
    return AnyOf((IsEmpty("deps"), Nested("deps", one_dependency)))
