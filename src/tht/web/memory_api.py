"""The administration of a workspace's Memory over HTTP: the caller's workspaces, and
below /api/workspaces/{workspaceId}/memory the archive's search, a card's create,
read, save and delete, the pending projection work and its retry.

Every route requires the operation's permission (`required_permission`: memory.manage)
in the path's workspace; MemoryAdmin checks the principal again.
No `from __future__ import annotations`: FastAPI must resolve the local Annotated aliases.
"""

from collections.abc import Awaitable, Callable
from datetime import date
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query
from fastapi import Path as PathParam
from pydantic import Field

from tht.accounts import Principal
from tht.bootstrap import Services
from tht.memory.model import CARD_ID_PATTERN, FAMILIES, IMPORT_ID_PATTERN, WORKSPACE_ID_PATTERN
from tht.usecases.card_administration import AdminRequest, required_permission
from tht.web import schemas
from tht.web.headers import IdempotencyKeyHeader

BASE = "/api/workspaces/{workspaceId}/memory"
WorkspaceId = Annotated[str, PathParam(alias="workspaceId", pattern=WORKSPACE_ID_PATTERN)]
CardId = Annotated[str, PathParam(alias="cardId", pattern=CARD_ID_PATTERN)]
PrincipalOf = Callable[..., Awaitable[Principal]]
errors = schemas.error_responses


def memory_router(services: Services, principal: PrincipalOf) -> APIRouter:
    """The routes in this order: a request goes to the first that matches (the
    pending list before a card id)."""
    router = APIRouter()
    _workspace_routes(router, services, principal)
    _search_route(router, services, principal)
    _card_reads(router, services, principal)
    _card_changes(router, services, principal)
    return router


def _admin(services: Services, actor: Principal, request: AdminRequest) -> dict[str, Any]:
    actor.require(
        required_permission(request.operation), request.workspace
    )  # MemoryAdmin checks again
    return services.admin.execute(actor, request)


def _workspace_routes(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    Actor = Annotated[Principal, Depends(principal)]

    @router.get(
        "/api/workspaces",
        response_model=schemas.WorkspaceList,
        responses=errors(401, 503),
        tags=["workspaces"],
        summary="Workspaces the caller belongs to",
    )
    def workspaces(actor: Actor) -> dict[str, Any]:
        visible = [w for w in services.workspaces.list() if w.id in actor.workspaces]
        return {
            "items": [
                {**w.model_dump(mode="json"), "manage": actor.can_manage(w.id)} for w in visible
            ]
        }


def _search_route(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    Actor = Annotated[Principal, Depends(principal)]

    def admin(actor: Principal, request: AdminRequest) -> dict[str, Any]:
        return _admin(services, actor, request)

    @router.get(
        BASE,
        response_model=schemas.CardPage,
        responses=errors(401, 403, 404, 422, 503),
        tags=["memory"],
        summary="Search, filter and paginate the archive",
    )
    def list_cards(
        actor: Actor,
        workspace: WorkspaceId,
        q: Annotated[str | None, Query(max_length=500, pattern=schemas.PRINTABLE_WORD)] = None,
        family: Annotated[list[Literal[FAMILIES]] | None, Query()] = None,  # type: ignore[valid-type]
        concepts: Annotated[
            list[Annotated[str, Field(max_length=100, pattern=schemas.PRINTABLE_WORD)]] | None,
            Query(max_length=50),
        ] = None,
        database: Annotated[
            str | None, Query(max_length=128, pattern=schemas.PRINTABLE_WORD)
        ] = None,
        schema: Annotated[str | None, Query(max_length=128, pattern=schemas.PRINTABLE_WORD)] = None,
        table: Annotated[str | None, Query(max_length=128, pattern=schemas.PRINTABLE_WORD)] = None,
        column: Annotated[str | None, Query(max_length=128, pattern=schemas.PRINTABLE_WORD)] = None,
        origin: Annotated[
            Literal["manual", "workflow", "imported"] | None,
            Query(description="manual, workflow: made here; imported: written by an import"),
        ] = None,
        import_id: Annotated[
            str | None,
            Query(
                alias="import",
                pattern=IMPORT_ID_PATTERN,
                description="The cards an import wrote (`tht memory imports list`)",
            ),
        ] = None,
        updated_from: Annotated[
            date | None, Query(description="First day (UTC), inclusive")
        ] = None,
        updated_to: Annotated[date | None, Query(description="Last day (UTC), inclusive")] = None,
        sort: Literal["updated_at", "created_at", "title", "family", "relevance"] | None = None,
        order: Literal["asc", "desc"] | None = None,
        page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
        page_size: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        filters = {
            k: v
            for k, v in {
                "q": q,
                "family": family,
                "concepts": concepts,
                "database": database,
                "schema": schema,
                "table": table,
                "column": column,
                "origin": origin,
                "import": import_id,
                "updated_from": updated_from.isoformat() if updated_from else None,
                "updated_to": updated_to.isoformat() if updated_to else None,
                "sort": sort,
                "order": order,
                "page": page,
                "page_size": page_size,
            }.items()
            if v is not None
        }
        return admin(actor, AdminRequest(workspace, "list", filters=filters))


def _card_reads(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    """Create a card, the pending list, read a card."""
    Actor = Annotated[Principal, Depends(principal)]

    def admin(actor: Principal, request: AdminRequest) -> dict[str, Any]:
        return _admin(services, actor, request)

    @router.post(
        BASE,
        status_code=201,
        response_model=schemas.SaveResult,
        responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
        tags=["memory"],
        summary="Create a card",
    )
    def create_card(
        actor: Actor,
        workspace: WorkspaceId,
        card: Annotated[schemas.CardIn, Body()],
        idempotency_key: IdempotencyKeyHeader = None,
    ) -> dict[str, Any]:
        return admin(
            actor,
            AdminRequest(
                workspace,
                "create",
                body=card.model_dump(by_alias=True, exclude_unset=True),
                idempotency_key=idempotency_key,
            ),
        )

    @router.get(
        BASE + "/pending",
        response_model=schemas.PendingList,
        responses=errors(401, 403, 404, 503),
        tags=["memory"],
        summary="Incomplete projection operations",
    )
    def pending(actor: Actor, workspace: WorkspaceId) -> dict[str, Any]:
        return admin(actor, AdminRequest(workspace, "pending"))

    @router.get(
        BASE + "/{cardId}",
        response_model=schemas.CardOut,
        responses=errors(401, 403, 404, 422, 503),
        tags=["memory"],
        summary="Read a complete card",
    )
    def show_card(actor: Actor, workspace: WorkspaceId, card_id: CardId) -> dict[str, Any]:
        return admin(actor, AdminRequest(workspace, "show", card_id=card_id))


def _card_changes(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    """Save a card, delete it, retry its projection."""
    Actor = Annotated[Principal, Depends(principal)]

    def admin(actor: Principal, request: AdminRequest) -> dict[str, Any]:
        return _admin(services, actor, request)

    @router.put(
        BASE + "/{cardId}",
        response_model=schemas.SaveResult,
        responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
        tags=["memory"],
        summary="Save content, links and dependencies together",
    )
    def update_card(
        actor: Actor,
        workspace: WorkspaceId,
        card_id: CardId,
        card: Annotated[schemas.CardUpdate, Body()],
        idempotency_key: IdempotencyKeyHeader = None,
    ) -> dict[str, Any]:
        return admin(
            actor,
            AdminRequest(
                workspace,
                "update",
                card_id=card_id,
                body=card.model_dump(by_alias=True, exclude_unset=True),
                idempotency_key=idempotency_key,
            ),
        )

    @router.delete(
        BASE + "/{cardId}",
        response_model=schemas.SaveResult,
        responses=errors(401, 403, 404, 409, 422, 503),
        tags=["memory"],
        summary="Delete a card, its dependencies and incident links",
    )
    def delete_card(
        actor: Actor,
        workspace: WorkspaceId,
        card_id: CardId,
        revision: Annotated[int | None, Query(ge=1)] = None,
        idempotency_key: IdempotencyKeyHeader = None,
    ) -> dict[str, Any]:
        return admin(
            actor,
            AdminRequest(
                workspace,
                "delete",
                card_id=card_id,
                revision=revision,
                idempotency_key=idempotency_key,
            ),
        )

    @router.post(
        BASE + "/{cardId}/retry",
        response_model=schemas.RetryResult,
        responses=errors(401, 403, 404, 422, 503),
        tags=["memory"],
        summary="Retry current projection work, including deletion",
    )
    def retry(actor: Actor, workspace: WorkspaceId, card_id: CardId) -> dict[str, Any]:
        return admin(actor, AdminRequest(workspace, "retry", card_id=card_id))
