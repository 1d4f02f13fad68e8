"""A workflow session on disk (ledger, proposals) and signed gate requests, for the
workflow tests: the same files the agent workflow writes."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tht.accounts import Principal
from tht.protected import sign
from tht.workflow.gate import new_gate_request

REVIEWER = Principal("reviewer", "admin", frozenset({"acme"}))

JOIN_SQL = (
    "SELECT m.*, j.name FROM acc.movements m JOIN acc.jobs j"
    " ON j.job_code = m.job_code AND j.fiscal_year = m.fiscal_year"
)
APPROVED_SQL = (
    "SELECT customer_id, sum(total) FROM sales.orders WHERE order_year = 2024 GROUP BY customer_id"
)


def decision(
    id: str,
    type: str,
    status: str = "approved",
    supersedes: list[str] | None = None,
    **payload: Any,
) -> dict[str, Any]:
    event = {"event": "decision", "id": id, "type": type, "status": status, "payload": payload}
    return {**event, "supersedes": supersedes} if supersedes else event


@dataclass
class Session:
    """A session of ``workspace``: the directory ``<root>/<workspace>/<id>/``."""

    root: Path
    workspace: str
    id: str
    events: list[dict] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.root / self.workspace / self.id

    @property
    def ledger(self) -> Path:
        return self.path / "ledger.jsonl"

    def log(self, *events: dict) -> Session:
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.ledger, "a") as handle:
            for event in events:
                handle.write(json.dumps(event) + "\n")
        return self

    def ledger_events(self) -> list[dict]:
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]

    def reviewed_events(self) -> list[dict]:
        return [e for e in self.ledger_events() if e["event"] == "memory_summary_reviewed"]

    def write_proposals(
        self, proposals: list[dict], name: str = "proposals.json", **extra: Any
    ) -> str:
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.root.parent / f"{self.workspace}-{self.id}-{name}"
        target.write_text(json.dumps({"version": 1, "proposals": proposals, **extra}))
        return str(target)


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` with its bytes: what a refused request must leave as it was."""
    return {
        str(f.relative_to(path)): f.read_bytes()
        for f in sorted(path.rglob("*"))
        if f.is_file() and not f.is_symlink()
    }


def add(id: str, sources: list[str], card: dict, links: list[dict] | None = None) -> dict:
    return {"id": id, "action": "add", "sources": sources, "card": card, "links": links or []}


def update(
    id: str,
    sources: list[str],
    card_id: str,
    revision: int,
    card: dict,
    change: str = "corrected",
    links: list[dict] | None = None,
) -> dict:
    return {
        "id": id,
        "action": "update",
        "sources": sources,
        "card_id": card_id,
        "revision": revision,
        "card": card,
        "change": change,
        "links": links or [],
    }


def join_rule(**overrides: Any) -> dict:
    return {
        "family": "sql_rule",
        "title": "Join movements and jobs on code and fiscal year",
        "content": "Join movements and jobs on job_code and fiscal_year.",
        "scope": "Accounting",
        "rationale": "A job code repeats across fiscal years.",
        "dependencies": [
            {"database": "dwh", "schema": "acc", "table": "movements", "column": "job_code"},
            {"database": "dwh", "schema": "acc", "table": "jobs", "column": "job_code"},
        ],
        **overrides,
    }


def solved(**overrides: Any) -> dict:
    return {
        "family": "solved_question",
        "title": "2024 orders per customer",
        "question": "Total of the 2024 orders per customer",
        "sql": APPROVED_SQL,
        "context": "Only 2024, as the reviewer asked for this question.",
        **overrides,
    }


def gate_document(
    key: bytes,
    session: str,
    review: dict,
    *,
    workspace: str = "acme",
    principal: Principal = REVIEWER,
) -> dict:
    return sign(new_gate_request(principal, workspace, session, review), key)


def new_key(tmp_path: Path) -> tuple[Path, bytes]:
    key = secrets.token_hex(32).encode()
    path = tmp_path / "gate.key"
    path.write_bytes(key)
    return path, key
