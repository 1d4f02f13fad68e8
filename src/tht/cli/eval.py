"""``tht memory eval``: measure a workspace's recall on the user's own cases.

Registered on ``memory_app`` by ``tht.cli.main``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tht.cli._common import _services, emit, load_runtime, read_text
from tht.errors import InvalidInput
from tht.memory.evaluation import MISS_K, parse_cases, report

MAX_CASES_BYTES = 16 * 1024 * 1024


def memory_eval(
    cases: Annotated[
        Path,
        typer.Option(
            "--cases",
            help=(
                'JSON Lines file, one case a line: {"question": ..., "expected": [card ids], '
                '"filters": {...} (optional), "command": search|rules|solved (optional, default search)}'
            ),
        ),
    ],
    config: Annotated[
        Path,
        typer.Option(
            "-c", "--config", help="Runtime file (YAML): workspace, database, schema, ..."
        ),
    ],
) -> None:
    """Measure recall on a cases file: recall@1/5/10, MRR and the misses, as one JSON document."""
    from tht.memory.recall_service import parse_recall_query

    runtime = load_runtime(config)
    parsed = parse_cases(read_text(str(cases), MAX_CASES_BYTES))
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
    from tht.memory.agent import DwhBinding, recall_binding

    returned = []
    with _services(runtime) as services:
        binding = recall_binding(
            services, runtime.workspace, DwhBinding(runtime.database, runtime.schema_name)
        )
        recall = services.recall.of(runtime.workspace)
        answers = []
        for case, query in zip(parsed, queries, strict=True):
            results = recall.recall(
                runtime.workspace,
                case.question,
                case.command,
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
                    case.command,
                    card_id,
                    results,
                    database=binding.database,
                    schema=binding.schema,
                    query=query.model_copy(update={"top": MISS_K}),
                    strict=False,
                ).as_json()
                for card_id in miss["missing"]
            }
    emit({"workspace": runtime.workspace, **document})
