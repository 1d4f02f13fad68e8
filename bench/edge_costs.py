"""What the Qdrant Edge engine itself costs in our recall: the batch recall sends, and the
same calls without each thing the product requires (the hits' revision and fingerprint,
the recall filters), on the workspace's shard the product builds.

The variants take turns on each question, in a rotating order, so that none of them
always runs right after another one warmed the caches for the same question.

    .venv/bin/python bench/edge_costs.py --size 100000
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import qdrant_edge as qe

from bench_common import analyze, load_cards, prepare_database, vocabulary
from tht.db.embedded import EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import WorkspaceService
from tht.memory.embedding import build_embedder
from tht.memory.embedding.sparse import SparseEncoder
from tht.memory.index import EdgeIndex
from tht.memory.index import edge as edge_engine
from tht.memory.index import filters as index_filters
from tht.memory.index.port import DENSE, PROJECTION_FIELDS, SPARSE
from tht.memory.indexing import IndexProjector
from tht.memory.projection_format import searchable
from tht.memory.recall import seed_count
from tht.memory.recall_filters import REUSABLE_FAMILIES, RecallFilters

WORKSPACE = "bench"


def build_shard(home: Path, size: int, embedded: EmbeddedPostgres) -> tuple[EdgeIndex, list[str]]:
    """The product's shard over the generated cards, and the words they are made of."""
    rng = random.Random(3)  # as recall_bench.py and peers_bench.py: the same cards
    runtime = prepare_database(embedded, f"edge_costs_{size}")
    archive = PostgresArchive(runtime).open()
    WorkspaceService(archive).create(WORKSPACE, "en")
    words = vocabulary(rng)
    load_cards(runtime, WORKSPACE, size, rng, words)
    analyze(embedded, f"edge_costs_{size}")
    index = EdgeIndex(home / "edge")
    IndexProjector(
        archive, index, build_embedder({"provider": "hashing", "dimension": 384})
    ).rebuild(WORKSPACE)
    archive.close()
    return index, words


def variants(where: qe.Filter, limit: int) -> dict:
    """``where``: recall's filters as the product sends them to a workspace's shard."""
    read = {"with_payload": PROJECTION_FIELDS}

    def dense(vector, **extra):
        return qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(list(vector), using=DENSE),
            params=edge_engine.DENSE_PARAMS,
            **extra,
        )

    def bm25(sparse, **extra):
        vector = qe.SparseVector(list(sparse.indices), list(sparse.values))
        return qe.QueryRequest(limit=limit, query=qe.Query.Nearest(vector, using=SPARSE), **extra)

    return {
        "recall's batch: dense + BM25, recall's filters, revision and fingerprint read": lambda d, s: [
            dense(d, filter=where, **read),
            bm25(s, filter=where, **read),
        ],
        "the same, nothing read": lambda d, s: [dense(d, filter=where), bm25(s, filter=where)],
        "dense alone, recall's filters, read": lambda d, s: [dense(d, filter=where, **read)],
        "BM25 alone, recall's filters, read": lambda d, s: [bm25(s, filter=where, **read)],
        "dense alone, no filter, nothing read": lambda d, s: [dense(d)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tht-edge-costs-"))
    embedded = EmbeddedPostgres(home / "pg")
    try:
        index, words = build_shard(home, args.size, embedded)
        embedder = build_embedder({"provider": "hashing", "dimension": 384})
        encoder = SparseEncoder("en")
        filters = RecallFilters(
            workspace=WORKSPACE,
            families=REUSABLE_FAMILIES,
            scope=None,
            concepts=(),
            database="dwh",
            schema_name="public",
            table=None,
            column=None,
        )
        calls = variants(
            edge_engine._filter(index_filters.recall_condition(filters, tenant=False)),
            seed_count(10),
        )
        names = list(calls)
        samples: dict[str, list[float]] = {name: [] for name in names}
        with index.session():
            shard = index.shard(WORKSPACE)
            for i in range(args.warmup + args.questions):
                question = " ".join(random.Random(i).choices(words, k=6))
                dense, sparse = (
                    embedder.embed_query(question),
                    encoder.encode_query(searchable(question)),
                )
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    request = qe.QueryBatchRequest(calls[name](dense, sparse))
                    started = time.perf_counter()
                    shard.query_batch(request)
                    if i >= args.warmup:
                        samples[name].append(time.perf_counter() - started)
        index.close()
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)
    figures = {name: round(statistics.median(v) * 1000, 2) for name, v in samples.items()}
    print(
        json.dumps({"cards": args.size, "questions": args.questions, "p50_ms": figures}, indent=2)
    )
    print("\n| Edge call | p50 ms |\n| --- | --- |")
    print("\n".join(f"| {name} | {value} |" for name, value in figures.items()))


if __name__ == "__main__":
    main()
