"""The accounts' lifecycle: users, memberships, roles, token rotation, deletion
(``tht user ...``) and the audit log (``tht audit``).

Every command is an admin's (``memory.manage``); tht.accounts checks again that the
admin administers what it changes. The operator (no token) may change everything.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput
from tht.errors import InvalidInput

MAX_PASSWORD_BYTES = 4096


class UserCreateIn(CommandInput):
    name: str
    role: str
    workspace: list[str]
    password_file: str | None = None
    expires_in: str | None = None


def user_create(ctx: CommandContext, args: UserCreateIn) -> dict[str, Any]:
    password = None
    if args.password_file is not None:
        password = ctx.read_text(args.password_file, MAX_PASSWORD_BYTES).rstrip("\r\n")
    # an admin gives access only to what it administers (tht.accounts checks it)
    result: dict[str, Any] = ctx.services.accounts.users.create_user(
        args.name,
        args.role,
        args.workspace,
        password,
        expires_in=args.expires_in,
        by=ctx.principal,
    )
    return result


class UserListIn(CommandInput):
    pass


def user_list(ctx: CommandContext, args: UserListIn) -> dict[str, Any]:
    """The users an admin sees (those of its workspaces, with only the memberships it
    administers); the operator sees every user."""
    return {"items": ctx.services.accounts.users.users(by=ctx.principal)}


class UserGrantIn(CommandInput):
    name: str
    workspace: str


def user_grant(ctx: CommandContext, args: UserGrantIn) -> dict[str, Any]:
    result: dict[str, Any] = ctx.services.accounts.users.grant(
        args.name, args.workspace, by=ctx.principal
    )
    return result


class UserRevokeIn(UserGrantIn):
    pass


def user_revoke(ctx: CommandContext, args: UserRevokeIn) -> dict[str, Any]:
    result: dict[str, Any] = ctx.services.accounts.users.revoke(
        args.name, args.workspace, by=ctx.principal
    )
    return result


class UserRoleIn(CommandInput):
    name: str
    role: str


def user_role(ctx: CommandContext, args: UserRoleIn) -> dict[str, Any]:
    result: dict[str, Any] = ctx.services.accounts.users.set_role(
        args.name, args.role, by=ctx.principal
    )
    return result


class UserTokenRotateIn(CommandInput):
    name: str
    expires_in: str | None = None


def user_token_rotate(ctx: CommandContext, args: UserTokenRotateIn) -> dict[str, Any]:
    from tht.accounts import token_lifetime

    token_lifetime(args.expires_in)  # a bad lifetime is exit 2 before anything is opened
    result: dict[str, Any] = ctx.services.accounts.tokens.rotate_token(
        args.name, expires_in=args.expires_in, by=ctx.principal
    )
    return result


class UserDeleteIn(CommandInput):
    name: str


def user_delete(ctx: CommandContext, args: UserDeleteIn) -> dict[str, Any]:
    result: dict[str, Any] = ctx.services.accounts.users.delete_user(args.name, by=ctx.principal)
    return result


def parse_since(text: str | None) -> datetime | None:
    """An ISO date or time (UTC when no zone is given), or a span back from now: 24h, 7d, 2w."""
    from tht.accounts import token_lifetime

    if text is None:
        return None
    text = text.strip()
    if text and text[-1:].lower() in "hdw" and text[:-1].isdigit():
        return datetime.now(UTC) - timedelta(seconds=token_lifetime(text) or 0)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(
            f"--since is an ISO date or time (2026-12-01, 2026-12-01T10:00) or a span"
            f" (24h, 7d), not '{text[:40]}'",
            details={"field": "since"},
        ) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class AuditIn(CommandInput):
    since: str | None = None
    user: str | None = None
    limit: int = 100


def audit(ctx: CommandContext, args: AuditIn) -> dict[str, Any]:
    moment = parse_since(args.since)
    items = ctx.services.accounts.audit.audit_log(
        since=moment, user=args.user, limit=args.limit, by=ctx.principal
    )
    return {"items": items}
