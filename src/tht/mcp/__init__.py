"""The MCP server: an agent's Memory tools over stdio (``tht mcp``) and streamable HTTP
(``/mcp/{workspace}`` on ``tht serve``)."""
