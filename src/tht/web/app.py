"""The administration web app: the JSON API below /api and the pages that use it.

Authentication: a bearer API token (`tht user create` prints one) or a web session
cookie from the login form. Cookie-authenticated unsafe requests also need a CSRF
token bound to the session (header X-CSRF-Token), an Origin among the configured public
origins and a same-origin Sec-Fetch-Site; bodies must be JSON (`tht.web.guard`). Every
memory route checks its capability (tht.accounts: the administrative routes, reads
included, `memory.manage`; an agent's recall and proposals `memory.recall` and
`memory.propose`, see tht.web.agent_api) and workspace membership, then the service checks
the principal again (MemoryAdmin, tht.usecases.recall_and_proposals).

Each area is a router of its own module; the request dependencies they share are in
tht.web.dependencies. The routers are included in one order: a request goes to the
first route whose path and method match.
"""

from collections.abc import Callable
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.routing import NoMatchFound

from tht.bootstrap import Services
from tht.memory.model import MAX_DOCUMENT_BYTES
from tht.service.health import HealthCheck
from tht.web.admin_api import admin_router
from tht.web.agent_api import agent_router
from tht.web.catalog import catalog_router
from tht.web.cli_route import cli_router
from tht.web.curation import curation_router
from tht.web.dependencies import WebSettings, request_auth
from tht.web.error_handlers import install_error_handlers
from tht.web.guard import RequestGuard
from tht.web.health_route import health_router, services_health
from tht.web.mcp_route import mcp_route
from tht.web.memory_api import memory_router
from tht.web.pages import api_docs_router, page_renderer, pages_router
from tht.web.review import review_router
from tht.web.schemas import PAGE_CARD_FIELDS
from tht.web.session_api import session_router

__all__ = ["WebSettings", "create_app"]

HERE = Path(__file__).parent
OPENAPI_URL = "/api/openapi.json"
API_DOCS_ASSETS = "/api/docs/assets"
SWAGGER_UI = Path(fastapi_offline.__file__).parent / "static"
UNNAMED_ROUTE = "\x00 no route"  # a route name no route bears (build_routes)


def create_app(
    services: Services,
    settings: WebSettings | None = None,
    run_command: Callable[..., None] | None = None,
    health: HealthCheck | None = None,
) -> FastAPI:
    """``run_command``: the service's command runner, served as ``POST /api/cli``;
    ``health``: the service's dependency report (default: these services' own)."""
    settings = settings or WebSettings()
    app = FastAPI(
        title="Thoth Memory administration API",
        version="1",
        openapi_url=OPENAPI_URL,
        docs_url=None,
        redoc_url=None,
        description='Administration → Memory management. Errors are {"error": {"code", "message", "details"}}.',
    )
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals["card_fields"] = PAGE_CARD_FIELDS
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    # Swagger UI's own files, from the installed package: the API docs need no CDN.
    app.mount(API_DOCS_ASSETS, StaticFiles(directory=str(SWAGGER_UI)), name="api-docs-assets")
    app.include_router(api_docs_router(templates, OPENAPI_URL, API_DOCS_ASSETS))
    install_error_handlers(app, templates, settings)
    # Body limits, media type and security headers, before routing and authentication.
    app.add_middleware(
        RequestGuard,
        max_body_bytes=MAX_DOCUMENT_BYTES,
        body_timeout=settings.body_timeout,
        secure=settings.secure,
    )

    auth = request_auth(services, settings)
    principal = auth.principal
    render = page_renderer(services, auth, templates)
    app.include_router(session_router(services, auth, settings))  # log in and out
    app.include_router(memory_router(services, principal))  # workspaces, the archive's cards
    # an agent's recall and proposals
    app.include_router(agent_router(services, principal, auth.recall_caller))
    app.include_router(catalog_router(services, principal))  # the Catalog page: DWH sync runs
    app.include_router(pages_router(services, auth, settings, templates, render))
    app.include_router(admin_router(services, principal, render))  # accounts, workspaces, audit
    app.include_router(review_router(services, principal, render))  # the reviewer's page and API
    app.include_router(curation_router(services, principal, render))  # benchmark and gaps
    if run_command is not None:
        # tht commands over HTTP (THT_SERVICE_URL)
        app.include_router(cli_router(run_command, services.accounts.tokens.by_token))
    # an agent's MCP tools (streamable HTTP), see tht.mcp.http
    app.router.routes.append(mcp_route(services, settings.public_origins))
    app.include_router(health_router(health or services_health(services), auth, settings))
    return app


def build_routes(app: FastAPI) -> None:
    """Build every route's request and response validators now. FastAPI builds a
    route's on the first request that walks past it; a service builds them before it
    serves, so they are among what it freezes (tht.service.server.settle_heap) instead
    of objects every full collection walks again."""
    try:
        app.url_path_for(UNNAMED_ROUTE)  # no route bears it: the search visits them all
    except NoMatchFound:
        pass
