"""Curation of a workspace's recall: its benchmark (cases, runs, history) and the gaps
mined from what agents asked (``tht memory benchmark ...``, ``tht memory gaps``,
``tht memory recalls``). All of it is an administrator's (``memory.manage``): the
recall log holds every agent's questions."""

from __future__ import annotations

from typing import Any, Literal

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput
from tht.commands.memory import Filters, json_argument

MAX_CASES_BYTES = 16 * 1024 * 1024


def _binding(ctx: CommandContext) -> tuple[str | None, str | None]:
    """The runtime file's database and schema, checked against the workspace's recorded
    binding as recall checks them."""
    from tht.usecases.recall_and_proposals import DwhBinding, recall_binding

    runtime = ctx.runtime
    assert runtime is not None
    bound = recall_binding(
        ctx.services, runtime.workspace, DwhBinding(runtime.database, runtime.schema_name)
    )
    return bound.database, bound.schema


class MemoryBenchmarkAddIn(CommandInput):
    config: str
    question: str
    expected: list[str]
    command: Literal["search", "rules", "solved"] = "search"
    filters: Filters = None
    name: str | None = None
    replace: bool = False
    origin: Literal["manual", "miss", "gap"] = "manual"


def memory_benchmark_add(ctx: CommandContext, args: MemoryBenchmarkAddIn) -> dict[str, Any]:
    from tht.memory.benchmark import one_case

    filters = json_argument(args.filters, "--filters")
    document = {
        "question": args.question,
        "expected": args.expected,
        "command": args.command,
        "filters": filters or {},
        **({"id": args.name} if args.name is not None else {}),
    }
    case = one_case(document)
    return ctx.services.benchmarks.add(
        ctx.workspace, [case], origin=args.origin, replace=args.replace
    )


class MemoryBenchmarkImportIn(CommandInput):
    config: str
    file: str  # JSON Lines, the format of `tht memory eval --cases` ('-': standard input)


def memory_benchmark_import(ctx: CommandContext, args: MemoryBenchmarkImportIn) -> dict[str, Any]:
    text = ctx.read_text(args.file, MAX_CASES_BYTES)
    return ctx.services.benchmarks.import_cases(ctx.workspace, text)


class MemoryBenchmarkListIn(CommandInput):
    config: str


def memory_benchmark_list(ctx: CommandContext, args: MemoryBenchmarkListIn) -> dict[str, Any]:
    return ctx.services.benchmarks.list_cases(ctx.workspace)


class MemoryBenchmarkRemoveIn(CommandInput):
    config: str
    case_id: str


def memory_benchmark_remove(ctx: CommandContext, args: MemoryBenchmarkRemoveIn) -> dict[str, Any]:
    return ctx.services.benchmarks.remove(ctx.workspace, args.case_id)


class MemoryBenchmarkRunIn(CommandInput):
    config: str


def memory_benchmark_run(ctx: CommandContext, args: MemoryBenchmarkRunIn) -> dict[str, Any]:
    database, schema = _binding(ctx)
    return ctx.services.benchmarks.run(ctx.workspace, database=database, schema=schema)


class MemoryBenchmarkRunsIn(CommandInput):
    config: str
    limit: int = 50


def memory_benchmark_runs(ctx: CommandContext, args: MemoryBenchmarkRunsIn) -> dict[str, Any]:
    return ctx.services.benchmarks.runs(ctx.workspace, args.limit)


class MemoryBenchmarkShowIn(CommandInput):
    config: str
    run_id: str


def memory_benchmark_show(ctx: CommandContext, args: MemoryBenchmarkShowIn) -> dict[str, Any]:
    return ctx.services.benchmarks.show_run(ctx.workspace, args.run_id)


class MemoryGapsIn(CommandInput):
    config: str
    days: int = 30
    limit: int = 50
    weak_below: float | None = None


def memory_gaps(ctx: CommandContext, args: MemoryGapsIn) -> dict[str, Any]:
    from tht.errors import InvalidInput
    from tht.memory.recall_log import gaps

    if not 1 <= args.days <= 3650:
        raise InvalidInput("--days must be between 1 and 3650", details={"days": args.days})
    if not 1 <= args.limit <= 500:
        raise InvalidInput("--limit must be between 1 and 500", details={"limit": args.limit})
    if args.weak_below is not None and not 0 < args.weak_below <= 1:
        raise InvalidInput(
            "--weak-below must be above 0 and at most 1", details={"weak_below": args.weak_below}
        )
    return gaps(
        ctx.services.recall_log,
        ctx.workspace,
        days=args.days,
        limit=args.limit,
        weak_below=args.weak_below,
    )


class MemoryRecallsIn(CommandInput):
    config: str
    limit: int = 100
    before: int | None = None
    principal: str | None = None


def memory_recalls(ctx: CommandContext, args: MemoryRecallsIn) -> dict[str, Any]:
    from tht.errors import InvalidInput
    from tht.memory.recall_log import MAX_LOG_ID

    if not 1 <= args.limit <= 1000:
        raise InvalidInput("--limit must be between 1 and 1000", details={"limit": args.limit})
    if args.before is not None and not 1 <= args.before <= MAX_LOG_ID:
        raise InvalidInput("--before must be an entry's id", details={"before": args.before})
    return ctx.services.recall_log.entries(
        ctx.workspace, limit=args.limit, before=args.before, principal=args.principal
    )
