"""``tht mcp``: the agent's Memory tools for MCP clients, over stdin/stdout (tht.mcp)."""

from __future__ import annotations

from tht.cli._common import ConfigOption
from tht.cli.apps import app
from tht.cli.submit import TOKEN


@app.command("mcp")
def mcp(config: ConfigOption) -> int:
    """Serve memory_search, memory_rules, memory_solved_search, memory_propose and
    memory_summary over MCP on stdin/stdout, for an MCP client that starts this command.

    Each call runs in the service as its `tht memory` command, with the token of
    THT_TOKEN, THT_TOKEN_FILE or --token-file (none: the installation's user, the
    operator). stdout carries the protocol; logs go to stderr."""
    from tht.mcp.stdio import serve

    return serve(config, token=TOKEN.get())
