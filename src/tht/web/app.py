"""The administration web app: the JSON API below /api and the pages that use it.

Authentication: a bearer API token (`tht user create` prints one) or a web session
cookie from the login form. Cookie-authenticated unsafe requests also need a CSRF
token bound to the session (header X-CSRF-Token), an Origin among the configured public
origins and a same-origin Sec-Fetch-Site; bodies must be JSON (`tht.web.guard`). Every
memory route checks its capability (tht.accounts: the administrative routes, reads
included, `memory.manage`; an agent's recall and proposals `memory.recall` and
`memory.propose`, see tht.web.agent) and workspace membership, then the service checks
the principal again (MemoryAdmin, tht.memory.agent).
"""

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal

import fastapi_offline
from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from tht import audit
from tht.accounts import MANAGE, Principal
from tht.bootstrap import Services
from tht.errors import (
    InvalidInput,
    NotFound,
    PermissionDenied,
    ThothError,
    TooManyRequests,
    Unauthenticated,
)
from tht.memory.admin import AdminRequest, required_permission
from tht.memory.model import (
    CARD_ID_PATTERN,
    FAMILIES,
    IMPORT_ID_PATTERN,
    MAX_DOCUMENT_BYTES,
    WORKSPACE_ID_PATTERN,
)
from tht.service.health import Dependency, HealthCheck, dependencies_of
from tht.web import schemas
from tht.web.admin_api import admin_router
from tht.web.agent import agent_router
from tht.web.catalog import catalog_router
from tht.web.cli_route import cli_router
from tht.web.curation import curation_router
from tht.web.guard import SAFE_METHODS, RequestGuard, normalized_origin, security_headers
from tht.web.headers import IdempotencyKeyHeader
from tht.web.review import review_router

HERE = Path(__file__).parent
OPENAPI_URL = "/api/openapi.json"
API_DOCS_ASSETS = "/api/docs/assets"
SWAGGER_UI = Path(fastapi_offline.__file__).parent / "static"
CSRF_PURPOSE = b"thoth-memory csrf token"


@dataclass
class WebSettings:
    secure: bool = False  # served over HTTPS: __Host- cookie with Secure
    body_timeout: float = 30.0  # seconds a client has to send a whole request body
    # Origins (scheme://host[:port]) the pages are served from: a cookie-authenticated
    # write must come from one. Not the request's Host: an attacker controls both.
    public_origins: tuple[str, ...] = ()

    @property
    def cookie_name(self) -> str:
        return "__Host-tht_session" if self.secure else "tht_session"


def error_response(error: ThothError) -> JSONResponse:
    response = JSONResponse(error.to_dict(), status_code=error.http_status)
    if isinstance(error, TooManyRequests):
        response.headers["Retry-After"] = str(error.retry_after)
    return response


class LazyMcpEndpoint:
    """``/mcp/{workspace}``: the MCP SDK is imported by the first request, not by every
    process that builds the app."""

    def __init__(self, services: Services, public_origins: tuple[str, ...]) -> None:
        self.services = services
        self.public_origins = public_origins
        self.endpoint: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.endpoint is None:
            from tht.mcp.http import McpEndpoint

            origins = self.public_origins
            self.endpoint = McpEndpoint(
                self.services, lambda origin: normalized_origin(origin) in origins
            )
        await self.endpoint(scope, receive, send)


def _services_health(services: Services) -> HealthCheck:
    """``/healthz`` of an app built on its own services: their archive, index, embedder."""

    def dependencies() -> list[Dependency]:
        indexes, embedders, _ = services.engines.in_use()
        return dependencies_of(services.archive, indexes, embedders)

    return HealthCheck(dependencies)


def create_app(
    services: Services,
    settings: WebSettings | None = None,
    run_command: Callable[..., None] | None = None,
    health: HealthCheck | None = None,
) -> FastAPI:
    """``run_command``: the service's command runner, served as ``POST /api/cli``;
    ``health``: the service's dependency report (default: these services' own)."""
    settings = settings or WebSettings()
    health_check = health or _services_health(services)
    app = FastAPI(
        title="Thoth Memory administration API",
        version="1",
        openapi_url=OPENAPI_URL,
        docs_url=None,
        redoc_url=None,
        description='Administration → Memory management. Errors are {"error": {"code", "message", "details"}}.',
    )
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    # Swagger UI's own files, from the installed package: the API docs need no CDN.
    app.mount(API_DOCS_ASSETS, StaticFiles(directory=str(SWAGGER_UI)), name="api-docs-assets")

    @app.get("/api/docs", include_in_schema=False)
    async def api_docs(request: Request) -> Response:
        """Interactive API docs (Swagger UI) over the OpenAPI document; try-it-out
        requests carry the page's session cookie, or a token given in Authorize."""
        return templates.TemplateResponse(
            request, "api_docs.html", {"openapi_url": OPENAPI_URL, "assets": API_DOCS_ASSETS}
        )

    def csrf_token(session: str) -> str:
        # Keyed with the session id itself (256 random bits that page scripts never see:
        # the cookie is HttpOnly), not with a secret of this process: every replica behind
        # a load balancer, and this one after a restart, computes the same token, and
        # the token tells nothing of the id.
        return hmac.new(session.encode(), CSRF_PURPOSE, hashlib.sha256).hexdigest()

    # --- errors -------------------------------------------------------------------------

    @app.exception_handler(ThothError)
    async def thoth_error(request: Request, exc: ThothError) -> Response:
        if not request.url.path.startswith("/api") and isinstance(exc, Unauthenticated):
            return RedirectResponse("/login", status_code=303)
        if not request.url.path.startswith("/api"):
            return templates.TemplateResponse(
                request, "error.html", {"error": exc}, status_code=exc.http_status
            )
        return error_response(exc)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> Response:
        # Rendered by Starlette's outermost middleware, outside RequestGuard: the
        # security headers are added here.
        response = error_response(ThothError())
        response.headers.update(dict(security_headers(secure=settings.secure)))
        return response

    def readable(error: dict) -> str:
        if error["type"] == "string_pattern_mismatch":
            pattern = str((error.get("ctx") or {}).get("pattern", ""))
            if "mem-" in pattern:
                return "is not a card id (mem-<uuid>)"
            if pattern == schemas.TEXT_PATTERN:
                return "must be text with a visible character and no control characters"
            return "has an invalid format"
        return error["msg"]

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        details = [
            {"field": ".".join(str(p) for p in e["loc"][1:]), "message": readable(e)}
            for e in exc.errors()
        ]
        message = "; ".join(f"{d['field']}: {d['message']}" for d in details) or "invalid request"
        return error_response(InvalidInput(message, details=details))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        body = {"error": {"code": code, "message": str(exc.detail), "details": None}}
        return JSONResponse(
            body, status_code=exc.status_code, headers=getattr(exc, "headers", None)
        )

    # --- request hygiene ----------------------------------------------------------------

    # Body limits, media type and security headers, before routing and authentication.
    app.add_middleware(
        RequestGuard,
        max_body_bytes=MAX_DOCUMENT_BYTES,
        body_timeout=settings.body_timeout,
        secure=settings.secure,
    )

    # --- authentication -----------------------------------------------------------------

    def check_csrf(request: Request, session: str) -> None:
        fetch_site = request.headers.get("sec-fetch-site")
        origin = request.headers.get("origin")
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            raise PermissionDenied(
                "cross-site request refused", details={"reason": "sec-fetch-site"}
            )
        if origin is not None and normalized_origin(origin) not in settings.public_origins:
            raise PermissionDenied("cross-origin request refused", details={"reason": "origin"})
        if fetch_site is None and origin is None:
            raise PermissionDenied("request origin unknown: refused", details={"reason": "origin"})
        token = request.headers.get("x-csrf-token", "")
        if not hmac.compare_digest(token, csrf_token(session)):
            raise PermissionDenied("missing or invalid CSRF token", details={"reason": "csrf"})

    def resolve_principal(request: Request) -> Principal:
        authorization = request.headers.get("authorization")
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("use 'Authorization: Bearer <token>'")
            return services.accounts.by_token(token.strip())
        session = request.cookies.get(settings.cookie_name)
        if not session:
            raise Unauthenticated()
        found = services.accounts.by_session(session)
        if request.method not in SAFE_METHODS:
            check_csrf(request, session)
        return found

    async def principal(request: Request) -> Principal:
        """The request's principal, named as the actor of what the request changes
        (tht.audit): resolved on a worker thread, named in the request's own context,
        which the route's thread inherits."""
        found = await run_in_threadpool(resolve_principal, request)
        audit.act_as(found.user)
        return found

    Actor = Annotated[Principal, Depends(principal)]
    WorkspaceId = Annotated[str, PathParam(alias="workspaceId", pattern=WORKSPACE_ID_PATTERN)]
    CardId = Annotated[str, PathParam(alias="cardId", pattern=CARD_ID_PATTERN)]

    def admin(actor: Principal, request: AdminRequest) -> dict[str, Any]:
        actor.require(
            required_permission(request.operation), request.workspace
        )  # MemoryAdmin checks again
        return services.admin.execute(actor, request)

    errors = schemas.error_responses

    # --- session ------------------------------------------------------------------------

    @app.post(
        "/api/session",
        response_model=schemas.SessionOut,
        responses=errors(401, 415, 422, 429, 503),
        tags=["session"],
        summary="Log in (password or API token); sets the session cookie",
    )
    def login(
        credentials: Annotated[schemas.Login, Body()], request: Request, response: Response
    ) -> dict[str, Any]:
        # the backoff's client is the peer address (uvicorn substitutes X-Forwarded-For
        # only from the proxies it trusts, loopback by default)
        client = request.client.host if request.client else "unknown"
        if isinstance(credentials, schemas.TokenLogin):
            found = services.accounts.by_token(credentials.token)
            services.accounts.record_token_login(found, client)
        else:
            found = services.accounts.by_password(credentials.name, credentials.password, client)
        session = services.accounts.open_session(found.user)
        set_session_cookie(response, session)
        return {"principal": found.as_json(), "csrf_token": csrf_token(session)}

    def set_session_cookie(response: Response, session: str) -> None:
        response.set_cookie(
            settings.cookie_name,
            session,
            httponly=True,
            samesite="strict",
            secure=settings.secure,
            path="/",
            max_age=8 * 3600,
        )

    @app.get(
        "/api/session",
        response_model=schemas.SessionOut,
        responses=errors(401, 503),
        tags=["session"],
        summary="The logged-in principal and its CSRF token",
    )
    def session_info(actor: Actor, request: Request) -> dict[str, Any]:
        session = request.cookies.get(settings.cookie_name)
        return {
            "principal": actor.as_json(),
            "csrf_token": csrf_token(session) if session else None,
        }

    @app.delete(
        "/api/session",
        status_code=204,
        responses=errors(401, 403, 503),
        tags=["session"],
        summary="Log out",
    )
    def logout(actor: Actor, request: Request) -> Response:
        services.accounts.close_session(request.cookies.get(settings.cookie_name, ""))
        response = Response(status_code=204)
        response.delete_cookie(
            settings.cookie_name, path="/", secure=settings.secure, samesite="strict"
        )
        return response

    # --- workspaces ---------------------------------------------------------------------

    @app.get(
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

    # --- memory -------------------------------------------------------------------------

    base = "/api/workspaces/{workspaceId}/memory"

    @app.get(
        base,
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

    @app.post(
        base,
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

    @app.get(
        base + "/pending",
        response_model=schemas.PendingList,
        responses=errors(401, 403, 404, 503),
        tags=["memory"],
        summary="Incomplete projection operations",
    )
    def pending(actor: Actor, workspace: WorkspaceId) -> dict[str, Any]:
        return admin(actor, AdminRequest(workspace, "pending"))

    @app.get(
        base + "/{cardId}",
        response_model=schemas.CardOut,
        responses=errors(401, 403, 404, 422, 503),
        tags=["memory"],
        summary="Read a complete card",
    )
    def show_card(actor: Actor, workspace: WorkspaceId, card_id: CardId) -> dict[str, Any]:
        return admin(actor, AdminRequest(workspace, "show", card_id=card_id))

    @app.put(
        base + "/{cardId}",
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

    @app.delete(
        base + "/{cardId}",
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

    @app.post(
        base + "/{cardId}/retry",
        response_model=schemas.RetryResult,
        responses=errors(401, 403, 404, 422, 503),
        tags=["memory"],
        summary="Retry current projection work, including deletion",
    )
    def retry(actor: Actor, workspace: WorkspaceId, card_id: CardId) -> dict[str, Any]:
        return admin(actor, AdminRequest(workspace, "retry", card_id=card_id))

    app.include_router(agent_router(services, principal))  # an agent's recall and proposals
    app.include_router(catalog_router(services, principal))  # the Catalog page: DWH sync runs

    # --- pages --------------------------------------------------------------------------

    def page_principal(request: Request) -> tuple[Principal, str]:
        session = request.cookies.get(settings.cookie_name)
        if not session:
            raise Unauthenticated()
        return services.accounts.by_session(session), session

    def render(request: Request, template: str, active: str, **page: Any) -> Response:
        """A page for the signed-in user; ``page``: what this page's template adds."""
        actor, session = page_principal(request)
        visible = [w for w in services.workspaces.list() if w.id in actor.workspaces]
        return templates.TemplateResponse(
            request,
            template,
            {
                **page,
                "principal": actor,
                "csrf_token": csrf_token(session),
                "workspaces": visible,
                "active": active,
                "families": FAMILIES,
                "workspace_problem": workspace_problem(
                    actor, request.query_params.get("workspace")
                ),
            },
        )

    def workspace_problem(actor: Principal, requested: str | None) -> str | None:
        """Why the workspace named in the URL is not shown, in words: never silently
        another one. An admin is told whether a workspace it does not belong to exists,
        and how to be made a member (``Principal.outside``); other roles are not."""
        if not requested or actor.can_manage(requested):
            return None
        shown = requested if len(requested) <= 64 else requested[:64] + "…"
        if requested in actor.workspaces:
            return (
                f"You belong to workspace “{shown}” but do not administer it: these pages need"
                " the memory.manage permission there. Choose one of your workspaces below."
            )
        refusal = actor.outside(MANAGE, requested)  # an admin is told whether it exists
        if isinstance(refusal, NotFound):
            return f"Workspace “{shown}” does not exist. Choose one of your workspaces below."
        if refusal.details.get("exists"):
            return (
                f"You are not a member of workspace “{shown}”: an admin of it, or the"
                f" installation's operator, adds you (tht user grant {actor.user}"
                f" --workspace {shown}). Choose one of your workspaces below."
            )
        return (
            f"Workspace “{shown}” does not exist, or you are not a member of it."
            " Choose one of your workspaces below."
        )

    @app.get("/", include_in_schema=False)
    def home(request: Request) -> Response:
        return RedirectResponse(
            "/admin/memory" if request.cookies.get(settings.cookie_name) else "/login",
            status_code=303,
        )

    @app.get("/login", include_in_schema=False, response_class=HTMLResponse)
    def login_page(request: Request) -> Response:
        # a spent login link lands here: the page says so instead of a bare login form
        spent = request.query_params.get("link") == "spent"
        return templates.TemplateResponse(request, "login.html", {"link_spent": spent})

    @app.get("/login/once/{token}", include_in_schema=False)
    def login_once(token: str) -> Response:
        try:
            session = services.accounts.redeem_one_time(token)
        except Unauthenticated:
            return RedirectResponse("/login?link=spent", status_code=303)
        response = RedirectResponse("/admin/memory", status_code=303)
        set_session_cookie(response, session)
        return response

    @app.get("/admin/memory", include_in_schema=False, response_class=HTMLResponse)
    def memory_page(request: Request) -> Response:
        return render(request, "memory.html", "memory")

    @app.get("/admin/databases", include_in_schema=False, response_class=HTMLResponse)
    def databases_page(request: Request) -> Response:
        return render(request, "databases.html", "databases")

    app.include_router(admin_router(services, principal, render))  # accounts, workspaces, audit
    app.include_router(review_router(services, principal, render))  # the reviewer's page and API
    app.include_router(curation_router(services, principal, render))  # benchmark and gaps
    if run_command is not None:
        # tht commands over HTTP (THT_SERVICE_URL)
        app.include_router(cli_router(run_command, services.accounts.by_token))
    app.router.routes.append(  # an agent's MCP tools (streamable HTTP), see tht.mcp.http
        Route(
            "/mcp/{workspace}",
            LazyMcpEndpoint(services, settings.public_origins),
            methods=["GET", "POST", "DELETE"],
        )
    )

    def sees_health_details(request: Request) -> bool:
        """An administrator (``memory.manage`` in a workspace) sees the error messages
        and latencies; a caller without credentials, or with wrong ones, the statuses."""
        if not request.headers.get("authorization") and not request.cookies.get(
            settings.cookie_name
        ):
            return False
        try:
            found = resolve_principal(request)
        except ThothError:
            return False
        return MANAGE in found.permissions and bool(found.workspaces)

    @app.get("/healthz", include_in_schema=False)
    async def health_route(request: Request) -> JSONResponse:
        # Waits for the probes on the event loop (no worker thread held), then looks at
        # the credentials only when the archive answered: a hung archive would hold
        # the thread that asks it.
        report = await health_check.report_async()
        detailed = report.archive_ok and await run_in_threadpool(sees_health_details, request)
        return JSONResponse(report.document(detailed=detailed), status_code=report.http_status)

    return app
