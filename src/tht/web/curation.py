"""The Recall quality page and its API: a workspace's benchmark (cases, runs, their
history with the card edits between them), a question tried as a case would be, and
the gaps mined from the recall log.

Every route is an administrator's: it resolves the principal (bearer token, or
session cookie with the app's CSRF checks on writes) and requires `memory.manage` in
the path's workspace before anything is read. The recall log holds every agent's
questions: an agent's token (memory.recall, memory.propose) gets 403 on every route.
Recall here uses the workspace's recorded DWH binding, as the agent routes do.
No `from __future__ import annotations`: FastAPI must resolve the local Annotated aliases.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from tht.accounts import Principal
from tht.bootstrap import Services
from tht.memory.agent import recall_binding
from tht.memory.benchmark import CASE_ID_PATTERN, RUN_ID_PATTERN, one_case
from tht.memory.model import CARD_ID_PATTERN, WORKSPACE_ID_PATTERN
from tht.memory.recall_log import gaps
from tht.web.schemas import TEXT_PATTERN
from tht.web.schemas import error_responses as errors

MAX_JSONL_CHARS = 4 * 1024 * 1024  # the request body's own bound is the app's


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


Command = Literal["search", "rules", "solved"]
CardId = Annotated[str, Field(pattern=CARD_ID_PATTERN)]


class CaseIn(_Input):
    question: Annotated[str, Field(min_length=1, max_length=2000, pattern=TEXT_PATTERN)]
    expected: Annotated[list[CardId], Field(min_length=1, max_length=100)]
    command: Command = "search"
    filters: dict[str, Any] = Field(default_factory=dict)
    name: Annotated[str | None, Field(min_length=1, max_length=200)] = None
    replace: bool = Field(
        default=False,
        description="The case of this question expects exactly these cards (default: added)",
    )
    origin: Literal["manual", "miss", "gap"] = Field(
        default="manual",
        description="manual: written on the page; miss: after a try that missed; gap: from a gap",
    )


class CasesImport(_Input):
    jsonl: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_JSONL_CHARS,
            description="JSON Lines, the format of `tht memory eval --cases`",
        ),
    ]


class TryIn(_Input):
    question: Annotated[str, Field(min_length=1, max_length=2000, pattern=TEXT_PATTERN)]
    command: Command = "search"
    filters: dict[str, Any] = Field(default_factory=dict)
    explain: Annotated[list[CardId], Field(max_length=20)] = Field(
        default_factory=list, description="Cards to say why they are or are not returned"
    )


def curation_router(
    services: Services,
    principal: Callable[..., Awaitable[Principal]],
    render: Callable[..., Response],
) -> APIRouter:
    router = APIRouter()
    Actor = Annotated[Principal, Depends(principal)]
    WorkspaceId = Annotated[str, PathParam(alias="workspaceId", pattern=WORKSPACE_ID_PATTERN)]
    CaseId = Annotated[str, PathParam(alias="caseId", pattern=CASE_ID_PATTERN)]
    RunId = Annotated[str, PathParam(alias="runId", pattern=RUN_ID_PATTERN)]
    base = "/api/workspaces/{workspaceId}/benchmark"
    benchmarks = services.benchmarks

    def bound(actor: Principal, workspace: str) -> tuple[str | None, str | None]:
        actor.require_manage(workspace)
        binding = recall_binding(services, workspace)
        return binding.database, binding.schema

    @router.get(
        base + "/cases",
        responses=errors(401, 403, 404, 422, 503),
        tags=["curation"],
        summary="The benchmark's cases, each expected card current, changed or deleted",
    )
    def list_cases(actor: Actor, workspace: WorkspaceId) -> dict[str, Any]:
        actor.require_manage(workspace)
        return benchmarks.list_cases(workspace)

    @router.post(
        base + "/cases",
        status_code=201,
        responses=errors(401, 403, 404, 415, 422, 503),
        tags=["curation"],
        summary="Add a case: this question should find these cards (its workspace's only)",
    )
    def add_case(
        actor: Actor, workspace: WorkspaceId, case: Annotated[CaseIn, Body()]
    ) -> dict[str, Any]:
        actor.require_manage(workspace)
        document = {
            "question": case.question,
            "expected": case.expected,
            "command": case.command,
            "filters": case.filters,
            **({"id": case.name} if case.name is not None else {}),
        }
        return benchmarks.add(
            workspace, [one_case(document)], origin=case.origin, replace=case.replace
        )

    @router.post(
        base + "/cases/import",
        status_code=201,
        responses=errors(401, 403, 404, 413, 415, 422, 503),
        tags=["curation"],
        summary="Import cases from JSON Lines: one bad line and nothing is written",
    )
    def import_cases(
        actor: Actor, workspace: WorkspaceId, body: Annotated[CasesImport, Body()]
    ) -> dict[str, Any]:
        actor.require_manage(workspace)
        return benchmarks.import_cases(workspace, body.jsonl)

    @router.delete(
        base + "/cases/{caseId}",
        responses=errors(401, 403, 404, 422, 503),
        tags=["curation"],
        summary="Remove a case",
    )
    def remove_case(actor: Actor, workspace: WorkspaceId, case: CaseId) -> dict[str, Any]:
        actor.require_manage(workspace)
        return benchmarks.remove(workspace, case)

    @router.post(
        base + "/runs",
        status_code=201,
        responses=errors(401, 403, 404, 409, 422, 503),
        tags=["curation"],
        summary="Run every case now and store the run (its figures, misses and comparison)",
    )
    def run(actor: Actor, workspace: WorkspaceId) -> dict[str, Any]:
        database, schema = bound(actor, workspace)
        return benchmarks.run(workspace, database=database, schema=schema)

    @router.get(
        base + "/runs",
        responses=errors(401, 403, 404, 422, 503),
        tags=["curation"],
        summary="The runs, newest first, with the card edits between them",
    )
    def runs(
        actor: Actor,
        workspace: WorkspaceId,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
    ) -> dict[str, Any]:
        actor.require_manage(workspace)
        return benchmarks.runs(workspace, limit)

    @router.get(
        base + "/runs/{runId}",
        responses=errors(401, 403, 404, 422, 503),
        tags=["curation"],
        summary="One run: its misses with their reasons, its cases' ranks",
    )
    def show_run(actor: Actor, workspace: WorkspaceId, run_id: RunId) -> dict[str, Any]:
        actor.require_manage(workspace)
        return benchmarks.show_run(workspace, run_id)

    @router.post(
        base + "/try",
        responses=errors(401, 403, 404, 409, 415, 422, 503),
        tags=["curation"],
        summary="Recall a question as a case would (not logged), with why cards are or are not returned",
    )
    def try_question(
        actor: Actor, workspace: WorkspaceId, body: Annotated[TryIn, Body()]
    ) -> dict[str, Any]:
        database, schema = bound(actor, workspace)
        return benchmarks.try_question(
            workspace,
            body.question,
            body.command,
            body.filters,
            body.explain,
            database=database,
            schema=schema,
        )

    @router.get(
        "/api/workspaces/{workspaceId}/gaps",
        responses=errors(401, 403, 404, 422, 503),
        tags=["curation"],
        summary="What agents asked that recall answered weakly, grouped and ranked",
    )
    def list_gaps(
        actor: Actor,
        workspace: WorkspaceId,
        days: Annotated[int, Query(ge=1, le=3650)] = 30,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        weak_below: Annotated[float | None, Query(gt=0, le=1)] = None,
    ) -> dict[str, Any]:
        actor.require_manage(workspace)
        return gaps(services.recall_log, workspace, days=days, limit=limit, weak_below=weak_below)

    @router.get(
        "/api/workspaces/{workspaceId}/recalls",
        responses=errors(401, 403, 404, 422, 503),
        tags=["curation"],
        summary="The recall log: each recall agents made, newest first (administrators only)",
    )
    def recalls(
        actor: Actor,
        workspace: WorkspaceId,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        before: Annotated[int | None, Query(ge=1)] = None,
        principal_name: Annotated[
            str | None, Query(alias="principal", min_length=1, max_length=100)
        ] = None,
    ) -> dict[str, Any]:
        actor.require_manage(workspace)
        return services.recall_log.entries(
            workspace, limit=limit, before=before, principal=principal_name
        )

    @router.get("/admin/curation", include_in_schema=False, response_class=HTMLResponse)
    def curation_page(request: Request) -> Response:
        return render(request, "curation.html", "curation")

    return router
