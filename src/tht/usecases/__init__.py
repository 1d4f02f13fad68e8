"""Use cases: what a person or an agent may do, the capability checked again on every
face. They sit above the memory, the accounts and the workflow they combine, and below
the faces (commands, HTTP, MCP) that call them."""
