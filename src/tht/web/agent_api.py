"""An agent's API: recall (search, rules, solved-search) and the workflow's side of
Memory (propose, summary, solved-index), below /api/workspaces/{workspaceId}/memory.

Each route answers the same JSON document as its CLI command (`tht memory search`,
...), through the same functions (tht.usecases.recall_and_proposals). The route checks the capability
in the path's workspace (memory.recall, memory.propose); the function checks the
principal again. The DWH binding is the workspace's configuration (the Catalog's
recorded binding), never the request's. Sessions are directories of the path's
workspace under the service's sessions_root (`tht serve -c`: sessions_root).
No `from __future__ import annotations`: FastAPI must resolve the local Annotated aliases.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse

from tht.accounts import PROPOSE, Principal
from tht.bootstrap import Services
from tht.memory import agent_requests as requests
from tht.memory.model import WORKSPACE_ID_PATTERN
from tht.memory.recall_service import RecallKind
from tht.usecases import recall_and_proposals as agent
from tht.web import schemas
from tht.web.dependencies import RecallCaller
from tht.web.headers import IdempotencyKeyHeader

WorkspaceId = Annotated[str, PathParam(alias="workspaceId", pattern=WORKSPACE_ID_PATTERN)]
PrincipalOf = Callable[..., Awaitable[Principal]]
CallerOf = Callable[..., Awaitable[RecallCaller]]
errors = schemas.error_responses


def agent_router(services: Services, principal: PrincipalOf, recall_caller: CallerOf) -> APIRouter:
    router = APIRouter(prefix="/api/workspaces/{workspaceId}/memory", tags=["agent"])
    _recall_routes(router, services, recall_caller)
    _proposal_routes(router, services, principal)
    return router


def answer(document: dict[str, Any]) -> JSONResponse:
    # as the CLI printed it: not re-serialized through the documented model
    return JSONResponse(document)


def _recall_routes(router: APIRouter, services: Services, recall_caller: CallerOf) -> None:
    Caller = Annotated[RecallCaller, Depends(recall_caller)]

    def recall(
        caller: RecallCaller,
        workspace: str,
        kind: RecallKind,
        request: requests.RecallRequest,
        *,
        question: str | None,
        session: str | None = None,
        error: str | None = None,
    ) -> JSONResponse:
        return answer(
            agent.service_recall(
                services,
                caller.principal,
                workspace,
                kind,
                question,
                request.filters_document(),
                session=session,
                error=error,
                explain=request.explain_card_id,
                view=request.view or "full",  # the document the CLI prints, unless asked
                recorded=caller.binding,
            )
        )

    @router.post(
        "/search",
        response_model=schemas.SearchOut,
        responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
        summary="Recall domain clarifications (filters.families widens it): `tht memory search`",
    )
    def search(
        caller: Caller, workspace: WorkspaceId, request: Annotated[requests.SearchIn, Body()]
    ) -> JSONResponse:
        return recall(
            caller,
            workspace,
            "search",
            request,
            question=request.question,
            session=request.session,
        )

    @router.post(
        "/rules",
        response_model=schemas.RulesOut,
        responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
        summary="Recall SQL rules and explained errors for a question or an error: `tht memory rules`",
    )
    def rules(
        caller: Caller, workspace: WorkspaceId, request: Annotated[requests.RulesIn, Body()]
    ) -> JSONResponse:
        return recall(
            caller,
            workspace,
            "rules",
            request,
            question=request.question,
            session=request.session,
            error=request.error,
        )

    @router.post(
        "/solved-search",
        response_model=schemas.RecallOut,
        responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
        summary="Recall solved questions (consultative exemplars): `tht memory solved-search`",
    )
    def solved_search(
        caller: Caller, workspace: WorkspaceId, request: Annotated[requests.SolvedSearchIn, Body()]
    ) -> JSONResponse:
        return recall(caller, workspace, "solved", request, question=request.question)


def _proposal_routes(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    Actor = Annotated[Principal, Depends(principal)]

    @router.post(
        "/propose",
        response_model=schemas.ProposeOut,
        responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
        summary="Validate and record a session's Memory proposals: `tht memory propose`",
    )
    def propose(
        actor: Actor,
        workspace: WorkspaceId,
        request: Annotated[requests.ProposeIn, Body()],
        idempotency_key: IdempotencyKeyHeader = None,
    ) -> JSONResponse:
        actor.require(PROPOSE, workspace)
        return answer(
            agent.propose_command(
                services,
                workspace,
                request.session,
                request.data,
                principal=actor,
                idempotency_key=idempotency_key,
            )
        )

    @router.post(
        "/summary",
        response_model=schemas.SummaryOut,
        responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
        summary="The reviewer's editable summary of a session: `tht memory summary`",
    )
    def summary(
        actor: Actor, workspace: WorkspaceId, request: Annotated[requests.SessionIn, Body()]
    ) -> JSONResponse:
        actor.require(PROPOSE, workspace)
        return answer(agent.summary_command(services, workspace, request.session, principal=actor))

    @router.post(
        "/solved-index",
        response_model=schemas.SolvedIndexOut,
        responses=errors(401, 403, 404, 409, 413, 415, 422, 503),
        summary="Retry the projection of a session's reviewed solved question: `tht memory solved-index`",
    )
    def solved_index(
        actor: Actor, workspace: WorkspaceId, request: Annotated[requests.SessionIn, Body()]
    ) -> JSONResponse:
        actor.require(PROPOSE, workspace)
        return answer(
            agent.solved_index_command(services, workspace, request.session, principal=actor)
        )
