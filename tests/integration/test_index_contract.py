"""One contract for every SearchIndex adapter, run against the real engines.

Qdrant Edge runs in-process in tmp_path; the qdrant-client adapter runs on the
client's local mode in tmp_path; pgvector runs in the test's own PostgreSQL database.
Vectors come from the hashing embedder and the real BM25 encoder. Filter semantics are
checked against ``recall_filters.card_matches``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import qdrant_edge as qe
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from tests.integration.service_support import alive, wait_for
from tht.memory.embedding import HashingEmbedder, SparseEncoder
from tht.memory.index import (
    RRF_K,
    EdgeIndex,
    IndexBusy,
    IndexHit,
    IndexIncompatible,
    IndexPoint,
    IndexUnavailable,
    PointRecord,
    QdrantServerIndex,
    SearchIndex,
)
from tht.memory.index.engines import ENGINES, engine_names
from tht.memory.index.pgvector import PgVectorIndex
from tht.memory.index.port import KEYWORD_FIELDS, IndexGeneration, begin_generation
from tht.memory.model import FAMILIES, Dependency
from tht.memory.recall_filters import CardFacts, RecallFilters, card_matches

DIMENSION = 64
EMBEDDER = HashingEmbedder(DIMENSION)
ENCODER = SparseEncoder("en")


@dataclass
class Engine:
    """Opens adapters on one storage location and can prepare a legacy collection
    with the engine's own API."""

    open: Callable[[], SearchIndex]
    create_dense_only: Callable[[int], None]
    # Writes a point as an earlier format did: no revision, no fingerprint.
    write_old_format: Callable[[uuid.UUID, str], None]


def _edge(tmp_path: Path) -> Engine:
    # One shard per workspace (see EdgeIndex): these write w1's shard directly.
    shard_path = EdgeIndex(tmp_path).workspace_path("w1")

    def create_dense_only(dimension: int) -> None:
        config = qe.EdgeConfig(
            vectors={"dense": qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)}
        )
        shard_path.parent.mkdir(parents=True)
        (tmp_path / "memory" / "layout.json").write_text(json.dumps({"dimension": dimension}))
        qe.EdgeShard.create(str(shard_path), config).close()

    def write_old_format(point_id: uuid.UUID, text: str) -> None:
        sparse = ENCODER.encode_document(text)
        vectors = {"dense": EMBEDDER.embed_passages([text])[0], "bm25": qe.SparseVector(*sparse)}
        payload = {"workspace": "w1", "family": "sql_rule", "deps": []}
        writer = EdgeIndex(tmp_path)
        with writer.session():
            writer.shard("w1", create=True).update(
                qe.UpdateOperation.upsert_points([qe.Point(point_id, vectors, payload)])
            )
        writer.close()

    return Engine(
        open=lambda: EdgeIndex(tmp_path, open_timeout=2.0),
        create_dense_only=create_dense_only,
        write_old_format=write_old_format,
    )


def _qdrant_local(tmp_path: Path) -> Engine:
    location = str(tmp_path / "qdrant")

    def create_dense_only(dimension: int) -> None:
        client = QdrantClient(path=location)
        client.create_collection(
            "memory",
            vectors_config={"dense": qm.VectorParams(size=dimension, distance=qm.Distance.COSINE)},
        )
        client.close()

    def write_old_format(point_id: uuid.UUID, text: str) -> None:
        client = QdrantClient(path=location)
        sparse = ENCODER.encode_document(text)
        vectors = {
            "dense": EMBEDDER.embed_passages([text])[0],
            "bm25": qm.SparseVector(indices=sparse.indices, values=sparse.values),
        }
        payload = {"workspace": "w1", "family": "sql_rule", "deps": []}
        client.upsert("memory", [qm.PointStruct(id=str(point_id), vector=vectors, payload=payload)])
        client.close()

    return Engine(
        open=lambda: QdrantServerIndex(QdrantClient(path=location)),
        create_dense_only=create_dense_only,
        write_old_format=write_old_format,
    )


def _pgvector(database) -> Engine:
    def create_dense_only(dimension: int) -> None:
        # a collection created earlier, by the engine's own SQL, with this dimension
        with psycopg.connect(database.migrator) as conn:
            conn.execute(
                "SELECT thoth_memory_pgvector.create_collection('memory', %s)", (dimension,)
            )

    def write_old_format(point_id: uuid.UUID, text: str) -> None:
        legacy = PgVectorIndex(database.runtime, "memory")
        legacy.upsert([point(facts(), text, point_id=point_id)])
        legacy.close()
        with psycopg.connect(database.migrator) as conn:
            conn.execute(
                "UPDATE thoth_memory_pgvector.points SET revision = NULL, fingerprint = NULL"
                " WHERE id = %s",
                (point_id,),
            )

    return Engine(
        open=lambda: PgVectorIndex(database.runtime, "memory", timeout=5),
        create_dense_only=create_dense_only,
        write_old_format=write_old_format,
    )


# Each engine of the installation's table, and how its case opens it here: the qdrant
# engine's adapter runs on qdrant-client's local mode.
CASES: dict[str, Callable[[pytest.FixtureRequest, Path], Engine]] = {
    "edge": lambda request, tmp_path: _edge(tmp_path),
    "qdrant": lambda request, tmp_path: _qdrant_local(tmp_path),
    "pgvector": lambda request, tmp_path: _pgvector(request.getfixturevalue("database")),
}


def test_every_engine_of_the_table_has_a_case() -> None:
    assert list(CASES) == engine_names()


@pytest.fixture(params=engine_names())
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    return CASES[request.param](request, tmp_path)


def test_an_engine_declares_what_it_offers_beyond_the_port(
    engine: Engine, request: pytest.FixtureRequest
) -> None:
    index = engine.open()
    offered = index.capabilities()
    # a schema of its own exactly where the engines' table gives it a migration pack
    listed = ENGINES[request.node.callspec.params["engine"]]
    assert (offered.schema is not None) == (listed.migration_pack() is not None)
    # every shipped engine rebuilds beside the serving points, and keeps the card's text
    assert offered.generations is not None and offered.vector_kinds[0] == "text"
    index.close()


@pytest.fixture
def index(engine: Engine) -> Iterator[SearchIndex]:
    opened = engine.open()
    opened.ensure_collection(DIMENSION)
    yield opened
    opened.close()


def facts(
    workspace: str = "w1",
    family: str = "sql_rule",
    scope: str | None = None,
    concepts: tuple[str, ...] = (),
    deps: tuple[dict, ...] = (),
) -> CardFacts:
    dependencies = tuple(Dependency.model_validate(d) for d in deps)
    return CardFacts(
        workspace=workspace,
        family=family,
        scope=scope,
        concepts=concepts,
        dependencies=dependencies,
    )


def point(
    card: CardFacts,
    text: str,
    *,
    revision: int = 1,
    fingerprint: str = "fp-1",
    point_id: uuid.UUID | None = None,
) -> IndexPoint:
    return IndexPoint(
        id=point_id or uuid.uuid4(),
        dense=EMBEDDER.embed_passages([text])[0],
        sparse=ENCODER.encode_document(text),
        card=card,
        revision=revision,
        fingerprint=fingerprint,
    )


def search(
    index: SearchIndex, text: str, filters: RecallFilters, limit: int = 20
) -> list[IndexHit]:
    return index.hybrid_search(
        EMBEDDER.embed_query(text), ENCODER.encode_query(text), filters, limit
    )


def everything(workspace: str = "w1", **narrowing: object) -> RecallFilters:
    return RecallFilters(workspace=workspace, families=FAMILIES, **narrowing)


def ids(hits: list[IndexHit]) -> set[uuid.UUID]:
    return {hit.id for hit in hits}


# -- collection lifecycle --------------------------------------------------------


def test_collection_lifecycle(engine: Engine) -> None:
    index = engine.open()
    assert not index.collection_exists()
    index.ensure_collection(DIMENSION)
    index.ensure_collection(DIMENSION)  # idempotent
    assert index.collection_exists()
    index.upsert([point(facts(), "monthly revenue")])
    index.drop_collection()
    assert not index.collection_exists()
    index.ensure_collection(DIMENSION)
    assert index.count("w1") == 0
    index.close()


@pytest.mark.slow
# qdrant-client's local mode is not thread-safe (its SQLite store fails or loses points
# under threads); a Qdrant server is, and the adapter tolerates a racing create.
@pytest.mark.parametrize("engine", ["edge", "pgvector"], indirect=True)
def test_threads_of_one_process_create_the_collection_and_write_at_once(engine: Engine) -> None:
    # The web server and concurrent review deliveries share one adapter: the first
    # writes race to create the collection and the workspace's shard.
    index = engine.open()
    threads = 6
    start = threading.Barrier(threads)

    def write(p: IndexPoint) -> None:
        start.wait()
        index.ensure_collection(DIMENSION)
        index.upsert([p])

    for _ in range(5):  # a race: a few rounds make a regression all but certain to show
        written = [point(facts(), f"rule written by thread {n}") for n in range(threads)]
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(write, written))  # re-raises the first failure
        assert {r.id for r in index.scroll_ids("w1")} == {p.id for p in written}
        index.drop_collection()
    index.close()


def test_operations_on_a_missing_collection_raise_index_unavailable(engine: Engine) -> None:
    index = engine.open()
    with pytest.raises(IndexUnavailable):
        search(index, "revenue", everything())
    with pytest.raises(IndexUnavailable):
        index.count("w1")
    index.close()


def test_unreachable_server_is_index_unavailable() -> None:
    index = QdrantServerIndex.connect("http://127.0.0.1:1", timeout=1)
    with pytest.raises(IndexUnavailable, match="Qdrant failed on collection memory") as caught:
        index.collection_exists()
    assert caught.value.code == "index_unavailable" and caught.value.http_status == 503
    index.close()


def test_missing_bm25_vector_is_added_to_an_existing_collection(engine: Engine) -> None:
    engine.create_dense_only(DIMENSION)
    index = engine.open()
    index.ensure_collection(DIMENSION)
    target = point(facts(), "net revenue excludes refunds")
    index.upsert([target, point(facts(), "customers by country")])
    hits = search(index, "refunds", everything())
    assert hits[0].id == target.id and hits[0].bm25_rank == 1
    index.close()


def test_incompatible_dense_vector_raises_index_incompatible(engine: Engine) -> None:
    engine.create_dense_only(DIMENSION * 2)
    index = engine.open()
    with pytest.raises(IndexIncompatible) as caught:
        index.ensure_collection(DIMENSION)
    assert caught.value.code == "index_incompatible" and caught.value.exit_code == 8
    index.close()


def test_points_survive_reopening(engine: Engine) -> None:
    index = engine.open()
    index.ensure_collection(DIMENSION)
    stored = point(facts(), "orders are counted once")
    index.upsert([stored])
    index.close()
    reopened = engine.open()
    assert reopened.scroll_ids("w1") == [PointRecord(stored.id, 1, "fp-1")]
    reopened.close()


def test_old_format_points_report_no_projection(engine: Engine) -> None:
    index = engine.open()
    index.ensure_collection(DIMENSION)
    index.close()
    old = uuid.uuid4()
    engine.write_old_format(old, "legacy revenue rule")
    index = engine.open()
    assert index.scroll_ids("w1") == [PointRecord(old, None, None)]
    (hit,) = search(index, "revenue", everything())
    assert (hit.id, hit.revision, hit.fingerprint) == (old, None, None)
    index.close()


# -- points ----------------------------------------------------------------------


def test_upsert_delete_count_and_scroll(index: SearchIndex) -> None:
    mine = [point(facts(), f"rule number {n}") for n in range(3)]
    other = point(facts(workspace="w2"), "rule number 0")
    index.upsert([*mine, other])
    assert index.count("w1") == 3 and index.count("w2") == 1
    assert {r.id for r in index.scroll_ids("w1")} == {p.id for p in mine}

    # Upserting the same ids again replaces, never duplicates.
    index.upsert(
        [
            point(p.card, "rule rewritten", revision=2, fingerprint="fp-2", point_id=p.id)
            for p in mine
        ]
    )
    assert index.count("w1") == 3
    assert set(index.scroll_ids("w1")) == {PointRecord(p.id, 2, "fp-2") for p in mine}

    index.delete("w1", [mine[0].id, uuid.uuid4()])  # an unknown id is not an error
    index.delete("w2", [p.id for p in mine])  # another workspace's delete leaves w1's points
    index.upsert([])
    index.delete("w1", [])
    assert index.count("w1") == 2
    assert mine[0].id not in {r.id for r in index.scroll_ids("w1")}
    assert index.scroll_ids("nobody") == [] and index.count("nobody") == 0


def test_dense_vectors_read_back_what_was_written(index: SearchIndex) -> None:
    mine, theirs = point(facts("w1"), "orders are counted once"), point(facts("w2"), "orders")
    index.upsert([mine, theirs])
    vectors = index.dense_vectors("w1", [mine.id, theirs.id, uuid.uuid4()])
    assert set(vectors) == {mine.id}  # another workspace's point and an absent one are left out
    stored, written = vectors[mine.id], list(mine.dense)
    cosine = sum(a * b for a, b in zip(stored, written, strict=True)) / (
        sum(a * a for a in stored) ** 0.5 * sum(b * b for b in written) ** 0.5
    )
    assert len(stored) == DIMENSION and cosine > 0.999
    assert index.dense_vectors("w3", [mine.id]) == {}


def test_a_readable_workspace_is_never_discarded(index: SearchIndex) -> None:
    kept = point(facts("w1"), "orders are counted once")
    index.upsert([kept])
    assert index.discard_unreadable("w1") is None and index.discard_unreadable("w2") is None
    assert [r.id for r in index.scroll_ids("w1")] == [kept.id]


@pytest.mark.slow
def test_scroll_pages_through_every_point(index: SearchIndex) -> None:
    points = [point(facts(), f"card {n}") for n in range(1100)]
    index.upsert(points)
    assert {r.id for r in index.scroll_ids("w1")} == {p.id for p in points}


# -- ranking -----------------------------------------------------------------------


def test_exact_lexical_match_ranks_first(index: SearchIndex) -> None:
    texts = [
        "gross margin is revenue minus cost of goods sold",
        "active customers placed an order in the last 90 days",
        "churn counts customers who cancelled their subscription",
        "fiscal year starts in april for the italian subsidiary",
    ]
    points = [point(facts(), text) for text in texts]
    index.upsert(points)
    hits = search(index, "churn cancelled subscription", everything())
    assert hits[0].id == points[2].id
    assert (hits[0].rank, hits[0].dense_rank, hits[0].bm25_rank) == (1, 1, 1)
    assert (hits[0].revision, hits[0].fingerprint) == (1, "fp-1")


def test_ranks_are_reported_per_branch_and_fused_by_rrf(index: SearchIndex) -> None:
    lexical = [point(facts(), f"invoice totals include tax variant {n}") for n in range(3)]
    unrelated = [point(facts(), f"warehouse shelf location code {n}") for n in range(3)]
    index.upsert(lexical + unrelated)
    hits = search(index, "invoice tax", everything(), limit=10)
    assert [hit.rank for hit in hits] == list(range(1, 7))
    # BM25 only returns cards sharing a term; dense returns every candidate.
    assert all(hit.dense_rank is not None for hit in hits)
    assert {hit.id for hit in hits if hit.bm25_rank is not None} == {p.id for p in lexical}
    assert sorted(hit.bm25_rank for hit in hits if hit.bm25_rank) == [1, 2, 3]

    def rrf(hit: IndexHit) -> float:
        return sum(1 / (RRF_K + r) for r in (hit.dense_rank, hit.bm25_rank) if r is not None)

    fused = [rrf(hit) for hit in hits]
    assert fused == sorted(fused, reverse=True)


def test_query_without_bm25_terms_still_searches_dense(index: SearchIndex) -> None:
    index.upsert([point(facts(), "the"), point(facts(), "revenue")])
    hits = search(index, "the of and", everything())  # stop words only
    assert len(hits) == 2 and all(hit.bm25_rank is None for hit in hits)


def test_bm25_idf_is_scoped_to_the_workspace(index: SearchIndex) -> None:
    # Within w1, "alpha" is rare (one card) and "beta" common (two): the alpha card
    # wins the BM25 branch. Many alpha cards elsewhere would flip that if IDF were
    # computed over the whole collection.
    alpha = point(facts(), "alpha")
    beta = point(facts(), "beta")
    beta_gamma = point(facts(), "beta gamma")
    index.upsert([alpha, beta, beta_gamma])
    before = search(index, "alpha beta", everything())
    assert min(before, key=lambda h: h.bm25_rank or 99).id == alpha.id

    index.upsert([point(facts(workspace="w2"), f"alpha {n}") for n in range(60)])
    after = search(index, "alpha beta", everything())
    assert after == before


# -- filters -----------------------------------------------------------------------


def test_workspace_isolation_with_identical_text(index: SearchIndex) -> None:
    text = "revenue is recognised on delivery"
    w1 = [point(facts(workspace="w1"), text) for _ in range(3)]
    w2 = [point(facts(workspace="w2"), text) for _ in range(3)]
    index.upsert(w1 + w2)
    assert ids(search(index, text, everything("w1"))) == {p.id for p in w1}
    assert ids(search(index, text, everything("w2"))) == {p.id for p in w2}
    assert search(index, text, everything("w3")) == []


def test_family_filter(index: SearchIndex) -> None:
    by_family = {family: point(facts(family=family), "revenue definition") for family in FAMILIES}
    index.upsert(list(by_family.values()))
    rules = RecallFilters(workspace="w1", families=("sql_rule", "explained_error"))
    assert ids(search(index, "revenue", rules)) == {
        by_family["sql_rule"].id,
        by_family["explained_error"].id,
    }
    assert search(index, "revenue", RecallFilters(workspace="w1", families=())) == []


def test_scope_is_an_exact_string(index: SearchIndex) -> None:
    sales = point(facts(scope="sales"), "revenue")
    index.upsert(
        [
            sales,
            point(facts(scope="sales EU"), "revenue"),
            point(facts(scope="Sales"), "revenue"),
            point(facts(), "revenue"),
        ]
    )
    assert ids(search(index, "revenue", everything(scope="sales"))) == {sales.id}


def test_every_requested_concept_must_be_present(index: SearchIndex) -> None:
    both = point(facts(concepts=("revenue", "refund", "tax")), "net revenue")
    index.upsert(
        [both, point(facts(concepts=("revenue",)), "net revenue"), point(facts(), "net revenue")]
    )
    assert ids(search(index, "revenue", everything(concepts=("revenue", "refund")))) == {both.id}


def test_physical_context_needs_one_dependency_for_all_levels(index: SearchIndex) -> None:
    pair = point(
        facts(
            deps=(
                {"database": "dwh", "schema": "sales", "table": "orders", "column": "id"},
                {"database": "dwh", "schema": "sales", "table": "customers", "column": "name"},
            )
        ),
        "order identifiers",
    )
    table_level = point(
        facts(deps=({"database": "dwh", "schema": "sales", "table": "orders"},)), "orders table"
    )
    database_level = point(facts(deps=({"database": "dwh"},)), "warehouse wide")
    workspace_wide = point(facts(), "workspace wide")
    elsewhere = point(facts(deps=({"database": "crm"},)), "other database")
    index.upsert([pair, table_level, database_level, workspace_wide, elsewhere])

    def found(**levels: str) -> set[uuid.UUID]:
        return ids(
            search(index, "orders", everything(database="dwh", schema_name="sales", **levels))
        )

    # orders.id and customers.name must not combine into orders.name.
    assert found(table="orders", column="name") == {
        table_level.id,
        database_level.id,
        workspace_wide.id,
    }
    assert found(table="orders", column="id") == {
        pair.id,
        table_level.id,
        database_level.id,
        workspace_wide.id,
    }
    assert found() == {pair.id, table_level.id, database_level.id, workspace_wide.id}


def _random_card(rng: random.Random) -> CardFacts:
    deps = []
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        dep = {"database": rng.choice(["d1", "d2"])}
        if rng.random() < 0.8:
            dep["schema"] = rng.choice(["s1", "s2"])
            if rng.random() < 0.7:
                dep["table"] = rng.choice(["t1", "t2", "t3"])
                if rng.random() < 0.6:
                    dep["column"] = rng.choice(["c1", "c2"])
        deps.append(dep)
    unique = tuple({tuple(sorted(d.items())): d for d in deps}.values())
    return facts(
        workspace=rng.choice(["w1", "w1", "w2"]),
        family=rng.choice(FAMILIES),
        scope=rng.choice([None, "sales", "finance"]),
        concepts=tuple(rng.sample(["revenue", "refund", "tax", "churn"], rng.randint(0, 3))),
        deps=unique,
    )


def _random_filters(rng: random.Random) -> RecallFilters:
    def maybe(values: list[str]) -> str | None:
        return rng.choice([None, None, *values])

    return RecallFilters(
        workspace=rng.choice(["w1", "w2"]),
        families=tuple(rng.sample(FAMILIES, rng.randint(1, len(FAMILIES)))),
        scope=maybe(["sales", "finance", "hr"]),
        concepts=tuple(rng.sample(["revenue", "refund", "tax", "churn"], rng.choice([0, 0, 1, 2]))),
        database=maybe(["d1", "d2"]),
        schema_name=maybe(["s1", "s2"]),
        table=maybe(["t1", "t2", "t3"]),
        column=maybe(["c1", "c2"]),
    )


def test_random_filters_select_exactly_what_card_matches_selects(index: SearchIndex) -> None:
    rng = random.Random(20240611)
    cards = [_random_card(rng) for _ in range(120)]
    points = [point(card, f"knowledge card {n} about revenue") for n, card in enumerate(cards)]
    index.upsert(points)
    non_trivial = 0
    for _ in range(80):
        filters = _random_filters(rng)
        expected = {p.id for p in points if card_matches(p.card, filters)}
        non_trivial += (
            0 < len(expected) < sum(p.card.workspace == filters.workspace for p in points)
        )
        assert ids(search(index, "revenue", filters, limit=len(points))) == expected, filters
    assert non_trivial > 20  # the generator exercises selective filters, not only all-or-nothing


# -- the embedded engine is single-process -----------------------------------------

_OPENER = """
import json, sys, time
from tht.memory.index import EdgeIndex, IndexBusy
print("starting", flush=True)
index = EdgeIndex(sys.argv[1], open_timeout=float(sys.argv[2]))
start = time.monotonic()
try:
    print(json.dumps({"count": index.count("w1"), "waited": time.monotonic() - start}))
except IndexBusy as exc:
    print(json.dumps({"code": exc.code, "message": exc.message, "waited": time.monotonic() - start}))
finally:
    index.close()
"""


def _open_in_another_process(path: Path, timeout: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _OPENER, str(path), str(timeout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(process: subprocess.Popen[str]) -> dict:
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return json.loads(out.splitlines()[-1])


def test_second_process_gets_index_busy_then_succeeds_after_close(tmp_path: Path) -> None:
    holder = EdgeIndex(tmp_path)
    holder.ensure_collection(DIMENSION)
    holder.upsert([point(facts(), "held card")])

    busy = _result(_open_in_another_process(tmp_path, 0.5))
    assert busy["code"] == "index_busy" and busy["waited"] >= 0.5
    assert f"pid {os.getpid()}" in busy["message"] and str(tmp_path / "memory") in busy["message"]
    assert "WAL" not in busy["message"]

    waiting = _open_in_another_process(tmp_path, 20)
    assert waiting.stdout is not None and waiting.stdout.readline().strip() == "starting"
    time.sleep(0.5)
    holder.close()
    done = _result(waiting)
    assert done["count"] == 1 and done["waited"] > 0.2


def test_open_in_the_same_process_waits_then_raises_index_busy(tmp_path: Path) -> None:
    holder = EdgeIndex(tmp_path)
    holder.ensure_collection(DIMENSION)
    second = EdgeIndex(tmp_path, open_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(IndexBusy) as caught:
        second.count("w1")
    assert time.monotonic() - started >= 0.3
    assert caught.value.exit_code == 8 and caught.value.http_status == 503
    holder.close()
    assert second.count("w1") == 0
    second.close()


def test_a_collection_the_service_holds_is_refused_at_once(tmp_path: Path) -> None:
    # the service keeps the collection until it stops: waiting open_timeout is in vain
    service = EdgeIndex(tmp_path, holder="service")
    service.ensure_collection(DIMENSION)
    busy = _result(_open_in_another_process(tmp_path, 20))
    assert busy["code"] == "index_busy" and busy["waited"] < 5
    assert f"held by the running service (pid {os.getpid()})" in busy["message"]
    assert "THT_SERVICE=auto" in busy["message"]
    service.close()
    assert _result(_open_in_another_process(tmp_path, 20))["count"] == 0


# -- the embedded engine's layout: one shard per workspace ---------------------------


def _legacy_single_shard(tmp_path: Path, points: list[IndexPoint]) -> None:
    """The collection as earlier versions wrote it: one shard for every workspace."""
    config = qe.EdgeConfig(
        vectors={"dense": qe.EdgeVectorParams(size=DIMENSION, distance=qe.Distance.Cosine)},
        sparse_vectors={"bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
    )
    shard = qe.EdgeShard.create(str(tmp_path / "memory"), config)
    shard.update(
        qe.UpdateOperation.upsert_points(
            [
                qe.Point(
                    p.id, {"dense": list(p.dense), "bm25": qe.SparseVector(*p.sparse)}, p.payload()
                )
                for p in points
            ]
        )
    )
    shard.close()


def test_each_workspace_has_its_own_shard(tmp_path: Path) -> None:
    index = EdgeIndex(tmp_path)
    index.ensure_collection(DIMENSION)
    index.upsert(
        [
            point(facts("w1"), "net revenue"),
            point(facts("w2"), "net revenue"),
            point(facts("w2"), "gross margin"),
        ]
    )
    index.close()
    shards = sorted(p.name for p in (tmp_path / "memory" / "workspaces").iterdir())
    assert shards == ["w1", "w1.written", "w2", "w2.written"]  # each written, not compacted
    for name, count in (("w1", 1), ("w2", 2)):
        shard = qe.EdgeShard.load(str(tmp_path / "memory" / "workspaces" / name))
        assert shard.count(qe.CountRequest(exact=True)) == count
        shard.close()


def test_a_legacy_single_shard_is_moved_into_workspace_shards(tmp_path: Path) -> None:
    mine = [point(facts("w1"), f"revenue rule {n}", revision=n + 1) for n in range(5)]
    theirs = [point(facts("w2"), f"churn rule {n}") for n in range(3)]
    _legacy_single_shard(tmp_path, mine + theirs)
    # an earlier move was interrupted after writing part of w1's shard
    (tmp_path / "memory" / "layout.json.moving").write_text(json.dumps({"dimension": DIMENSION}))
    moved = EdgeIndex(tmp_path).workspace_path("w1")
    moved.parent.mkdir(parents=True)
    partial = qe.EdgeShard.create(
        str(moved),
        qe.EdgeConfig(
            vectors={"dense": qe.EdgeVectorParams(size=DIMENSION, distance=qe.Distance.Cosine)},
            sparse_vectors={"bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        ),
    )
    partial.update(
        qe.UpdateOperation.upsert_points(
            [qe.Point(mine[0].id, {"dense": list(mine[0].dense)}, mine[0].payload())]
        )
    )
    partial.close()

    index = EdgeIndex(tmp_path)
    assert index.collection_exists()
    assert set(index.scroll_ids("w1")) == {
        PointRecord(p.id, p.revision, p.fingerprint) for p in mine
    }
    assert index.count("w2") == 3
    (hit, *_) = search(index, "revenue rule 3", everything())
    assert hit.id == mine[3].id and hit.bm25_rank == 1 and hit.revision == 4
    assert not (tmp_path / "memory" / "edge_config.json").exists()
    assert sorted(p.name for p in (tmp_path / "memory").iterdir()) == ["layout.json", "workspaces"]
    index.ensure_collection(DIMENSION)  # the moved collection is this projection's
    index.close()


def test_a_workspace_shard_has_the_payload_indexes(tmp_path: Path) -> None:
    index = EdgeIndex(tmp_path)
    index.ensure_collection(DIMENSION)
    index.upsert([point(facts("w1"), "net revenue")])
    with index.session():
        schema = index.shard("w1").info().payload_schema
    assert set(schema) == {"workspace", *KEYWORD_FIELDS}
    assert schema["workspace"].params.is_tenant
    index.close()


# -- generations (rebuilds beside the serving points) --------------------------------


@pytest.mark.parametrize("engine", engine_names(), indirect=True)
def test_a_generation_is_invisible_until_it_switches_and_then_replaces_the_serving_one(
    index: SearchIndex,
) -> None:
    """What a rebuild writes to its generation is not read (search, BM25 IDF, count,
    scroll, vectors) before the switch; saves meanwhile reach both; after the switch
    the generation alone serves and the replaced points are gone."""
    alpha, beta, beta_gamma = (point(facts(), text) for text in ("alpha", "beta", "beta gamma"))
    index.upsert([alpha, beta, beta_gamma])
    before = search(index, "alpha beta", everything())
    generation = begin_generation(index, "w1")
    assert generation.resumable and generation.records() == []
    # the generation: the same cards at revision 2, "alpha" made common (IDF would move)
    rebuilt = [
        point(facts(), text, revision=2, point_id=p.id)
        for p, text in ((alpha, "alpha"), (beta, "beta alpha"), (beta_gamma, "beta gamma alpha"))
    ]
    generation.upsert([*rebuilt, point(facts(), "alpha delta", revision=2)])
    assert search(index, "alpha beta", everything()) == before
    assert index.count("w1") == 3
    assert {r.revision for r in index.scroll_ids("w1")} == {1}
    assert index.dense_vectors("w1", [alpha.id]).keys() == {alpha.id}
    # a save during the rebuild reaches both; a delete removes from both
    saved = point(facts(), "epsilon", revision=7)
    index.upsert([saved])
    index.delete("w1", [beta_gamma.id])
    assert {r.id for r in index.scroll_ids("w1")} == {alpha.id, beta.id, saved.id}
    held = {r.id: r.revision for r in generation.records()}
    assert held[saved.id] == 7 and beta_gamma.id not in held and len(held) == 4
    # an interrupted rebuild finds its generation again
    assert {r.id for r in begin_generation(index, "w1").records()} == set(held)
    generation.switch()
    assert {r.id: r.revision for r in index.scroll_ids("w1")} == held
    assert index.count("w1") == 4
    assert ids(search(index, "alpha", everything())) >= {alpha.id, beta.id}
    assert search(index, "alpha beta", everything()) != before
    # the next rebuild starts an empty generation: the replaced points are gone
    assert begin_generation(index, "w1").records() == []


def _paused_at(step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hold the process or thread that reaches ``step`` (see ``tht.faults.pause_point``)
    until the returned marker file is removed."""
    marker = tmp_path / f"paused-{step}"
    monkeypatch.setattr("tht.memory.index.edge.IN_PROCESS_OPTIMIZE_BYTES", 0)  # always a child
    monkeypatch.setenv("THT_PAUSE_AT", step)
    monkeypatch.setenv("THT_PAUSE_FILE", str(marker))
    return marker


def _wait_for(path: Path, thread: threading.Thread) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert thread.is_alive(), "the optimize ended without reaching its pause"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def test_an_edge_generation_is_indexed_in_another_process_while_this_one_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's optimize holds the GIL for seconds (qdrant-edge-py 0.9.0), so the
    rebuild runs it in a child process: meanwhile this process searches and saves, and
    the saves that reach the closed generation are applied when it opens again."""
    index = EdgeIndex(tmp_path)
    index.ensure_collection(DIMENSION)
    serving = point(facts(), "serving card")
    index.upsert([serving])
    generation = begin_generation(index, "w1")
    rebuilt = [point(facts(), f"rebuilt card {n}", revision=2) for n in range(300)]
    generation.upsert(rebuilt)
    marker = _paused_at("edge.optimizing", tmp_path, monkeypatch)
    failures: list[BaseException] = []
    optimizing = threading.Thread(target=lambda: _record(generation.optimize, failures))
    optimizing.start()
    try:
        _wait_for(marker, optimizing)  # the child has the shard; this process goes on
        assert ids(search(index, "serving card", everything())) == {serving.id}
        saved = point(facts(), "saved during the optimize", revision=5)
        index.upsert([saved])
        index.delete("w1", [rebuilt[0].id])
        assert optimizing.is_alive()
    finally:
        marker.unlink(missing_ok=True)
        optimizing.join(60)
    assert not optimizing.is_alive() and failures == []
    monkeypatch.delenv("THT_PAUSE_AT")
    held = {r.id: r.revision for r in generation.records()}
    assert held == {**{p.id: 2 for p in rebuilt[1:]}, saved.id: 5}
    generation.switch()  # the switch indexes again, unpaused, and serves the generation
    assert index.count("w1") == 300
    assert ids(search(index, "saved during the optimize", everything(), limit=1)) == {saved.id}
    index.close()


def test_an_edge_generation_whose_optimize_fails_keeps_its_points_for_the_next_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, generation = _generation_of_20_cards(tmp_path)
    monkeypatch.setattr("tht.memory.index.edge.IN_PROCESS_OPTIMIZE_BYTES", 0)
    monkeypatch.setenv("THT_CRASH_AT", "edge.optimizing")  # the child dies before indexing
    with pytest.raises(IndexUnavailable, match="indexing the embedded index's new generation"):
        generation.optimize()
    monkeypatch.delenv("THT_CRASH_AT")
    generation.upsert([point(facts(), "written after the failure")])  # the shard is open again
    assert len(generation.records()) == 21
    index.close()
    reopened = EdgeIndex(tmp_path)
    assert len(begin_generation(reopened, "w1").records()) == 21  # a rebuild resumes it
    reopened.close()


def test_closing_the_index_stops_a_generations_optimize_and_a_rebuild_resumes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a service stopping during a rebuild: the child goes, the generation stays on disk
    index, generation = _generation_of_20_cards(tmp_path)
    marker = _paused_at("edge.optimizing", tmp_path, monkeypatch)
    failures: list[BaseException] = []
    optimizing = threading.Thread(target=lambda: _record(generation.optimize, failures))
    optimizing.start()
    _wait_for(marker, optimizing)
    index.close()
    optimizing.join(60)
    marker.unlink(missing_ok=True)
    monkeypatch.delenv("THT_PAUSE_AT")
    assert not optimizing.is_alive()
    assert len(failures) == 1 and "was being built" in str(failures[0])
    reopened = EdgeIndex(tmp_path)
    assert len(begin_generation(reopened, "w1").records()) == 20
    reopened.close()


def _generation_of_20_cards(tmp_path: Path) -> tuple[EdgeIndex, IndexGeneration]:
    index = EdgeIndex(tmp_path)
    index.ensure_collection(DIMENSION)
    generation = begin_generation(index, "w1")
    generation.upsert([point(facts(), f"card {n}") for n in range(20)])
    return index, generation


def _record(action: Callable[[], None], failures: list[BaseException]) -> None:
    try:
        action()
    except BaseException as exc:
        failures.append(exc)


def test_compacting_an_edge_shard_copies_its_points_and_keeps_the_saves_made_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What imports leave in plain segments is replaced by an indexed copy (vectors
    read back, nothing embedded), while recall and saves go on."""
    index = EdgeIndex(tmp_path)
    index.ensure_collection(DIMENSION)
    written = [point(facts(), f"imported card {n}") for n in range(300)]
    index.upsert(written)
    index.delete("w1", [written[0].id])
    assert not index.compact("w1")  # 299 plain vectors: under the threshold
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 100)
    serving = index.workspace_path("w1")
    before = search(index, "imported card 7", everything())
    vectors = index.dense_vectors("w1", [p.id for p in written])
    marker = _paused_at("edge.optimizing", tmp_path, monkeypatch)
    failures: list[BaseException] = []
    compacting = threading.Thread(target=lambda: _record(lambda: index.compact("w1"), failures))
    compacting.start()
    try:
        _wait_for(marker, compacting)  # copied; the copy is being indexed in a child
        assert search(index, "imported card 7", everything()) == before
        saved = point(facts(), "saved during the compaction")
        index.upsert([saved])
        index.delete("w1", [written[1].id])
    finally:
        marker.unlink(missing_ok=True)
        compacting.join(60)
    assert not compacting.is_alive() and failures == []
    assert index.workspace_path("w1") != serving and not serving.exists()
    assert {r.id for r in index.scroll_ids("w1")} == {p.id for p in written[2:]} | {saved.id}
    assert index.dense_vectors("w1", [p.id for p in written[2:]]) == {
        i: v for i, v in vectors.items() if i != written[1].id
    }
    assert search(index, "imported card 7", everything())[0].id == before[0].id
    begin_generation(index, "w1")  # a rebuild's generation: its switch brings indexed segments
    assert not index.compact("w1")
    index.close()


def test_a_compaction_never_switches_to_a_copy_that_lost_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction copies the serving shard's files (here a second time, indexed
    segments beside plain ones); a copy found with fewer points than the serving shard
    is discarded, never served."""
    index = EdgeIndex(tmp_path)
    index.ensure_collection(DIMENSION)
    first = [point(facts(), f"first card {n}") for n in range(150)]
    index.upsert(first)
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 100)
    monkeypatch.setattr("tht.memory.index.edge.IN_PROCESS_OPTIMIZE_BYTES", 0)
    assert index.compact("w1") == 150
    later = [point(facts(), f"later card {n}") for n in range(120)]
    index.upsert(later)
    serving = index.workspace_path("w1")
    copy_serving = EdgeIndex._copy_serving

    def losing_a_point(self: EdgeIndex, workspace: str):  # a torn copy, say
        generation = copy_serving(self, workspace)
        shard = qe.EdgeShard.load(str(generation.path))
        shard.update(qe.UpdateOperation.delete_points([later[0].id]))
        shard.close()
        return generation

    monkeypatch.setattr(EdgeIndex, "_copy_serving", losing_a_point)
    with pytest.raises(IndexUnavailable, match="holds 269 points, the serving shard 270"):
        index.compact("w1")
    assert index.workspace_path("w1") == serving and index.count("w1") == 270
    assert sorted(p.name for p in serving.parent.iterdir()) == sorted(
        ["w1.current", serving.name, "w1.written"]  # no copy left; still owed
    )
    monkeypatch.undo()
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 100)
    assert index.compact("w1") == 270
    assert index.workspace_path("w1") != serving and index.count("w1") == 270
    found = search(index, "later card 7", everything())
    assert found[0].id == later[7].id
    index.close()


_OPTIMIZING = """
import sys
from tht.memory.index import EdgeIndex, edge
from tht.memory.index.port import begin_generation
edge.IN_PROCESS_OPTIMIZE_BYTES = 0
index = EdgeIndex(sys.argv[1])
index.ensure_collection(4)
begin_generation(index, "w1").optimize()
"""


def _optimizers_of(parent: int) -> list[int]:
    """The optimizer children of ``parent`` (its pid is one of their arguments), whichever
    other processes come and go meanwhile (the suite runs on several workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or gone since the listing
            continue
        if any(a.endswith(b"edge_optimizer.py") for a in argv) and str(parent).encode() in argv:
            found.append(int(entry.name))
    return found


def test_a_service_killed_during_an_optimize_leaves_no_optimizer_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an orphan would go on writing a generation the next rebuild may take up or remove
    marker = _paused_at("edge.optimizing", tmp_path, monkeypatch)
    service = subprocess.Popen([sys.executable, "-c", _OPTIMIZING, str(tmp_path / "index")])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert service.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        (optimizer,) = _optimizers_of(service.pid)
        assert alive(optimizer)
        service.kill()
        service.wait()
        assert wait_for(lambda: not alive(optimizer), 10), (
            "the optimizer outlived the killed process"
        )
    finally:
        service.kill()
        marker.unlink(missing_ok=True)
