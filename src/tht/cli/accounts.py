"""The accounts' lifecycle on the command line: memberships, roles, token rotation,
deletion (``tht user ...``) and the audit log (``tht audit``).

Every command is an admin's (``memory.manage``, tht.cli.capabilities); tht.accounts
checks again that the admin administers what it changes. Run without a token (the
operator) they may change everything.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from tht.accounts import ROLES, token_lifetime
from tht.cli.invocation import current
from tht.cli.main import _services, app, emit, user_app
from tht.errors import InvalidInput

token_app = typer.Typer(help="A user's API token: rotate it.", no_args_is_help=True)
user_app.add_typer(token_app, name="token")

UserName = Annotated[str, typer.Argument(help="User name")]
WorkspaceOption = Annotated[str, typer.Option("--workspace", "-w", help="Workspace id")]
EXPIRES_HELP = (
    "How long the token lives: 12h, 30d, 8w, or 'never' (a service account's token, rotated"
    " by hand). Default: THT_TOKEN_EXPIRES_IN where tokens are issued, else 90d."
)


@user_app.command("grant")
def user_grant(name: UserName, workspace: WorkspaceOption) -> None:
    """Make a user a member of a workspace (its role applies there at once)."""
    with _services() as services:
        emit(services.accounts.grant(name, workspace, by=current().principal))


@user_app.command("revoke")
def user_revoke(name: UserName, workspace: WorkspaceOption) -> None:
    """End a user's membership of a workspace: its token and web sessions lose it at once."""
    with _services() as services:
        emit(services.accounts.revoke(name, workspace, by=current().principal))


@user_app.command("role")
def user_role(
    name: UserName,
    role: Annotated[str, typer.Argument(help=f"The new role: {', '.join(ROLES)}")],
) -> None:
    """Change a user's role (the last admin keeps its role: exit 4, last_admin)."""
    with _services() as services:
        emit(services.accounts.set_role(name, role, by=current().principal))


@token_app.command("rotate")
def user_token_rotate(
    name: UserName,
    expires_in: Annotated[str | None, typer.Option("--expires-in", help=EXPIRES_HELP)] = None,
) -> None:
    """Issue a new API token (printed this once); the old one and the user's web
    sessions stop working now."""
    token_lifetime(expires_in)  # a bad lifetime is exit 2 before anything is opened
    with _services() as services:
        emit(services.accounts.rotate_token(name, expires_in=expires_in, by=current().principal))


@user_app.command("delete")
def user_delete(name: UserName) -> None:
    """Delete a user with its memberships and sessions (never the last admin: exit 4)."""
    with _services() as services:
        emit(services.accounts.delete_user(name, by=current().principal))


def parse_since(text: str | None) -> datetime | None:
    """An ISO date or time (UTC when no zone is given), or a span back from now: 24h, 7d, 2w."""
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


@app.command("audit")
def audit_log(
    since: Annotated[
        str | None,
        typer.Option(help="From this ISO date or time (UTC), or a span back from now: 24h, 7d"),
    ] = None,
    user: Annotated[str | None, typer.Option(help="Only events this user did or underwent")] = None,
    limit: Annotated[int, typer.Option(help="At most this many events (1 to 1000)")] = 100,
) -> None:
    """The audit log, newest first: logins, failed logins, token, role and membership
    changes, user deletions and card mutations, each with its actor (admins only: an
    admin reads the events of its workspaces and their users, the operator all)."""
    moment = parse_since(since)
    with _services() as services:
        items = services.accounts.audit_log(
            since=moment, user=user, limit=limit, by=current().principal
        )
        emit({"items": items})
