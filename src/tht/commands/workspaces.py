"""Workspaces: create, list, inspect, and switch one's embedder profile
(``tht workspace create|list|show|embedder``)."""

from __future__ import annotations

from typing import Any

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput


class WorkspaceCreateIn(CommandInput):
    workspace_id: str
    language: str
    name: str | None = None
    embedder: str = "default"


def workspace_create(ctx: CommandContext, args: WorkspaceCreateIn) -> dict[str, Any]:
    """The new workspace, and (``granted``) who administers it on the pages: a token's
    admin its creator; the operator's, the installation's ``admin`` user (`tht serve`'s),
    when there is one. Both grants are audited."""
    services = ctx.services
    created = services.workspaces.create(args.workspace_id, args.language, args.name, args.embedder)
    document: dict[str, Any] = created.model_dump(mode="json")
    if ctx.principal is not None:
        services.accounts.users.grant(ctx.principal.user, created.id)
        document["granted"] = [ctx.principal.user]
    else:
        admin = services.accounts.users.grant_installation_admin(created.id)
        if admin is not None:
            document["granted"] = [admin]
    return document


class WorkspaceListIn(CommandInput):
    pass


def workspace_list(ctx: CommandContext, args: WorkspaceListIn) -> dict[str, Any]:
    principal = ctx.principal
    return {
        "items": [
            w.model_dump(mode="json")
            for w in ctx.services.workspaces.list()
            if principal is None or w.id in principal.workspaces
        ]
    }


class WorkspaceShowIn(CommandInput):
    workspace_id: str


def workspace_show(ctx: CommandContext, args: WorkspaceShowIn) -> dict[str, Any]:
    return ctx.services.workspaces.show(args.workspace_id).as_json()


class WorkspaceEmbedderIn(CommandInput):
    workspace_id: str
    profile: str


def workspace_embedder(ctx: CommandContext, args: WorkspaceEmbedderIn) -> dict[str, Any]:
    from tht.commands.progress_rate import RateProgress

    result: dict[str, Any] = ctx.services.projector.switch(
        args.workspace_id, args.profile, RateProgress(ctx.progress)
    )
    return result
