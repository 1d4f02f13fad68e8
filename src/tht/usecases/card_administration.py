"""Administrative operations behind every entry point that acts for a person.

The HTTP routes check the principal and the workspace, then hand this module the
principal and a snapshot of the request; it checks the principal again on its own, so
a bug in a route cannot open the archive. `tht memory admin` reaches the same code
from a signed protected request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tht.accounts import MANAGE, Principal
from tht.errors import InvalidInput
from tht.memory.card_store import MemoryService
from tht.memory.idempotency import IdempotencyKey
from tht.memory.index.errors import IndexUnavailable
from tht.memory.model import card_id_to_uuid, parse_card_input, parse_list_query, uuid_to_card_id
from tht.memory.workspace_projection import Projection

Operation = Literal["list", "show", "create", "update", "delete", "pending", "retry"]
OPERATIONS: tuple[str, ...] = ("list", "show", "create", "update", "delete", "pending", "retry")
# The administrative surface needs memory.manage, its reads included: a member without
# it (a user, an agent) reads memory through recall, not by browsing the archive here.
REQUIRED: dict[str, str] = dict.fromkeys(OPERATIONS, MANAGE)


def required_permission(operation: str) -> str:
    """The capability an operation needs (an unknown one: memory.manage, then refused)."""
    return REQUIRED.get(operation, MANAGE)


def retry_index_work(projector: Projection | None, workspace: str, card_id: str) -> dict[str, Any]:
    """A card's index work retried from its current state, as every face answers it
    (`tht memory retry`, the HTTP route, a protected request): work still pending
    afterwards is no success but index_unavailable (exit 8, HTTP 503), naming the card
    and the outcome."""
    if projector is None:
        raise InvalidInput("no search index is configured: nothing to retry")
    outcome = projector.retry(workspace, card_id)
    if outcome.status != "current":
        raise IndexUnavailable(
            f"the index work of card {card_id} is still pending: {outcome.error}",
            details={"id": card_id, "index": outcome.as_json()},
        )
    return {"id": card_id, "index": outcome.as_json()}


@dataclass(frozen=True)
class AdminRequest:
    """What the caller asked for: the protected request snapshot."""

    workspace: str
    operation: Operation
    card_id: str | None = None
    body: Any = None
    filters: dict[str, Any] = field(default_factory=dict)
    revision: int | None = None
    # create, update, delete: a retry under the same key answers the first result
    idempotency_key: str | None = None


class MemoryAdmin:
    def __init__(self, memory: MemoryService, projector: Projection | None) -> None:
        self.memory = memory
        self.projector = projector

    def execute(self, principal: Principal, request: AdminRequest) -> dict[str, Any]:
        principal.require(required_permission(request.operation), request.workspace)
        workspace, operation = request.workspace, request.operation
        key = IdempotencyKey.given(request.idempotency_key, principal.user)
        if operation == "list":
            return self.memory.list_cards(workspace, parse_list_query(request.filters)).as_json()
        if operation == "pending":
            return {"items": [p.model_dump(mode="json") for p in self.memory.pending(workspace)]}
        if operation == "create":
            return self.memory.create_card(
                workspace, parse_card_input(request.body), idempotency=key
            ).as_json()
        if operation not in OPERATIONS:
            raise InvalidInput(f"unknown operation '{operation}'")
        card_id = uuid_to_card_id(card_id_to_uuid(request.card_id or ""))
        if operation == "show":
            return self.memory.get_card(workspace, card_id).as_json()
        if operation == "update":
            data = parse_card_input(request.body, card_id=card_id, workspace=workspace)
            return self.memory.update_card(workspace, card_id, data, idempotency=key).as_json()
        if operation == "delete":
            return self.memory.delete_card(
                workspace, card_id, request.revision, idempotency=key
            ).as_json()
        return retry_index_work(self.projector, workspace, card_id)
