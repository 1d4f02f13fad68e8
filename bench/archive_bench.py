"""Archive benchmark: load N cards, then time the admin list and card creation.

Prints list latency (text search + family + concept + table filters, with totals)
p50/p99 and create latency p50, on the embedded PostgreSQL in a temporary home (or on
THT_BENCH_ADMIN_DATABASE_URL, a superuser URL, if set).

    .venv/bin/python bench/archive_bench.py [--cards 100000] [--queries 300]
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
import uuid
from pathlib import Path

import psycopg

from bench_common import CONCEPTS, FAMILIES, TABLES, percentile, time_list
from tht.db.embedded import MIGRATOR, RUNTIME, EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.migrations import migrate
from tht.memory.model import parse_card_input

COLUMNS = [f"col_{i}" for i in range(30)]


def vocabulary(rng: random.Random, size: int = 500) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 10))))
    return sorted(words)


def row(rng, words, workspace):
    family = rng.choice(FAMILIES)
    text = " ".join(rng.choices(words, k=30))
    fields = {
        "content": None,
        "scope": None,
        "rationale": None,
        "question": None,
        "sql": None,
        "context": None,
    }
    if family == "solved_question":
        fields.update(question=text, sql="SELECT 1", context="bench")
    elif family == "explained_error":
        fields.update(context=text, content="fix", rationale="why")
    else:
        fields.update(
            content=text, scope=rng.choice(["Sales", "Accounting", "HR"]), rationale="because"
        )
    return {
        "workspace_id": workspace,
        "id": uuid.UUID(int=rng.getrandbits(128), version=4),
        "family": family,
        "language": "en",
        "title": " ".join(rng.choices(words, k=5)),
        **fields,
        "concepts": rng.sample(CONCEPTS, 3),
        "origin": "manual",
    }


def load(conninfo: str, workspace: str, count: int, rng: random.Random, words: list[str]) -> None:
    columns = [
        "workspace_id",
        "id",
        "family",
        "language",
        "title",
        "content",
        "scope",
        "rationale",
        "question",
        "sql",
        "context",
        "concepts",
        "origin",
    ]
    started = time.perf_counter()
    with psycopg.connect(conninfo) as conn:
        for start in range(0, count, 5000):
            with conn.transaction():
                conn.execute("SET LOCAL ROLE thoth_memory_runtime")
                conn.execute("SELECT set_config('thoth.workspace', %s, true)", (workspace,))
                batch = [row(rng, words, workspace) for _ in range(min(5000, count - start))]
                # COPY is refused under row-level security; pipelined INSERTs are close enough
                with conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO thoth_memory.cards ({', '.join(columns)})"
                        f" VALUES ({', '.join(['%s'] * len(columns))})",
                        [[r[c] for c in columns] for r in batch],
                    )
                    cur.executemany(
                        "INSERT INTO thoth_memory.card_dependencies (workspace_id, card_id, position,"
                        " database_name, schema_name, table_name, column_name) VALUES (%s, %s, 0, 'dwh', 'public', %s, %s)",
                        [
                            [workspace, r["id"], rng.choice(TABLES), rng.choice(COLUMNS)]
                            for r in batch
                        ],
                    )
            print(
                f"loaded {start + len(batch)}/{count} cards ({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cards", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--creates", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(7)
    words = vocabulary(rng)

    home = Path(tempfile.mkdtemp(prefix="tht-bench-"))
    embedded = EmbeddedPostgres(home)
    try:
        embedded.ensure_roles_and_database("thoth_bench")
        with psycopg.connect(embedded.conninfo(MIGRATOR, "thoth_bench"), autocommit=True) as conn:
            migrate(conn, runtime_login=RUNTIME)
        runtime = embedded.conninfo(RUNTIME, "thoth_bench")
        archive = PostgresArchive(runtime).open()
        WorkspaceService(archive).create("bench", "en")
        WorkspaceService(archive).create("noise", "en")
        load(runtime, "bench", args.cards, rng, words)
        load(runtime, "noise", args.cards // 10, rng, words)
        # as autovacuum would after a bulk load (only the owner may ANALYZE)
        with psycopg.connect(embedded.conninfo(MIGRATOR, "thoth_bench"), autocommit=True) as conn:
            conn.execute("ANALYZE thoth_memory.cards")
            conn.execute("ANALYZE thoth_memory.card_dependencies")
        memory = MemoryService(archive)

        listing = time_list(memory, "bench", rng, words, args.queries)
        create_ms = []
        for i in range(args.creates):
            data = parse_card_input(
                {
                    "family": "sql_rule",
                    "title": f"bench {i}",
                    "content": " ".join(rng.choices(words, k=30)),
                    "scope": "Sales",
                    "rationale": "r",
                    "concepts": rng.sample(CONCEPTS, 2),
                    "dependencies": [
                        {"database": "dwh", "schema": "public", "table": rng.choice(TABLES)}
                    ],
                }
            )
            t0 = time.perf_counter()
            memory.create_card("bench", data)
            create_ms.append((time.perf_counter() - t0) * 1000)
        archive.close()
        print(
            json.dumps(
                {
                    "cards": args.cards,
                    **listing,
                    "create_ms": {
                        "p50": round(statistics.median(create_ms), 2),
                        "p99": round(percentile(create_ms, 0.99), 2),
                    },
                },
                indent=2,
            )
        )
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
