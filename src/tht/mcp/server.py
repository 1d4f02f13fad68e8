"""The MCP server of both transports: the tool list, argument validation, and the
answer of a call.

A call answers the command's JSON document, as the CLI prints it (text content, and
the same object as structured content). Arguments that do not fit the tool are a
protocol error (INVALID_PARAMS) naming them, before anything runs; an error of the
command itself (forbidden, not found, a refused proposal, the service unavailable) is
a tool result with ``isError`` and the error document, so the model can read it. No
call ends the server: an unexpected failure becomes an error result too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from tht import __version__
from tht.errors import InvalidInput, ThothError
from tht.mcp.tools import TOOLS, Tool

log = logging.getLogger("tht.mcp")

INSTRUCTIONS = (
    "Thoth Memory holds a text-to-SQL workspace's reviewed knowledge. Before writing SQL,"
    " call memory_search (domain clarifications only: what the business means by its words),"
    " memory_rules (SQL rules: joins, formulas, filters; and explained errors) and"
    " memory_solved_search (earlier questions with approved SQL: exemplars, not approvals)."
    " After a database error, call memory_rules with the error. Each answers"
    ' {"results": [...]}, best first, each card with its similarity to the question (cosine,'
    " 0-1): use the cards that fit the question; an empty answer means none applies. At the end"
    " of a workflow session, memory_propose what was learned and memory_summary to review it."
)

# (tool, validated arguments, the request's context) -> (ok, the command's JSON document)
CallTool = Callable[[Tool, BaseModel, Any], Awaitable[tuple[bool, dict[str, Any]]]]


def tool_list() -> list[types.Tool]:
    return [
        types.Tool(
            name=tool.name,
            title=tool.title,
            description=tool.description,
            input_schema=tool.input_schema,
            annotations=types.ToolAnnotations(
                title=tool.title,
                read_only_hint=tool.read_only,
                destructive_hint=False,
                idempotent_hint=tool.read_only,
                open_world_hint=False,
            ),
        )
        for tool in TOOLS.values()
    ]


def answer(ok: bool, document: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(document, ensure_ascii=False, default=str)
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=json.loads(text),
        is_error=not ok,
    )


def invalid_params(error: InvalidInput) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=error.message, data=error.to_dict())


def build_server(call: CallTool) -> Server[Any]:
    """An MCP server whose tool calls ``call`` runs (forwarded to the service over its
    socket, or run in the service for an HTTP request's principal)."""

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = TOOLS.get(params.name)
        if tool is None:
            raise invalid_params(
                InvalidInput(
                    f"unknown tool '{params.name}' (the tools: {', '.join(TOOLS)})",
                    details={"field": "name"},
                )
            )
        try:
            arguments = tool.parse(params.arguments)
        except InvalidInput as exc:
            raise invalid_params(exc) from exc
        try:
            ok, document = await call(tool, arguments, ctx)
        except ThothError as exc:
            ok, document = False, exc.to_dict()
        except Exception as exc:  # the last line of defence: the server keeps serving
            log.error("%s failed: %s", tool.name, exc, exc_info=True)
            ok, document = False, ThothError(f"internal error ({type(exc).__name__})").to_dict()
        return answer(ok, document)

    return Server(
        "thoth-memory",
        version=__version__,
        title="Thoth Memory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
