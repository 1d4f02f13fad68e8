"""What every router of the web app shares: the app's settings, the JSON error
response, the CSRF token and the request's principal (bearer token, or session cookie
with the CSRF checks on unsafe methods).

`request_auth` builds the dependencies once per app, over its services and settings;
the routers receive them (``auth.principal`` is the FastAPI dependency of the API
routes, ``auth.page_principal`` the pages').
"""

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from tht import audit
from tht.accounts import Principal
from tht.bootstrap import Services
from tht.errors import PermissionDenied, ThothError, TooManyRequests, Unauthenticated
from tht.usecases.recall_and_proposals import DwhBinding, token_recall
from tht.web.guard import SAFE_METHODS, normalized_origin

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


def csrf_token(session: str) -> str:
    # Keyed with the session id itself (256 random bits that page scripts never see:
    # the cookie is HttpOnly), not with a secret of this process: every replica behind
    # a load balancer, and this one after a restart, computes the same token, and
    # the token tells nothing of the id.
    return hmac.new(session.encode(), CSRF_PURPOSE, hashlib.sha256).hexdigest()


def check_csrf(request: Request, session: str, settings: WebSettings) -> None:
    """A cookie-authenticated unsafe request: same-origin, from a public origin, with
    the session's CSRF token."""
    fetch_site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        raise PermissionDenied("cross-site request refused", details={"reason": "sec-fetch-site"})
    if origin is not None and normalized_origin(origin) not in settings.public_origins:
        raise PermissionDenied("cross-origin request refused", details={"reason": "origin"})
    if fetch_site is None and origin is None:
        raise PermissionDenied("request origin unknown: refused", details={"reason": "origin"})
    token = request.headers.get("x-csrf-token", "")
    if not hmac.compare_digest(token, csrf_token(session)):
        raise PermissionDenied("missing or invalid CSRF token", details={"reason": "csrf"})


@dataclass(frozen=True)
class RecallCaller:
    """A recall request's principal, with the path's workspace's recorded binding when
    it was read in the token check's transaction (None: recall reads it)."""

    principal: Principal
    binding: DwhBinding | None


@dataclass(frozen=True)
class RequestAuth:
    """The request dependencies of one app (see `request_auth`)."""

    resolve_principal: Callable[[Request], Principal]
    principal: Callable[[Request], Awaitable[Principal]]
    recall_caller: Callable[[Request], Awaitable[RecallCaller]]
    page_principal: Callable[[Request], tuple[Principal, str]]
    set_session_cookie: Callable[[Response, str], None]


def bearer_token(authorization: str) -> str:
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("use 'Authorization: Bearer <token>'")
    return token.strip()


def request_auth(services: Services, settings: WebSettings) -> RequestAuth:
    """The principal of a request to an app over ``services``, and its session cookie."""

    def resolve_principal(request: Request) -> Principal:
        authorization = request.headers.get("authorization")
        if authorization:
            return services.accounts.tokens.by_token(bearer_token(authorization))
        session = request.cookies.get(settings.cookie_name)
        if not session:
            raise Unauthenticated()
        found = services.accounts.sessions.by_session(session)
        if request.method not in SAFE_METHODS:
            check_csrf(request, session, settings)
        return found

    async def principal(request: Request) -> Principal:
        """The request's principal, named as the actor of what the request changes
        (tht.audit): resolved on a worker thread, named in the request's own context,
        which the route's thread inherits."""
        found = await run_in_threadpool(resolve_principal, request)
        audit.act_as(found.user)
        return found

    def resolve_recall_caller(request: Request) -> RecallCaller:
        authorization = request.headers.get("authorization")
        workspace = request.path_params.get("workspaceId")
        if authorization and workspace is not None:
            token = bearer_token(authorization)
            return RecallCaller(*token_recall(services, token, workspace))
        return RecallCaller(resolve_principal(request), None)

    async def recall_caller(request: Request) -> RecallCaller:
        """A recall route's principal as ``principal`` resolves it (before the body is
        validated: a bad token is a 401 whatever the body), and for an API token the
        path's workspace's recorded binding, read in the token check's transaction:
        one pooled checkout and three round trips before recall instead of two
        transactions. Nothing is kept, so a revoked token or a rebind is seen by the
        next request."""
        found = await run_in_threadpool(resolve_recall_caller, request)
        audit.act_as(found.principal.user)
        return found

    def page_principal(request: Request) -> tuple[Principal, str]:
        session = request.cookies.get(settings.cookie_name)
        if not session:
            raise Unauthenticated()
        return services.accounts.sessions.by_session(session), session

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

    return RequestAuth(
        resolve_principal, principal, recall_caller, page_principal, set_session_cookie
    )
