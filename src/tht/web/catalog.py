"""The Catalog page's API: a workspace's DWH binding, its sync runs, "Sync
now" and retry. Every route takes the authenticated principal (bearer token, or
session cookie with the CSRF checks of the app) and requires `memory.manage` in the
path's workspace before the Catalog is touched."""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from tht.accounts import Principal
from tht.bootstrap import Services
from tht.catalog.service import Catalog
from tht.errors import ServiceUnavailable
from tht.memory.model import WORKSPACE_ID_PATTERN
from tht.web.schemas import ErrorOut

RUN_ID_PATTERN = r"^run-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


_DESCRIPTIONS = {
    401: "Not authenticated",
    403: "Not allowed (permission, workspace, CSRF)",
    404: "Not found (run, or no DWH binding)",
    409: "A Memory cleanup of an earlier run is pending",
    422: "Invalid input",
    502: "The DWH could not be scanned (the run failed; nothing was deleted)",
    503: "Archive, Catalog or index unavailable (a started cleanup stays pending)",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorOut, "description": _DESCRIPTIONS[code]} for code in codes}


class _Out(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


class RemovedColumn(_Out):
    table: str
    column: str


class Removed(_Out):
    tables: list[str]
    columns: list[RemovedColumn]


class DeletedCard(_Out):
    id: str
    title: str
    family: str


class RunError(_Out):
    model_config = ConfigDict(extra="allow")
    phase: str
    code: str
    message: str
    at: str | None = None


class RunOut(_Out):
    run_id: str
    workspace: str
    kind: Literal["sync", "forget"]
    database: str
    schema_name: str = Field(alias="schema")
    status: Literal["failed", "pending", "completed"]
    phase: Literal["scan", "memory_cleanup", "done"]
    removed: Removed
    forgotten: dict[str, Any] | None
    tables_scanned: int | None
    deleted_cards: list[DeletedCard] = Field(
        description="Memory cards deleted by this run's cleanup"
    )
    links_removed: int
    errors: list[RunError]
    attempts: int
    started_at: str
    finished_at: str | None


class BindingOut(_Out):
    workspace: str
    database: str
    schema_name: str = Field(alias="schema")
    connection: str | None = Field(
        description=(
            "The installation's DWH connection (by name) the Catalog scans through;"
            " null: bound for recall only, nothing to sync"
        )
    )
    updated_at: str | None


class SnapshotOut(_Out):
    run_id: str
    taken_at: str
    tables: int
    columns: int


class CatalogOut(_Out):
    workspace: str
    binding: BindingOut | None
    snapshot: SnapshotOut | None
    pending_run: RunOut | None
    runs: list[RunOut]


def catalog_router(services: Services, principal: Callable[..., Awaitable[Principal]]) -> APIRouter:
    router = APIRouter(prefix="/api/workspaces/{workspaceId}/catalog", tags=["catalog"])
    Actor = Annotated[Principal, Depends(principal)]
    WorkspaceId = Annotated[str, PathParam(alias="workspaceId", pattern=WORKSPACE_ID_PATTERN)]
    RunId = Annotated[str, PathParam(alias="runId", pattern=RUN_ID_PATTERN)]

    def catalog(actor: Principal, workspace: str) -> Catalog:
        actor.require_manage(workspace)
        found = services.catalog
        if found is None:  # Engines.services always builds one; only a bare Services lacks it
            raise ServiceUnavailable("this server has no Catalog")
        return found

    @router.get(
        "",
        response_model=CatalogOut,
        response_model_by_alias=True,
        responses=errors(401, 403, 422, 503),
        summary="The DWH binding, last snapshot and recent runs",
    )
    def overview(
        actor: Actor, workspace: WorkspaceId, limit: Annotated[int, Query(ge=1, le=100)] = 20
    ) -> dict[str, Any]:
        found = catalog(actor, workspace)
        return {**found.status(workspace), "runs": found.runs(workspace, limit)}

    @router.post(
        "/sync",
        response_model=RunOut,
        response_model_by_alias=True,
        responses=errors(401, 403, 404, 409, 422, 502, 503),
        summary="Sync now: scan the bound DWH schema and clean Memory of removed tables and columns",
    )
    def sync_now(actor: Actor, workspace: WorkspaceId) -> dict[str, Any]:
        return catalog(actor, workspace).sync(workspace)

    @router.get(
        "/runs/{runId}",
        response_model=RunOut,
        response_model_by_alias=True,
        responses=errors(401, 403, 404, 422, 503),
        summary="One run: removals, deleted Memory cards, errors",
    )
    def show_run(actor: Actor, workspace: WorkspaceId, run_id: RunId) -> dict[str, Any]:
        return catalog(actor, workspace).run(workspace, run_id)

    @router.post(
        "/runs/{runId}/retry",
        response_model=RunOut,
        response_model_by_alias=True,
        responses=errors(401, 403, 404, 409, 422, 503),
        summary="Complete a pending run's Memory cleanup with its recorded removals",
    )
    def retry_run(actor: Actor, workspace: WorkspaceId, run_id: RunId) -> dict[str, Any]:
        return catalog(actor, workspace).retry(workspace, run_id)

    return router
