"""The reviewer's page (gate `reviewer_memory_promote`) and its API.

The routes follow the administration's rules: every route resolves the principal
(bearer token, or session cookie with CSRF for writes), checks `memory.manage` in the
path's workspace, and the workflow service checks the principal again. The web app is
the trusted backend here: it hands the reviewer's choice to `WorkflowService` with
the authenticated principal (the CLI's `review-apply` needs a signed gate request).
No `from __future__ import annotations`: FastAPI must resolve the local Annotated aliases.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path as PathParam, Request
from fastapi.responses import HTMLResponse, Response

from tht.accounts import Principal
from tht.bootstrap import Services
from tht.web import schemas
from tht.workflow.contract import SESSION_ID_PATTERN, Review

WORKSPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"


def review_router(services: Services, principal: Callable[..., Principal],
                  render: Callable[[Request, str, str], Response]) -> APIRouter:
    router = APIRouter()
    Actor = Annotated[Principal, Depends(principal)]
    WorkspaceId = Annotated[str, PathParam(alias="workspaceId", pattern=WORKSPACE_PATTERN)]
    SessionId = Annotated[str, PathParam(alias="sessionId", pattern=SESSION_ID_PATTERN)]
    errors = schemas.error_responses
    base = "/api/workspaces/{workspaceId}/review/sessions"

    def workflow(actor: Principal, workspace: str):
        actor.require_manage(workspace)  # the route's check; the service checks again
        return services.workflow

    @router.get(base, responses=errors(401, 403, 404, 422, 503), tags=["review"],
                summary="Sessions with Memory proposals in this workspace")
    def sessions(actor: Actor, workspace: WorkspaceId) -> dict[str, Any]:
        return {"items": workflow(actor, workspace).list_sessions(actor, workspace)}

    @router.get(base + "/{sessionId}", responses=errors(401, 403, 404, 409, 422, 503), tags=["review"],
                summary="The editable Memory summary of a session")
    def summary(actor: Actor, workspace: WorkspaceId, session: SessionId) -> dict[str, Any]:
        return workflow(actor, workspace).summary(workspace, session, principal=actor)

    @router.post(base + "/{sessionId}/apply", responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
                 tags=["review"], summary="Apply the reviewer's choice (once: a repeated delivery returns the receipt)")
    def apply(actor: Actor, workspace: WorkspaceId, session: SessionId,
              review: Annotated[Review, Body()]) -> dict[str, Any]:
        return workflow(actor, workspace).review_apply(actor, workspace, session, review)

    @router.get("/admin/review", include_in_schema=False, response_class=HTMLResponse)
    def review_page(request: Request) -> Response:
        return render(request, "review.html", "review")

    return router
