"""A Qdrant server or cluster through ``qdrant-client`` (production, scale-out).

Tests run the same adapter on qdrant-client's local mode (``QdrantClient(path=...)``
or ``location=":memory:"``), which runs the hybrid query but has no payload indexes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, cast

from qdrant_client import QdrantClient
from qdrant_client import models as m

from tht.errors import InvalidInput, ThothError
from tht.memory.embedding.sparse import SparseVector
from tht.memory.index import filters as f
from tht.memory.index.errors import IndexIncompatible, IndexUnavailable
from tht.memory.index.port import (
    DENSE,
    KEYWORD_FIELDS,
    PROJECTION_FIELDS,
    SPARSE,
    TENANT_FIELD,
    BranchHit,
    IndexHit,
    IndexPoint,
    PointRecord,
    fuse,
    projection,
)
from tht.memory.recall_filters import RecallFilters

API_KEY_ENV = "THT_QDRANT_API_KEY"
_SCROLL_PAGE = 1000


class QdrantServerIndex:
    def __init__(self, client: QdrantClient, collection: str = "memory") -> None:
        self.client = client
        self.collection = collection
        options = client.init_options
        # Local mode ignores payload indexes and warns about each one.
        self._local = options.get("path") is not None or options.get("location") == ":memory:"

    @classmethod
    def connect(
        cls, url: str, collection: str = "memory", *, timeout: float = 10.0
    ) -> QdrantServerIndex:
        """Connect to a server; the API key, if any, comes from ``THT_QDRANT_API_KEY``."""
        try:
            # No version probe here: building an adapter must not touch the network;
            # the first real call reports an unreachable or unsuitable server.
            client = QdrantClient(
                url=url,
                api_key=os.environ.get(API_KEY_ENV) or None,
                timeout=max(1, round(timeout)),
                check_compatibility=False,
            )
        except Exception as exc:  # invalid URLs surface as assorted client errors
            raise IndexUnavailable(f"cannot connect to Qdrant at {url}: {exc}") from exc
        return cls(client, collection)

    # -- collection ---------------------------------------------------------------

    def collection_exists(self) -> bool:
        with _engine_errors(self.collection):
            return self.client.collection_exists(self.collection)

    def ensure_collection(self, dimension: int) -> None:
        with _engine_errors(self.collection):
            if not self.client.collection_exists(self.collection):
                self._create(dimension)
            params = self.client.get_collection(self.collection).config.params
            vectors = params.vectors
            dense = vectors.get(DENSE) if isinstance(vectors, dict) else None
            if dense is None or dense.size != dimension or dense.distance != m.Distance.COSINE:
                raise IndexIncompatible(
                    f"Qdrant collection {self.collection} has dense vectors {vectors!r}, this projection "
                    f"needs a vector '{DENSE}' of size {dimension} with Cosine distance; rebuild the index",
                    details={"collection": self.collection, "dimension": dimension},
                )
            sparse = (params.sparse_vectors or {}).get(SPARSE)
            if sparse is None:
                self.client.create_vector_name(
                    self.collection,
                    SPARSE,
                    m.SparseVectorNameConfig(sparse=m.SparseVectorConfig(modifier=m.Modifier.IDF)),
                )
            elif sparse.modifier != m.Modifier.IDF:
                raise IndexIncompatible(
                    f"Qdrant collection {self.collection} has a BM25 vector without the IDF modifier; "
                    "rebuild the index",
                    details={"collection": self.collection},
                )
            self._ensure_payload_indexes()

    def _create(self, dimension: int) -> None:
        try:
            self.client.create_collection(
                self.collection,
                vectors_config={DENSE: m.VectorParams(size=dimension, distance=m.Distance.COSINE)},
                sparse_vectors_config={SPARSE: m.SparseVectorParams(modifier=m.Modifier.IDF)},
            )
        except Exception:
            # Another writer may have created it in the meantime; then it is checked
            # like any existing collection.
            if not self.client.collection_exists(self.collection):
                raise

    def _ensure_payload_indexes(self) -> None:
        if self._local:
            return
        present = set(self.client.get_collection(self.collection).payload_schema)
        wanted: dict[str, Any] = {
            TENANT_FIELD: m.KeywordIndexParams(type=m.KeywordIndexType.KEYWORD, is_tenant=True)
        }
        wanted.update({name: m.PayloadSchemaType.KEYWORD for name in KEYWORD_FIELDS})
        for name, schema in wanted.items():
            if name not in present:
                self.client.create_payload_index(self.collection, name, field_schema=schema)

    def drop_collection(self) -> None:
        with _engine_errors(self.collection):
            self.client.delete_collection(self.collection)

    def close(self) -> None:
        with _engine_errors(self.collection):
            self.client.close()

    # -- points -------------------------------------------------------------------

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if not points:
            return
        structs = [
            m.PointStruct(
                id=str(p.id),
                vector={
                    DENSE: list(p.dense),
                    SPARSE: m.SparseVector(
                        indices=list(p.sparse.indices), values=list(p.sparse.values)
                    ),
                },
                payload=p.payload(),
            )
            for p in points
        ]
        with _engine_errors(self.collection):
            self.client.upsert(self.collection, structs, wait=True)

    def delete(self, workspace: str, ids: Sequence[uuid.UUID]) -> None:
        if not ids:
            return
        only_these = m.Filter(
            must=[
                m.HasIdCondition(has_id=[str(i) for i in ids]),
                m.FieldCondition(key=TENANT_FIELD, match=m.MatchValue(value=workspace)),
            ]
        )
        with _engine_errors(self.collection):
            self.client.delete(self.collection, m.FilterSelector(filter=only_these), wait=True)

    def hybrid_search(
        self, dense: Sequence[float], sparse: SparseVector, filters: RecallFilters, limit: int
    ) -> list[IndexHit]:
        if limit < 1:
            raise InvalidInput("the search limit must be at least 1")
        where = _filter(f.recall_condition(filters))
        sparse_query = m.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
        # IDF over this workspace only: another tenant's cards must not change scores here.
        idf = m.SearchParams(
            idf=m.IdfCorpusParams(corpus=_filter(f.workspace_condition(filters.workspace)))
        )
        # Both branches in one batch, each filtered before candidate selection; the
        # fusion happens in ``fuse`` (deterministic ties).
        dense_only = m.QueryRequest(
            query=list(dense),
            using=DENSE,
            filter=where,
            limit=limit,
            with_payload=PROJECTION_FIELDS,
        )
        sparse_only = m.QueryRequest(
            query=sparse_query,
            using=SPARSE,
            filter=where,
            params=idf,
            limit=limit,
            with_payload=PROJECTION_FIELDS,
        )
        with _engine_errors(self.collection):
            dense_points, sparse_points = (
                r.points
                for r in self.client.query_batch_points(self.collection, [dense_only, sparse_only])
            )
        return fuse(_branch(dense_points), _branch(sparse_points), limit)

    def optimize(self) -> None:
        """The server's optimizer runs on its own."""

    def session(self) -> AbstractContextManager[None]:
        """A server serves many processes: nothing to hold."""
        return nullcontext()

    def discard_unreadable(self, workspace: str) -> str | None:
        return None  # the server owns its storage and recovers its own shards

    def scroll_ids(self, workspace: str) -> list[PointRecord]:
        where = _filter(f.workspace_condition(workspace))
        records: list[PointRecord] = []
        offset = None
        while True:
            with _engine_errors(self.collection):
                page, offset = self.client.scroll(
                    self.collection,
                    scroll_filter=where,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=PROJECTION_FIELDS,
                )
            records.extend(PointRecord(uuid.UUID(str(r.id)), *projection(r.payload)) for r in page)
            if offset is None:
                return records

    def dense_vectors(
        self, workspace: str, ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, list[float]]:
        if not ids:
            return {}
        with _engine_errors(self.collection):
            records = self.client.retrieve(
                self.collection,
                [str(i) for i in ids],
                with_payload=[TENANT_FIELD],
                with_vectors=[DENSE],
            )
        vectors: dict[uuid.UUID, list[float]] = {}
        for record in records:
            if (record.payload or {}).get(TENANT_FIELD) != workspace:
                continue  # another workspace's point of the same id is none of this workspace's
            stored = record.vector.get(DENSE) if isinstance(record.vector, dict) else None
            # the dense vector is a single vector (never a multivector) in this collection
            dense = cast(list[float], stored) if isinstance(stored, list) else []
            vectors[uuid.UUID(str(record.id))] = list(dense)
        return vectors

    def count(self, workspace: str) -> int:
        with _engine_errors(self.collection):
            result = self.client.count(
                self.collection, count_filter=_filter(f.workspace_condition(workspace)), exact=True
            )
        return result.count


@contextmanager
def _engine_errors(collection: str) -> Iterator[None]:
    # Connection failures, server errors and local-mode errors all come as different
    # exception types; every one of them means the projection cannot be used now.
    try:
        yield
    except ThothError:
        raise
    except Exception as exc:
        raise IndexUnavailable(
            f"Qdrant failed on collection {collection}: {exc}", details={"collection": collection}
        ) from exc


def _branch(points: Sequence[m.ScoredPoint]) -> list[BranchHit]:
    return [BranchHit(uuid.UUID(str(p.id)), p.score, *projection(p.payload)) for p in points]


def _filter(condition: f.All) -> m.Filter:
    return m.Filter(must=[_condition(c) for c in condition.conditions])


def _condition(condition: f.Condition) -> Any:
    match condition:
        case f.Match(key, value):
            return m.FieldCondition(key=key, match=m.MatchValue(value=value))
        case f.MatchAny(key, values):
            return m.FieldCondition(key=key, match=m.MatchAny(any=list(values)))
        case f.IsNull(key):
            return m.IsNullCondition(is_null=m.PayloadField(key=key))
        case f.IsEmpty(key):
            return m.IsEmptyCondition(is_empty=m.PayloadField(key=key))
        case f.All():
            return _filter(condition)
        case f.AnyOf(conditions):
            return m.Filter(should=[_condition(c) for c in conditions])
        case f.Nested(key, inner):
            return m.NestedCondition(nested=m.Nested(key=key, filter=_filter(inner)))
    raise TypeError(f"unknown filter condition {condition!r}")
