"""A Qdrant server or cluster through ``qdrant-client`` (production, scale-out).

Tests run the same adapter on qdrant-client's local mode (``QdrantClient(path=...)``
or ``location=":memory:"``), which runs the hybrid query but has no payload indexes.

Generations: one collection serves every workspace, so a rebuild of one workspace
cannot swap collections (an alias switch would replace every workspace's points).
Instead each point records the generation of its workspace's projection it belongs to
(payload ``generation``; absent: generation 0, every point written before generations
existed) and the card it projects (``card``); its id is derived from both, so a card
has a point in the serving generation and one in the generation a rebuild builds.
Per workspace, a vector-less marker point in the same collection (``generations_of``)
names the serving generation and the one being built: the state lives with the
points, survives every process, and the switch is one upsert of that point, which
Qdrant applies atomically. Reads filter on the serving generation (the BM25 IDF corpus
too); saves write the serving and the building generation; the replaced generation's
points are deleted after the switch.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, cast

from qdrant_client import QdrantClient
from qdrant_client import models as m

from tht.errors import Conflict, InvalidInput, ThothError
from tht.faults import crash_point
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
    Capabilities,
    Generations,
    IndexHit,
    IndexPoint,
    PointRecord,
    fuse,
    projection,
)
from tht.memory.recall_filters import RecallFilters

API_KEY_ENV = "THT_QDRANT_API_KEY"
_SCROLL_PAGE = 1000
GENERATION_FIELD = "generation"  # absent on generation 0
CARD_FIELD = "card"  # the card's UUID: the point id is derived from it and the generation
MARKER_FIELD = "generations_of"  # the marker point of a workspace's generations
_WITH_PAYLOAD = [*PROJECTION_FIELDS, CARD_FIELD]
_IDS = uuid.UUID("5d0c3f4e-4a43-4d0e-9a56-3f1d2c6b7a10")  # the namespace of derived ids


def point_id(card: uuid.UUID, generation: int) -> uuid.UUID:
    """The point of a card in a generation: the card's UUID in generation 0 (as points
    were written before generations), a UUID derived from both in later ones."""
    return card if generation == 0 else uuid.uuid5(card, f"generation:{generation}")


def _marker_id(workspace: str) -> str:
    return str(uuid.uuid5(_IDS, f"generations:{workspace}"))


class QdrantServerIndex:
    def __init__(self, client: QdrantClient, collection: str = "memory") -> None:
        self.client = client
        self.collection = collection
        options = client.init_options
        # Local mode ignores payload indexes and warns about each one.
        self._local = options.get("path") is not None or options.get("location") == ":memory:"
        # Local mode is not thread-safe (its in-memory arrays are resized in place): a
        # rebuild's writer thread and recall would corrupt each other. A server is.
        self._calls: AbstractContextManager[Any] = (
            threading.RLock() if self._local else nullcontext()
        )

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

    @contextmanager
    def _engine(self) -> Iterator[None]:
        """Around every client call: one at a time in local mode, errors translated."""
        with self._calls, _engine_errors(self.collection):
            yield

    # -- collection ---------------------------------------------------------------

    def collection_exists(self) -> bool:
        with self._engine():
            return self.client.collection_exists(self.collection)

    def ensure_collection(self, dimension: int) -> None:
        with self._engine():
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
        wanted.update(
            {GENERATION_FIELD: m.PayloadSchemaType.INTEGER, CARD_FIELD: m.PayloadSchemaType.KEYWORD}
        )
        for name, schema in wanted.items():
            if name not in present:
                self.client.create_payload_index(self.collection, name, field_schema=schema)

    def drop_collection(self) -> None:
        with self._engine():
            self.client.delete_collection(self.collection)

    def close(self) -> None:
        with self._engine():
            self.client.close()

    def capabilities(self) -> Capabilities:
        """Generations (a server indexes what is written on its own)."""
        return Capabilities(generations=self)

    # -- points -------------------------------------------------------------------

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Into the workspace's serving generation and, during a rebuild, the one being
        built, so that the switch finds the save there whichever process made it."""
        if not points:
            return
        generations = {
            workspace: self._generations(workspace).written()
            for workspace in {p.card.workspace for p in points}
        }
        self._write(
            [(p, generation) for p in points for generation in generations[p.card.workspace]]
        )

    def _write(self, points: Sequence[tuple[IndexPoint, int]]) -> None:
        if points:
            with self._engine():
                self.client.upsert(self.collection, [_struct(*p) for p in points], wait=True)

    def delete(self, workspace: str, ids: Sequence[uuid.UUID]) -> None:
        """These cards' points in every generation of the workspace."""
        if ids:
            self._delete(workspace, ids, None)

    def _delete(self, workspace: str, ids: Sequence[uuid.UUID], generation: int | None) -> None:
        """The points of these cards in one generation (None: in all of them); generation
        0's points may predate the card field: their id is the card's."""
        cards = [str(i) for i in ids]
        must: list[Any] = [m.FieldCondition(key=TENANT_FIELD, match=m.MatchValue(value=workspace))]
        if generation is not None:
            must.append(_generation_condition(generation))
        only_these = m.Filter(
            must=must,
            should=[
                m.HasIdCondition(has_id=cards),
                m.FieldCondition(key=CARD_FIELD, match=m.MatchAny(any=cards)),
            ],
        )
        with self._engine():
            self.client.delete(self.collection, m.FilterSelector(filter=only_these), wait=True)

    # -- generations (rebuilds beside the serving points) ------------------------------

    def _generations(self, workspace: str) -> Generations:
        """The workspace's marker point: its serving and building generations."""
        with self._engine():
            found = self.client.retrieve(
                self.collection, [_marker_id(workspace)], with_payload=True, with_vectors=False
            )
        payload = (found[0].payload or {}) if found else {}
        return Generations(int(payload.get("serving", 0)), payload.get("building"))

    def _mark(self, workspace: str, generations: Generations) -> None:
        """Record the workspace's generations: one point, written atomically."""
        marker = m.PointStruct(
            id=_marker_id(workspace),
            vector={},
            payload={
                MARKER_FIELD: workspace,
                "serving": generations.serving,
                "building": generations.building,
            },
        )
        with self._engine():
            self.client.upsert(self.collection, [marker], wait=True)

    def begin_generation(self, workspace: str) -> QdrantGeneration:
        """The generation a rebuild of the workspace writes: the one an interrupted
        rebuild left (its points are kept: the rebuild skips what is current there), or
        a new, empty one after the serving one. From now on every save of the workspace
        writes it too, whichever process makes the save, until it switches."""
        self.prune_generations(workspace)  # a crash between a switch and its pruning
        generations = self._generations(workspace)
        building = generations.building
        if building is None:
            building = generations.serving + 1
            self._mark(workspace, Generations(generations.serving, building))
        return QdrantGeneration(self, workspace, building)

    def prune_generations(self, workspace: str) -> None:
        """Delete the workspace's points of generations that neither serve nor are
        being built (the one a switch replaced)."""
        generations = self._generations(workspace)
        stale = m.Filter(
            must=[m.FieldCondition(key=TENANT_FIELD, match=m.MatchValue(value=workspace))],
            must_not=[_generation_condition(g) for g in generations.written()],
        )
        with self._engine():
            self.client.delete(self.collection, m.FilterSelector(filter=stale), wait=True)

    def hybrid_search(
        self, dense: Sequence[float], sparse: SparseVector, filters: RecallFilters, limit: int
    ) -> list[IndexHit]:
        if limit < 1:
            raise InvalidInput("the search limit must be at least 1")
        serving = _generation_condition(self._generations(filters.workspace).serving)
        where = _filter(f.recall_condition(filters), serving)
        sparse_query = m.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
        # IDF over this workspace's serving generation only: another tenant's cards, or
        # a rebuild's new generation, must not change scores here.
        idf = m.SearchParams(
            idf=m.IdfCorpusParams(corpus=_filter(f.workspace_condition(filters.workspace), serving))
        )
        # Both branches in one batch, each filtered before candidate selection; the
        # fusion happens in ``fuse`` (deterministic ties).
        dense_only = m.QueryRequest(
            query=list(dense),
            using=DENSE,
            filter=where,
            limit=limit,
            with_payload=_WITH_PAYLOAD,
        )
        sparse_only = m.QueryRequest(
            query=sparse_query,
            using=SPARSE,
            filter=where,
            params=idf,
            limit=limit,
            with_payload=_WITH_PAYLOAD,
        )
        with self._engine():
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
        return self._records(workspace, self._generations(workspace).serving)

    def _records(self, workspace: str, generation: int) -> list[PointRecord]:
        where = _filter(f.workspace_condition(workspace), _generation_condition(generation))
        records: list[PointRecord] = []
        offset = None
        while True:
            with self._engine():
                page, offset = self.client.scroll(
                    self.collection,
                    scroll_filter=where,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=_WITH_PAYLOAD,
                )
            records.extend(PointRecord(_card(r), *projection(r.payload)) for r in page)
            if offset is None:
                return records

    def dense_vectors(
        self, workspace: str, ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, list[float]]:
        if not ids:
            return {}
        serving = self._generations(workspace).serving
        with self._engine():
            records = self.client.retrieve(
                self.collection,
                [str(point_id(i, serving)) for i in ids],
                with_payload=[TENANT_FIELD, CARD_FIELD, GENERATION_FIELD],
                with_vectors=[DENSE],
            )
        vectors: dict[uuid.UUID, list[float]] = {}
        for record in records:
            payload = record.payload or {}
            if (
                payload.get(TENANT_FIELD) != workspace
                or payload.get(GENERATION_FIELD, 0) != serving
            ):
                continue  # another workspace's point of the same id is none of this workspace's
            stored = record.vector.get(DENSE) if isinstance(record.vector, dict) else None
            # the dense vector is a single vector (never a multivector) in this collection
            dense = cast(list[float], stored) if isinstance(stored, list) else []
            vectors[_card(record)] = list(dense)
        return vectors

    def count(self, workspace: str) -> int:
        serving = _generation_condition(self._generations(workspace).serving)
        with self._engine():
            result = self.client.count(
                self.collection,
                count_filter=_filter(f.workspace_condition(workspace), serving),
                exact=True,
            )
        return result.count


class QdrantGeneration:
    """A new generation of one workspace's points, written by a rebuild beside the
    serving one; ``switch`` makes it serve (see ``QdrantServerIndex.begin_generation``)."""

    resumable = True  # its points survive an interruption, for the next rebuild to skip

    def __init__(self, index: QdrantServerIndex, workspace: str, generation: int) -> None:
        self.index = index
        self.workspace = workspace
        self.generation = generation

    def records(self) -> list[PointRecord]:
        return self.index._records(self.workspace, self.generation)

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if any(p.card.workspace != self.workspace for p in points):
            raise InvalidInput(f"a rebuild of {self.workspace} got a point of another workspace")
        self.index._write([(p, self.generation) for p in points])

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            self.index._delete(self.workspace, ids, self.generation)

    def optimize(self) -> None:
        return None  # the server's optimizer runs on its own

    def switch(self) -> None:
        """Serve this generation (one marker write), then delete the replaced one."""
        generations = self.index._generations(self.workspace)
        if generations.building == self.generation:
            self.index._mark(self.workspace, Generations(self.generation, None))
        elif generations.serving != self.generation:
            raise Conflict(
                f"the rebuild of workspace '{self.workspace}' lost its generation"
                f" {self.generation} (another rebuild switched it); run `tht memory index` again",
                details={"workspace": self.workspace, "generation": self.generation},
            )
        crash_point("index.after_switch")
        self.index.prune_generations(self.workspace)


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
    return [BranchHit(_card(p), p.score, *projection(p.payload)) for p in points]


def _card(point: Any) -> uuid.UUID:
    """The card a point projects: recorded in its payload, or (generation 0, written
    before the field existed) its id."""
    return uuid.UUID(str((point.payload or {}).get(CARD_FIELD) or point.id))


def _struct(point: IndexPoint, generation: int) -> m.PointStruct:
    payload = {**point.payload(), CARD_FIELD: str(point.id)}
    if generation:
        payload[GENERATION_FIELD] = generation
    return m.PointStruct(
        id=str(point_id(point.id, generation)),
        vector={
            DENSE: list(point.dense),
            SPARSE: m.SparseVector(
                indices=list(point.sparse.indices), values=list(point.sparse.values)
            ),
        },
        payload=payload,
    )


def _generation_condition(generation: int) -> Any:
    """The points of one generation; generation 0's carry no generation field."""
    if generation == 0:
        return m.IsEmptyCondition(is_empty=m.PayloadField(key=GENERATION_FIELD))
    return m.FieldCondition(key=GENERATION_FIELD, match=m.MatchValue(value=generation))


def _filter(condition: f.All, *extra: Any) -> m.Filter:
    return m.Filter(must=[*(_condition(c) for c in condition.conditions), *extra])


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
