"""`tht catalog ...`: the physical Catalog of a workspace's DWH (bind, sync, runs,
retry, forget): parsers of the commands of ``tht.commands.catalog``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tht.cli.apps import catalog_app
from tht.cli.submit import path, submit

ConfigOption = Annotated[
    Path,
    typer.Option("-c", "--config", help="Runtime file (YAML): workspace, database, schema"),
]
ConnectionOption = Annotated[
    str | None,
    typer.Option(
        "--connection",
        help="One of the installation's DWH connections (`dwh:` in its configuration), by"
        " name; without it the binding serves recall only and no sync can scan it",
    ),
]


@catalog_app.command("bind")
def catalog_bind(config: ConfigOption, connection: ConnectionOption = None) -> int:
    """Record the workspace's DWH binding (the runtime file's database and schema, an
    installation's DWH connection by name) without syncing. The services' faces (HTTP,
    MCP) recall with it."""
    return submit("catalog.bind", {"config": path(config), "connection": connection})


@catalog_app.command("sync")
def catalog_sync(
    config: ConfigOption,
    connection: Annotated[
        str | None,
        typer.Option(
            "--connection",
            help="Bind first: the runtime file's database and schema, through this installation's"
            " DWH connection (default: the recorded binding)",
        ),
    ] = None,
) -> int:
    """Scan the bound DWH schema; if the scan succeeded, diff it with the last snapshot and
    delete the Memory cards that depend on removed tables or columns."""
    return submit("catalog.sync", {"config": path(config), "connection": connection})


@catalog_app.command("retry")
def catalog_retry(
    run_id: Annotated[str, typer.Argument(help="Run id (run-<uuid>)")], config: ConfigOption
) -> int:
    """Complete a pending run's Memory cleanup with its recorded removals (no new scan or diff).
    A completed run is left unchanged."""
    return submit("catalog.retry", {"run_id": run_id, "config": path(config)})


@catalog_app.command("runs")
def catalog_runs(
    config: ConfigOption,
    limit: Annotated[int, typer.Option(help="At most this many runs, newest first (1-500)")] = 50,
) -> int:
    """List runs with their phase, removals, deleted Memory cards and errors."""
    return submit("catalog.runs", {"config": path(config), "limit": limit})


@catalog_app.command("show")
def catalog_show(
    run_id: Annotated[str, typer.Argument(help="Run id (run-<uuid>)")], config: ConfigOption
) -> int:
    """Show one run: removals, deleted Memory cards, errors."""
    return submit("catalog.show", {"run_id": run_id, "config": path(config)})


@catalog_app.command("status")
def catalog_status(config: ConfigOption) -> int:
    """The workspace's binding, its last snapshot and the pending run, if any."""
    return submit("catalog.status", {"config": path(config)})


@catalog_app.command("forget")
def catalog_forget(
    config: ConfigOption,
    table: Annotated[
        str | None, typer.Option(help="Forget this table (with --column: only that column)")
    ] = None,
    column: Annotated[str | None, typer.Option(help="Forget only this column of --table")] = None,
    all_objects: Annotated[
        bool, typer.Option("--all", help="Forget the whole snapshot of the bound scope")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm (required)")] = False,
) -> int:
    """Manual Catalog cleanup: drop objects from the Catalog's snapshot only. Never deletes Memory."""
    return submit(
        "catalog.forget",
        {
            "config": path(config),
            "table": table,
            "column": column,
            "all_objects": all_objects,
            "yes": yes,
        },
    )
