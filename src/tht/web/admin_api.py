"""The administration of accounts over HTTP: workspaces, users, roles, memberships,
token rotation, deletion and the audit log, below /api/admin.

Every route is an admin's: it resolves the principal (bearer token, or session cookie
with the app's CSRF checks on writes), requires `memory.manage` (in the path's
workspace where there is one), and tht.accounts checks again that the admin
administers every workspace it touches. A user or an agent gets 403.
"""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from tht.accounts import AUDIT_LIMIT, MANAGE, Principal
from tht.bootstrap import Services
from tht.commands import accounts as account_commands
from tht.commands import workspaces as workspace_commands
from tht.commands.context import CommandContext
from tht.memory.model import WORKSPACE_ID_PATTERN
from tht.web.schemas import TEXT_PATTERN
from tht.web.schemas import error_responses as errors

USER_PATTERN = r"^[A-Za-z0-9._@-]{1,64}$"
# what tht.accounts.token_lifetime accepts, bounded below its 10000-day cap
LIFETIME_PATTERN = r"^(never|[1-9][0-9]{0,3}[hd]|[1-9][0-9]{0,2}w)$"
Role = Literal["admin", "user", "agent"]
UserName = Annotated[str, PathParam(pattern=USER_PATTERN)]
WorkspaceId = Annotated[str, PathParam(pattern=WORKSPACE_ID_PATTERN)]
PrincipalOf = Callable[..., Awaitable[Principal]]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkspaceIn(_Input):
    id: Annotated[str, Field(pattern=WORKSPACE_ID_PATTERN, description="lowercase id")]
    language: Literal["en", "it"]
    name: Annotated[str | None, Field(min_length=1, max_length=200, pattern=TEXT_PATTERN)] = None
    embedder: Annotated[
        str,
        Field(
            pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$",
            description="The installation's embedder profile the workspace's vectors come from",
        ),
    ] = "default"


class WorkspaceOut(BaseModel):
    id: str
    name: str
    language: Literal["en", "it"]
    embedder: str
    created_at: datetime


class WorkspaceList(BaseModel):
    items: list[WorkspaceOut]


ExpiresIn = Annotated[
    str | None,
    Field(
        pattern=LIFETIME_PATTERN,
        description="How long the token lives: 12h, 30d, 8w or never; default 90d"
        " (THT_TOKEN_EXPIRES_IN of the server)",
    ),
]


class UserIn(_Input):
    name: Annotated[str, Field(pattern=USER_PATTERN)]
    role: Role
    workspaces: Annotated[
        list[Annotated[str, Field(pattern=WORKSPACE_ID_PATTERN)]],
        Field(min_length=1, max_length=100),
    ]
    password: Annotated[str | None, Field(min_length=12, max_length=1024)] = None
    expires_in: ExpiresIn = None


class UserOut(BaseModel):
    user: str
    role: Role
    workspaces: list[str] = Field(description="Its workspaces that the admin administers")
    other_workspaces: int = Field(
        description="How many more it belongs to: then only their admins change it"
    )
    created_at: str
    has_password: bool
    token_issued_at: str | None
    token_expires_at: str | None = Field(description="None: the token never expires")


class UserList(BaseModel):
    items: list[UserOut]


class CreatedUser(BaseModel):
    user: str
    role: Role
    workspaces: list[str]
    token: str = Field(description="The API token, shown this once")
    token_expires_at: str | None


class RoleIn(_Input):
    role: Role


class RoleOut(BaseModel):
    user: str
    role: Role
    previous_role: Role
    workspaces: list[str]


class MembershipOut(BaseModel):
    user: str
    workspace: str
    member: bool
    changed: bool = Field(description="False: it already was so")


class TokenIn(_Input):
    expires_in: ExpiresIn = None


class TokenOut(BaseModel):
    user: str
    token: str = Field(description="The new API token, shown this once; the old one is dead")
    token_expires_at: str | None


class DeletedUser(BaseModel):
    deleted: str
    role: Role
    workspaces: list[str]


class AuditEvent(BaseModel):
    id: int
    at: str
    actor: str | None = Field(description="Who acted: a user, 'operator', or None (a failed login)")
    action: str = Field(
        description="login.success, login.failure, user.create, user.role, user.delete,"
        " token.rotate, membership.grant, membership.revoke, workspace.create,"
        " card.create, card.update, card.delete"
    )
    user: str | None = Field(description="The user acted upon")
    workspace: str | None
    client: str | None
    details: dict[str, Any]


class AuditList(BaseModel):
    items: list[AuditEvent]


def admin_router(
    services: Services,
    principal: Callable[..., Awaitable[Principal]],
    render: Callable[[Request, str, str], Response],
) -> APIRouter:
    """``render``: the app's page renderer (the session's principal and CSRF token)."""
    router = APIRouter(tags=["administration"])
    _workspace_routes(router, services, principal)
    _user_routes(router, services, principal)
    _membership_routes(router, services, principal)

    @router.get("/admin/accounts", include_in_schema=False, response_class=HTMLResponse)
    def accounts_page(request: Request) -> Response:
        # the page shows its panels to admins only; the routes it calls check on their own
        return render(request, "accounts.html", "accounts")

    return router


def _workspace_routes(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    Actor = Annotated[Principal, Depends(principal)]

    @router.get(
        "/api/admin/workspaces",
        response_model=WorkspaceList,
        responses=errors(401, 403, 503),
        summary="The workspaces the admin administers",
    )
    def workspaces(actor: Actor) -> dict[str, Any]:
        actor.require(MANAGE, None)
        return {
            "items": [
                w.model_dump(mode="json")
                for w in services.workspaces.list()
                if actor.can_manage(w.id)
            ]
        }

    @router.post(
        "/api/admin/workspaces",
        status_code=201,
        response_model=WorkspaceOut,
        responses=errors(401, 403, 404, 409, 415, 422, 503),
        summary="Create a workspace; its creator becomes a member (404: an embedder profile"
        " the installation does not define)",
    )
    def create_workspace(actor: Actor, body: Annotated[WorkspaceIn, Body()]) -> dict[str, Any]:
        actor.require(MANAGE, None)
        # `tht workspace create`: its creator administers it
        return workspace_commands.workspace_create(
            CommandContext.serving(services, actor),
            workspace_commands.WorkspaceCreateIn(
                workspace_id=body.id, language=body.language, name=body.name, embedder=body.embedder
            ),
        )


def _user_routes(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    """The users of the admin's workspaces: list, create, role."""
    Actor = Annotated[Principal, Depends(principal)]
    accounts = services.accounts

    @router.get(
        "/api/admin/users",
        response_model=UserList,
        responses=errors(401, 403, 503),
        summary="The users of the admin's workspaces: role, workspaces, token dates (no secret)",
    )
    def users(actor: Actor) -> dict[str, Any]:
        actor.require(MANAGE, None)
        return account_commands.user_list(
            CommandContext.serving(services, actor), account_commands.UserListIn()
        )

    @router.post(
        "/api/admin/users",
        status_code=201,
        response_model=CreatedUser,
        responses=errors(401, 403, 404, 409, 415, 422, 503),
        summary="Create a user in workspaces the admin administers; returns its token once",
    )
    def create_user(actor: Actor, body: Annotated[UserIn, Body()]) -> dict[str, Any]:
        for workspace in body.workspaces:
            actor.require(MANAGE, workspace)
        return accounts.users.create_user(
            body.name,
            body.role,
            body.workspaces,
            body.password,
            expires_in=body.expires_in,
            by=actor,
        )

    @router.put(
        "/api/admin/users/{name}/role",
        response_model=RoleOut,
        responses=errors(401, 403, 404, 409, 415, 422, 503),
        summary="Change a user's role (409 last_admin: the last admin keeps it)",
    )
    def set_role(actor: Actor, name: UserName, body: Annotated[RoleIn, Body()]) -> dict[str, Any]:
        actor.require(MANAGE, None)
        return account_commands.user_role(
            CommandContext.serving(services, actor),
            account_commands.UserRoleIn(name=name, role=body.role),
        )


def _membership_routes(router: APIRouter, services: Services, principal: PrincipalOf) -> None:
    """Memberships, token rotation, deletion, the audit log."""
    Actor = Annotated[Principal, Depends(principal)]
    accounts = services.accounts

    @router.put(
        "/api/admin/users/{name}/workspaces/{workspace}",
        response_model=MembershipOut,
        responses=errors(401, 403, 404, 503),
        summary="Make the user a member of the workspace",
    )
    def grant(actor: Actor, name: UserName, workspace: WorkspaceId) -> dict[str, Any]:
        actor.require(MANAGE, workspace)
        return account_commands.user_grant(
            CommandContext.serving(services, actor),
            account_commands.UserGrantIn(name=name, workspace=workspace),
        )

    @router.delete(
        "/api/admin/users/{name}/workspaces/{workspace}",
        response_model=MembershipOut,
        responses=errors(401, 403, 404, 503),
        summary="End the user's membership of the workspace (effective at once)",
    )
    def revoke(actor: Actor, name: UserName, workspace: WorkspaceId) -> dict[str, Any]:
        actor.require(MANAGE, workspace)
        return account_commands.user_revoke(
            CommandContext.serving(services, actor),
            account_commands.UserRevokeIn(name=name, workspace=workspace),
        )

    @router.post(
        "/api/admin/users/{name}/token",
        response_model=TokenOut,
        responses=errors(401, 403, 404, 415, 422, 503),
        summary="Rotate the user's API token: the new one is returned once, the old one is dead",
    )
    def rotate(
        actor: Actor, name: UserName, body: Annotated[TokenIn | None, Body()] = None
    ) -> dict[str, Any]:
        actor.require(MANAGE, None)
        return account_commands.user_token_rotate(
            CommandContext.serving(services, actor),
            account_commands.UserTokenRotateIn(
                name=name, expires_in=body.expires_in if body else None
            ),
        )

    @router.delete(
        "/api/admin/users/{name}",
        response_model=DeletedUser,
        responses=errors(401, 403, 404, 409, 503),
        summary="Delete a user with its memberships and sessions (409 last_admin)",
    )
    def delete_user(actor: Actor, name: UserName) -> dict[str, Any]:
        actor.require(MANAGE, None)
        return account_commands.user_delete(
            CommandContext.serving(services, actor), account_commands.UserDeleteIn(name=name)
        )

    @router.get(
        "/api/admin/audit",
        response_model=AuditList,
        responses=errors(401, 403, 422, 503),
        summary="The audit log, newest first: the events of the admin's workspaces",
    )
    def audit(
        actor: Actor,
        since: Annotated[datetime | None, Query(description="From this time (ISO 8601)")] = None,
        user: Annotated[str | None, Query(pattern=USER_PATTERN)] = None,
        limit: Annotated[int, Query(ge=1, le=AUDIT_LIMIT)] = 100,
    ) -> dict[str, Any]:
        actor.require(MANAGE, None)
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        return {"items": accounts.audit.audit_log(since=since, user=user, limit=limit, by=actor)}
