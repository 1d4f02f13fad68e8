"""The reviewer's summary: the sessions of a workspace with recorded proposals, and one
session's editable summary (additions, updates with their changes, the approved solved
question with its SQL read-only, links, reused cards, and the receipt once reviewed).
It only reads: the archive and the session directory.
"""

from __future__ import annotations

from typing import Any

from tht.accounts import Principal
from tht.errors import ThothError
from tht.memory.archive.port import Archive
from tht.memory.model import (
    CONTENT_FIELDS,
    Card,
    CardInput,
    card_id_to_uuid,
    parse_card_input,
    uuid_to_card_id,
)
from tht.workflow.contract import GATE
from tht.workflow.recorded import receipt_json, recorded_proposals
from tht.workflow.session import SessionStore


class SummaryService:
    def __init__(self, archive: Archive, sessions: SessionStore) -> None:
        self.archive = archive
        self.sessions = sessions

    def list_sessions(self, principal: Principal, workspace: str) -> list[dict[str, Any]]:
        """Sessions of this workspace with recorded proposals, newest first, and whether
        they were reviewed."""
        principal.require_manage(workspace)
        found: list[dict[str, Any]] = []
        for session in self.sessions.sessions(workspace):
            try:
                recorded = self.sessions.session(workspace, session).proposals()
            except ThothError:
                continue
            if recorded is not None and recorded.workspace == workspace and recorded.digest:
                found.append(
                    {
                        "session": session,
                        "proposals": len(recorded.proposals),
                        "recorded_at": recorded.recorded_at,
                    }
                )
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            for item in found:
                receipt = tx.reviews.receipt(item["session"])
                item["reviewed"] = receipt["outcome"] if receipt else None
        return sorted(found, key=lambda i: (i["recorded_at"] or "", i["session"]), reverse=True)

    def summary(
        self, workspace: str, session: str, *, principal: Principal | None = None
    ) -> dict[str, Any]:
        """One editable summary: additions, updates with their change, the approved
        solved question (its SQL read-only), links, reused cards."""
        if principal is not None:
            principal.require_manage(workspace)
        files = self.sessions.session(workspace, session)
        files.require()
        recorded = recorded_proposals(files)
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            receipt = tx.reviews.receipt(session)
            wanted = {
                card_id_to_uuid(c)
                for p in recorded.proposals
                for c in [p.card_id, p.reuse, *[link.target for link in p.links]]
                if c
            }
            existing = tx.cards(sorted(wanted))
        current = {uuid_to_card_id(k): v for k, v in existing.items()}
        additions, updates, reused, links = [], [], [], []
        solved = None
        for proposal in recorded.proposals:
            card = parse_card_input(proposal.card)
            edit = card.model_dump(
                mode="json", by_alias=True, exclude_none=True, exclude={"revision", "links"}
            )
            for link in proposal.links:
                links.append(
                    {
                        "from": proposal.id,
                        "target": link.target,
                        "proposal": link.proposal,
                        "meaning": link.meaning,
                        "target_title": current[link.target].title
                        if link.target in current
                        else None,
                    }
                )
            entry = {
                "proposal": proposal.id,
                "family": card.family,
                "sources": proposal.sources,
                "card": edit,
                "links": [link.model_dump(exclude_none=True) for link in proposal.links],
            }
            if proposal.reuse:
                found = current.get(proposal.reuse)
                reused.append(
                    {
                        "proposal": proposal.id,
                        "card_id": proposal.reuse,
                        "title": found.title if found else None,
                        "exists": found is not None,
                    }
                )
            elif proposal.card_id is not None:  # an update
                found = current.get(proposal.card_id)
                updates.append(
                    {
                        **entry,
                        "card_id": proposal.card_id,
                        "revision": proposal.revision,
                        "change": proposal.change,
                        "current": found.as_json() if found else None,
                        "current_revision": found.revision if found else None,
                        "stale": found is None or found.revision != proposal.revision,
                        "changes": _changes(found, card) if found else [],
                    }
                )
            elif card.family == "solved_question":
                solved = {
                    **entry,
                    "question": card.question,
                    "sql": card.sql,
                    "context": card.context,
                    "sql_read_only": True,
                }
            else:
                additions.append(entry)
        return {
            "session": session,
            "workspace": workspace,
            "gate": GATE,
            "proposals_digest": recorded.digest,
            "additions": additions,
            "updates": updates,
            "solved_question": solved,
            "links": links,
            "reused": reused,
            "reviewed": receipt_json(receipt) if receipt else None,
        }


def _changes(current: Card, proposed: CardInput) -> list[dict[str, Any]]:
    changes = []
    for field in CONTENT_FIELDS:
        before, after = getattr(current, field), getattr(proposed, field)
        if field == "error_signature" and "error_signature" not in proposed.model_fields_set:
            continue
        if before != after:
            changes.append({"field": field, "before": before, "after": after})
    before_deps = sorted(d.as_json().items() for d in current.dependencies)
    after_deps = sorted(d.as_json().items() for d in proposed.dependencies)
    if before_deps != after_deps:
        changes.append(
            {
                "field": "dependencies",
                "before": [d.as_json() for d in current.dependencies],
                "after": [d.as_json() for d in proposed.dependencies],
            }
        )
    return changes
