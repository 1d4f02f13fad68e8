"""How long the embedded engine's indexing stops the service's other threads, and what
plain (unindexed) segments cost recall.

qdrant-edge-py 0.9.0 holds the GIL for the whole of ``EdgeShard.optimize()``. A thread
that wakes every 5 ms records the longest gap between two of its wake-ups (what a
recall arriving meanwhile would wait) while a rebuild's generation of N points is
indexed: in this process (the engine's call, as before) and in a child process
(``EdgeGeneration.optimize``). The two take turns, on the same points. Then the serving
shard, written in place as an import writes it, is searched before and after
``EdgeIndex.compact`` (the engine's query alone: no embedding, no archive).

Random 384-dimension vectors and 12-term sparse vectors: the engine's work, not a
model's. No PostgreSQL.

    .venv/bin/python bench/edge_stall_bench.py [--points 20000] [--rounds 2]
    .venv/bin/python bench/edge_stall_bench.py --indexed 80000 --points 20000 --rounds 0
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tht.memory.embedding.sparse import SparseVector
from tht.memory.index import EdgeIndex
from tht.memory.index.port import IndexPoint
from tht.memory.model import FAMILIES
from tht.memory.recall_filters import CardFacts, RecallFilters

DIMENSION = 384
WORKSPACE = "bench"
WRITE_BATCH = 512


def random_points(
    count: int, rng: random.Random, workspace: str = WORKSPACE
) -> Iterator[list[IndexPoint]]:
    facts = CardFacts(workspace, "sql_rule", None, (), ())
    for start in range(0, count, WRITE_BATCH):
        yield [
            IndexPoint(
                id=uuid.UUID(int=rng.getrandbits(128)),
                dense=[rng.gauss(0, 1) for _ in range(DIMENSION)],
                sparse=SparseVector(tuple(sorted(rng.sample(range(30_000), 12))), (1.0,) * 12),
                card=facts,
                revision=1,
                fingerprint="bench",
            )
            for _ in range(min(WRITE_BATCH, count - start))
        ]


@contextmanager
def longest_stall() -> Iterator[list[float]]:
    """Yields a list that holds, once the block ends, the longest gap (seconds) between
    two wake-ups of a thread that sleeps 5 ms at a time."""
    found: list[float] = []
    gaps: list[float] = []
    done = threading.Event()

    def beat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        yield found
    finally:
        done.set()
        thread.join()
        found.append(max(gaps, default=0.0))


def timed(action: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, longest stall seconds) of the action."""
    with longest_stall() as stall:
        started = time.perf_counter()
        action()
        seconds = time.perf_counter() - started
    return seconds, stall[0]


def query_p50(index: EdgeIndex, rng: random.Random, questions: int = 200) -> float:
    filters = RecallFilters(workspace=WORKSPACE, families=FAMILIES)
    times = []
    for _ in range(questions):
        dense = [rng.gauss(0, 1) for _ in range(DIMENSION)]
        sparse = SparseVector(tuple(sorted(rng.sample(range(30_000), 5))), (1.0,) * 5)
        started = time.perf_counter()
        index.hybrid_search(dense, sparse, filters, 50)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--indexed",
        type=int,
        default=0,
        help="points compacted (indexed) into the serving shard before the plain ones",
    )
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tht-edge-stall-"))
    rng = random.Random(7)
    try:
        index = EdgeIndex(home)
        index.ensure_collection(DIMENSION)
        if args.indexed:  # a workspace indexed before, which saves or an import then grew
            for batch in random_points(args.indexed, rng):
                index.upsert(batch)
            index.compact(WORKSPACE, least=1)
        for batch in random_points(args.points, rng):
            index.upsert(batch)  # the serving shard, in place, as an import writes it
        runs: dict[str, list[tuple[float, float]]] = {"in_process": [], "child_process": []}
        for round_ in range(args.rounds):
            order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
            for variant in order:
                # a rebuild's generation of a workspace of its own, never switched: each
                # variant indexes a new, plain one, while WORKSPACE serves beside it
                built = f"{WORKSPACE}-{round_}-{variant}"
                generation = index.begin_generation(built)
                for batch in random_points(args.points, random.Random(round_), built):
                    generation.upsert(batch)
                optimize = (
                    generation.shard.optimize if variant == "in_process" else generation.optimize
                )
                runs[variant].append(timed(optimize))
                generation.close()
                shutil.rmtree(generation.path)
        plain = query_p50(index, rng)
        # whatever the size, for the figure
        compact_seconds, compact_stall = timed(lambda: index.compact(WORKSPACE, least=1))
        indexed = query_p50(index, rng)
        index.close()
        print(
            json.dumps(
                {
                    "points": args.points,
                    "indexed_before": args.indexed,
                    "rounds": args.rounds,
                    "optimize_a_generation": {
                        variant: {
                            "seconds": [round(s, 2) for s, _ in found],
                            "longest_stall_seconds": [round(g, 3) for _, g in found],
                        }
                        for variant, found in runs.items()
                    },
                    "compact_serving_shard": {
                        "seconds": round(compact_seconds, 2),
                        "longest_stall_seconds": round(compact_stall, 3),
                    },
                    "engine_query_p50_ms": {
                        "plain_segments": round(plain * 1000, 2),
                        "after_compact": round(indexed * 1000, 2),
                    },
                },
                indent=2,
            )
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
