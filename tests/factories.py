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


# The embedder of the tests' installations: fast, deterministic, no model to load.
TEST_EMBEDDER: dict[str, Any] = {"provider": "hashing", "dimension": 64}


def write_installation(home: Any, **sections: Any) -> Any:
    """Write (or extend) the installation's configuration of ``home``
    (``home/config.yaml``, read by every process of that THT_HOME): ``sections`` are its
    keys (index, embedders, sessions_root, dwh). The default profile is the tests'
    embedder unless ``embedders`` names another. Returns the file's path."""
    from pathlib import Path

    import yaml

    path = Path(home) / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    current = yaml.safe_load(path.read_text()) if path.exists() else None
    config: dict[str, Any] = current or {"embedders": {"default": TEST_EMBEDDER}}
    for key, value in sections.items():
        if key in ("embedders", "dwh") and isinstance(value, dict):
            config[key] = {**config.get(key, {}), **value}
        else:
            config[key] = str(value) if isinstance(value, Path) else value
    path.write_text(yaml.safe_dump(config, sort_keys=True))
    return path


def installation_of(
    index: Any = None,
    sessions_root: Any = None,
    embedder: dict[str, Any] | None = None,
    **sections: Any,
) -> Any:
    """An installation's configuration for services a test builds itself: an Edge
    index in ``index`` (default: ``$THT_HOME/index``), the tests' embedder as the
    default profile, and ``sections`` (embedders, dwh, ...) beside."""
    from tht.installation import Installation

    document: dict[str, Any] = {"embedders": {"default": embedder or TEST_EMBEDDER}}
    if index is not None:
        document["index"] = {"engine": "edge", "path": str(index)}
    if sessions_root is not None:
        document["sessions_root"] = str(sessions_root)
    for key, value in sections.items():
        document[key] = {**document.get(key, {}), **value} if key == "embedders" else value
    return Installation.model_validate(document)
