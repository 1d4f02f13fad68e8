"""``/mcp/{workspace}`` on ``tht serve``: the agent's Memory tools over MCP's streamable
HTTP transport, run in the service for the bearer token's principal.

Authentication is the API's: ``Authorization: Bearer <token>`` on every request (no
cookie: nothing here is for a browser). A request that carries an ``Origin`` (a browser's)
must come from one of the service's public origins: the MCP transport asks servers to
check it against DNS rebinding, where a page makes a browser post to a local server. The path names the workspace, as the agent
routes' path does, and the principal must belong to it; each call then checks its
capability again (tht.usecases.recall_and_proposals), so a user token may recall but not propose.

Stateless and JSON-only: every request is a whole MCP exchange with nothing kept
between requests, so any instance behind a load balancer can answer it and no app
lifespan is needed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers

from tht.accounts import PROPOSE, RECALL, Principal
from tht.errors import Forbidden, NotFound, PermissionDenied, ThothError, Unauthenticated
from tht.mcp.server import build_server
from tht.mcp.tools import Tool
from tht.memory.model import WORKSPACE_ID_PATTERN
from tht.usecases import recall_and_proposals as agent

if TYPE_CHECKING:
    from tht.bootstrap import Services

WORKSPACE = re.compile(WORKSPACE_ID_PATTERN)
_PRINCIPAL = "tht.principal"  # the ASGI scope's keys the tool calls read
_WORKSPACE = "tht.workspace"
_BINDING = "tht.binding"

Scope = dict[str, Any]


class McpEndpoint:
    """The ASGI app of ``/mcp/{workspace}``."""

    def __init__(self, services: Services, origin_allowed: Callable[[str], bool]) -> None:
        """``origin_allowed``: whether a browser's Origin is one of the service's public
        origins (the web app's rule, tht.web.guard)."""
        self.services = services
        self.origin_allowed = origin_allowed
        self.server = build_server(self._call)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        try:
            origin = Headers(scope=scope).get("origin")
            if origin is not None and not self.origin_allowed(origin):
                raise PermissionDenied("cross-origin request refused", details={"reason": "origin"})
            workspace = str(scope.get("path_params", {}).get("workspace", ""))
            if not WORKSPACE.match(workspace):
                raise NotFound(f"no workspace '{workspace}': the URL is /mcp/<workspace id>")
            principal, binding = await self._caller(scope, workspace)
            if not (principal.can(RECALL, workspace) or principal.can(PROPOSE, workspace)):
                if workspace in principal.workspaces:  # a member whose role has neither
                    raise Forbidden(
                        f"user {principal.user} (role {principal.role}) may not recall nor propose",
                        details={"permission": RECALL, "workspace": workspace},
                    )
                raise await anyio.to_thread.run_sync(principal.outside, RECALL, workspace)
        except ThothError as exc:
            await _error(exc, scope, receive, send)
            return
        scope[_PRINCIPAL], scope[_WORKSPACE], scope[_BINDING] = principal, workspace, binding
        manager = StreamableHTTPSessionManager(app=self.server, stateless=True, json_response=True)
        async with manager.run():
            await manager.handle_request(scope, receive, send)

    async def _caller(
        self, scope: Scope, workspace: str
    ) -> tuple[Principal, agent.DwhBinding | None]:
        """The token's principal and, when it may recall in ``workspace``, the
        workspace's recorded binding, read in one transaction as the agent routes do."""
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("use 'Authorization: Bearer <token>'")
        return await anyio.to_thread.run_sync(
            agent.token_recall, self.services, token.strip(), workspace
        )

    async def _call(self, tool: Tool, arguments: Any, ctx: Any) -> tuple[bool, dict[str, Any]]:
        scope = ctx.request.scope
        document = await anyio.to_thread.run_sync(
            self._run, tool, arguments, scope[_PRINCIPAL], scope[_WORKSPACE], scope[_BINDING]
        )
        return True, document

    def _run(
        self,
        tool: Tool,
        arguments: Any,
        principal: Principal,
        workspace: str,
        binding: agent.DwhBinding | None,
    ) -> dict[str, Any]:
        """The tool's command in the service, through the functions the HTTP agent
        routes use (tht.usecases.recall_and_proposals)."""
        services = self.services
        word = tool.command.rpartition(".")[2]  # memory.search: search
        if word in agent.RECALL_KINDS:
            return agent.service_recall(
                services,
                principal,
                workspace,
                agent.RECALL_KINDS[word],
                arguments.question,
                arguments.filters_document(),
                session=getattr(arguments, "session", None),
                error=getattr(arguments, "error", None),
                explain=arguments.explain_card_id,
                view=arguments.view or "compact",
                recorded=binding,
            )
        principal.require(PROPOSE, workspace)  # before the session is looked at
        if word == "propose":
            return agent.propose_command(
                services, workspace, arguments.session, arguments.data, principal=principal
            )
        return agent.summary_command(services, workspace, arguments.session, principal=principal)


async def _error(error: ThothError, scope: Scope, receive: Any, send: Any) -> None:
    from starlette.responses import JSONResponse

    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, Unauthenticated) else None
    response = JSONResponse(error.to_dict(), status_code=error.http_status, headers=headers)
    await response(scope, receive, send)
