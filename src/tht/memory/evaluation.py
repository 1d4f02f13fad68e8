"""Recall evaluation: cases files and ranking metrics. Pure functions, no I/O.

A cases file holds one JSON object per line (JSON Lines); blank lines are skipped:

    {"question": "...", "expected": ["mem-..."], "filters": {"table": "orders"}, "command": "rules"}

- ``question`` (required): what the agent would ask.
- ``expected`` (required): the card ids recall should find (at least one).
- ``filters`` (optional): the recall command's ``--filters`` object.
- ``command`` (optional, default ``search``): ``search``, ``rules`` or ``solved``;
  ``family`` is accepted as a synonym.
- ``id`` (optional): a name for the case, echoed in the misses.

Metrics over the cases, each case weighing the same:

- recall@k: the fraction of a case's expected cards among its first k results;
- MRR: the reciprocal rank of the first expected card among the first ``MISS_K``
  results (0 when there is none): MRR@10.

A *miss* is a case with an expected card outside the first ``MISS_K`` results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tht.errors import InvalidInput
from tht.memory.model import card_id_to_uuid, uuid_to_card_id
from tht.validation import parse_json

COMMANDS = ("search", "rules", "solved")
KS = (1, 5, 10)
MISS_K = 10
MAX_CASES = 10_000
MAX_EXPECTED = 100
_KEYS = {"id", "question", "expected", "filters", "command", "family"}


@dataclass(frozen=True)
class EvalCase:
    line: int
    question: str
    expected: tuple[str, ...]
    command: str = "search"
    filters: dict[str, Any] = field(default_factory=dict)
    name: str | None = None


def _bad(line: int, message: str) -> InvalidInput:
    return InvalidInput(f"cases line {line}: {message}", details={"line": line})


def parse_case(text: str, line: int) -> EvalCase:
    try:
        document = parse_json(text, "the case")
    except InvalidInput as exc:
        raise _bad(line, exc.message) from exc
    if not isinstance(document, dict):
        raise _bad(line, "a case must be a JSON object")
    unknown = sorted(set(document) - _KEYS)
    if unknown:
        raise _bad(line, f"unknown keys {', '.join(unknown)} (allowed: {', '.join(sorted(_KEYS))})")
    question = document.get("question")
    if not isinstance(question, str) or not question.strip():
        raise _bad(line, "question must be a non-empty string")
    expected = document.get("expected")
    if not isinstance(expected, list) or not expected or len(expected) > MAX_EXPECTED:
        raise _bad(line, f"expected must be a list of 1 to {MAX_EXPECTED} card ids")
    ids: list[str] = []
    for value in expected:
        if not isinstance(value, str):
            raise _bad(line, "expected must hold card ids (strings)")
        try:
            ids.append(uuid_to_card_id(card_id_to_uuid(value)))
        except InvalidInput as exc:
            raise _bad(line, f"expected holds {value!r}, not a card id (mem-<uuid>)") from exc
    commands = {document[key] for key in ("command", "family") if key in document}
    if len(commands) > 1:
        raise _bad(line, "command and family disagree")
    command = commands.pop() if commands else "search"
    if command not in COMMANDS:
        raise _bad(line, f"command must be one of {', '.join(COMMANDS)}, not {command!r}")
    filters = document.get("filters", {})
    if filters is None:
        filters = {}
    if not isinstance(filters, dict):
        raise _bad(line, "filters must be a JSON object")
    name = document.get("id")
    if name is not None and not isinstance(name, (str, int)):
        raise _bad(line, "id must be a string or a number")
    return EvalCase(
        line,
        question.strip(),
        tuple(dict.fromkeys(ids)),
        command,
        filters,
        None if name is None else str(name),
    )


def parse_cases(text: str) -> list[EvalCase]:
    """Every non-blank line is a case; the first bad line stops parsing with its number."""
    cases = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            cases.append(parse_case(raw, number))
            if len(cases) > MAX_CASES:
                raise _bad(number, f"more than {MAX_CASES} cases")
    if not cases:
        raise InvalidInput("the cases file holds no case")
    return cases


def ranks_of(expected: Sequence[str], returned: Sequence[str]) -> dict[str, int | None]:
    """The 1-based rank of each expected card in the results, None when absent."""
    position: dict[str, int] = {}
    for rank, card_id in enumerate(returned, start=1):
        position.setdefault(card_id, rank)
    return {card_id: position.get(card_id) for card_id in expected}


def recall_at(expected: Sequence[str], returned: Sequence[str], k: int) -> float:
    if not expected:
        raise ValueError("a case needs at least one expected card")
    top = set(returned[:k])
    return sum(1 for card_id in set(expected) if card_id in top) / len(set(expected))


def reciprocal_rank(
    expected: Sequence[str], returned: Sequence[str], cutoff: int = MISS_K
) -> float:
    wanted = set(expected)
    for rank, card_id in enumerate(returned[:cutoff], start=1):
        if card_id in wanted:
            return 1 / rank
    return 0.0


def summarize(
    rankings: Sequence[tuple[Sequence[str], Sequence[str]]], ks: Sequence[int] = KS
) -> dict[str, float]:
    """Mean recall@k and MRR over ``(expected, returned)`` pairs."""
    if not rankings:
        raise ValueError("no case to summarize")
    metrics = {
        f"recall@{k}": sum(recall_at(e, r, k) for e, r in rankings) / len(rankings) for k in ks
    }
    metrics["mrr"] = sum(reciprocal_rank(e, r) for e, r in rankings) / len(rankings)
    return {name: round(value, 4) for name, value in metrics.items()}


def report(cases: Sequence[EvalCase], returned: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The evaluation document: counts, metrics overall and per command, and the misses."""
    if len(cases) != len(returned):
        raise ValueError("one result list per case")
    pairs = [(case.expected, list(ids)) for case, ids in zip(cases, returned, strict=True)]
    by_command = {}
    for command in COMMANDS:
        chosen = [pair for case, pair in zip(cases, pairs, strict=True) if case.command == command]
        if chosen:
            by_command[command] = {"cases": len(chosen), **summarize(chosen)}
    misses = []
    for case, (expected, ids) in zip(cases, pairs, strict=True):
        ranks = ranks_of(expected, ids)
        missing = [card_id for card_id, rank in ranks.items() if rank is None or rank > MISS_K]
        if missing:
            misses.append(
                {
                    "line": case.line,
                    "id": case.name,
                    "command": case.command,
                    "question": case.question,
                    "missing": missing,
                    "ranks": ranks,
                    "returned": list(ids[:MISS_K]),
                }
            )
    return {
        "cases": len(cases),
        "metrics": summarize(pairs),
        "by_command": by_command,
        "misses": misses,
    }
