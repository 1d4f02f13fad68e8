"""Why recall did not return a card: pure functions, no I/O.

``tht memory search --explain <card-id>`` (and the agent search route's ``explain``)
and the misses of ``tht memory eval`` name, for one card, the first reason in this
order (the order recall itself applies them):

- ``family``: the command does not recall the card's family (search recalls domain
  clarifications unless ``--filters {"families": [...]}`` widens it);
- ``scope`` / ``concepts``: a ``--filters`` scope or concept the card does not have;
- ``binding``: none of the card's dependencies lies in the bound database/schema (the
  runtime file's, or the workspace's recorded binding); the details name both;
- ``filters``: it lies there, but not in the ``--filters`` table/column;
- ``decided``: the session already decided it (``--session``);
- ``pending``: projection work is outstanding for it (``memory pending``);
- ``not_indexed``: the index does not hold its current revision in the running format;
- ``ranked_below_cut``: eligible, but ranked after the requested ``top`` (its dense
  and BM25 ranks among the eligible cards tell which signal missed it).

``returned`` is not a reason: the card is in the results, at ``rank``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from tht.memory.model import Dependency
from tht.memory.recall_filters import CardFacts, RecallFilters, physical_match


class Projected(Protocol):
    """What the archive records of a card's projection (``ProjectionState``)."""

    @property
    def revision(self) -> int: ...
    @property
    def projected_revision(self) -> int | None: ...
    @property
    def fingerprint(self) -> str | None: ...
    @property
    def operation(self) -> str | None: ...


@dataclass(frozen=True)
class Explanation:
    card_id: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def returned(self) -> bool:
        return self.reason == "returned"

    def as_json(self) -> dict[str, Any]:
        return {
            "card": self.card_id,
            "returned": self.returned,
            "reason": self.reason,
            "details": self.details,
        }


def _dependency(dep: Dependency) -> dict[str, Any]:
    return dep.as_json()


def exclusion(
    card_id: str,
    card: CardFacts,
    projected: Projected,
    filters: RecallFilters,
    fingerprint: str,
    *,
    decided: bool,
) -> Explanation | None:
    """The reason recall leaves this card out before ranking, or None if it is eligible."""
    if card.family not in filters.families:
        return Explanation(
            card_id,
            "family",
            {"family": card.family, "recalled_families": list(filters.families)},
        )
    if filters.scope is not None and card.scope != filters.scope:
        return Explanation(card_id, "scope", {"scope": card.scope, "filter": filters.scope})
    missing = [c for c in filters.concepts if c not in card.concepts]
    if missing:
        return Explanation(card_id, "concepts", {"missing": missing})
    bound = RecallFilters(
        workspace=filters.workspace,
        families=filters.families,
        database=filters.database,
        schema_name=filters.schema_name,
    )
    dependencies = [_dependency(dep) for dep in card.dependencies]
    if not physical_match(card.dependencies, bound):
        return Explanation(
            card_id,
            "binding",
            {
                "dependencies": dependencies,
                "bound": {"database": filters.database, "schema": filters.schema_name},
            },
        )
    if not physical_match(card.dependencies, filters):
        return Explanation(
            card_id,
            "filters",
            {
                "dependencies": dependencies,
                "filter": {"table": filters.table, "column": filters.column},
            },
        )
    if decided:
        return Explanation(card_id, "decided", {})
    if projected.operation is not None:
        return Explanation(card_id, "pending", {"operation": projected.operation})
    if projected.projected_revision != projected.revision or projected.fingerprint != fingerprint:
        return Explanation(
            card_id,
            "not_indexed",
            {
                "revision": projected.revision,
                "indexed_revision": projected.projected_revision,
                "current_format": projected.fingerprint == fingerprint,
            },
        )
    return None


def ranked(
    card_id: str,
    *,
    rank: int | None,
    top: int,
    dense_rank: int | None,
    bm25_rank: int | None,
    depth: int,
) -> Explanation:
    """An eligible card: returned at ``rank`` (1-based, within ``top``), or ranked below
    the cut. Branch ranks are among the eligible cards of each branch, None when the
    card is not among its first ``depth`` (BM25: or shares no term with the question)."""
    details: dict[str, Any] = {"dense_rank": dense_rank, "bm25_rank": bm25_rank}
    if rank is not None and rank <= top:
        return Explanation(card_id, "returned", {"rank": rank, **details})
    return Explanation(
        card_id,
        "ranked_below_cut",
        {"top": top, **({"rank": rank} if rank is not None else {}), **details, "depth": depth},
    )
