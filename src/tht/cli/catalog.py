"""`tht catalog ...`: the physical Catalog of a workspace's DWH (bind, sync, runs,
retry, forget). Same contract as every command: one JSON document on stdout, also on
failure; progress on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tht.cli._common import _services, emit, load_runtime
from tht.errors import InvalidInput

catalog_app = typer.Typer(
    help="The physical Catalog: DWH binding, sync (scan, diff, Memory cleanup of removed tables and columns),"
    " runs, retry, manual forget.",
    no_args_is_help=True,
)

ConfigOption = Annotated[
    Path,
    typer.Option("-c", "--config", help="Runtime file (YAML): workspace, database, schema"),
]
ConnectionOption = Annotated[
    str,
    typer.Option(
        "--connection",
        help="One of the installation's DWH connections (`dwh:` in its configuration), by name",
    ),
]


@catalog_app.command("bind")
def catalog_bind(config: ConfigOption, connection: ConnectionOption) -> None:
    """Record the workspace's DWH binding (the runtime file's database and schema, an
    installation's DWH connection by name) without syncing."""
    from tht.catalog.model import binding_from_runtime

    runtime = load_runtime(config)
    binding = binding_from_runtime(runtime, connection)
    with _services(workspace=runtime.workspace) as services:
        emit(services.catalog.bind(binding))


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
) -> None:
    """Scan the bound DWH schema; if the scan succeeded, diff it with the last snapshot and
    delete the Memory cards that depend on removed tables or columns."""
    from tht.catalog.model import binding_from_runtime
    from tht.cli.invocation import progress

    runtime = load_runtime(config)
    binding = binding_from_runtime(runtime, connection) if connection is not None else None
    with _services(runtime) as services:
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
        emit(services.catalog.sync(runtime.workspace, binding, progress=progress))


@catalog_app.command("retry")
def catalog_retry(
    run_id: Annotated[str, typer.Argument(help="Run id (run-<uuid>)")], config: ConfigOption
) -> None:
    """Complete a pending run's Memory cleanup with its recorded removals (no new scan or diff).
    A completed run is left unchanged."""

    runtime = load_runtime(config)
    with _services(runtime) as services:
        emit(services.catalog.retry(runtime.workspace, run_id))


@catalog_app.command("runs")
def catalog_runs(
    config: ConfigOption,
    limit: Annotated[int, typer.Option(help="At most this many runs, newest first (1-500)")] = 50,
) -> None:
    """List runs with their phase, removals, deleted Memory cards and errors."""

    runtime = load_runtime(config)
    with _services(workspace=runtime.workspace) as services:
        emit({"items": services.catalog.runs(runtime.workspace, limit)})


@catalog_app.command("show")
def catalog_show(
    run_id: Annotated[str, typer.Argument(help="Run id (run-<uuid>)")], config: ConfigOption
) -> None:
    """Show one run: removals, deleted Memory cards, errors."""

    runtime = load_runtime(config)
    with _services(workspace=runtime.workspace) as services:
        emit(services.catalog.run(runtime.workspace, run_id))


@catalog_app.command("status")
def catalog_status(config: ConfigOption) -> None:
    """The workspace's binding, its last snapshot and the pending run, if any."""

    runtime = load_runtime(config)
    with _services(workspace=runtime.workspace) as services:
        emit(services.catalog.status(runtime.workspace))


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
) -> None:
    """Manual Catalog cleanup: drop objects from the Catalog's snapshot only. Never deletes Memory."""

    runtime = load_runtime(config)
    if not yes:
        raise InvalidInput("refusing to forget Catalog objects without --yes")
    with _services(workspace=runtime.workspace) as services:
        emit(services.catalog.forget(runtime.workspace, table, column, all_objects))
