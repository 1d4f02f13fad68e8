"""Logging in and out of the pages: ``/api/session`` opens a web session from a
password or an API token (the session cookie, and the CSRF token the page's scripts
send back), tells the logged-in principal, and closes it.
No `from __future__ import annotations`: FastAPI must resolve the local Annotated aliases.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import Response

from tht.accounts import Principal
from tht.bootstrap import Services
from tht.web import schemas
from tht.web.dependencies import RequestAuth, WebSettings, csrf_token


def session_router(services: Services, auth: RequestAuth, settings: WebSettings) -> APIRouter:
    router = APIRouter(tags=["session"])
    Actor = Annotated[Principal, Depends(auth.principal)]
    errors = schemas.error_responses

    @router.post(
        "/api/session",
        response_model=schemas.SessionOut,
        responses=errors(401, 415, 422, 429, 503),
        summary="Log in (password or API token); sets the session cookie",
    )
    def login(
        credentials: Annotated[schemas.Login, Body()], request: Request, response: Response
    ) -> dict[str, Any]:
        # the backoff's client is the peer address (uvicorn substitutes X-Forwarded-For
        # only from the proxies it trusts, loopback by default)
        client = request.client.host if request.client else "unknown"
        if isinstance(credentials, schemas.TokenLogin):
            found = services.accounts.tokens.by_token(credentials.token)
            services.accounts.sessions.record_token_login(found, client)
        else:
            found = services.accounts.sessions.by_password(
                credentials.name, credentials.password, client
            )
        session = services.accounts.sessions.open_session(found.user)
        auth.set_session_cookie(response, session)
        return {"principal": found.as_json(), "csrf_token": csrf_token(session)}

    @router.get(
        "/api/session",
        response_model=schemas.SessionOut,
        responses=errors(401, 503),
        summary="The logged-in principal and its CSRF token",
    )
    def session_info(actor: Actor, request: Request) -> dict[str, Any]:
        session = request.cookies.get(settings.cookie_name)
        return {
            "principal": actor.as_json(),
            "csrf_token": csrf_token(session) if session else None,
        }

    @router.delete(
        "/api/session",
        status_code=204,
        responses=errors(401, 403, 503),
        summary="Log out",
    )
    def logout(actor: Actor, request: Request) -> Response:
        services.accounts.sessions.close_session(request.cookies.get(settings.cookie_name, ""))
        response = Response(status_code=204)
        response.delete_cookie(
            settings.cookie_name, path="/", secure=settings.secure, samesite="strict"
        )
        return response

    return router
