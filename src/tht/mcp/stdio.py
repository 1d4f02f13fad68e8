"""``tht mcp -c runtime.yaml``: the agent's Memory tools over MCP on stdin/stdout.

A thin face: each tool call is the command it stands for (``tht.commands.table``),
forwarded to the installation's service over its socket (auto-started as the CLI
does), or to ``THT_SERVICE_URL`` over HTTP, so this process never imports the engines.
With ``THT_SERVICE=off`` the commands run here instead, on engines it keeps warm.

Who calls: the token of ``THT_TOKEN``, ``THT_TOKEN_FILE`` or ``--token-file`` (an
agent's sandbox gets one: every call then runs with its capabilities); without one, the
installation's own user on the local socket, the operator. Either way only the agent's
five tools are served.

The runtime file names the workspace and the DWH binding; it is read at each call, as
each command reads it.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from tht.errors import InvalidInput


def serve(
    config: str | os.PathLike[str], *, token: str | None, env: Mapping[str, str] | None = None
) -> int:
    """Serve until the client closes standard input; returns the exit code."""
    path = os.path.abspath(os.fspath(config))
    if not os.path.isfile(path):
        # before the protocol starts, the CLI's way: one JSON error on stdout
        error = InvalidInput(f"the runtime file {config} does not exist")
        sys.stdout.write(json.dumps(error.to_dict()) + "\n")
        sys.stdout.flush()
        return error.exit_code

    import anyio
    from mcp.server.stdio import stdio_server

    from tht.mcp.server import build_server
    from tht.mcp.tools import Tool, command_arguments
    from tht.service.commands import CommandRunner

    runner = CommandRunner(token=token, env=env)

    async def call(tool: Tool, arguments: Any, ctx: Any) -> tuple[bool, dict[str, Any]]:
        name, args, stdin = command_arguments(tool, arguments, path)
        code, document = await anyio.to_thread.run_sync(
            functools.partial(runner.run_command, name, args, stdin=stdin)
        )
        return code == 0, document

    server = build_server(call)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        pass
    finally:
        runner.close()
    return 0
