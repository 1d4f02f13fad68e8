"""The commands: one typed application function per ``tht`` command, the table that
declares them (``tht.commands.table``) and the dispatcher that runs one
(``tht.commands.dispatch``). Every face calls these: the CLI's parser, the service's
socket and ``POST /api/cli``, the MCP tools and the Python client.

Importing this package imports nothing: the table is standard library only, so the
command-line client can read it before it knows where a command runs."""
