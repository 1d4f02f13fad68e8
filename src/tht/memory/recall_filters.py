"""Recall filters and their meaning, as one pure definition.

The search index translates ``RecallFilters`` into engine filters (applied inside both
the dense and the BM25 branch, before candidate selection); link expansion and hit
verification apply ``card_matches`` to PostgreSQL rows. Both must agree: the
contract tests check the engines against this function.

Semantics:
- ``workspace`` and ``families`` are hard limits.
- ``scope``: exact string equality with the card's business scope (a card without a
  scope does not match a scope filter).
- ``concepts``: every requested concept is present on the card.
- physical context (``database``, ``schema``, ``table``, ``column``): a card without
  dependencies is workspace-wide and always matches; otherwise ONE of its dependencies
  must satisfy every given level, where a dependency level that is absent (a
  database-only or table-only dependency) covers all its descendants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tht.memory.model import Dependency

CLARIFICATION_FAMILIES = ("domain_clarification",)
REUSABLE_FAMILIES = ("domain_clarification", "sql_rule", "explained_error")
RULE_FAMILIES = ("sql_rule", "explained_error")
EXEMPLAR_FAMILIES = ("solved_question",)


@dataclass(frozen=True)
class RecallFilters:
    workspace: str
    families: tuple[str, ...]
    scope: str | None = None
    concepts: tuple[str, ...] = ()
    database: str | None = None
    schema_name: str | None = None
    table: str | None = None
    column: str | None = None

    def physical(self) -> tuple[str | None, str | None, str | None, str | None]:
        return (self.database, self.schema_name, self.table, self.column)


@dataclass(frozen=True)
class CardFacts:
    """What a filter looks at: the same fields in a PostgreSQL row and an index payload."""

    workspace: str
    family: str
    scope: str | None
    concepts: tuple[str, ...] = ()
    dependencies: tuple[Dependency, ...] = field(default_factory=tuple)


def dependency_matches(dep: Dependency, filters: RecallFilters) -> bool:
    for wanted, have in zip(
        filters.physical(), (dep.database, dep.schema_name, dep.table, dep.column), strict=True
    ):
        if wanted is not None and have is not None and have != wanted:
            return False
    return True


def physical_match(dependencies: Sequence[Dependency], filters: RecallFilters) -> bool:
    if not dependencies:
        return True
    return any(dependency_matches(dep, filters) for dep in dependencies)


def card_matches(card: CardFacts, filters: RecallFilters) -> bool:
    if card.workspace != filters.workspace or card.family not in filters.families:
        return False
    if filters.scope is not None and card.scope != filters.scope:
        return False
    if not set(filters.concepts) <= set(card.concepts):
        return False
    return physical_match(card.dependencies, filters)
