"""`tht memory benchmark ...`, `tht memory gaps` and `tht memory recalls`: a curator's
view of recall quality (parsers of the commands of ``tht.commands.curation``)."""

from __future__ import annotations

from typing import Annotated

import typer

from tht.cli._common import ConfigOption
from tht.cli.apps import GROUP_SETTINGS, memory_app
from tht.cli.submit import path, submit

benchmark_app = typer.Typer(
    help="The workspace's benchmark: cases (a question and the cards it should find), runs"
    " on demand, and their history. memory.manage.",
    no_args_is_help=True,
    **GROUP_SETTINGS,
)
memory_app.add_typer(benchmark_app, name="benchmark")


@benchmark_app.command("add")
def benchmark_add(
    question: Annotated[str, typer.Argument(help="The question, as an agent would ask it")],
    config: ConfigOption,
    expected: Annotated[
        list[str],
        typer.Option(
            "--expected",
            help="A card this question should find (mem-<uuid>); repeat for several",
        ),
    ],
    command: Annotated[
        str, typer.Option("--command", help="search (default), rules or solved: how it is asked")
    ] = "search",
    filters: Annotated[
        str | None,
        typer.Option(
            "--filters", help='The recall filters it is asked with (JSON), e.g. {"table": "orders"}'
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="A name for the case")] = None,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="The case of this question expects exactly these cards, their revisions now"
            " (default: they are added to its cards)",
        ),
    ] = False,
) -> int:
    """Add a case: this question should find these cards. Cards of another workspace are
    refused; the same command, question and filters again adds to that case."""
    return submit(
        "memory.benchmark.add",
        {
            "config": path(config),
            "question": question,
            "expected": expected,
            "command": command,
            "filters": filters,
            "name": name,
            "replace": replace,
        },
    )


@benchmark_app.command("import")
def benchmark_import(
    file: Annotated[
        str,
        typer.Argument(
            help='JSON Lines, one case a line (the format of `tht memory eval --cases`): {"question":'
            ' ..., "expected": [card ids], "command": search|rules|solved, "filters": {...}, "id": name}'
            " ('-': standard input)"
        ),
    ],
    config: ConfigOption,
) -> int:
    """Import cases from JSON Lines: one bad line (or a card of another workspace) and
    nothing is written, the line named."""
    return submit("memory.benchmark.import", {"config": path(config), "file": file})


@benchmark_app.command("list")
def benchmark_list(config: ConfigOption) -> int:
    """Every case with the state of its expected cards: current, changed since the case
    was written, or deleted."""
    return submit("memory.benchmark.list", {"config": path(config)})


@benchmark_app.command("remove")
def benchmark_remove(
    case_id: Annotated[str, typer.Argument(help="The case (case-<uuid>)")],
    config: ConfigOption,
) -> int:
    """Remove a case."""
    return submit("memory.benchmark.remove", {"config": path(config), "case_id": case_id})


@benchmark_app.command("run")
def benchmark_run(config: ConfigOption) -> int:
    """Run every case now and store the run: recall@1/5/10 and MRR overall and per
    command, each miss with its reason, the expected cards changed or deleted since
    their case was written, and the comparison with the run before."""
    return submit("memory.benchmark.run", {"config": path(config)})


@benchmark_app.command("runs")
def benchmark_runs(
    config: ConfigOption,
    limit: Annotated[int, typer.Option("--limit", help="How many runs, newest first (≤ 200)")] = 50,
) -> int:
    """The history: each run's figures, whether it is worse than the one before, and the
    card edits between runs (from the audit log)."""
    return submit("memory.benchmark.runs", {"config": path(config), "limit": limit})


@benchmark_app.command("show")
def benchmark_show(
    run_id: Annotated[str, typer.Argument(help="The run (bench-<uuid>)")],
    config: ConfigOption,
) -> int:
    """One run with its misses, their reasons and its cases' ranks."""
    return submit("memory.benchmark.show", {"config": path(config), "run_id": run_id})


@memory_app.command("gaps")
def memory_gaps(
    config: ConfigOption,
    days: Annotated[int, typer.Option("--days", help="The last days of the recall log")] = 30,
    limit: Annotated[int, typer.Option("--limit", help="How many gaps, best ranked first")] = 50,
    weak_below: Annotated[
        float | None,
        typer.Option(
            "--weak-below",
            help="A recall is weak when its first card holds less than this share of the"
            " question's terms (default 0.5, see docs/curation.md)",
        ),
    ] = None,
) -> int:
    """What agents asked that Memory answered weakly (no result, a first card that
    covers little of the question, or a new card proposed after it), grouped by similar
    questions and ranked by frequency and recency. memory.manage."""
    return submit(
        "memory.gaps",
        {"config": path(config), "days": days, "limit": limit, "weak_below": weak_below},
    )


@memory_app.command("recalls")
def memory_recalls(
    config: ConfigOption,
    limit: Annotated[int, typer.Option("--limit", help="How many, newest first (≤ 1000)")] = 100,
    before: Annotated[
        int | None, typer.Option("--before", help="The next page: entries before this id")
    ] = None,
    principal: Annotated[
        str | None, typer.Option("--principal", help="Only this user's (an agent's) recalls")
    ] = None,
) -> int:
    """The recall log: each recall an agent made (question, command, who, session, the
    cards returned with their scores, when), and the log's bound and counts.
    memory.manage: agents never read it."""
    return submit(
        "memory.recalls",
        {"config": path(config), "limit": limit, "before": before, "principal": principal},
    )
