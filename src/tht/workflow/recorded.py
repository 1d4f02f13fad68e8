"""What the workflow's jobs share: the digest of a recorded proposals file and how it is
read back, a proposed card parsed with the proposal it came from, and a review receipt
as the answers show it.

`propose` records the proposals with their digest; the summary and review-apply read
them back only if that digest still holds, so the reviewer decides on exactly what was
validated.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tht.errors import Conflict, InvalidInput, ThothError
from tht.memory.model import CardInput, parse_card_input
from tht.workflow.contract import Proposal, ProposalsFile
from tht.workflow.session import SessionFiles


def digest(document: Any) -> str:
    """SHA-256 of the document's canonical JSON (sorted keys, no white space)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def proposals_digest(workspace: str, session: str, proposals: list[Proposal]) -> str:
    """The digest a recorded proposals file carries, and a review must name."""
    return digest(
        {
            "workspace": workspace,
            "session": session,
            "proposals": [p.model_dump(mode="json", exclude_none=True) for p in proposals],
        }
    )


def parse_card(document: Any, where: str) -> CardInput:
    """A proposed (or reviewer-edited) card; ``where`` names the proposal in errors."""
    if not isinstance(document, dict):
        raise InvalidInput(f"{where}: the card must be a JSON object")
    for key in ("links", "revision"):
        if key in document:
            raise InvalidInput(
                f"{where}: '{key}' does not go in the card (links belong to the proposal,"
                " the revision to an update)"
            )
    try:
        return parse_card_input(document)
    except ThothError as exc:
        raise type(exc)(f"{where}: {exc.message}", details=exc.details) from exc


def recorded_proposals(files: SessionFiles) -> ProposalsFile:
    """The session's recorded proposals (none recorded: an empty summary), refused when
    they were not recorded by `propose`, belong to another workspace or changed since."""
    workspace, session = files.workspace, files.id
    recorded = files.proposals()
    if recorded is None:
        return ProposalsFile(
            session=session,
            workspace=workspace,
            proposals=[],
            digest=proposals_digest(workspace, session, []),
        )
    if recorded.digest is None:
        raise InvalidInput(
            f"the proposals of session {session} were not recorded: run `tht memory propose`"
        )
    if recorded.workspace != workspace or recorded.session != session:
        raise InvalidInput(
            f"the proposals of session {session} belong to workspace '{recorded.workspace}'"
        )
    if proposals_digest(workspace, session, recorded.proposals) != recorded.digest:
        raise Conflict(
            f"the proposals of session {session} changed after they were recorded: propose again"
        )
    return recorded


def receipt_json(receipt: dict[str, Any]) -> dict[str, Any]:
    """A review receipt as the summary and review-apply answer it."""
    return {
        "session": receipt["session_id"],
        "outcome": receipt["outcome"],
        "reviewer": receipt["reviewer"],
        "request_digest": receipt["request_digest"],
        "proposals_digest": receipt["proposals_digest"],
        "created_at": receipt["created_at"].isoformat(),
        "ledger_appended_at": receipt["ledger_appended_at"].isoformat()
        if receipt["ledger_appended_at"]
        else None,
        "cards": receipt["result"]["cards"],
    }
