"""Recall for a question, bound to the runtime file's database and schema
(``tht memory search|solved-search|rules``), and measuring it on the user's own cases
(``tht memory eval``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput
from tht.commands.memory import Filters, json_argument
from tht.memory.recall_answer import View

if TYPE_CHECKING:
    from tht.memory.recall_service import RecallKind

MAX_CASES_BYTES = 16 * 1024 * 1024


class _RecallIn(CommandInput):
    config: str
    filters: Filters = None
    explain: str | None = None  # a card id
    view: View = "full"
    json_output: bool = False  # accepted for compatibility: the output is always JSON


def _recall(
    ctx: CommandContext,
    kind: RecallKind,
    args: _RecallIn,
    question: str | None,
    *,
    session: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    from tht.memory.recall_service import parse_recall_query
    from tht.usecases.recall_and_proposals import DwhBinding, recall_binding, recall_command

    query = parse_recall_query(json_argument(args.filters, "--filters"))
    services, runtime = ctx.services, ctx.runtime
    assert runtime is not None
    return recall_command(
        services,
        runtime.workspace,
        kind,
        question,
        query,
        session=session,
        error=error,
        explain=args.explain,
        binding=recall_binding(
            services, runtime.workspace, DwhBinding(runtime.database, runtime.schema_name)
        ),
        principal=ctx.principal,
        view=args.view,
    )


class MemorySearchIn(_RecallIn):
    question: str
    session: str | None = None


def memory_search(ctx: CommandContext, args: MemorySearchIn) -> dict[str, Any]:
    return _recall(ctx, "search", args, args.question, session=args.session)


class MemorySolvedSearchIn(_RecallIn):
    question: str


def memory_solved_search(ctx: CommandContext, args: MemorySolvedSearchIn) -> dict[str, Any]:
    return _recall(ctx, "solved", args, args.question)


class MemoryRulesIn(_RecallIn):
    question: str | None = None
    session: str | None = None
    error: str | None = None


def memory_rules(ctx: CommandContext, args: MemoryRulesIn) -> dict[str, Any]:
    return _recall(ctx, "rules", args, args.question, session=args.session, error=args.error)


class MemoryEvalIn(CommandInput):
    cases: str  # a JSON Lines file
    config: str


def memory_eval(ctx: CommandContext, args: MemoryEvalIn) -> dict[str, Any]:
    from tht.memory.benchmark import measure
    from tht.memory.evaluation import parse_cases
    from tht.usecases.recall_and_proposals import DwhBinding, recall_binding

    runtime = ctx.runtime
    assert runtime is not None
    parsed = parse_cases(ctx.read_text(args.cases, MAX_CASES_BYTES))
    services = ctx.services
    binding = recall_binding(
        services, runtime.workspace, DwhBinding(runtime.database, runtime.schema_name)
    )
    document = measure(
        services.recall.of(runtime.workspace),
        runtime.workspace,
        parsed,
        database=binding.database,
        schema=binding.schema,
    )
    document.pop("returned")
    return {"workspace": runtime.workspace, **document}
