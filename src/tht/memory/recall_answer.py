"""The compact recall answer: what an agent needs of each card to write SQL, and
nothing null, empty or repeated.

A recall's full answer (``view: "full"``, the CLI's and the HTTP routes' default) is
each card as ``memory show`` prints it, with its ranking score and how it was found;
a model that reads ten of them reads timestamps, origins, empty lists, nulls and titles
that repeat their content. The compact answer (``view: "compact"``, the MCP tools'
default) keeps, per card:

- ``id``, ``family``, ``revision`` (what a proposal to update it names);
- ``similarity``: the cosine similarity of the question and the card (the relevance
  an agent may threshold: docs/recall.md), absent for a card reached only through a
  link, which says ``linked_from`` and ``link`` (the link's meaning) instead;
  ``exact_error_match`` for an explained error whose signature is the error's;
- the card's texts that are not empty: ``title`` only when its content (or question)
  does not already say it, then ``content``, ``question``, ``sql``, ``context``,
  ``rationale``, ``scope`` (then any other text field of the model);
- ``depends_on``: its dependencies as ``table`` or ``table.column``, qualified with
  ``database.schema.`` only where they are not the recall's binding;
- ``imported``: true for a card an import wrote (not reviewed in this installation).

The ranking ``score`` is left out: the order of ``results`` is the ranking.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from tht.memory.model import texts_in_order

View = Literal["compact", "full"]
VIEWS: tuple[View, ...] = ("compact", "full")
TEXTS = texts_in_order("content", "question", "sql", "context", "rationale", "scope")
_NOT_WORD = re.compile(r"\W+")


def compact_answer(
    document: dict[str, Any], database: str | None, schema: str | None
) -> dict[str, Any]:
    """The compact form of a recall's full answer (``recall_command``'s document) bound
    to ``database`` and ``schema``."""
    compact: dict[str, Any] = {key: value for key, value in document.items() if key != "results"}
    compact["results"] = [compact_card(card, database, schema) for card in document["results"]]
    return _without_empty_fields(compact)


def compact_card(card: dict[str, Any], database: str | None, schema: str | None) -> dict[str, Any]:
    retrieval = card.get("retrieval") or {}
    compact: dict[str, Any] = {"id": card["id"], "family": card["family"]}
    if retrieval.get("via") == "error_signature":
        compact["exact_error_match"] = True
    if retrieval.get("similarity") is not None:
        compact["similarity"] = retrieval["similarity"]
    elif retrieval.get("via") == "link":
        compact["linked_from"] = retrieval["path"][-2]
        compact["link"] = retrieval["meanings"][-1]
    title = card.get("title") or ""
    if not any(_says(card.get(key), title) for key in ("content", "question")):
        compact["title"] = title
    for key in TEXTS:
        if card.get(key):
            compact[key] = card[key]
    compact["depends_on"] = [
        _dependency(dependency, database, schema) for dependency in card.get("dependencies") or []
    ]
    compact["revision"] = card["revision"]
    if card.get("imported"):
        compact["imported"] = True
    result: dict[str, Any] = without_empty(compact)
    return result


def _says(text: str | None, title: str) -> bool:
    """Whether ``text`` holds the title's words in its order (case and punctuation aside)."""
    if not text or not title:
        return False
    words = _NOT_WORD.sub(" ", title).strip().casefold()
    return bool(words) and words in _NOT_WORD.sub(" ", text).casefold()


def _dependency(dependency: dict[str, Any], database: str | None, schema: str | None) -> str:
    parts = [dependency.get("table"), dependency.get("column")]
    if (dependency.get("database"), dependency.get("schema")) != (database, schema):
        parts = [dependency.get("database"), dependency.get("schema"), *parts]
    return ".".join(part for part in parts if part)


def _without_empty_fields(document: dict[str, Any]) -> dict[str, Any]:
    # `results` stays when empty: an answer that found nothing says so, not `{}`
    return {"results": [], **without_empty(document)}


def without_empty(value: Any) -> Any:
    """``value`` with the nulls, empty strings, lists and objects of its objects left
    out (at every depth)."""
    if isinstance(value, dict):
        kept = {key: without_empty(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in (None, "", [], {})}
    if isinstance(value, list):
        return [without_empty(item) for item in value]
    return value
