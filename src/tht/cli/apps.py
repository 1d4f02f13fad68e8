"""The ``tht`` command's groups, on which each command module registers its parsers."""

from __future__ import annotations

from typing import Any

import typer

# every group parses alone too (tht.cli.main builds only the group a command names):
# with the root's settings, so its help reads the same either way
GROUP_SETTINGS: dict[str, Any] = {"add_completion": False, "rich_markup_mode": "markdown"}

app = typer.Typer(
    help="Thoth Memory: the reusable knowledge of a text-to-SQL agent. Every command prints one JSON document.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
memory_app = typer.Typer(
    help="Cards of one workspace: browse, edit, and the projection's pending work.",
    no_args_is_help=True,
    **GROUP_SETTINGS,
)
workspace_app = typer.Typer(
    help="Workspaces: create, list and inspect.", no_args_is_help=True, **GROUP_SETTINGS
)
db_app = typer.Typer(
    help="The embedded PostgreSQL in THT_HOME (status, stop).",
    no_args_is_help=True,
    **GROUP_SETTINGS,
)
service_app = typer.Typer(
    help="The installation's service: whether it runs, and stopping it (`tht serve` starts one).",
    no_args_is_help=True,
    **GROUP_SETTINGS,
)
user_app = typer.Typer(
    help="Local accounts of the web administration.", no_args_is_help=True, **GROUP_SETTINGS
)
catalog_app = typer.Typer(
    help="The physical Catalog: DWH binding, sync (scan, diff, Memory cleanup of removed tables and columns),"
    " runs, retry, manual forget.",
    no_args_is_help=True,
    **GROUP_SETTINGS,
)
app.add_typer(memory_app, name="memory")
app.add_typer(workspace_app, name="workspace")
app.add_typer(db_app, name="db")
app.add_typer(service_app, name="service")
app.add_typer(user_app, name="user")
app.add_typer(catalog_app, name="catalog")

# the groups of `tht`, by the first word of a command line
GROUPS: dict[str, typer.Typer] = {
    "memory": memory_app,
    "workspace": workspace_app,
    "db": db_app,
    "service": service_app,
    "user": user_app,
    "catalog": catalog_app,
}
