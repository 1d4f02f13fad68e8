"""What the benchmarks share: the generated cards, a prepared archive, percentiles and
the admin-list timing. Not a test and not part of the product."""

from __future__ import annotations

import random
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

from tht.db.embedded import MIGRATOR, RUNTIME, EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.index.pgvector_migrations import PACK as PGVECTOR_PACK
from tht.memory.migrations import migrate
from tht.memory.model import ListQuery

try:
    from tht.memory.projection_format import indexed_text
except ImportError:  # compare.py measuring a revision from before its name
    from tht.memory.projection import indexed_text

TABLES = [f"table_{i}" for i in range(50)]
CONCEPTS = [f"concept{i}" for i in range(50)]
FAMILIES = ["domain_clarification", "sql_rule", "solved_question", "explained_error"]


def vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def prepared_home(home: Path) -> str:
    """The embedded server of THT_HOME ``home`` started and migrated as the product
    would; returns the runtime conninfo."""
    embedded = EmbeddedPostgres(home)
    try:
        from tht.bootstrap import migration_packs
    except ImportError:  # compare.py measuring a revision whose prepare() chose its packs
        return embedded.prepare()[0].runtime_conninfo
    return embedded.prepare(migration_packs())[0].runtime_conninfo


def prepare_database(embedded: EmbeddedPostgres, database: str, *, pgvector: bool = False) -> str:
    """A fresh migrated database on the embedded server; returns the runtime conninfo."""
    embedded.ensure_roles_and_database(database)
    if pgvector:
        with psycopg.connect(embedded.superuser_conninfo(database), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    with psycopg.connect(embedded.conninfo(MIGRATOR, database), autocommit=True) as conn:
        migrate(conn, runtime_login=RUNTIME)
        if pgvector:
            migrate(conn, runtime_login=RUNTIME, pack=PGVECTOR_PACK)
    return embedded.conninfo(RUNTIME, database)


def analyze(embedded: EmbeddedPostgres, database: str, *, vacuum: bool = False) -> None:
    """As autovacuum would after a bulk load or a rebuild (only the owner may ANALYZE
    or VACUUM): otherwise it runs on its own a minute later, in the middle of what
    is being timed."""
    with psycopg.connect(embedded.conninfo(MIGRATOR, database), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE" if vacuum else "ANALYZE")


def load_cards(
    conninfo: str, workspace: str, count: int, rng: random.Random, words: list[str]
) -> None:
    """``count`` cards of the four families, one table dependency each, 2 concepts each
    and a sparse link graph (one card in ten links to two others)."""
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
    ids = []
    with psycopg.connect(conninfo) as conn:
        for start in range(0, count, 5000):
            rows, deps = [], []
            for _ in range(min(5000, count - start)):
                family = rng.choice(FAMILIES)
                text = " ".join(rng.choices(words, k=25))
                fields = dict.fromkeys(
                    ["content", "scope", "rationale", "question", "sql", "context"]
                )
                if family == "solved_question":
                    fields.update(question=text, sql="SELECT 1", context="bench")
                elif family == "explained_error":
                    fields.update(context=text, content="fix", rationale="why")
                else:
                    fields.update(content=text, scope="Sales", rationale="because")
                card_id = uuid.UUID(int=rng.getrandbits(128), version=4)
                ids.append(card_id)
                rows.append(
                    [
                        workspace,
                        card_id,
                        family,
                        "en",
                        " ".join(rng.choices(words, k=4)),
                        fields["content"],
                        fields["scope"],
                        fields["rationale"],
                        fields["question"],
                        fields["sql"],
                        fields["context"],
                        rng.sample(CONCEPTS, 2),
                        "manual",
                    ]
                )
                deps.append([workspace, card_id, rng.choice(TABLES)])
            with conn.transaction():
                conn.execute("SET LOCAL ROLE thoth_memory_runtime")
                conn.execute("SELECT set_config('thoth.workspace', %s, true)", (workspace,))
                with conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO thoth_memory.cards ({', '.join(columns)})"
                        f" VALUES ({', '.join(['%s'] * len(columns))})",
                        rows,
                    )
                    cur.executemany(
                        "INSERT INTO thoth_memory.card_dependencies (workspace_id, card_id, position,"
                        " database_name, schema_name, table_name) VALUES (%s, %s, 0, 'dwh', 'public', %s)",
                        deps,
                    )
                    links = [
                        (workspace, a, b, "related")
                        for a in ids[-len(rows) :][::10]
                        for b in rng.sample(ids, 2)
                        if a != b
                    ]
                    cur.executemany(
                        "INSERT INTO thoth_memory.card_links (workspace_id, source_id, target_id, meaning)"
                        " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                        links,
                    )
    print(f"loaded {count} cards", file=sys.stderr)


def raw_embedder_throughput(embedder, archive: PostgresArchive, workspace: str, size: int) -> float:
    """Passages per second of the embedder alone on the texts the rebuild embeds (the
    indexed texts of the workspace's first cards), batched as the rebuild does (2000
    texts for the hashing embedder, 320 for a model)."""
    count = min(size, 2000 if embedder.model_id.startswith("hashing") else 320)
    with archive.transaction(workspace) as tx:
        cards = tx.cards(tx.card_ids_after(uuid.UUID(int=0), count))
    sample = [indexed_text(card) for card in cards.values()]
    embedder.embed_passages(sample[:32])  # load the model
    started = time.perf_counter()
    embedder.embed_passages(sample)
    return len(sample) / (time.perf_counter() - started)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(samples: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds of samples in seconds."""
    return {
        "p50": round(statistics.median(samples) * 1000, 2),
        "p99": round(percentile(samples, 0.99) * 1000, 2),
    }


def time_list(
    memory,
    workspace: str,
    rng: random.Random,
    words: list[str],
    queries: int,
    families: list[str] = FAMILIES,
    concepts: list[str] = CONCEPTS,
    tables: list[str] = TABLES,
) -> dict:
    """The admin list (``tht memory list``, ``GET .../memory``) through MemoryService:
    text + family + concept + table filters, text only, and a paged family filter."""
    list_ms, totals = [], []
    for _ in range(queries):
        query = ListQuery(
            q=rng.choice(words),
            family=[rng.choice(families)],
            concepts=[rng.choice(concepts)],
            table=rng.choice(tables),
        )
        t0 = time.perf_counter()
        page = memory.list_cards(workspace, query)
        list_ms.append((time.perf_counter() - t0) * 1000)
        totals.append(page.total)
    text_ms, text_totals = [], []
    for _ in range(queries // 3):
        t0 = time.perf_counter()
        page = memory.list_cards(workspace, ListQuery(q=rng.choice(words)))
        text_ms.append((time.perf_counter() - t0) * 1000)
        text_totals.append(page.total)
    broad_ms = []
    for _ in range(queries // 3):
        query = ListQuery(family=[rng.choice(families)], page=rng.randint(1, 50))
        t0 = time.perf_counter()
        memory.list_cards(workspace, query)
        broad_ms.append((time.perf_counter() - t0) * 1000)
    return {
        "list_text_plus_3_filters_ms": {
            "p50": round(statistics.median(list_ms), 2),
            "p99": round(percentile(list_ms, 0.99), 2),
            "mean_total_matches": round(statistics.mean(totals), 1),
        },
        "list_text_only_ms": {
            "p50": round(statistics.median(text_ms), 2),
            "p99": round(percentile(text_ms, 0.99), 2),
            "mean_total_matches": round(statistics.mean(text_totals), 1),
        },
        "list_family_filter_paged_ms": {
            "p50": round(statistics.median(broad_ms), 2),
            "p99": round(percentile(broad_ms, 0.99), 2),
        },
    }
