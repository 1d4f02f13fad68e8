"""The app's refusals: every API error is one JSON document ``{"error": {"code",
"message", "details"}}`` (tht.errors); a page's error is the error page, and a page
without a session redirects to the login form."""

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from tht.errors import InvalidInput, ThothError, Unauthenticated
from tht.web import schemas
from tht.web.dependencies import WebSettings, error_response
from tht.web.guard import security_headers


def readable(error: dict[str, Any]) -> str:
    """A request validation error's message, in words for the pattern it missed."""
    if error["type"] == "string_pattern_mismatch":
        pattern = str((error.get("ctx") or {}).get("pattern", ""))
        if "mem-" in pattern:
            return "is not a card id (mem-<uuid>)"
        if pattern == schemas.TEXT_PATTERN:
            return "must be text with a visible character and no control characters"
        return "has an invalid format"
    return str(error["msg"])


def install_error_handlers(app: FastAPI, templates: Jinja2Templates, settings: WebSettings) -> None:
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
