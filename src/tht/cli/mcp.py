"""``tht mcp``: the agent's Memory tools for MCP clients, over stdin/stdout (tht.mcp)."""

from __future__ import annotations

import typer

from tht.cli.invocation import current
from tht.cli.main import ConfigOption, app


@app.command("mcp")
def mcp(config: ConfigOption) -> None:
    """Serve memory_search, memory_rules, memory_solved_search, memory_propose and
    memory_summary over MCP on stdin/stdout, for an MCP client that starts this command.

    Each call runs in the service as its `tht memory` command, with the token of
    THT_TOKEN, THT_TOKEN_FILE or --token-file (none: the installation's user, the
    operator). stdout carries the protocol; logs go to stderr."""
    from tht.mcp.stdio import serve

    code = serve(config, token=current().token)
    if code:
        raise typer.Exit(code)
