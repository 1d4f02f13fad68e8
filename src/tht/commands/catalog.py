"""The physical Catalog of a workspace's DWH (``tht catalog bind|sync|retry|forget|
runs|show|status``): its binding, the scans, the runs that clean Memory of removed
tables and columns. Progress goes to stderr."""

from __future__ import annotations

from typing import Any

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput
from tht.errors import InvalidInput


class CatalogBindIn(CommandInput):
    config: str
    connection: str | None = None  # None: a binding for recall only, which no sync scans


def catalog_bind(ctx: CommandContext, args: CatalogBindIn) -> dict[str, Any]:
    from tht.catalog.model import binding_from_runtime

    assert ctx.runtime is not None
    binding = binding_from_runtime(ctx.runtime, args.connection)
    result: dict[str, Any] = ctx.services.catalog.bind(binding)
    return result


class CatalogSyncIn(CommandInput):
    config: str
    connection: str | None = None


def catalog_sync(ctx: CommandContext, args: CatalogSyncIn) -> dict[str, Any]:
    from tht.catalog.model import binding_from_runtime

    runtime = ctx.runtime
    assert runtime is not None
    binding = (
        binding_from_runtime(runtime, args.connection) if args.connection is not None else None
    )
    services = ctx.services
    recorded = services.catalog.binding(runtime.workspace) if binding is None else None
    if recorded is not None and (runtime.database, runtime.schema_name) not in (
        (None, None),
        (recorded.database, recorded.schema),
    ):
        raise InvalidInput(
            f"workspace '{runtime.workspace}' is bound to {recorded.database}.{recorded.schema},"
            f" not {runtime.database}.{runtime.schema_name}: sync that, or bind again with"
            " --connection",
            details={"binding": recorded.as_json()},
        )
    result: dict[str, Any] = services.catalog.sync(
        runtime.workspace, binding, progress=ctx.progress
    )
    return result


class CatalogRetryIn(CommandInput):
    run_id: str
    config: str


def catalog_retry(ctx: CommandContext, args: CatalogRetryIn) -> dict[str, Any]:
    result: dict[str, Any] = ctx.services.catalog.retry(ctx.workspace, args.run_id)
    return result


class CatalogRunsIn(CommandInput):
    config: str
    limit: int = 50


def catalog_runs(ctx: CommandContext, args: CatalogRunsIn) -> dict[str, Any]:
    return {"items": ctx.services.catalog.runs(ctx.workspace, args.limit)}


class CatalogShowIn(CommandInput):
    run_id: str
    config: str


def catalog_show(ctx: CommandContext, args: CatalogShowIn) -> dict[str, Any]:
    result: dict[str, Any] = ctx.services.catalog.run(ctx.workspace, args.run_id)
    return result


class CatalogStatusIn(CommandInput):
    config: str


def catalog_status(ctx: CommandContext, args: CatalogStatusIn) -> dict[str, Any]:
    result: dict[str, Any] = ctx.services.catalog.status(ctx.workspace)
    return result


class CatalogForgetIn(CommandInput):
    config: str
    table: str | None = None
    column: str | None = None
    all_objects: bool = False
    yes: bool = False


def catalog_forget(ctx: CommandContext, args: CatalogForgetIn) -> dict[str, Any]:
    if not args.yes:
        raise InvalidInput("refusing to forget Catalog objects without --yes")
    result: dict[str, Any] = ctx.services.catalog.forget(
        ctx.workspace, args.table, args.column, args.all_objects
    )
    return result
