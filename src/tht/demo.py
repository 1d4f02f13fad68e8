"""The demo workspace: realistic cards derived from BIRD Mini-Dev (CC BY-SA 4.0), with
dependencies on the tables and columns they name and a few links, loaded once."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from tht.catalog.model import Binding
from tht.errors import Conflict
from tht.memory.card_store import MemoryService
from tht.memory.indexing import Progress
from tht.memory.model import ListQuery, parse_card_input

DEMO_WORKSPACE = "demo"
DEMO_SESSIONS = "sessions"  # in THT_HOME: the demo's sessions root, when none is configured
# The DWH an agent of the demo queries: recall over HTTP and MCP is bound to it (the
# demo has no DWH to scan, so the binding is for recall only). Its cards cover eleven
# BIRD databases; a runtime file names this one too, or an admin binds another.
DEMO_DATABASE, DEMO_SCHEMA = "california_schools", "public"


def demo_sessions_root(home: Path) -> Path:
    """The sessions root `tht serve --demo` reads when its configuration names none: a
    folder of THT_HOME, so that the reviewer's page shows where sessions go."""
    root = home / DEMO_SESSIONS
    root.mkdir(parents=True, exist_ok=True)
    return root


def demo_cards() -> list[dict[str, Any]]:
    data = json.loads(resources.files("tht").joinpath("demo_data/bird_demo.json").read_text())
    cards: list[dict[str, Any]] = data["cards"]
    return cards


def load_demo(
    services: Any,
    say: Callable[[str], None] = lambda _message: None,
    index_progress: Progress | None = None,
) -> dict[str, Any]:
    """Create the demo workspace and its cards if it has none; index them in batches
    (the first time, most of a minute with the bundled model: ``say`` and
    ``index_progress`` tell the operator)."""
    try:
        services.workspaces.create(DEMO_WORKSPACE, "en", "Demo (BIRD Mini-Dev)")
    except Conflict:
        pass
    if services.catalog.binding(DEMO_WORKSPACE) is None:
        services.catalog.bind(Binding(DEMO_WORKSPACE, DEMO_DATABASE, DEMO_SCHEMA, None))
    created = services.workspaces.show(DEMO_WORKSPACE).cards == {}
    if created:
        # archive first (no per-card propagation), then one batched rebuild
        archive_only = MemoryService(services.archive)
        say(f"loading the demo workspace: {len(demo_cards())} cards from BIRD Mini-Dev")
        ids: dict[str, list[str]] = {}
        for document in demo_cards():
            card = archive_only.create_card(DEMO_WORKSPACE, parse_card_input(document)).card
            assert card is not None  # a create returns the card it made
            ids.setdefault(card.family, []).append(card.id)
            for dep in card.dependencies:
                ids.setdefault(f"table:{dep.table}", []).append(card.id)
        _link_solved_questions(archive_only, ids)
        services.projector.rebuild(DEMO_WORKSPACE, index_progress)
    elif services.memory.pending(DEMO_WORKSPACE):
        services.projector.drain(DEMO_WORKSPACE)  # an earlier load that stopped half-way
    page = services.memory.list_cards(DEMO_WORKSPACE, ListQuery(page_size=10))
    return {"workspace": DEMO_WORKSPACE, "created": created, **page.as_json()}


def _link_solved_questions(memory: MemoryService, ids: dict[str, list[str]]) -> None:
    """Each solved question links to rules on the tables it reads: what a reviewer
    would approve alongside the exemplar."""
    rules = set(ids.get("sql_rule", []))
    for question_id in ids.get("solved_question", []):
        question = memory.get_card(DEMO_WORKSPACE, question_id)
        targets = list(
            dict.fromkeys(
                c
                for dep in question.dependencies
                for c in ids.get(f"table:{dep.table}", [])
                if c in rules
            )
        )
        if not targets:
            continue
        document = question.as_json()
        document["links"] = [{"target": t, "meaning": "uses the rule"} for t in targets[:3]]
        memory.update_card(
            DEMO_WORKSPACE,
            question_id,
            parse_card_input(document, card_id=question_id, workspace=DEMO_WORKSPACE),
        )
