"""Recall for a question, bound to the runtime file's database and schema
(``tht memory search|solved-search|rules``), and measuring it on the user's own cases
(``tht memory eval``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput
from tht.commands.memory import Filters, json_argument

if TYPE_CHECKING:
    from tht.memory.recall_service import RecallKind

MAX_CASES_BYTES = 16 * 1024 * 1024


class _RecallIn(CommandInput):
    config: str
    filters: Filters = None
    explain: str | None = None
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
    from tht.memory.agent import DwhBinding, recall_binding, recall_command
    from tht.memory.recall_service import parse_recall_query

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
    from tht.errors import InvalidInput
    from tht.memory.agent import DwhBinding, recall_binding
    from tht.memory.evaluation import MISS_K, parse_cases, report
    from tht.memory.recall_service import parse_recall_query

    runtime = ctx.runtime
    assert runtime is not None
    parsed = parse_cases(ctx.read_text(args.cases, MAX_CASES_BYTES))
    queries = []
    for case in parsed:
        try:
            query = parse_recall_query(case.filters)
        except InvalidInput as exc:
            raise InvalidInput(
                f"cases line {case.line}: {exc.message}",
                details={"line": case.line, "filters": exc.details},
            ) from exc
        # at least MISS_K results, so recall@10 and the misses mean what they say
        queries.append(query.model_copy(update={"top": max(query.top, MISS_K)}))
    services = ctx.services
    binding = recall_binding(
        services, runtime.workspace, DwhBinding(runtime.database, runtime.schema_name)
    )
    recall = services.recall.of(runtime.workspace)
    answers, returned = [], []
    for case, query in zip(parsed, queries, strict=True):
        results = recall.recall(
            runtime.workspace,
            case.question,
            cast("RecallKind", case.command),
            database=binding.database,
            schema=binding.schema,
            query=query,
        )
        answers.append(results)
        returned.append([result.card.id for result in results])
    document = report(parsed, returned)
    # each missing card with the reason `memory search --explain` would give
    by_line = {
        case.line: (case, query, results)
        for case, query, results in zip(parsed, queries, answers, strict=True)
    }
    for miss in document["misses"]:
        case, query, results = by_line[miss["line"]]
        miss["reasons"] = {
            card_id: recall.explain(
                runtime.workspace,
                case.question,
                cast("RecallKind", case.command),
                card_id,
                results,
                database=binding.database,
                schema=binding.schema,
                query=query.model_copy(update={"top": MISS_K}),
                strict=False,
            ).as_json()
            for card_id in miss["missing"]
        }
    return {"workspace": runtime.workspace, **document}
