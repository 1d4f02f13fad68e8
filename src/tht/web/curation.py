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

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from tht.accounts import Principal
from tht.bootstrap import Services
from tht.memory import agent_requests as requests
from tht.memory.benchmark import CASE_ID_PATTERN, RUN_ID_PATTERN, one_case
from tht.memory.evaluation import MAX_CASES, parse_case
from tht.memory.model import CARD_ID_PATTERN, WORKSPACE_ID_PATTERN
from tht.memory.recall_log import MAX_LOG_ID, gaps
from tht.usecases.recall_and_proposals import recall_binding
from tht.web.schemas import TEXT_PATTERN
from tht.web.schemas import error_responses as errors


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


CardId = Annotated[str, Field(pattern=CARD_ID_PATTERN)]
Question = Annotated[str, Field(min_length=1, max_length=2000, pattern=TEXT_PATTERN)]


class _Imported(_Input):
    question: Question
    expected: Annotated[list[CardId], Field(min_length=1, max_length=100)]
    name: Annotated[str | None, Field(min_length=1, max_length=200)] = None


# Each command with the filters it takes (those of its agent route): a case's filters
# are checked against its command before anything is written.
class SearchImported(_Imported):
    command: Literal["search"] = "search"
    filters: requests.SearchFiltersIn | requests.SearchColumnFiltersIn | None = None


class RulesImported(_Imported):
    command: Literal["rules"]
    filters: requests.RulesFiltersIn | requests.RulesColumnFiltersIn | None = None


class SolvedImported(_Imported):
    command: Literal["solved"]
    filters: requests.SolvedFiltersIn | requests.SolvedColumnFiltersIn | None = None


class _Written(_Input):
    replace: bool = Field(
        default=False,
        description="The case of this question expects exactly these cards (default: added)",
    )
    origin: Literal["manual", "miss", "gap"] = Field(
        default="manual",
        description="manual: written on the page; miss: after a try that missed; gap: from a gap",
    )


class SearchCaseIn(SearchImported, _Written):
    pass


class RulesCaseIn(RulesImported, _Written):
    pass


class SolvedCaseIn(SolvedImported, _Written):
    pass


CaseIn = SearchCaseIn | RulesCaseIn | SolvedCaseIn


class CasesImport(_Input):
    """The lines of a cases file (``tht memory eval --cases``), parsed by the page: a
    case a line, ``id`` given as ``name``."""

    cases: Annotated[
        list[SearchImported | RulesImported | SolvedImported],
        Field(min_length=1, max_length=MAX_CASES),
    ]


class _Try(_Input):
    question: Question
    explain: Annotated[list[CardId], Field(max_length=20)] = Field(
        default_factory=list, description="Cards to say why they are or are not returned"
    )


class SearchTryIn(_Try):
    command: Literal["search"] = "search"
    filters: requests.SearchFiltersIn | requests.SearchColumnFiltersIn | None = None


class RulesTryIn(_Try):
    command: Literal["rules"]
    filters: requests.RulesFiltersIn | requests.RulesColumnFiltersIn | None = None


class SolvedTryIn(_Try):
    command: Literal["solved"]
    filters: requests.SolvedFiltersIn | requests.SolvedColumnFiltersIn | None = None


TryIn = SearchTryIn | RulesTryIn | SolvedTryIn


def _filters(given: BaseModel | None) -> dict[str, Any]:
    """The filters as stored and recalled with: what was given, no defaults."""
    return {} if given is None else given.model_dump(mode="json", exclude_defaults=True)


WorkspaceId = Annotated[str, PathParam(alias="workspaceId", pattern=WORKSPACE_ID_PATTERN)]
CaseId = Annotated[str, PathParam(alias="caseId", pattern=CASE_ID_PATTERN)]
RunId = Annotated[str, PathParam(alias="runId", pattern=RUN_ID_PATTERN)]
PrincipalOf = Callable[..., Awaitable[Principal]]
BASE = "/api/workspaces/{workspaceId}/benchmark"


def curation_router(
    services: Services,
    principal: PrincipalOf,
    render: Callable[..., Response],
) -> APIRouter:
    router = APIRouter()
    _case_routes(router, services, principal)
    _run_routes(router, services, principal)
    _log_routes(router, services, principal)

    @router.get("/admin/curation", include_in_schema=False, response_class=HTMLResponse)
    def curation_page(request: Request) -> Response:
        return render(request, "curation.html", "curation")

    return router


def _bound(services: Services, actor: Principal, workspace: str) -> tuple[str | None, str | None]:
    actor.require_manage(workspace)
    binding = recall_binding(services, workspace)
    return binding.database, binding.schema


def _case_routes(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    """The benchmark's cases: list, add, import, remove."""
    Actor = Annotated[Principal, Depends(principal)]
    base = BASE
    benchmarks = services.benchmarks

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
            "filters": _filters(case.filters),
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
        summary="Import cases (the lines of a cases file): one bad case and nothing is written",
    )
    def import_cases(
        actor: Actor, workspace: WorkspaceId, body: Annotated[CasesImport, Body()]
    ) -> dict[str, Any]:
        actor.require_manage(workspace)
        cases = [
            parse_case(
                json.dumps(
                    {
                        "question": case.question,
                        "expected": case.expected,
                        "command": case.command,
                        "filters": _filters(case.filters),
                        **({"id": case.name} if case.name is not None else {}),
                    }
                ),
                line,
            )
            for line, case in enumerate(body.cases, start=1)
        ]
        return benchmarks.add(workspace, cases, origin="import")

    @router.delete(
        base + "/cases/{caseId}",
        responses=errors(401, 403, 404, 422, 503),
        tags=["curation"],
        summary="Remove a case",
    )
    def remove_case(actor: Actor, workspace: WorkspaceId, case: CaseId) -> dict[str, Any]:
        actor.require_manage(workspace)
        return benchmarks.remove(workspace, case)


def _run_routes(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    """The benchmark's runs, and a question tried as a case would be."""
    Actor = Annotated[Principal, Depends(principal)]
    base = BASE
    benchmarks = services.benchmarks

    def bound(actor: Principal, workspace: str) -> tuple[str | None, str | None]:
        return _bound(services, actor, workspace)

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
            _filters(body.filters),
            body.explain,
            database=database,
            schema=schema,
        )


def _log_routes(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    """What agents asked: the gaps recall left, the recall log."""
    Actor = Annotated[Principal, Depends(principal)]

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
        before: Annotated[int | None, Query(ge=1, le=MAX_LOG_ID)] = None,
        principal_name: Annotated[
            str | None, Query(alias="principal", min_length=1, max_length=100)
        ] = None,
    ) -> dict[str, Any]:
        actor.require_manage(workspace)
        return services.recall_log.entries(
            workspace, limit=limit, before=before, principal=principal_name
        )
