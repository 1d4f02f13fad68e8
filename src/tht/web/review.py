"""The reviewer's page (gate `reviewer_memory_promote`) and its API.

The routes follow the administration's rules: every route resolves the principal
(bearer token, or session cookie with CSRF for writes), checks `memory.manage` in the
path's workspace, and the workflow service checks the principal again. The web app is
the trusted backend here: it hands the reviewer's choice to `ReviewService` with
the authenticated principal (the CLI's `review-apply` needs a signed gate request).
No `from __future__ import annotations`: FastAPI must resolve the local Annotated aliases.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from tht.accounts import Principal
from tht.bootstrap import Services
from tht.errors import InvalidInput, NotFound
from tht.memory.model import WORKSPACE_ID_PATTERN
from tht.validation import describe_validation_error, validation_details
from tht.web import schemas
from tht.workflow.contract import SESSION_ID_PATTERN, Review


def review_router(
    services: Services,
    principal: Callable[..., Awaitable[Principal]],
    render: Callable[..., Response],
) -> APIRouter:
    router = APIRouter()
    Actor = Annotated[Principal, Depends(principal)]
    WorkspaceId = Annotated[str, PathParam(alias="workspaceId", pattern=WORKSPACE_ID_PATTERN)]
    SessionId = Annotated[str, PathParam(alias="sessionId", pattern=SESSION_ID_PATTERN)]
    errors = schemas.error_responses
    base = "/api/workspaces/{workspaceId}/review/sessions"

    def check_route(actor: Principal, workspace: str, *, session: str | None = None) -> None:
        actor.require_manage(workspace)  # the route's check; the service checks again
        if session is not None and services.sessions.root is None:
            raise NotFound(
                f"session {session} does not exist: this installation has no sessions_root",
                details={"session": session},
            )

    @router.get(
        base,
        responses=errors(401, 403, 404, 422, 503),
        tags=["review"],
        summary="Sessions with Memory proposals in this workspace",
    )
    def sessions(actor: Actor, workspace: WorkspaceId) -> dict[str, Any]:
        check_route(actor, workspace)
        items = services.summaries.list_sessions(actor, workspace) if services.sessions.root else []
        return {"items": items}

    @router.get(
        base + "/{sessionId}",
        responses=errors(401, 403, 404, 409, 422, 503),
        tags=["review"],
        summary="The editable Memory summary of a session",
    )
    def summary(actor: Actor, workspace: WorkspaceId, session: SessionId) -> dict[str, Any]:
        check_route(actor, workspace, session=session)
        return services.summaries.summary(workspace, session, principal=actor)

    @router.post(
        base + "/{sessionId}/apply",
        responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
        tags=["review"],
        summary="Apply the reviewer's choice (once: a repeated delivery returns the receipt)",
    )
    def apply(
        actor: Actor,
        workspace: WorkspaceId,
        session: SessionId,
        review: Annotated[
            dict[str, Any],
            Body(description="The reviewer's choice: schemas/memory-review.schema.json"),
        ],
    ) -> dict[str, Any]:
        check_route(actor, workspace, session=session)
        try:
            choice = Review.model_validate(review)
        except ValidationError as exc:
            raise InvalidInput(
                f"invalid review: {describe_validation_error(exc)}", details=validation_details(exc)
            ) from exc
        return services.review.review_apply(actor, workspace, session, choice)

    @router.get("/admin/review", include_in_schema=False, response_class=HTMLResponse)
    def review_page(request: Request) -> Response:
        # where the sessions come from, or that this server reads none (the page says how)
        return render(request, "review.html", "review", sessions_root=services.sessions.root)

    return router
