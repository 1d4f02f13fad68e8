"""`tht memory import`, `tht memory export` and `tht memory imports`: cards in and out
in bulk, and the imports' records (parsers of the commands of
``tht.commands.transfer``)."""

from __future__ import annotations

from typing import Annotated

import typer

from tht.cli._common import ConfigOption
from tht.cli.apps import memory_app
from tht.cli.submit import path, submit

FORMATS = ("jsonl", "csv", "vanna", "wrenai", "bird")  # tht.memory.transfer.formats.FORMATS


@memory_app.command("import")
def memory_import(
    file: Annotated[str, typer.Argument(help="The file to import ('-' for standard input)")],
    config: ConfigOption,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help=f"{' | '.join(FORMATS)} (default: from the extension, .jsonl or .csv; required"
            " for .json and whenever the content suggests another format)",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check everything, write nothing; report each line")
    ] = False,
    on_conflict: Annotated[
        str,
        typer.Option(
            "--on-conflict",
            help="A record whose card exists with other content: skip (default), update, or fail",
        ),
    ] = "skip",
    keep_going: Annotated[
        bool,
        typer.Option(
            "--continue",
            help="Import the valid records and report the invalid ones (default: one invalid"
            " record and nothing is written)",
        ),
    ] = False,
    family: Annotated[
        str | None,
        typer.Option(help="Refuse records of any other family (a file of one family only)"),
    ] = None,
    scope: Annotated[
        str | None,
        typer.Option(
            help="Business scope of records whose format has none (vanna, wrenai); default: the"
            " runtime file's database"
        ),
    ] = None,
) -> int:
    """Import cards in bulk: card documents (jsonl, csv) or a peer's knowledge (vanna,
    wrenai, bird). Idempotent: a rerun creates nothing twice."""
    return submit(
        "memory.import",
        {
            "file": file,
            "config": path(config),
            "fmt": fmt,
            "dry_run": dry_run,
            "on_conflict": on_conflict,
            "keep_going": keep_going,
            "family": family,
            "scope": scope,
        },
    )


imports_app = typer.Typer(
    help="The imports' records: where imported cards came from; undo an import.",
    no_args_is_help=True,
)
memory_app.add_typer(imports_app, name="imports")


@imports_app.command("list")
def imports_list(
    config: ConfigOption,
    import_id: Annotated[
        str | None, typer.Option("--import", help="One import (imp-<uuid>) instead of all")
    ] = None,
) -> int:
    """List the workspace's imports, newest first (at most 100): file, format, who, when,
    how it ended, its summary, the cards that still name it, and its undo if undone.
    `tht memory list --filters '{"import": "imp-..."}'` lists an import's cards."""
    return submit("memory.imports.list", {"config": path(config), "import_id": import_id})


@imports_app.command("undo")
def imports_undo(
    import_id: Annotated[str, typer.Argument(help="The import to undo (imp-<uuid>)")],
    config: ConfigOption,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Undo an import recorded as still running (its process died before it ended)",
        ),
    ] = False,
) -> int:
    """Delete the cards an import created that nobody changed since; keep and report the
    cards edited since and those it replaced (--on-conflict update: nothing to restore).
    The deletions leave the search index as `memory delete`'s do. Rerun to finish an
    interrupted undo."""
    return submit(
        "memory.imports.undo", {"import_id": import_id, "config": path(config), "force": force}
    )


@memory_app.command("export")
def memory_export(
    config: ConfigOption,
    fmt: Annotated[str, typer.Option("--format", help="jsonl (default) or csv")] = "jsonl",
) -> int:
    """Write every card of the workspace to stdout, losslessly (ids, all fields,
    dependencies, links with meanings, origin, source, revision, timestamps); the
    summary goes to stderr."""
    return submit("memory.export", {"config": path(config), "fmt": fmt})
