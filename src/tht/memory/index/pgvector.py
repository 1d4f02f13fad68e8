"""pgvector in the installation's PostgreSQL: the projection engine for installations
that do not want a second service (``index: {engine: pgvector}``).

Tables (schema ``thoth_memory_pgvector``, its own migration pack): ``points`` (one per
card and workspace: the filter facts), ``vectors`` (dense vectors of two kinds, 'text'
and 'symptom'), ``bm25_vectors`` (the BM25 term frequencies), both referencing their
point, and ``document_frequencies`` (per workspace, for the BM25 IDF). A write is one
transaction per workspace, in the order the foreign keys demand: the frequencies move,
then the points are written, then the vectors that reference them.

Search, in one transaction: per vector kind a separate statement whose LITERAL kind
predicate selects that kind's partial HNSW index (cosine distance ``<=>``, kept raw,
nearest first); BM25 as the inner product of the stored term frequencies with the
query's IDF weights (Qdrant's IDF, over the workspace); the filters inside every
branch; the branches fused by the shared client-side RRF (k=60).

Generations (migration 002): every row belongs to a generation of its workspace's
projection, and the workspace's ``generations`` row names the one serving recall and
the one a rebuild is building (``begin_generation``). Reads see only the serving
generation; saves write the serving and the building one, under the workspace's lock;
the switch is one UPDATE of that row under the same lock, after which the replaced
generation's rows are deleted. An interrupted rebuild finds its generation again.

Every transaction runs as ``thoth_memory_runtime`` with the workspace set
transaction-locally, like the archive's: row-level security confines it to that
workspace, and every statement also names the workspace itself.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from tht.db.connector import PostgresConnector, StoreErrors, translate
from tht.errors import Conflict, InvalidInput, SchemaNotReady, ThothError
from tht.faults import crash_point
from tht.memory.embedding.sparse import SparseVector
from tht.memory.index import filters as f
from tht.memory.index.errors import IndexIncompatible, IndexUnavailable
from tht.memory.index.pgvector_migrations import PACK
from tht.memory.index.port import (
    BranchHit,
    Capabilities,
    Generations,
    IndexHit,
    IndexPoint,
    PointRecord,
    fuse,
)
from tht.memory.migrations import check_schema
from tht.memory.recall_filters import RecallFilters
from tht.sqlfiles import named_queries

KINDS = ("text", "symptom")
MAX_DIMENSION = 2000  # pgvector's HNSW indexes vectors of at most 2000 dimensions
# A sparsevec has at most 10^9 dimensions and BM25 term ids are 31-bit hashes: term t
# is stored in column bm25_<t // 10^9> at index t mod 10^9 (see 001_projection.sql).
SPARSE_RANGE = 1_000_000_000
SPARSE_COLUMNS = 3
MAX_TERM = 2**31 - 1
# In document_frequencies, the term every point contains: its frequency is the
# workspace's point count, the N of the IDF.
DOCUMENTS_TERM = -1


class IndexSchemaNotReady(SchemaNotReady, IndexUnavailable):
    """The pgvector engine's tables are missing or older than this code: its migration
    pack is not applied. Also an ``IndexUnavailable``, so a save keeps a retryable
    pending operation instead of failing, and recall reports the index (exit 8)."""

    code = "index_schema_not_ready"
    exit_code = IndexUnavailable.exit_code
    default_message = "the pgvector index tables are missing or not at the expected version"


@cache
def _file(name: str) -> str:
    return resources.files(__package__).joinpath("pgvector_sql", name).read_text()


def queries() -> dict[str, str]:
    return named_queries(__package__, "pgvector_sql/queries.sql")


def _q(name: str) -> str:
    return queries()[name]


# One builder per vector kind, each from its own file with the kind as a literal: the
# literal is what lets the planner use the kind's partial HNSW index. Never build
# these from a kind parameter.
def text_query(dimension: int, where: sql.Composable) -> sql.Composed:
    return sql.SQL(_file("dense_text.sql")).format(dimension=sql.Literal(dimension), filter=where)


def symptom_query(dimension: int, where: sql.Composable) -> sql.Composed:
    return sql.SQL(_file("dense_symptom.sql")).format(
        dimension=sql.Literal(dimension), filter=where
    )


DENSE_QUERIES = {"text": text_query, "symptom": symptom_query}


def bm25_query(where: sql.Composable) -> sql.Composed:
    return sql.SQL(_file("bm25.sql")).format(filter=where)


def bm25_idf(documents: int, df: int) -> float:
    """Qdrant's IDF for sparse vectors with ``Modifier.Idf`` (segment's ``fancy_idf``):
    ln((N - df + 0.5) / (df + 0.5) + 1), N the points of the corpus (here the
    workspace), df those containing the term; in f32 as Qdrant computes it."""
    n, d = np.float32(documents), np.float32(df)
    half, one = np.float32(0.5), np.float32(1.0)
    return float(np.log((n - d + half) / (d + half) + one))


def sparse_columns(indices: Sequence[int], values: Sequence[float]) -> list[str]:
    """The three sparsevec texts of a BM25 vector (1-based indices in the text form)."""
    columns: list[list[str]] = [[] for _ in range(SPARSE_COLUMNS)]
    for index, value in sorted(zip(indices, values, strict=True)):
        if not 0 <= index <= MAX_TERM:
            raise IndexIncompatible(
                f"BM25 term id {index} is outside the 31-bit range the pgvector index stores"
            )
        if value:
            # float32 values printed exactly (repr of the float), so they parse back unchanged
            columns[index // SPARSE_RANGE].append(f"{index % SPARSE_RANGE + 1}:{float(value)!r}")
    return ["{" + ",".join(column) + f"}}/{SPARSE_RANGE}" for column in columns]


def _vector_text(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


@dataclass(frozen=True)
class _Layout(Generations):
    """One workspace's generations, and the collection's dense dimension."""

    dimension: int


class PgVectorIndex:
    def __init__(
        self,
        conninfo: str,
        collection: str = "memory",
        *,
        timeout: float = 10.0,
        max_connections: int = 4,
    ) -> None:
        self.collection = collection
        self.timeout = timeout
        # Connected on first use: building the adapter must not touch the database, so
        # browsing and editing work while it is unreachable.
        self._connector = PostgresConnector(
            conninfo,
            ERRORS,
            max_connections=max_connections,
            timeout=timeout,
            check=_check_schema,
            name="thoth-memory-pgvector",
        )

    # -- collection ---------------------------------------------------------------

    def session(self) -> AbstractContextManager[None]:
        """A database serves many processes: nothing to hold."""
        return nullcontext()

    def check_schema(self) -> None:
        """Raise ``IndexSchemaNotReady`` unless this engine's migrations are applied
        unchanged (checked when the pool opens: a service checks at start)."""
        self._connector.open()

    def collection_exists(self) -> bool:
        with self._transaction("") as conn:
            return self._stored_layout(conn, "") is not None

    def ensure_collection(self, dimension: int) -> None:
        if not 1 <= dimension <= MAX_DIMENSION:
            raise IndexIncompatible(
                f"the pgvector index holds dense vectors of 1 to {MAX_DIMENSION} dimensions, not {dimension}",
                details={"dimension": dimension},
            )
        with self._transaction("") as conn:
            found = _scalar(
                conn, "collection_create", {"collection": self.collection, "dimension": dimension}
            )
        if found != dimension:
            raise IndexIncompatible(
                f"the pgvector collection {self.collection} has dense vectors of dimension {found}, this "
                f"projection needs {dimension}; rebuild the index",
                details={"collection": self.collection, "found": found, "dimension": dimension},
            )

    def drop_collection(self) -> None:
        with self._transaction("") as conn:
            conn.execute(_q("collection_drop"), {"collection": self.collection})

    def close(self) -> None:
        self._connector.close()

    def capabilities(self) -> Capabilities:
        """Generations, a symptom projection beside the text, and its own migrations."""
        return Capabilities(generations=self, schema=self, vector_kinds=KINDS)

    def optimize(self) -> None:
        """After a rebuild: planner statistics for the rows just written (the HNSW
        indexes are maintained on every write), so the planner can tell a selective
        filter (exact scan) from a broad one (HNSW) right away."""
        with self._transaction("") as conn:
            conn.execute(_q("analyze"))

    # -- points -------------------------------------------------------------------

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        by_workspace: dict[str, dict[uuid.UUID, IndexPoint]] = {}
        for point in points:
            by_workspace.setdefault(point.card.workspace, {})[point.id] = point  # the last one wins
        for workspace in sorted(by_workspace):
            group = list(by_workspace[workspace].values())
            with self._transaction(workspace, lock=True) as conn:
                layout = self._layout(conn, workspace)
                for generation in layout.written():
                    self._write(conn, workspace, generation, layout.dimension, group)

    def _write(
        self,
        conn: psycopg.Connection,
        workspace: str,
        generation: int,
        dimension: int,
        group: list[IndexPoint],
    ) -> None:
        """Points of one workspace (one per id) into one generation, in the caller's
        transaction, which holds the workspace's lock."""
        for point in group:
            self._check_dimension(point.dense, dimension)
            if point.symptom is not None:
                self._check_dimension(point.symptom, dimension)
        rows = [_point_row(point) for point in group]
        scope = {
            "collection": self.collection,
            "workspace": workspace,
            "generation": generation,
            "ids": [point.id for point in group],
        }
        # Order matters: the frequencies read the BM25 rows being replaced; the
        # BM25 and dense vectors reference their point (and the collection's
        # dimension), so the points go first.
        conn.execute(
            _q("frequencies_apply"),
            {**scope, "points": Jsonb([{"terms": r["terms"]} for r in rows])},
        )
        conn.execute(_q("points_upsert"), {**scope, "points": Jsonb(rows)})
        conn.execute(_q("bm25_upsert"), {**scope, "points": Jsonb(rows)})
        without_symptom = [point.id for point in group if point.symptom is None]
        if without_symptom:
            conn.execute(_q("symptoms_clear"), {**scope, "ids": without_symptom})
        # vectors as text ('[...]'), not JSON arrays: jsonb would parse every
        # element into a numeric first, five times slower
        vectors = [
            {
                "point_id": str(point.id),
                "kind": "text",
                "embedding": _vector_text(point.dense),
            }
            for point in group
        ]
        vectors += [
            {
                "point_id": str(point.id),
                "kind": "symptom",
                "embedding": _vector_text(point.symptom),
            }
            for point in group
            if point.symptom is not None
        ]
        conn.execute(
            _q("vectors_upsert"),
            {**scope, "dimension": dimension, "vectors": Jsonb(vectors)},
        )

    def delete(self, workspace: str, ids: Sequence[uuid.UUID]) -> None:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return
        with self._transaction(workspace, lock=True) as conn:
            for generation in self._layout(conn, workspace).written():
                self._remove(conn, workspace, generation, ids)

    def _remove(
        self, conn: psycopg.Connection, workspace: str, generation: int, ids: list[uuid.UUID]
    ) -> None:
        scope = {
            "collection": self.collection,
            "workspace": workspace,
            "generation": generation,
            "ids": ids,
        }
        conn.execute(_q("frequencies_apply"), {**scope, "points": Jsonb([])})
        conn.execute(_q("points_delete"), scope)

    def clear_workspace(self, workspace: str) -> int:
        """Remove every point of one workspace (its vectors and document frequencies
        with it); other workspaces are untouched. Returns the number of points removed."""
        with self._transaction(workspace, lock=True) as conn:
            self._layout(conn, workspace)
            removed: int = _scalar(
                conn, "workspace_clear", {"collection": self.collection, "workspace": workspace}
            )
        return removed

    # -- generations (rebuilds beside the serving points) ------------------------------

    def begin_generation(self, workspace: str) -> PgVectorGeneration:
        """The generation a rebuild of the workspace writes: the one an interrupted
        rebuild left (its points are kept: the rebuild skips what is current there), or
        a new, empty one after the serving one. From now on every save of the workspace
        writes it too, whichever process makes the save, until it switches."""
        self.prune_generations(workspace)  # a crash between a switch and its pruning
        scope = {"collection": self.collection, "workspace": workspace}
        with self._transaction(workspace, lock=True) as conn:
            self._layout(conn, workspace)  # a missing collection is refused
            conn.execute(_q("generation_begin"), scope)
            building = self._layout(conn, workspace).building
        if building is None:  # the row was just written under the lock
            raise IndexUnavailable(f"the pgvector index began no generation for {workspace}")
        return PgVectorGeneration(self, workspace, building)

    def prune_generations(self, workspace: str) -> int:
        """Delete the rows of the workspace's generations that neither serve nor are
        being built (the one a switch replaced); returns how many points went."""
        with self._transaction(workspace) as conn:
            self._layout(conn, workspace)
            removed: int = _scalar(
                conn, "generation_prune", {"collection": self.collection, "workspace": workspace}
            )
        return removed

    def discard_unreadable(self, workspace: str) -> str | None:
        return None  # the points are rows of the archive's database, which owns its storage

    def scroll_ids(self, workspace: str) -> list[PointRecord]:
        with self._transaction(workspace) as conn:
            return self._records(conn, workspace, self._layout(conn, workspace).serving)

    def _records(
        self, conn: psycopg.Connection, workspace: str, generation: int
    ) -> list[PointRecord]:
        rows = conn.execute(
            _q("points_scroll"),
            {"collection": self.collection, "workspace": workspace, "generation": generation},
        )
        return [
            PointRecord(point_id, revision, fingerprint) for point_id, revision, fingerprint in rows
        ]

    def dense_vectors(
        self, workspace: str, ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, list[float]]:
        if not ids:
            return {}
        with self._transaction(workspace) as conn:
            rows = conn.execute(
                _q("vectors_text"),
                {
                    "collection": self.collection,
                    "workspace": workspace,
                    "generation": self._layout(conn, workspace).serving,
                    "ids": list(ids),
                },
            )
            # pgvector's text form of a vector is a JSON array
            return {point_id: json.loads(embedding) for point_id, embedding in rows}

    def count(self, workspace: str) -> int:
        with self._transaction(workspace) as conn:
            found: int = _scalar(
                conn,
                "points_count",
                {
                    "collection": self.collection,
                    "workspace": workspace,
                    "generation": self._layout(conn, workspace).serving,
                },
            )
        return found

    # -- search -------------------------------------------------------------------

    def hybrid_search(
        self, dense: Sequence[float], sparse: SparseVector, filters: RecallFilters, limit: int
    ) -> list[IndexHit]:
        if limit < 1:
            raise InvalidInput("the search limit must be at least 1")
        with self._transaction(filters.workspace) as conn:
            layout = self._layout(conn, filters.workspace)
            dense_hits, nearest = self._dense_branch(conn, layout, dense, filters, limit)
            sparse_hits = self._bm25_branch(conn, layout, sparse, filters, limit)
        return [
            replace(
                hit,
                matched_kind=nearest[hit.id][0],
                distance=nearest[hit.id][1],
                similarity=1.0 - nearest[hit.id][1],
            )
            if hit.id in nearest
            else hit
            for hit in fuse(dense_hits, sparse_hits, limit)
        ]

    def dense_search(
        self, dense: Sequence[float], filters: RecallFilters, limit: int
    ) -> list[tuple[uuid.UUID, str, float]]:
        """The dense branch alone: (point id, matched kind, raw cosine distance),
        nearest first."""
        with self._transaction(filters.workspace) as conn:
            layout = self._layout(conn, filters.workspace)
            _, nearest = self._dense_branch(conn, layout, dense, filters, limit)
        return sorted(
            ((i, kind, distance) for i, (kind, distance) in nearest.items()),
            key=lambda hit: (hit[2], hit[0]),
        )

    def bm25_search(
        self, sparse: SparseVector, filters: RecallFilters, limit: int
    ) -> list[BranchHit]:
        """The BM25 branch alone, with its scores (best first)."""
        with self._transaction(filters.workspace) as conn:
            layout = self._layout(conn, filters.workspace)
            return self._bm25_branch(conn, layout, sparse, filters, limit)

    def _dense_branch(
        self,
        conn: psycopg.Connection,
        layout: _Layout,
        dense: Sequence[float],
        filters: RecallFilters,
        limit: int,
    ) -> tuple[list[BranchHit], dict[uuid.UUID, tuple[str, float]]]:
        """Each kind's ``limit`` nearest, merged: a point ranks by its nearest vector
        (the true top ``limit`` by that measure is within the kinds' own top lists)."""
        dimension = layout.dimension
        self._check_dimension(dense, dimension)
        where, params = _Where().build(f.recall_condition(filters))
        params.update(
            collection=self.collection,
            workspace=filters.workspace,
            generation=layout.serving,
            limit=limit,
            query=_vector_text(dense),
        )
        best: dict[uuid.UUID, tuple[str, float, int | None, str | None]] = {}
        for kind in KINDS:  # "text" first: it wins a tie
            for point_id, distance, revision, fingerprint in conn.execute(
                DENSE_QUERIES[kind](dimension, where), params
            ):
                if point_id not in best or distance < best[point_id][1]:
                    best[point_id] = (kind, distance, revision, fingerprint)
        ordered = sorted(best.items(), key=lambda item: (item[1][1], item[0]))[:limit]
        # the branch score is the negated distance: exact, so ties stay ties
        hits = [
            BranchHit(point_id, -distance, revision, fingerprint)
            for point_id, (_, distance, revision, fingerprint) in ordered
        ]
        return hits, {point_id: (kind, distance) for point_id, (kind, distance, _, _) in ordered}

    def _bm25_branch(
        self,
        conn: psycopg.Connection,
        layout: _Layout,
        sparse: SparseVector,
        filters: RecallFilters,
        limit: int,
    ) -> list[BranchHit]:
        query = {
            index: value
            for index, value in zip(sparse.indices, sparse.values, strict=True)
            if value
        }
        if not query:
            return []  # stop words only: no term to match, as in Qdrant
        terms = sorted(query)
        scope = {
            "collection": self.collection,
            "workspace": filters.workspace,
            "generation": layout.serving,
        }
        frequencies: dict[int, int] = dict(
            conn.execute(_q("bm25_statistics"), {**scope, "terms": terms}).fetchall()
        )
        documents = frequencies.get(DOCUMENTS_TERM, 0)
        # The query carries the IDF, the stored vectors the term frequencies: their
        # inner product is the BM25 score. Products in f32, as Qdrant's.
        weights = [
            float(np.float32(query[t]) * np.float32(bm25_idf(documents, frequencies.get(t, 0))))
            for t in terms
        ]
        where, params = _Where().build(f.recall_condition(filters))
        weight_0, weight_1, weight_2 = sparse_columns(terms, weights)
        params.update(
            scope,
            limit=limit,
            terms=terms,
            weights_0=weight_0,
            weights_1=weight_1,
            weights_2=weight_2,
        )
        return [
            BranchHit(point_id, score, revision, fingerprint)
            for point_id, revision, fingerprint, score in conn.execute(bm25_query(where), params)
        ]

    # -- plumbing -----------------------------------------------------------------

    def _stored_layout(self, conn: psycopg.Connection, workspace: str) -> _Layout | None:
        """The collection's dense dimension and the workspace's generations, None when
        there is no collection yet."""
        row = conn.execute(
            _q("collection_get"), {"collection": self.collection, "workspace": workspace}
        ).fetchone()
        return _Layout(*row) if row else None

    def _layout(self, conn: psycopg.Connection, workspace: str) -> _Layout:
        """``_stored_layout``; a missing collection is refused."""
        layout = self._stored_layout(conn, workspace)
        if layout is None:
            raise IndexUnavailable(
                f"the pgvector index has no collection {self.collection} yet; write a card or run the index rebuild",
                details={"collection": self.collection},
            )
        return layout

    def _check_dimension(self, vector: Sequence[float], dimension: int) -> None:
        if len(vector) != dimension:
            raise IndexIncompatible(
                f"a dense vector of dimension {len(vector)} does not fit the pgvector collection "
                f"{self.collection} (dimension {dimension}); rebuild the index",
                details={
                    "collection": self.collection,
                    "found": len(vector),
                    "dimension": dimension,
                },
            )

    @contextmanager
    def _transaction(self, workspace: str, *, lock: bool = False) -> Iterator[psycopg.Connection]:
        """One transaction as the runtime role in ``workspace`` ("" sees no workspace
        data: collection operations); ``lock`` serializes the workspace's writers."""
        try:
            with self._connector.connection() as conn, conn.transaction():
                conn.execute(
                    _q("set_context"),
                    {"workspace": workspace, "lock": lock, "collection": self.collection},
                )
                yield conn
        except ThothError:
            raise
        except psycopg.Error as exc:
            raise _translate(exc) from exc


class PgVectorGeneration:
    """A new generation of one workspace's points, written by a rebuild beside the
    serving one; ``switch`` makes it serve (see ``PgVectorIndex.begin_generation``)."""

    resumable = True  # its rows survive an interruption, for the next rebuild to skip

    def __init__(self, index: PgVectorIndex, workspace: str, generation: int) -> None:
        self.index = index
        self.workspace = workspace
        self.generation = generation

    def records(self) -> list[PointRecord]:
        with self.index._transaction(self.workspace) as conn:
            self._check(conn)
            return self.index._records(conn, self.workspace, self.generation)

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        group = {point.id: point for point in points}  # the last one wins
        if any(point.card.workspace != self.workspace for point in group.values()):
            raise InvalidInput(f"a rebuild of {self.workspace} got a point of another workspace")
        if not group:
            return
        with self.index._transaction(self.workspace, lock=True) as conn:
            layout = self._check(conn)
            self.index._write(
                conn, self.workspace, self.generation, layout.dimension, list(group.values())
            )

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        ids = list(dict.fromkeys(ids))
        if ids:
            with self.index._transaction(self.workspace, lock=True) as conn:
                self._check(conn)
                self.index._remove(conn, self.workspace, self.generation, ids)

    def optimize(self) -> None:
        return None  # the HNSW and GIN indexes are maintained on every write

    def switch(self) -> None:
        """Serve this generation: one UPDATE under the workspace's lock (saves wrote both
        generations until then), then delete the replaced one and refresh the planner's
        statistics."""
        scope = {
            "collection": self.index.collection,
            "workspace": self.workspace,
            "generation": self.generation,
        }
        with self.index._transaction(self.workspace, lock=True) as conn:
            switched = conn.execute(_q("generation_switch"), scope).rowcount
            if not switched and self.index._layout(conn, self.workspace).serving != self.generation:
                raise self._replaced()
        crash_point("index.after_switch")
        self.index.prune_generations(self.workspace)
        self.index.optimize()

    def _check(self, conn: psycopg.Connection) -> _Layout:
        """The workspace's layout, provided this generation is still the one being built
        (another process's rebuild may have switched it, or the workspace was cleared)."""
        layout = self.index._layout(conn, self.workspace)
        if layout.building != self.generation:
            raise self._replaced()
        return layout

    def _replaced(self) -> Conflict:
        return Conflict(
            f"the rebuild of workspace '{self.workspace}' lost its generation {self.generation}"
            " (another rebuild switched it, or the workspace's points were cleared); run"
            " `tht memory index` again",
            details={"workspace": self.workspace, "generation": self.generation},
        )


class _Where:
    """The engine-neutral filter tree (``filters.recall_condition``) as SQL on the
    point ``p``: the same semantics the Qdrant adapters give it, values as parameters."""

    _SCALARS: ClassVar[dict[str, str]] = {
        "workspace": "workspace_id",
        "family": "family",
        "scope": "scope",
    }
    _ARRAYS: ClassVar[dict[str, str]] = {
        "concepts": "concepts",
        "dep_paths": "dep_paths",
        "dep_prefixes": "dep_prefixes",
    }
    _LEVELS: ClassVar[set[str]] = set(f.DEP_LEVELS)

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}

    def build(self, condition: f.All) -> tuple[sql.Composable, dict[str, Any]]:
        return self._condition(condition, nested=False), self.params

    def _value(self, value: Any) -> sql.Placeholder:
        name = f"filter_{len(self.params)}"
        self.params[name] = value
        return sql.Placeholder(name)

    def _column(self, key: str, kinds: dict[str, str]) -> sql.Composable:
        if key not in kinds:
            raise TypeError(f"no column for filter key {key!r}")
        return sql.SQL("p.{}").format(sql.Identifier(kinds[key]))

    def _level(self, key: str) -> sql.Composable:
        if key not in self._LEVELS:
            raise TypeError(f"no dependency level {key!r}")
        return sql.SQL("(dep ->> {})").format(sql.Literal(key))

    def _condition(self, condition: f.Condition, *, nested: bool) -> sql.Composable:
        match condition:
            case f.Match(key, value) if nested:
                return sql.SQL("{} = {}").format(self._level(key), self._value(value))
            case f.Match(key, value) if key in self._ARRAYS:
                return sql.SQL("{} = ANY ({})").format(
                    self._value(value), self._column(key, self._ARRAYS)
                )
            case f.Match(key, value):
                return sql.SQL("{} = {}").format(
                    self._column(key, self._SCALARS), self._value(value)
                )
            case f.MatchAny(key, values) if key in self._ARRAYS:
                return sql.SQL("{} && {}::text[]").format(
                    self._column(key, self._ARRAYS), self._value(list(values))
                )
            case f.MatchAny(key, values):
                return sql.SQL("{} = ANY ({}::text[])").format(
                    self._column(key, self._SCALARS), self._value(list(values))
                )
            case f.IsNull(key) if nested:
                return sql.SQL("{} IS NULL").format(self._level(key))
            case f.IsEmpty("deps"):
                return sql.SQL("jsonb_array_length(p.deps) = 0")
            case f.IsEmpty(key):
                return sql.SQL("cardinality({}) = 0").format(self._column(key, self._ARRAYS))
            case f.All(conditions):
                parts = [self._condition(c, nested=nested) for c in conditions]
                return (
                    sql.SQL("({})").format(sql.SQL(" AND ").join(parts))
                    if parts
                    else sql.SQL("TRUE")
                )
            case f.AnyOf(conditions):
                parts = [self._condition(c, nested=nested) for c in conditions]
                return (
                    sql.SQL("({})").format(sql.SQL(" OR ").join(parts))
                    if parts
                    else sql.SQL("FALSE")
                )
            case f.Nested("deps", inner) if not nested:
                # one dependency must satisfy every condition
                return sql.SQL(
                    "EXISTS (SELECT 1 FROM jsonb_array_elements(p.deps) AS d(dep) WHERE {})"
                ).format(self._condition(inner, nested=True))
        raise TypeError(f"unsupported filter condition {condition!r}")


def _point_row(point: IndexPoint) -> dict[str, Any]:
    payload = point.payload()
    bm25_0, bm25_1, bm25_2 = sparse_columns(point.sparse.indices, point.sparse.values)
    return {
        "id": str(point.id),
        "family": payload["family"],
        "scope": payload["scope"],
        "concepts": payload["concepts"],
        "deps": payload["deps"],
        "dep_paths": payload["dep_paths"],
        "dep_prefixes": payload["dep_prefixes"],
        "terms": sorted(
            {
                index
                for index, value in zip(point.sparse.indices, point.sparse.values, strict=True)
                if value
            }
        ),
        "bm25_0": bm25_0,
        "bm25_1": bm25_1,
        "bm25_2": bm25_2,
        "revision": point.revision,
        "fingerprint": point.fingerprint,
        "symptom": point.symptom is not None,
    }


def _scalar(conn: psycopg.Connection, query: str, params: dict[str, Any]) -> Any:
    """The one value of a query that always returns one row."""
    row = conn.execute(_q(query), params).fetchone()
    if row is None:
        raise IndexUnavailable(f"the pgvector query {query} returned no row")
    return row[0]


ERRORS = StoreErrors(
    what="the pgvector index (PostgreSQL)",
    unavailable=IndexUnavailable,
    schema_missing=lambda: IndexSchemaNotReady(
        f"the {PACK.schema} schema is missing: run {PACK.command} with the migrator credentials"
    ),
    failed=lambda line: IndexUnavailable(f"the pgvector index failed: {line}"),
    privileged_login=lambda login, superuser, bypassrls: IndexUnavailable(
        "refusing to use the pgvector index: the runtime database login is a superuser or"
        " bypasses row-level security; give the runtime a restricted login"
        " (member of thoth_memory_runtime)"
    ),
    login_refused=lambda message: IndexSchemaNotReady(
        f"the runtime login cannot use the pgvector index tables: {message}"
    ),
)


def _translate(exc: BaseException) -> ThothError:
    return translate(exc, ERRORS)


def _check_schema(conn: psycopg.Connection) -> None:
    """The pgvector pack's migrations, applied unchanged (its own error class)."""
    try:
        check_schema(conn, PACK)
    except SchemaNotReady as exc:
        raise IndexSchemaNotReady(exc.message, details=exc.details) from exc
