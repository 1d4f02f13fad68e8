"""``/healthz``: the dependency report (archive, index, embedder). An administrator
(``memory.manage`` in a workspace) sees the error messages and latencies; a caller
without credentials, or with wrong ones, the statuses."""

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from tht.accounts import MANAGE
from tht.bootstrap import Services
from tht.errors import ThothError
from tht.service.health import Dependency, HealthCheck, dependencies_of
from tht.web.dependencies import RequestAuth, WebSettings


def services_health(services: Services) -> HealthCheck:
    """``/healthz`` of an app built on its own services: their archive, index, embedder."""

    def dependencies() -> list[Dependency]:
        indexes, embedders, _ = services.engines.in_use()
        return dependencies_of(services.archive, indexes, embedders)

    return HealthCheck(dependencies)


def health_router(health_check: HealthCheck, auth: RequestAuth, settings: WebSettings) -> APIRouter:
    router = APIRouter()

    def sees_health_details(request: Request) -> bool:
        """An administrator (``memory.manage`` in a workspace) sees the error messages
        and latencies; a caller without credentials, or with wrong ones, the statuses."""
        if not request.headers.get("authorization") and not request.cookies.get(
            settings.cookie_name
        ):
            return False
        try:
            found = auth.resolve_principal(request)
        except ThothError:
            return False
        return MANAGE in found.permissions and bool(found.workspaces)

    @router.get("/healthz", include_in_schema=False)
    async def health_route(request: Request) -> JSONResponse:
        # Waits for the probes on the event loop (no worker thread held), then looks at
        # the credentials only when the archive answered: a hung archive would hold
        # the thread that asks it.
        report = await health_check.report_async()
        detailed = report.archive_ok and await run_in_threadpool(sees_health_details, request)
        return JSONResponse(report.document(detailed=detailed), status_code=report.http_status)

    return router
