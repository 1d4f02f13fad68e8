"""``/mcp/{workspace}``: an agent's MCP tools over streamable HTTP (tht.mcp.http)."""

from typing import Any

from starlette.routing import Route

from tht.bootstrap import Services
from tht.web.guard import normalized_origin


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


def mcp_route(services: Services, public_origins: tuple[str, ...]) -> Route:
    return Route(
        "/mcp/{workspace}",
        LazyMcpEndpoint(services, public_origins),
        methods=["GET", "POST", "DELETE"],
    )
