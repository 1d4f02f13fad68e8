"""Gaps: what agents asked that Memory answered weakly, grouped. Pure functions, no I/O.

A logged recall is **weak** when (the first reason that applies):

- ``no_result``: recall returned nothing;
- ``low_coverage``: its first card holds less than ``WEAK_COVERAGE`` of the question's
  BM25 terms (stemmed, stop words dropped, by the workspace's analyzer), each term
  weighted by its IDF among the workspace's cards (``tht.memory.recall_log.coverage``).
  Measured on BIRD Mini-Dev by ``bench/weak_recall_bench.py`` (docs/curation.md), each
  question asked with its own card in the workspace and again with it left out: at
  0.5, 6.6 % of the questions answered with their own card first are flagged on the
  dev half (which decided: the largest threshold keeping that at most 10 %), and 70 %
  of the unanswered ones; on the test half 8.4 % and 67 %;
- ``proposed``: the recall's session later proposed a new card (the agent found
  nothing to reuse and wrote one).

Weak recalls are **grouped** by their questions' terms: a question joins the first
group (of its command) whose first question shares at least ``SIMILARITY`` of their
terms (Jaccard: shared terms / all terms of both); questions are taken newest first,
so each group is led by its most recent question. A question without a term (stop
words only) groups with the questions of the same text.

Groups are **ranked** by recency-weighted frequency: each ask counts 1, halved for
every ``HALF_LIFE_DAYS`` days of age; ties by the latest ask.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

WEAK_COVERAGE = 0.5
SIMILARITY = 0.5
HALF_LIFE_DAYS = 7.0
EXAMPLES = 5

# the family a card written for a gap of each command belongs to
FAMILY_OF_COMMAND = {
    "search": "domain_clarification",
    "rules": "sql_rule",
    "solved": "solved_question",
}


@dataclass(frozen=True)
class Asked:
    """One logged recall, as the gaps see it."""

    id: int
    at: datetime
    principal: str | None
    command: str
    text: str  # the question, or the error of `rules --error`
    results: int
    first: str | None  # the first card's id
    terms: frozenset[int]
    coverage: float | None
    proposed: bool


def weakness(asked: Asked, threshold: float = WEAK_COVERAGE) -> str | None:
    """Why the recall was weak, or None."""
    if asked.results == 0:
        return "no_result"
    if asked.coverage is not None and asked.coverage < threshold:
        return "low_coverage"
    if asked.proposed:
        return "proposed"
    return None


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@dataclass
class Gap:
    command: str
    terms: frozenset[int]  # the leading question's
    leader: str
    asks: list[Asked] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def id(self) -> str:
        """Stable while its leading question leads it."""
        digest = hashlib.sha256(f"{self.command}\n{self.leader}".encode()).hexdigest()
        return f"gap-{digest[:16]}"

    def score(self, now: datetime) -> float:
        return math.fsum(
            math.pow(0.5, max(0.0, (now - a.at).total_seconds()) / 86_400 / HALF_LIFE_DAYS)
            for a in self.asks
        )

    def as_json(self, now: datetime, titles: dict[str, str | None]) -> dict[str, Any]:
        questions = Counter(a.text for a in self.asks)
        latest = {a.text: a.at for a in reversed(self.asks)}
        examples = sorted(questions, key=lambda q: (-questions[q], -latest[q].timestamp()))
        firsts = Counter(a.first for a in self.asks if a.first)
        top = firsts.most_common(1)[0][0] if firsts else None
        return {
            "id": self.id,
            "command": self.command,
            "asks": len(self.asks),
            "questions": len(questions),
            "examples": [{"question": q, "asks": questions[q]} for q in examples[:EXAMPLES]],
            "principals": sorted({a.principal for a in self.asks if a.principal}),
            "first_asked": min(a.at for a in self.asks).isoformat(),
            "last_asked": max(a.at for a in self.asks).isoformat(),
            "reasons": dict(sorted(self.reasons.items())),
            "score": round(self.score(now), 3),
            "first_result": {"id": top, "title": titles.get(top)} if top else None,
            "draft": draft(self.command, examples[:EXAMPLES]),
        }


def draft(command: str, questions: Sequence[str]) -> dict[str, Any]:
    """The card a curator starts from for a gap: its family, and its title (and, for
    a solved question, the question) from what agents asked most."""
    family = FAMILY_OF_COMMAND[command]
    title = questions[0][:300] if questions else ""
    document: dict[str, Any] = {"family": family, "title": title}
    if family == "solved_question":
        document["question"] = questions[0] if questions else ""
    else:
        document["content"] = "Agents asked: " + "; ".join(f"“{q}”" for q in questions)
    return document


def group(
    asked: Iterable[Asked],
    *,
    threshold: float = WEAK_COVERAGE,
    similarity: float = SIMILARITY,
) -> list[Gap]:
    """The weak recalls grouped (``asked`` newest first), best ranked first is left
    to ``rank``."""
    gaps: list[Gap] = []
    by_term: dict[tuple[str, int], list[int]] = {}  # (command, term) -> gaps holding it
    by_text: dict[tuple[str, str], int] = {}  # (command, text) -> its gap, once placed
    for item in asked:
        reason = weakness(item, threshold)
        if reason is None:
            continue
        key = (item.command, _normal(item.text))
        found = by_text.get(key)
        if found is None and item.terms:
            candidates = {g for t in item.terms for g in by_term.get((item.command, t), ())}
            for index in sorted(candidates):
                if jaccard(gaps[index].terms, item.terms) >= similarity:
                    found = index
                    break
        if found is None:
            found = len(gaps)
            gaps.append(Gap(item.command, item.terms, item.text))
            for term in item.terms:
                by_term.setdefault((item.command, term), []).append(found)
        by_text[key] = found
        gaps[found].asks.append(item)
        gaps[found].reasons[reason] += 1
    return gaps


def rank(gaps: list[Gap], now: datetime) -> list[Gap]:
    return sorted(gaps, key=lambda g: (-g.score(now), -max(a.at for a in g.asks).timestamp()))


def _normal(text: str) -> str:
    return " ".join(text.lower().split())
