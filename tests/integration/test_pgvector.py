"""The pgvector projection engine: the pgvector repository specification's tests
(a1-a8) adapted to the SearchIndex port, the planner evidence for the partial HNSW
indexes, BM25 equal to Qdrant's, row-level security of the projection tables, and the
migration pack. Real PostgreSQL (the test's own database), no mocks.

Vectors that a test asserts on are written by hand (a deterministic embedder in the
strongest sense), so distances can be computed here and compared.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import uuid
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
import qdrant_edge as qe
from psycopg import sql
from psycopg.types.json import Jsonb

from tests.factories import card
from tht.bootstrap import migration_packs
from tht.db.embedded import RUNTIME, EmbeddedPostgres
from tht.errors import ConfigurationError, MigrationRefused, SchemaNotReady
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import HashingEmbedder, SparseEncoder, SparseVector
from tht.memory.index import EdgeIndex, IndexPoint, IndexUnavailable
from tht.memory.index import filters as f
from tht.memory.index import pgvector as pv
from tht.memory.index.pgvector import IndexSchemaNotReady, PgVectorIndex
from tht.memory.index.pgvector_migrations import PACK
from tht.memory.indexing import IndexProjector
from tht.memory.migrations import migrate
from tht.memory.model import FAMILIES, card_id_to_uuid
from tht.memory.recall_filters import CardFacts, RecallFilters
from tht.memory.recall_service import RecallQuery, RecallService

SQL_DIR = Path(pv.__file__).with_name("pgvector_sql")
TABLES = ("points", "vectors", "bm25_vectors", "document_frequencies")
ENCODER = SparseEncoder("en")
NO_TERMS = SparseVector([], [])


@pytest.fixture
def index(database):
    opened = PgVectorIndex(database.runtime, "memory", timeout=5)
    yield opened
    opened.close()


def facts(workspace="w1", family="sql_rule", scope=None, concepts=()):
    return CardFacts(workspace=workspace, family=family, scope=scope, concepts=concepts)


def point(
    dense, *, workspace="w1", family="sql_rule", text=None, symptom=None, revision=1, point_id=None
):
    return IndexPoint(
        point_id or uuid.uuid4(),
        dense,
        ENCODER.encode_document(text) if text else NO_TERMS,
        facts(workspace, family),
        revision,
        "fp-1",
        symptom,
    )


def everything(workspace="w1", families=FAMILIES):
    return RecallFilters(workspace=workspace, families=tuple(families))


def cosine_distance(a, b):
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return 1 - dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def superuser_rows(database, query, params=()):
    with psycopg.connect(database.superuser) as conn:
        return conn.execute(query, params).fetchall()


# -- a1: idempotent upsert, rebuild with the same rows ----------------------------


def _snapshot(database):
    """Every projection row with its row version (xmin): a rewrite changes xmin."""
    return {
        table: sorted(
            superuser_rows(
                database,
                sql.SQL("SELECT xmin::text, t::text FROM {} t").format(
                    sql.Identifier("thoth_memory_pgvector", table)
                ),
            )
        )
        for table in TABLES
    }


def test_a1_upserting_the_same_point_twice_leaves_one_row_and_rewrites_nothing(database, index):
    index.ensure_collection(3)
    same = point([1.0, 0.0, 0.0], text="revenue is net of refunds", symptom=[0.0, 1.0, 0.0])
    index.upsert([same])
    before = _snapshot(database)
    index.upsert([same])
    index.upsert([same, same])  # twice in one batch as well
    assert superuser_rows(database, "SELECT count(*) FROM thoth_memory_pgvector.points") == [(1,)]
    assert superuser_rows(
        database, "SELECT kind FROM thoth_memory_pgvector.vectors ORDER BY kind"
    ) == [("symptom",), ("text",)]
    assert _snapshot(database) == before  # same rows, same row versions: no churn

    index.upsert(
        [point([1.0, 0.0, 0.0], text="revenue is net of refunds", revision=2, point_id=same.id)]
    )
    assert superuser_rows(database, "SELECT revision FROM thoth_memory_pgvector.points") == [(2,)]
    # the new version has no symptom: the old symptom vector is gone with it
    assert superuser_rows(database, "SELECT kind FROM thoth_memory_pgvector.vectors") == [("text",)]


def test_a1_rebuild_is_safe_at_any_time_and_produces_the_same_rows(database, archive):
    WorkspaceService(archive).create("acme", "en")
    index = PgVectorIndex(database.runtime)
    projector = IndexProjector(archive, index, HashingEmbedder(16))
    memory = MemoryService(archive, projector)
    for i in range(5):
        memory.create_card("acme", card(title=f"Rule {i}"))
    memory.create_card("acme", card("explained_error", title="Twice counted"))
    projector.rebuild("acme")
    first = _contents(database)
    summary = projector.rebuild("acme")
    assert summary["indexed"] == 6 and summary["failed"] == 0 and summary["generation"] == "new"
    # the same rows, in the new generation; the replaced generation's rows are gone
    assert _contents(database) == first
    assert superuser_rows(
        database, "SELECT DISTINCT generation FROM thoth_memory_pgvector.points"
    ) == [(2,)]
    index.close()


def _contents(database):
    """Every projection row without its generation (and time of writing)."""
    return {
        table: sorted(
            superuser_rows(
                database,
                sql.SQL(
                    "SELECT (to_jsonb(t) - 'generation' - 'indexed_at')::text FROM {} t"
                ).format(sql.Identifier("thoth_memory_pgvector", table)),
            )
        )
        for table in TABLES
    }


# -- a2: the write order is a real constraint -------------------------------------


def _runtime_transaction(conn, workspace):
    conn.execute(
        pv.queries()["set_context"], {"workspace": workspace, "lock": True, "collection": "memory"}
    )


def test_a2_vectors_before_their_point_are_rejected_and_the_adapter_order_succeeds(database, index):
    index.ensure_collection(3)
    target = point([1.0, 2.0, 3.0], text="orders are counted once")
    row = pv._point_row(target)
    scope = {"collection": "memory", "workspace": "w1", "generation": 0, "ids": [target.id]}
    vectors = Jsonb([{"point_id": str(target.id), "kind": "text", "embedding": "[1,2,3]"}])
    with psycopg.connect(database.runtime) as conn:
        # single pass, vectors first: the foreign key to the point rejects them
        with pytest.raises(psycopg.errors.ForeignKeyViolation), conn.transaction():
            _runtime_transaction(conn, "w1")
            conn.execute(
                pv.queries()["vectors_upsert"], {**scope, "dimension": 3, "vectors": vectors}
            )
        with pytest.raises(psycopg.errors.ForeignKeyViolation), conn.transaction():
            _runtime_transaction(conn, "w1")
            conn.execute(pv.queries()["bm25_upsert"], {**scope, "points": Jsonb([row])})
        # the adapter's order: the point, then its vectors
        with conn.transaction():
            _runtime_transaction(conn, "w1")
            conn.execute(pv.queries()["frequencies_apply"], {**scope, "points": Jsonb([row])})
            conn.execute(pv.queries()["points_upsert"], {**scope, "points": Jsonb([row])})
            conn.execute(pv.queries()["bm25_upsert"], {**scope, "points": Jsonb([row])})
            conn.execute(
                pv.queries()["vectors_upsert"], {**scope, "dimension": 3, "vectors": vectors}
            )
    assert index.dense_search([1.0, 2.0, 3.0], everything(), 5)[0][0] == target.id
    assert [
        hit.id for hit in index.bm25_search(ENCODER.encode_query("orders"), everything(), 5)
    ] == [target.id]
    # a vector must also have its collection's dimension
    with (
        psycopg.connect(database.runtime) as conn,
        pytest.raises(psycopg.errors.ForeignKeyViolation),
    ):
        with conn.transaction():
            _runtime_transaction(conn, "w1")
            conn.execute(
                pv.queries()["vectors_upsert"],
                {
                    **scope,
                    "dimension": 2,
                    "vectors": Jsonb(
                        [{"point_id": str(target.id), "kind": "symptom", "embedding": "[1,2]"}]
                    ),
                },
            )


# -- a3: nearest first, raw cosine distance ---------------------------------------


def test_a3_search_orders_by_hand_computed_cosine_distance(index):
    index.ensure_collection(3)
    vectors = {
        "a": [1.0, 0.0, 0.0],
        "b": [1.0, 1.0, 0.0],
        "c": [0.0, 1.0, 1.0],
        "d": [-1.0, 0.5, 0.0],
    }
    points = {name: point(vector) for name, vector in vectors.items()}
    index.upsert(list(points.values()))
    query = [0.9, 0.4, 0.1]
    expected = sorted(vectors, key=lambda name: cosine_distance(vectors[name], query))
    assert expected == ["b", "a", "c", "d"]  # the fixture really discriminates

    found = index.dense_search(query, everything(), 10)
    assert [point_id for point_id, _, _ in found] == [points[name].id for name in expected]
    for (_, kind, distance), name in zip(found, expected, strict=True):
        assert kind == "text"
        assert distance == pytest.approx(
            cosine_distance(vectors[name], query), abs=1e-6
        )  # raw, not a similarity

    hits = index.hybrid_search(query, NO_TERMS, everything(), 10)
    assert [hit.id for hit in hits] == [points[name].id for name in expected]
    assert [hit.dense_rank for hit in hits] == [1, 2, 3, 4] and all(
        hit.bm25_rank is None for hit in hits
    )
    assert [hit.distance for hit in hits] == [distance for _, _, distance in found]


# -- a4: the kind of vector -------------------------------------------------------


def test_a4_each_kind_query_searches_only_its_kind_and_hits_say_which_matched(database, index):
    index.ensure_collection(3)
    explained = point([1.0, 0.0, 0.0], family="explained_error", symptom=[0.0, 1.0, 0.0])
    topical = point([0.0, 1.0, 0.5])
    index.upsert([explained, topical])
    query = [0.0, 1.0, 0.0]

    def kind_rows(kind):
        where, params = pv._Where().build(f.recall_condition(everything()))
        params.update(
            collection="memory",
            workspace="w1",
            generation=0,
            limit=10,
            query=pv._vector_text(query),
        )
        with psycopg.connect(database.runtime) as conn, conn.transaction():
            _runtime_transaction(conn, "w1")
            return [
                (row[0], row[1]) for row in conn.execute(pv.DENSE_QUERIES[kind](3, where), params)
            ]

    # the symptom query sees only symptom vectors, the text query only text vectors
    assert kind_rows("symptom") == [(explained.id, pytest.approx(0.0, abs=1e-6))]
    assert kind_rows("text") == [
        (topical.id, pytest.approx(cosine_distance([0, 1, 0.5], query), abs=1e-6)),
        (explained.id, pytest.approx(1.0, abs=1e-6)),
    ]
    first, second = index.hybrid_search(query, NO_TERMS, everything(), 10)
    assert (first.id, first.matched_kind, second.id, second.matched_kind) == (
        explained.id,
        "symptom",
        topical.id,
        "text",
    )
    # the filters hold inside the symptom branch too
    rules_only = index.hybrid_search(query, NO_TERMS, everything(families=["sql_rule"]), 10)
    assert [hit.id for hit in rules_only] == [topical.id]


# -- a5: workspace isolation ------------------------------------------------------


def test_a5_identical_text_in_two_workspaces_never_crosses(index):
    index.ensure_collection(16)
    embedder = HashingEmbedder(16)
    text = "net revenue excludes refunds"
    vector = embedder.embed_passages([text])[0]
    mine = [
        point(vector, workspace="w1", family="explained_error", text=text, symptom=vector)
        for _ in range(3)
    ]
    theirs = [
        point(vector, workspace="w2", family="explained_error", text=text, symptom=vector)
        for _ in range(3)
    ]
    index.upsert(mine + theirs)
    query, terms = embedder.embed_query(text), ENCODER.encode_query(text)
    for workspace, expected in (("w1", mine), ("w2", theirs)):
        hits = index.hybrid_search(query, terms, everything(workspace), 50)
        assert {hit.id for hit in hits} == {p.id for p in expected}
        assert all(hit.bm25_rank and hit.dense_rank for hit in hits)
        assert {p.id for p in index.bm25_search(terms, everything(workspace), 50)} == {
            p.id for p in expected
        }
        assert {i for i, _, _ in index.dense_search(query, everything(workspace), 50)} == {
            p.id for p in expected
        }
    assert index.hybrid_search(query, terms, everything("w3"), 50) == []


# -- a6: workspace-scoped clear ---------------------------------------------------


def test_a6_clearing_one_workspace_leaves_the_other_intact_and_no_orphans(database, index):
    index.ensure_collection(16)
    embedder = HashingEmbedder(16)
    texts = [f"fiscal year rule {n}" for n in range(4)]

    def points_of(workspace):
        return [
            point(
                embedder.embed_passages([t])[0],
                workspace=workspace,
                family="explained_error",
                text=t,
                symptom=embedder.embed_passages(["error " + t])[0],
            )
            for t in texts
        ]

    index.upsert(points_of("w1") + points_of("w2"))
    query, terms = embedder.embed_query("fiscal year"), ENCODER.encode_query("fiscal year")
    before = index.hybrid_search(query, terms, everything("w2"), 10)
    frequencies = superuser_rows(
        database,
        "SELECT term, df FROM thoth_memory_pgvector.document_frequencies"
        " WHERE workspace_id = 'w2' ORDER BY term",
    )

    assert index.clear_workspace("w1") == 4
    assert index.count("w1") == 0 and index.hybrid_search(query, terms, everything("w1"), 10) == []
    assert (
        index.count("w2") == 4 and index.hybrid_search(query, terms, everything("w2"), 10) == before
    )
    for table in TABLES:
        assert superuser_rows(
            database,
            sql.SQL("SELECT count(*) FROM {} WHERE workspace_id = 'w1'").format(
                sql.Identifier("thoth_memory_pgvector", table)
            ),
        ) == [(0,)]
    assert (
        superuser_rows(
            database,
            "SELECT term, df FROM thoth_memory_pgvector.document_frequencies"
            " WHERE workspace_id = 'w2' ORDER BY term",
        )
        == frequencies
    )
    assert superuser_rows(
        database, "SELECT count(*) FROM thoth_memory_pgvector.vectors WHERE workspace_id = 'w2'"
    ) == [(8,)]


# -- a7: embedding batches across cards and kinds --------------------------------


def test_a7_embedding_batches_of_32_run_across_cards_and_both_kinds(database, archive):
    WorkspaceService(archive).create("acme", "en")
    index = PgVectorIndex(database.runtime)
    embedder = HashingEmbedder(16)
    projector = IndexProjector(archive, index, embedder)
    memory = MemoryService(archive, projector)
    for i in range(72):
        memory.create_card("acme", card(title=f"Card {i}"))
    for i in range(28):  # a symptom projection each: 100 + 28 = 128 texts
        memory.create_card(
            "acme", card("explained_error", title=f"Error {i}", context=f"division by zero {i}")
        )
    embedder.calls = 0
    summary = projector.rebuild("acme")
    # 4 = ceil(128 / 32); a batch per kind would take 4 + 1, per card 128
    assert summary["indexed"] == 100 and embedder.calls == 4
    assert superuser_rows(
        database,
        "SELECT kind, count(*) FROM thoth_memory_pgvector.vectors GROUP BY kind ORDER BY kind",
    ) == [("symptom", 28), ("text", 100)]
    index.close()


# -- a8: links walked over the pgvector projection --------------------------------


def test_a8_a_two_level_link_graph_is_walked_from_pgvector_hits(database, archive):
    for workspace in ("acme", "other"):
        WorkspaceService(archive).create(workspace, "en")
    index = PgVectorIndex(database.runtime)
    embedder = HashingEmbedder(64)
    projector = IndexProjector(archive, index, embedder)
    memory = MemoryService(archive, projector)
    recall = RecallService(archive, index, embedder, projector.format)

    def add(**fields):
        return memory.create_card("acme", card(**fields)).card

    grandchild = add(title="Carrier lookup table", content="use the carriers dimension")
    hidden = add(title="Payroll carriers", content="carrier benefit codes", scope="HR")
    child = add(
        title="Carrier codes",
        content="carrier identifiers are three letters",
        links=[{"target": grandchild.id, "meaning": "stored in"}],
    )
    root = add(
        title="Shipped order",
        content="an order is shipped when every line shipped",
        links=[{"target": child.id, "meaning": "uses"}, {"target": hidden.id, "meaning": "see"}],
    )
    results = {
        r.card.id: r
        for r in recall.recall(
            "acme", "when is an order shipped", "search", query=RecallQuery(top=20, scope="Sales")
        )
    }
    assert hidden.id not in results  # out of scope: neither returned nor a bridge
    assert results[root.id].ranked.path == (root.id,) and results[root.id].ranked.seed_rank == 1
    path = results[grandchild.id].ranked.path
    # the strongest path to the grandchild is a chain of real links ending at it
    links = {root.id: {child.id: "uses", hidden.id: "see"}, child.id: {grandchild.id: "stored in"}}
    assert path[-2:] == (child.id, grandchild.id)
    assert list(results[grandchild.id].ranked.meanings) == [
        links[a][b] for a, b in itertools.pairwise(path)
    ]
    assert results[root.id].as_json()["retrieval"]["matched_kind"] == "text"
    index.close()


# -- the planner: a partial HNSW index per kind, chosen because of the literal -----


def _generic(query: sql.Composable, params: dict, conn: psycopg.Connection) -> str:
    """The statement with every parameter as $n: what a prepared statement's generic
    plan sees (psycopg prepares a statement after five executions)."""
    text = query.as_string(conn) if isinstance(query, sql.Composable) else query
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))
    assert set(names) <= set(params)
    for position, name in enumerate(names, start=1):
        text = text.replace(f"%({name})s", f"${position}")
    return text


def _plan(conn: psycopg.Connection, text: str) -> str:
    return "\n".join(row[0] for row in conn.execute("EXPLAIN (GENERIC_PLAN) " + text))


@pytest.fixture
def populated(database, index):
    """2000 points (every fourth an explained error with a symptom), analyzed."""
    index.ensure_collection(64)
    embedder, rng = HashingEmbedder(64), random.Random(4)
    words = [f"word{n}" for n in range(300)]
    points = []
    for n in range(2000):
        text = " ".join(rng.choices(words, k=8))
        family = FAMILIES[n % 4]
        symptom = (
            embedder.embed_passages(["error " + text])[0] if family == "explained_error" else None
        )
        points.append(
            point(embedder.embed_passages([text])[0], family=family, text=text, symptom=symptom)
        )
    for start in range(0, len(points), 500):
        index.upsert(points[start : start + 500])
    index.optimize()  # the planner's statistics, as after a rebuild
    return embedder, points


@pytest.mark.parametrize("kind", ["text", "symptom"])
def test_each_kind_uses_its_partial_hnsw_index_and_a_bind_parameter_would_not(
    database, populated, kind
):
    embedder, _ = populated
    where, params = pv._Where().build(f.recall_condition(everything()))
    params.update(
        collection="memory",
        workspace="w1",
        generation=0,
        limit=20,
        query=pv._vector_text(embedder.embed_query("x")),
    )
    with psycopg.connect(database.runtime) as conn, conn.transaction():
        _runtime_transaction(conn, "w1")
        adapter_query = pv.DENSE_QUERIES[kind](64, where)
        plan = _plan(conn, _generic(adapter_query, params, conn))
        assert f"Index Scan using vectors_{kind}_hnsw_64 on vectors" in plan, plan
        # the same statement with the kind as a bind parameter: the generic plan cannot
        # prove the partial index and sorts a scan of the vectors instead
        bound = adapter_query.as_string(conn).replace(f"v.kind = '{kind}'", "v.kind = %(kind)s")
        assert bound != adapter_query.as_string(conn)
        plan = _plan(conn, _generic(bound, {**params, "kind": kind}, conn))
        assert "hnsw" not in plan and "Seq Scan on vectors" in plan and "Sort" in plan, plan


@pytest.mark.parametrize("kind", ["text", "symptom"])
def test_the_kind_is_a_literal_in_its_own_query_file(kind):
    text = (SQL_DIR / f"dense_{kind}.sql").read_text()
    statement = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    assert f"v.kind = '{kind}'" in statement
    other = {"text": "symptom", "symptom": "text"}[kind]
    assert f"'{other}'" not in statement
    assert not re.search(r"kind\s*=\s*(%\(|\$|ANY)", statement)
    assert "<=>" in statement and "vector_cosine_ops" not in statement  # the operator of the index


def test_filtered_search_returns_full_lists_thanks_to_iterative_scans(database, populated):
    embedder, points = populated
    wanted = ("domain_clarification", "sql_rule", "solved_question")  # three points in four
    filters = everything(families=wanted)
    query = embedder.embed_query("word1 word2 word3")
    index = PgVectorIndex(database.runtime)
    found = index.dense_search(query, filters, 100)
    index.close()
    assert len(found) == 100
    families = {p.id: p.card.family for p in points}
    assert {families[i] for i, _, _ in found} <= set(wanted)
    # the same statement without iterative scans stops at hnsw.ef_search candidates
    where, params = pv._Where().build(f.recall_condition(filters))
    params.update(
        collection="memory", workspace="w1", generation=0, limit=100, query=pv._vector_text(query)
    )
    with psycopg.connect(database.runtime) as conn, conn.transaction():
        _runtime_transaction(conn, "w1")
        plan = "\n".join(
            r[0] for r in conn.execute(sql.SQL("EXPLAIN ") + pv.text_query(64, where), params)
        )
        assert "vectors_text_hnsw_64" in plan  # the case iterative scans are for
        conn.execute("SET LOCAL hnsw.iterative_scan = off")
        assert len(conn.execute(pv.text_query(64, where), params).fetchall()) < 100


def test_the_symptom_scan_is_skipped_when_no_point_with_a_symptom_passes_the_filter(
    database, populated
):
    embedder, points = populated
    query = embedder.embed_query("error word1 word2")
    index = PgVectorIndex(database.runtime)
    others = everything(families=("domain_clarification", "sql_rule"))
    errors = everything(families=("explained_error",))
    found = index.dense_search(query, others, 20)
    assert len(found) == 20 and {kind for _, kind, _ in found} == {"text"}
    assert "symptom" in {kind for _, kind, _ in index.dense_search(query, errors, 20)}

    def symptom_scan(filters: RecallFilters) -> str:
        where, params = pv._Where().build(f.recall_condition(filters))
        params.update(
            collection="memory",
            workspace="w1",
            generation=0,
            limit=20,
            query=pv._vector_text(query),
        )
        with psycopg.connect(database.runtime) as conn, conn.transaction():
            _runtime_transaction(conn, "w1")
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            plan = conn.execute(
                sql.SQL("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ") + pv.symptom_query(64, where),
                params,
            ).fetchall()
        (line,) = [row[0] for row in plan if "vectors_symptom_hnsw_64" in row[0]]
        return line

    # the gate finds no explained error among the filtered points: the scan never runs
    # (without it, it read every symptom vector and the filter refused each one)
    assert "never executed" in symptom_scan(others)
    assert "never executed" not in symptom_scan(errors)
    # the flag follows the symptom: a point that loses it is no longer one the gate finds
    error = next(p for p in points if p.symptom is not None)
    index.upsert([replace(error, symptom=None)])
    flagged = superuser_rows(
        database,
        "SELECT symptom FROM thoth_memory_pgvector.points WHERE id = %s",
        (error.id,),
    )
    assert flagged == [(False,)]
    assert superuser_rows(
        database,
        "SELECT count(*) FROM thoth_memory_pgvector.points p WHERE p.symptom <> EXISTS ("
        " SELECT 1 FROM thoth_memory_pgvector.vectors v WHERE v.point_id = p.id"
        " AND v.kind = 'symptom')",
    ) == [(0,)]
    index.close()


# -- BM25: Qdrant's scores, computed in PostgreSQL ---------------------------------


def test_idf_is_qdrants_formula():
    for documents, df in [(1, 1), (4, 1), (4, 3), (10, 0), (1000, 7), (3, 3)]:
        assert pv.bm25_idf(documents, df) == pytest.approx(
            math.log((documents - df + 0.5) / (df + 0.5) + 1), rel=1e-6
        )


def test_bm25_scores_equal_hand_computed_values(index):
    index.ensure_collection(2)
    texts = ["alpha beta", "beta gamma", "the", "alpha alpha delta beta"]
    points = [point([1.0, 0.5], text=t) for t in texts]
    index.upsert(points + [point([1.0, 0.5], workspace="w2", text="alpha") for _ in range(7)])
    query = ENCODER.encode_query("alpha beta delta")
    documents = [ENCODER.encode_document(t) for t in texts]

    def by_hand(document):
        score = 0.0
        for term in query.indices:
            if term in document.indices:
                df = sum(term in other.indices for other in documents)  # this workspace only
                idf = math.log((len(documents) - df + 0.5) / (df + 0.5) + 1)
                score += idf * document.values[document.indices.index(term)]
        return score

    expected = {p.id: by_hand(d) for p, d in zip(points, documents, strict=True) if by_hand(d) > 0}
    found = {hit.id: hit.score for hit in index.bm25_search(query, everything(), 10)}
    assert found.keys() == expected.keys() and len(found) == 3  # not "the": stop words only
    for point_id, score in found.items():
        assert score == pytest.approx(expected[point_id], rel=1e-6)


def test_bm25_scores_equal_qdrant_edges_over_the_workspace_after_updates(index, tmp_path):
    rng = random.Random(8)
    words = [
        "revenue",
        "refund",
        "order",
        "invoice",
        "fiscal",
        "year",
        "customer",
        "churn",
        "margin",
        "the",
    ]
    edge = EdgeIndex(tmp_path / "edge")
    edge.ensure_collection(2)
    index.ensure_collection(2)
    points = [
        point(
            [1.0, rng.random()],
            workspace=rng.choice(["w1", "w1", "w2"]),
            text=" ".join(rng.choices(words, k=rng.randint(1, 12))),
        )
        for _ in range(60)
    ]
    replaced = [
        point([1.0, 0.0], workspace=p.card.workspace, text="refund refund margin", point_id=p.id)
        for p in points[:10]
    ]
    index.upsert(points)
    index.upsert(replaced)  # document frequencies follow replacements...
    for workspace in ("w1", "w2"):  # ...and deletes
        index.delete(workspace, [p.id for p in points[10:20] if p.card.workspace == workspace])
    # Qdrant's figure over the live points: Edge, given only them (a shard counts
    # replaced and deleted points in its IDF until they are vacuumed).
    edge.upsert(replaced + points[20:])
    for question in ["refund margin", "fiscal year revenue", "the churn", "invoice"]:
        query = ENCODER.encode_query(question)
        # Edge keeps one shard per workspace: its IDF is the workspace's
        request = qe.QueryRequest(
            limit=100,
            query=qe.Query.Nearest(qe.SparseVector(query.indices, query.values), using="bm25"),
        )
        with edge.session():
            qdrant = {p.id: p.score for p in edge.shard("w1").query(request)}
        ours = {hit.id: hit.score for hit in index.bm25_search(query, everything(), 100)}
        assert ours.keys() == qdrant.keys() and ours, question
        for point_id, score in ours.items():
            assert score == pytest.approx(qdrant[point_id], rel=1e-5), question
    edge.close()


def test_document_frequencies_always_equal_a_recount(database, index):
    index.ensure_collection(2)
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    live: dict[uuid.UUID, IndexPoint] = {}
    for _ in range(40):
        action = rng.choice(["new", "new", "replace", "same", "delete"])
        if action == "new" or not live:
            p = point(
                [1.0, 1.0],
                workspace=rng.choice(["w1", "w2"]),
                text=" ".join(rng.choices(words, k=3)),
            )
            index.upsert([p])
        elif action == "replace":
            old = rng.choice(list(live.values()))
            p = point(
                [1.0, 1.0],
                workspace=old.card.workspace,
                text=" ".join(rng.choices(words, k=4)),
                point_id=old.id,
            )
            index.upsert([p])
        elif action == "same":
            p = rng.choice(list(live.values()))
            index.upsert([p])
        else:
            p = live.pop(rng.choice(list(live)))
            index.delete(p.card.workspace, [p.id])
            continue
        live[p.id] = p
        # term -1 counts every point: the workspace's point count
        recount = superuser_rows(
            database,
            "SELECT workspace_id, term, count(*)::int"
            " FROM thoth_memory_pgvector.bm25_vectors,"
            " unnest(array_append(terms, -1)) AS term GROUP BY 1, 2 ORDER BY 1, 2",
        )
        stored = superuser_rows(
            database,
            "SELECT workspace_id, term, df"
            " FROM thoth_memory_pgvector.document_frequencies ORDER BY 1, 2",
        )
        assert stored == recount
    expected = sorted(
        {(p.card.workspace, t) for p in live.values() for t in [*p.sparse.indices, -1]}
    )
    assert [(w, t) for w, t, _ in stored] == expected
    workspaces = sorted({p.card.workspace for p in live.values()})
    assert [(w, df) for w, t, df in stored if t == -1] == [
        (w, sum(p.card.workspace == w for p in live.values())) for w in workspaces
    ]


# -- tenancy: forced row-level security on the projection tables -----------------


def test_projection_tables_have_forced_rls_and_see_only_the_transactions_workspace(database, index):
    index.ensure_collection(2)
    index.upsert(
        [
            point(
                [1.0, 0.0],
                workspace=w,
                family="explained_error",
                text="revenue",
                symptom=[0.0, 1.0],
            )
            for w in ("w1", "w2")
        ]
    )
    flags = superuser_rows(
        database,
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'thoth_memory_pgvector' AND c.relkind = 'r' ORDER BY 1",
    )
    assert flags == [
        (name, True, True)
        for name in (
            "bm25_vectors",
            "collections",
            "document_frequencies",
            "generations",
            "points",
            "schema_migrations",
            "vectors",
        )
    ]
    for workspace in ("w1", "w2"):  # each workspace's generations row
        index.begin_generation(workspace)
    with psycopg.connect(database.runtime) as conn:
        for table in (*TABLES, "generations"):
            name = sql.Identifier("thoth_memory_pgvector", table)
            for workspace, visible in (("w1", {"w1"}), ("w2", {"w2"}), ("", set())):
                with conn.transaction():
                    _runtime_transaction(conn, workspace)
                    seen = {
                        w
                        for (w,) in conn.execute(
                            sql.SQL("SELECT workspace_id FROM {}").format(name)
                        )
                    }
                    assert seen == visible, (table, workspace)
                    if workspace != "w2":  # another workspace's rows cannot be changed or removed
                        assert (
                            conn.execute(
                                sql.SQL(
                                    "UPDATE {} SET workspace_id = workspace_id"
                                    " WHERE workspace_id = 'w2'"
                                ).format(name)
                            ).rowcount
                            == 0
                        )
                        assert (
                            conn.execute(
                                sql.SQL("DELETE FROM {} WHERE workspace_id = 'w2'").format(name)
                            ).rowcount
                            == 0
                        )
            # moving a row into another workspace is refused by the policy's WITH CHECK
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                _runtime_transaction(conn, "w1")
                conn.execute(
                    sql.SQL("UPDATE {} SET workspace_id = 'w2' WHERE workspace_id = 'w1'").format(
                        name
                    )
                )
        # and the runtime has no DDL
        for ddl in (
            "CREATE TABLE thoth_memory_pgvector.intruder (x int)",
            "CREATE INDEX intruder ON thoth_memory_pgvector.points (scope)",
            "DROP TABLE thoth_memory_pgvector.points",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                _runtime_transaction(conn, "w1")
                conn.execute(ddl)
    assert index.count("w1") == 1 and index.count("w2") == 1  # nothing above changed a row


# -- readiness, errors and wiring ------------------------------------------------------


def test_missing_pgvector_schema_is_schema_not_ready_naming_the_step(empty_database):
    index = PgVectorIndex(empty_database.runtime, timeout=5)
    with pytest.raises(IndexSchemaNotReady) as caught:
        index.collection_exists()
    error = caught.value
    # a SchemaNotReady, and an IndexUnavailable: a save stays pending rather than failing
    assert isinstance(error, SchemaNotReady) and isinstance(error, IndexUnavailable)
    assert "tht memory migrate --engine pgvector" in error.message and error.exit_code == 8
    index.close()


def test_old_or_changed_pgvector_schema_is_refused(database):
    with psycopg.connect(database.migrator) as conn:
        conn.execute("UPDATE thoth_memory_pgvector.schema_migrations SET checksum = 'tampered'")
    with pytest.raises(IndexSchemaNotReady, match="checksum"):
        PgVectorIndex(database.runtime).count("w1")
    with psycopg.connect(database.migrator) as conn:
        conn.execute("DELETE FROM thoth_memory_pgvector.schema_migrations")
    with pytest.raises(IndexSchemaNotReady, match="missing: 001_projection"):
        PgVectorIndex(database.runtime).count("w1")


def test_a_save_without_the_pgvector_tables_is_kept_pending(database, archive):
    WorkspaceService(archive).create("acme", "en")
    with psycopg.connect(database.superuser) as conn:
        conn.execute("DROP SCHEMA thoth_memory_pgvector CASCADE")
    index = PgVectorIndex(database.runtime)
    memory = MemoryService(archive, IndexProjector(archive, index, HashingEmbedder(16)))
    result = memory.create_card("acme", card())
    assert result.status == "saved_index_incomplete" and "--engine pgvector" in result.index.error
    assert [p.card_id for p in memory.pending("acme")] == [result.card.id]
    index.close()


def test_unreachable_database_is_index_unavailable():
    index = PgVectorIndex("host=127.0.0.1 port=1 dbname=thoth user=nobody", timeout=1)
    with pytest.raises(IndexUnavailable, match="pgvector index") as caught:
        index.collection_exists()
    assert caught.value.code == "index_unavailable" and caught.value.http_status == 503
    index.close()


def test_missing_extension_is_refused_with_the_dba_step(empty_database):
    from tht.bootstrap import run_migrations

    with pytest.raises(
        MigrationRefused,
        match=r"a superuser \(the DBA\) must first run \"CREATE EXTENSION vector;\"",
    ):
        run_migrations(empty_database.env(), engine="pgvector")
    # the archive's pack was applied, the pgvector pack rolled back entirely
    with psycopg.connect(empty_database.superuser) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'thoth_memory'"
        ).fetchone() == (1,)
        assert conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'thoth_memory_pgvector'"
            " AND tablename <> 'schema_migrations'"
        ).fetchone() == (0,)
    with psycopg.connect(empty_database.superuser, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")  # what the DBA does
    report = run_migrations(empty_database.env(), engine="pgvector")
    assert report["pgvector"]["applied"] == [
        "001_projection",
        "002_generations",
        "003_symptom_points",
    ]
    assert PgVectorIndex(empty_database.runtime).collection_exists() is False


def test_the_pgvector_pack_is_its_own_ledger_and_a_second_run_is_a_noop(database):
    with psycopg.connect(database.migrator, autocommit=True) as conn:
        report = migrate(conn, runtime_login=RUNTIME, pack=PACK)
        archive = conn.execute(
            "SELECT count(*) FROM thoth_memory.schema_migrations WHERE name = 'projection'"
        ).fetchone()
    assert report["applied"] == [] and report["already_applied"] == [
        "001_projection",
        "002_generations",
        "003_symptom_points",
    ]
    assert archive == (0,)


def test_engine_pgvector_in_the_installation(cli, runtime_file, tmp_path):
    from tht.installation import load_installation

    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    migrated = cli("memory", "migrate", "--engine", "pgvector")
    assert migrated.code == 0 and migrated.document["pgvector"]["already_applied"] == [
        "001_projection",
        "002_generations",
        "003_symptom_points",
    ]
    config = runtime_file("acme", index="{engine: pgvector}")
    error = tmp_path / "error.json"
    error.write_text(
        '{"family": "explained_error", "title": "Ratio of empty months",'
        ' "context": "division by zero in the revenue ratio", "content": "guard the denominator",'
        ' "rationale": "months without orders"}'
    )
    created = cli("memory", "create", "-c", config, "--data", str(error))
    assert created.code == 0 and created.document["index"]["status"] == "current"
    found = cli("memory", "rules", "division by zero", "-c", config)
    assert found.code == 0
    (result,) = found.document["results"]
    assert (
        result["id"] == created.document["card"]["id"]
        and result["retrieval"]["matched_kind"] == "symptom"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("index: {engine: pgvector, url: 'http://localhost:6333'}\n")
    with pytest.raises(ConfigurationError, match="pgvector"):
        load_installation(bad)


def test_the_embedded_server_prepares_pgvector_when_asked(tmp_path):
    embedded = EmbeddedPostgres(tmp_path / "home")
    try:
        settings, report = embedded.prepare(migration_packs())
        assert "pgvector" not in (report or {})
        with psycopg.connect(embedded.superuser_conninfo("thoth")) as conn:
            assert conn.execute(
                "SELECT count(*) FROM pg_extension WHERE extname = 'vector'"
            ).fetchone() == (0,)
        settings, report = embedded.prepare(migration_packs(engine="pgvector"))
        assert report == {
            "pgvector": {
                "applied": ["001_projection", "002_generations", "003_symptom_points"],
                "already_applied": [],
                "runtime_login": RUNTIME,
            }
        }
        assert embedded.prepare(migration_packs(engine="pgvector")) == (
            settings,
            None,
        )  # prepared once
        index = PgVectorIndex(settings.runtime_conninfo)
        index.ensure_collection(8)
        assert index.count("w1") == 0
        index.close()
    finally:
        embedded.stop()


def test_recall_results_report_the_matched_kind(database, archive):
    WorkspaceService(archive).create("acme", "en")
    index = PgVectorIndex(database.runtime)
    embedder = HashingEmbedder(64)
    projector = IndexProjector(archive, index, embedder)
    memory = MemoryService(archive, projector)
    error = memory.create_card(
        "acme",
        card(
            "explained_error",
            title="Totals multiplied",
            context="ERROR: division by zero in margin ratio",
        ),
    ).card
    rule = memory.create_card("acme", card("sql_rule", title="Margin ratio per product")).card
    results = RecallService(archive, index, embedder, projector.format).recall(
        "acme", "ERROR: division by zero", "rules", query=RecallQuery(top=10)
    )
    kinds = {r.card.id: r.as_json()["retrieval"]["matched_kind"] for r in results}
    assert kinds[error.id] == "symptom" and kinds[rule.id] == "text"
    assert results[0].card.id == error.id
    assert card_id_to_uuid(error.id) in {p.id for p in index.scroll_ids("acme")}
    index.close()
