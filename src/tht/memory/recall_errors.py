"""Recall for an error (`tht memory rules --error`): the explained errors whose
normalized signature equals the error's, found by an exact PostgreSQL lookup and ranked
first, then verified hybrid recall of rules and explained errors for the rest.

The exact matches need no index: when hybrid recall fails after some were found, the
answer keeps them and says why the rest is missing (``recall_error``).
"""

from __future__ import annotations

import uuid
from typing import Any

from tht.errors import InvalidInput, ThothError
from tht.memory.error_signature import normalize_error
from tht.memory.recall_filters import card_matches
from tht.memory.recall_service import RecallQuery, RecallService


def rules_for_error(
    recall: RecallService,
    workspace: str,
    error_text: str,
    question: str | None,
    *,
    database: str | None,
    schema: str | None,
    query: RecallQuery,
    exclude: frozenset[uuid.UUID],
) -> dict[str, Any]:
    """Explained errors whose signature equals the error's (PostgreSQL, exact),
    then hybrid recall of rules and explained errors."""
    signature = normalize_error(error_text)
    if signature is None:
        raise InvalidInput("--error holds no error text")
    filters = recall.filters(workspace, "rules", database, schema, query)
    with recall.archive.transaction(workspace, lock="shared") as tx:
        tx.require_workspace()
        ids = tx.reviews.error_signature_matches(signature)
        facts = tx.recall_facts(ids)
        matching = [
            i for i in ids if i in facts and i not in exclude and card_matches(facts[i][1], filters)
        ]
        exact_cards = tx.cards(matching[: query.top])
    exact = []
    for rank, card_uuid in enumerate(matching[: query.top], start=1):
        data = exact_cards[card_uuid].as_json()
        data.pop("incoming_links", None)
        data["score"] = None
        data["retrieval"] = {
            "path": [data["id"]],
            "via": "error_signature",
            "seed_rank": rank,
            "dense_rank": None,
            "bm25_rank": None,
            "matched_kind": "error_signature",
            "hops": 0,
            "meanings": [],
        }
        exact.append(data)
    results = list(exact)
    remaining = query.top - len(exact)
    recall_error = None
    if remaining > 0:
        try:
            found = recall.recall(
                workspace,
                question or error_text,
                "rules",
                database=database,
                schema=schema,
                query=query.model_copy(update={"top": remaining}),
                exclude=exclude | frozenset(matching),
            )
            results += [r.as_json() for r in found]
        except ThothError as exc:
            if not exact:
                raise
            recall_error = exc.to_dict()["error"]
    answer: dict[str, Any] = {
        "error_signature": signature,
        "exact": len(exact),
        "results": results,
    }
    if recall_error is not None:
        answer["recall_error"] = recall_error
    return answer
