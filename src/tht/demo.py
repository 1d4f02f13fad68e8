"""A small demo workspace, loaded once, so `make run` shows the product working."""

from __future__ import annotations

from typing import Any

from tht.errors import Conflict
from tht.memory.model import ListQuery, parse_card_input

DEMO_WORKSPACE = "demo"

_CARDS: list[dict[str, Any]] = [
    {
        "family": "domain_clarification",
        "title": "Shipped order",
        "content": "In this workspace an order is shipped when every one of its lines has been shipped.",
        "scope": "Sales",
        "concepts": ["order", "shipping"],
        "dependencies": [{"database": "dwh", "schema": "sales", "table": "order_lines", "column": "shipped_at"}],
    },
    {
        "family": "sql_rule",
        "title": "Join job movements on code and fiscal year",
        "content": "Link movements to jobs with both job_code and fiscal_year.",
        "scope": "Accounting",
        "rationale": "A job code is unique only within a fiscal year; joining on the code alone duplicates rows.",
        "concepts": ["job", "fiscal year"],
        "dependencies": [
            {"database": "dwh", "schema": "acc", "table": "movements", "column": "job_code"},
            {"database": "dwh", "schema": "acc", "table": "jobs", "column": "job_code"},
        ],
    },
    {
        "family": "solved_question",
        "title": "Total 2024 orders per customer",
        "question": "Total of 2024 orders per customer",
        "sql": "SELECT customer_id, sum(total) FROM sales.orders WHERE order_date >= '2024-01-01'"
               " AND order_date < '2025-01-01' GROUP BY customer_id",
        "context": "The year 2024 belongs to this question only.",
        "concepts": ["order", "customer"],
        "dependencies": [{"database": "dwh", "schema": "sales", "table": "orders"}],
    },
    {
        "family": "explained_error",
        "title": "Order header total multiplied by the lines join",
        "context": "Summing orders.total after joining order_lines counts each order once per line.",
        "content": "Compute the header total once per order, before or without joining the lines.",
        "rationale": "The join has one row per line, so header amounts repeat.",
        "scope": "Sales",
        "concepts": ["order", "granularity"],
        "dependencies": [{"database": "dwh", "schema": "sales", "table": "orders", "column": "total"}],
    },
]


def load_demo(services: Any) -> dict[str, Any]:
    try:
        services.workspaces.create(DEMO_WORKSPACE, "en", "Demo workspace")
    except Conflict:
        pass
    created = services.workspaces.show(DEMO_WORKSPACE).cards == {}
    if created:
        ids: list[str] = []
        for document in _CARDS:
            document = dict(document)
            if document["family"] == "explained_error" and ids:
                document["links"] = [{"target": ids[-1], "meaning": "corrects the pattern used by"}]
            result = services.memory.create_card(DEMO_WORKSPACE, parse_card_input(document))
            ids.append(result.card.id)
    page = services.memory.list_cards(DEMO_WORKSPACE, ListQuery(page_size=100))
    return {"workspace": DEMO_WORKSPACE, "created": created, **page.as_json()}
