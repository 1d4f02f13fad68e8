"""The accounts' lifecycle on the command line: memberships, roles, token rotation,
deletion (``tht user grant|revoke|role|token rotate|delete``) and the audit log
(``tht audit``): parsers of the commands of ``tht.commands.accounts``."""

from __future__ import annotations

from typing import Annotated

import typer

from tht.cli.apps import app, user_app
from tht.cli.submit import submit

token_app = typer.Typer(help="A user's API token: rotate it.", no_args_is_help=True)
user_app.add_typer(token_app, name="token")

UserName = Annotated[str, typer.Argument(help="User name")]
WorkspaceOption = Annotated[str, typer.Option("--workspace", "-w", help="Workspace id")]
ROLES = ("admin", "user", "agent")  # tht.accounts.ROLES
EXPIRES_HELP = (
    "How long the token lives: 12h, 30d, 8w, or 'never' (a service account's token, rotated"
    " by hand). Default: THT_TOKEN_EXPIRES_IN where tokens are issued, else 90d."
)


@user_app.command("grant")
def user_grant(name: UserName, workspace: WorkspaceOption) -> int:
    """Make a user a member of a workspace (its role applies there at once)."""
    return submit("user.grant", {"name": name, "workspace": workspace})


@user_app.command("revoke")
def user_revoke(name: UserName, workspace: WorkspaceOption) -> int:
    """End a user's membership of a workspace: its token and web sessions lose it at once."""
    return submit("user.revoke", {"name": name, "workspace": workspace})


@user_app.command("role")
def user_role(
    name: UserName,
    role: Annotated[str, typer.Argument(help=f"The new role: {', '.join(ROLES)}")],
) -> int:
    """Change a user's role (the last admin keeps its role: exit 4, last_admin)."""
    return submit("user.role", {"name": name, "role": role})


@token_app.command("rotate")
def user_token_rotate(
    name: UserName,
    expires_in: Annotated[str | None, typer.Option("--expires-in", help=EXPIRES_HELP)] = None,
) -> int:
    """Issue a new API token (printed this once); the old one and the user's web
    sessions stop working now."""
    return submit("user.token.rotate", {"name": name, "expires_in": expires_in})


@user_app.command("delete")
def user_delete(name: UserName) -> int:
    """Delete a user with its memberships and sessions (never the last admin: exit 4)."""
    return submit("user.delete", {"name": name})


@app.command("audit")
def audit_log(
    since: Annotated[
        str | None,
        typer.Option(help="From this ISO date or time (UTC), or a span back from now: 24h, 7d"),
    ] = None,
    user: Annotated[str | None, typer.Option(help="Only events this user did or underwent")] = None,
    limit: Annotated[int, typer.Option(help="At most this many events (1 to 1000)")] = 100,
) -> int:
    """The audit log, newest first: logins, failed logins, token, role and membership
    changes, user deletions and card mutations, each with its actor (admins only: an
    admin reads the events of its workspaces and their users, the operator all)."""
    return submit("audit", {"since": since, "user": user, "limit": limit})
