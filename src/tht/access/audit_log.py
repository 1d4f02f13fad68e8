"""The audit log of the accounts and the cards, as the operator or an admin reads it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tht.access.records import AccountsPart
from tht.accounts import AUDIT_LIMIT, AUDIT_WORKSPACES, MANAGE, Principal, iso
from tht.errors import InvalidInput


class AuditLog(AccountsPart):
    def audit_log(
        self,
        *,
        since: datetime | None = None,
        user: str | None = None,
        limit: int = 100,
        by: Principal | None = None,
    ) -> list[dict[str, Any]]:
        """Audit rows, newest first. The operator reads everything; an admin reads the
        events of the workspaces it administers: an event of a workspace (a card, a
        membership, the workspace's creation) by its ``workspace``, an event about a
        user by the workspaces that user belonged to when it happened, of which the
        admin sees only its own (``other_workspaces`` counts the rest). An event of no
        workspace (a failed login of an unknown name) is the operator's alone."""
        if by is not None:
            by.require(MANAGE, None)
        if not 1 <= limit <= AUDIT_LIMIT:
            raise InvalidInput(f"--limit is 1 to {AUDIT_LIMIT}", details={"field": "limit"})
        with self.archive.transaction(None, accounts=True) as tx:
            entries = tx.accounts.audit(
                since=since,
                user=user,
                limit=limit,
                workspaces=(
                    sorted(w for w in by.workspaces if by.can_manage(w)) if by is not None else None
                ),
            )
        return [
            {
                "id": e.id,
                "at": iso(e.at),
                "actor": e.actor,
                "action": e.action,
                "user": e.target_user,
                "workspace": e.workspace_id,
                "client": e.client,
                "details": e.details if by is None else _visible_details(e.details, by),
            }
            for e in entries
        ]


def _visible_details(details: Any, by: Principal) -> Any:
    """An event's details as an admin reads them: of the user's workspaces, only those
    the admin administers, and how many others there are."""
    if not isinstance(details, dict) or not isinstance(details.get(AUDIT_WORKSPACES), list):
        return details
    workspaces = details[AUDIT_WORKSPACES]
    visible = [w for w in workspaces if by.can_manage(w)]
    return {
        **details,
        AUDIT_WORKSPACES: visible,
        "other_workspaces": len(workspaces) - len(visible),
    }
