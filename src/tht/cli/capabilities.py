"""What each ``tht`` command needs of the principal that runs it.

The operator (a command in its own process with the installation's files, or the
installation's own user on the service's socket without a token) may do everything.
A token's principal needs the capability below in the command's workspace. A command
missing from the table is refused to every token: new commands are closed by default.
"""

from __future__ import annotations

from tht.accounts import MANAGE, PROPOSE, READ, RECALL

SIGNED = "signed"  # the authority is the request's signature, checked by the command
OPERATOR_ONLY = "operator"

CAPABILITIES: dict[tuple[str, ...], str] = {
    ("memory", "list"): READ,
    ("memory", "show"): READ,
    ("memory", "pending"): READ,
    ("memory", "check"): READ,  # with --repair: MANAGE (see required)
    ("memory", "create"): MANAGE,
    ("memory", "update"): MANAGE,
    ("memory", "delete"): MANAGE,
    ("memory", "retry"): MANAGE,
    ("memory", "index"): MANAGE,
    ("memory", "import"): MANAGE,
    ("memory", "export"): READ,
    ("memory", "imports"): READ,  # imports undo: MANAGE (see required)
    ("memory", "search"): RECALL,
    ("memory", "rules"): RECALL,
    ("memory", "solved-search"): RECALL,
    ("memory", "eval"): RECALL,
    ("memory", "propose"): PROPOSE,
    ("memory", "summary"): PROPOSE,
    ("memory", "solved-index"): PROPOSE,
    ("memory", "admin"): SIGNED,
    ("memory", "review-apply"): SIGNED,
    ("workspace", "list"): READ,
    ("workspace", "show"): READ,
    ("workspace", "create"): MANAGE,
    ("workspace", "embedder"): MANAGE,
    ("user", "create"): MANAGE,
    ("user", "list"): MANAGE,
    ("user", "grant"): MANAGE,
    ("user", "revoke"): MANAGE,
    ("user", "role"): MANAGE,
    ("user", "token"): MANAGE,  # token rotate
    ("user", "delete"): MANAGE,
    ("audit",): MANAGE,
    ("catalog", "bind"): MANAGE,
    ("catalog", "sync"): MANAGE,
    ("catalog", "retry"): MANAGE,
    ("catalog", "forget"): MANAGE,
    ("catalog", "runs"): READ,
    ("catalog", "show"): READ,
    ("catalog", "status"): READ,
    ("demo",): OPERATOR_ONLY,
    # a process of its own (never run in the service); its tools are the commands
    # memory search|rules|solved-search|propose|summary, each checked with the token
    ("mcp",): OPERATOR_ONLY,
    # never run in the service either: it asks the running service on its socket
    ("health",): OPERATOR_ONLY,
}


def command_path(args: list[str]) -> tuple[str, ...]:
    words = tuple(a for a in args[:2] if not a.startswith("-"))
    return words if words in CAPABILITIES else words[:1]


def required(args: list[str]) -> str:
    """The capability the command in ``args`` needs (OPERATOR_ONLY when unknown)."""
    path = command_path(args)
    capability = CAPABILITIES.get(path, OPERATOR_ONLY)
    if path == ("memory", "check") and "--repair" in args:
        return MANAGE
    if path == ("memory", "imports") and "undo" in args[2:3]:
        return MANAGE
    return capability
