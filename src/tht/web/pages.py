"""The pages: the API docs, the login form and its one-time links, and the signed-in
user's pages (`page_renderer`: the frame every page shares, given to the routers that
add their own pages). A page reads its data from the JSON API with the session cookie.
"""

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from tht.accounts import MANAGE, Principal
from tht.bootstrap import Services
from tht.errors import NotFound, Unauthenticated
from tht.memory.model import FAMILIES
from tht.web.dependencies import RequestAuth, WebSettings, csrf_token

Render = Callable[..., Response]


def api_docs_router(templates: Jinja2Templates, openapi_url: str, assets: str) -> APIRouter:
    router = APIRouter()

    @router.get("/api/docs", include_in_schema=False)
    async def api_docs(request: Request) -> Response:
        """Interactive API docs (Swagger UI) over the OpenAPI document; try-it-out
        requests carry the page's session cookie, or a token given in Authorize."""
        return templates.TemplateResponse(
            request, "api_docs.html", {"openapi_url": openapi_url, "assets": assets}
        )

    return router


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


def page_renderer(services: Services, auth: RequestAuth, templates: Jinja2Templates) -> Render:
    def render(request: Request, template: str, active: str, **page: Any) -> Response:
        """A page for the signed-in user; ``page``: what this page's template adds."""
        actor, session = auth.page_principal(request)
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

    return render


def pages_router(
    services: Services,
    auth: RequestAuth,
    settings: WebSettings,
    templates: Jinja2Templates,
    render: Render,
) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    def home(request: Request) -> Response:
        return RedirectResponse(
            "/admin/memory" if request.cookies.get(settings.cookie_name) else "/login",
            status_code=303,
        )

    @router.get("/login", response_class=HTMLResponse)
    def login_page(request: Request) -> Response:
        # a spent login link lands here: the page says so instead of a bare login form
        spent = request.query_params.get("link") == "spent"
        return templates.TemplateResponse(request, "login.html", {"link_spent": spent})

    @router.get("/login/once/{token}")
    def login_once(token: str) -> Response:
        try:
            session = services.accounts.sessions.redeem_one_time(token)
        except Unauthenticated:
            return RedirectResponse("/login?link=spent", status_code=303)
        response = RedirectResponse("/admin/memory", status_code=303)
        auth.set_session_cookie(response, session)
        return response

    @router.get("/admin/memory", response_class=HTMLResponse)
    def memory_page(request: Request) -> Response:
        return render(request, "memory.html", "memory")

    @router.get("/admin/databases", response_class=HTMLResponse)
    def databases_page(request: Request) -> Response:
        return render(request, "databases.html", "databases")

    return router
