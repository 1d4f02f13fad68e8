"""Valid card documents for each family, to be varied by tests."""

from __future__ import annotations

from typing import Any

from tht.memory.model import CardInput, parse_card_input

BASE: dict[str, dict[str, Any]] = {
    "domain_clarification": {
        "title": "Shipped order",
        "content": "An order is shipped when all of its lines are shipped.",
        "scope": "Sales",
    },
    "sql_rule": {
        "title": "Join jobs on code and fiscal year",
        "content": "Join movements and jobs on job_code and fiscal_year.",
        "scope": "Accounting",
        "rationale": "A job code repeats across fiscal years.",
    },
    "solved_question": {
        "title": "2024 orders per customer",
        "question": "Total of 2024 orders per customer",
        "sql": "SELECT customer_id, sum(total) FROM orders GROUP BY customer_id",
        "context": "Only 2024.",
    },
    "explained_error": {
        "title": "Header total multiplied by lines",
        "context": "sum(orders.total) after joining order_lines",
        "content": "Sum header totals before joining lines.",
        "rationale": "The join repeats the header once per line.",
    },
}


def card_document(family: str = "domain_clarification", **overrides: Any) -> dict[str, Any]:
    return {"family": family, **BASE[family], **overrides}


def card(family: str = "domain_clarification", **overrides: Any) -> CardInput:
    return parse_card_input(card_document(family, **overrides))
