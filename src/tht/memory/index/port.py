"""The search index port: the Qdrant projection of cards, whichever engine runs it.

A point is a rebuildable copy of what recall filters and ranks on. Hits carry the
projected revision and fingerprint so the caller can verify them against PostgreSQL;
a payload is never shown to a user.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from tht.memory.embedding.sparse import SparseVector
from tht.memory.model import Dependency
from tht.memory.recall_filters import CardFacts, RecallFilters

DENSE = "dense"
SPARSE = "bm25"
# Reciprocal rank fusion constant, set explicitly: engine defaults have changed
# between releases and the recall ranking assumes 60.
RRF_K = 60

TENANT_FIELD = "workspace"
PROJECTION_FIELDS = ["revision", "fingerprint"]
KEYWORD_FIELDS = ("family", "scope", "concepts", "dep_paths", "dep_prefixes")


def dependency_path(levels: Sequence[str]) -> str:
    """One keyword for a dependency path (database, schema, table, column prefix);
    JSON keeps it unambiguous whatever characters the names hold."""
    return json.dumps(list(levels), ensure_ascii=False, separators=(",", ":"))


@functools.lru_cache(maxsize=65536)
def _path(levels: tuple[str, ...]) -> str:
    """``dependency_path``, remembered: a rebuild meets the same tables again and again."""
    return dependency_path(levels)


@dataclass(frozen=True)
class IndexPoint:
    id: uuid.UUID  # the card's UUID
    dense: Sequence[float]
    sparse: SparseVector
    card: CardFacts
    revision: int
    fingerprint: str
    # An explained error's second dense projection: its error text (the card's
    # context), so a query that quotes an error finds the card that explains it.
    # Engines without vector kinds ignore it.
    symptom: Sequence[float] | None = None

    def payload(self) -> dict[str, Any]:
        card = self.card
        return {
            "workspace": card.workspace,
            "family": card.family,
            "scope": card.scope,
            "concepts": list(card.concepts),
            # Every level is present, null when absent: the physical filter relies on
            # IsNull to let a shallower dependency cover its descendants.
            "deps": [dep.as_json() for dep in card.dependencies],
            # The same dependencies as keywords, one per dependency, so the physical
            # filter runs on payload indexes instead of a nested scan (10x slower):
            # each dependency's full path, and every prefix of it.
            "dep_paths": sorted({_path(tuple(_levels(dep))) for dep in card.dependencies}),
            "dep_prefixes": sorted(
                {
                    _path(tuple(_levels(dep)[:n]))
                    for dep in card.dependencies
                    for n in range(1, len(_levels(dep)) + 1)
                }
            ),
            "revision": self.revision,
            "fingerprint": self.fingerprint,
        }


def _levels(dep: Dependency) -> list[str]:
    return [
        level
        for level in (dep.database, dep.schema_name, dep.table, dep.column)
        if level is not None
    ]


@dataclass(frozen=True)
class PointRecord:
    """What the index holds for a card, for drift checks against the archive.

    Revision and fingerprint are None on points written by an older format: they
    never match a card, so such points count as stale.
    """

    id: uuid.UUID
    revision: int | None
    fingerprint: str | None


@dataclass(frozen=True)
class IndexHit:
    id: uuid.UUID
    rank: int  # 1-based position after fusion
    dense_rank: int | None  # 1-based position in the dense branch, None if not a candidate there
    bm25_rank: int | None
    revision: int | None  # None on an old-format point, like PointRecord
    fingerprint: str | None
    # Which dense projection matched: "text" (the card) or "symptom" (an explained
    # error's error text); "text" for engines without vector kinds.
    matched_kind: str = "text"
    # The raw cosine distance of that dense match, where the engine reports it
    # (pgvector), never converted to a similarity; None otherwise.
    distance: float | None = None
    # The cosine similarity of the question and that dense match (1 - the cosine
    # distance), None when the dense branch did not return the point: the relevance an
    # agent may threshold (it does not depend on the other results, unlike the ranks).
    similarity: float | None = None


class SearchIndex(Protocol):
    def session(self) -> AbstractContextManager[Any]:
        """Hold the engine for a unit of work. The embedded engine is single-process:
        callers enter a session BEFORE taking the archive's workspace lock, so a
        process holding the index never waits on one that waits for it."""

    def collection_exists(self) -> bool: ...

    def ensure_collection(self, dimension: int) -> None:
        """Create the collection, or check an existing one: a missing BM25 vector is
        added, an incompatible dense vector raises ``IndexIncompatible``."""

    def drop_collection(self) -> None: ...

    def upsert(self, points: Sequence[IndexPoint]) -> None: ...

    def delete(self, workspace: str, ids: Sequence[uuid.UUID]) -> None:
        """Remove these points of the workspace; unknown ids are not an error."""

    def hybrid_search(
        self, dense: Sequence[float], sparse: SparseVector, filters: RecallFilters, limit: int
    ) -> list[IndexHit]:
        """Dense and BM25 candidates (``limit`` each), both filtered before selection
        and with BM25 IDF computed over the workspace, fused by RRF with k=60."""

    def discard_unreadable(self, workspace: str) -> str | None:
        """Before a rebuild: set aside the workspace's storage if it cannot be opened,
        so the rebuild recreates it; returns where it went (None: nothing to do). Only
        the embedded engine owns its files; a server's storage is its operator's."""

    def scroll_ids(self, workspace: str) -> list[PointRecord]: ...

    def dense_vectors(
        self, workspace: str, ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, list[float]]:
        """The stored dense vector (the card's text) of these points of the workspace,
        as the engine reads it back; absent points are left out. For ``check``, which
        compares a sample with fresh embeddings to find damaged storage."""

    def count(self, workspace: str) -> int: ...

    def optimize(self) -> None:
        """Build search structures for what was written (after a rebuild); a server
        does this on its own."""

    def close(self) -> None: ...

    def capabilities(self) -> Capabilities:
        """What the engine offers beyond this port (``Capabilities``): declared, so
        that the projector never guesses at an engine's methods."""
        ...


class Generational(Protocol):
    """An engine that rebuilds a workspace into a new generation beside the one
    serving recall (every shipped engine); see ``begin_generation``."""

    def begin_generation(self, workspace: str) -> IndexGeneration: ...


class PointEncoding(Protocol):
    """An engine with its own form of a point, built outside the workspace's lock
    (the embedded Edge engine); see ``encode_points``."""

    def encode_points(self, points: Sequence[IndexPoint]) -> list[IndexPoint]: ...


class Compacting(Protocol):
    """An engine that indexes nothing on its own (Qdrant Edge): what saves and imports
    write stays in plain segments until a compaction replaces the workspace's serving
    points by an indexed copy."""

    def compact(
        self,
        workspace: str,
        starting: Callable[[int], None] | None = None,
        *,
        least: int | None = None,
    ) -> int:
        """Compact the workspace when at least ``least`` (default: the engine's own
        threshold) of its points are plain; returns the points copied (0: nothing)."""
        ...

    def settled_writes(self, quiet: float) -> list[str]:
        """The workspaces written since the last call and not for ``quiet`` seconds."""
        ...

    def owed_compactions(self) -> list[str]:
        """The workspaces an earlier process left to compact."""
        ...


class SchemaChecked(Protocol):
    """An engine that keeps tables in PostgreSQL, under migrations of its own."""

    def check_schema(self) -> None:
        """Raise unless the engine's migrations are applied unchanged."""
        ...


@dataclass(frozen=True)
class Capabilities:
    """An engine's optional capabilities: each is the engine itself where it has it
    (``Capabilities(generations=self)``, which mypy checks against the protocol), None
    where it has not. ``vector_kinds``: the dense vectors a point keeps, "text" always
    and "symptom" where the engine keeps an explained error's second projection."""

    generations: Generational | None = None
    encoding: PointEncoding | None = None
    compaction: Compacting | None = None
    schema: SchemaChecked | None = None
    vector_kinds: tuple[str, ...] = ("text",)


@dataclass(frozen=True)
class EncodedPoint(IndexPoint):
    """A point with the engine's own form of it (``engine``), built by ``encode_points``."""

    engine: Any = None


def encode_points(index: SearchIndex, points: Sequence[IndexPoint]) -> list[IndexPoint]:
    """The points in the engine's own form where the engine offers it (``PointEncoding``,
    the embedded Edge engine): built before the workspace's lock is taken, so the locked
    write only hands them over (converting 512 points of 384 floats takes ~0.1 s of
    Python, which would otherwise hold the lock that saves and archive batches wait for)."""
    encoding = index.capabilities().encoding
    return encoding.encode_points(points) if encoding is not None else list(points)


def stores_symptoms(index: SearchIndex) -> bool:
    """Whether the engine keeps the symptom projection (``IndexPoint.symptom``): an
    engine declares its dense vector kinds in ``Capabilities.vector_kinds``; the Qdrant
    engines keep only the card's text, and embedding symptoms for them would be wasted
    work."""
    return "symptom" in index.capabilities().vector_kinds


def projection(payload: dict[str, Any] | None) -> tuple[int | None, str | None]:
    """The revision and fingerprint a point records; absent on old-format points."""
    payload = payload or {}
    return payload.get("revision"), payload.get("fingerprint")


@dataclass(frozen=True)
class BranchHit:
    """One candidate of the dense or the BM25 branch, as the engine scored it."""

    id: uuid.UUID
    score: float
    revision: int | None
    fingerprint: str | None


def fuse(
    dense: Sequence[BranchHit], sparse: Sequence[BranchHit], limit: int, k: int = RRF_K
) -> list[IndexHit]:
    """Reciprocal rank fusion of the two branches, done here rather than by the engine
    so that equal scores are ordered by point id: the same archive gives the same
    ranking whichever engine, replica or rebuild answers (engines break ties by their
    internal offsets, which a rebuild changes)."""

    def ranks(hits: Sequence[BranchHit]) -> dict[uuid.UUID, int]:
        ordered = sorted(hits, key=lambda h: (-h.score, h.id))
        return {hit.id: position for position, hit in enumerate(ordered, start=1)}

    dense_ranks, sparse_ranks = ranks(dense), ranks(sparse)
    projection_of = {hit.id: (hit.revision, hit.fingerprint) for hit in [*sparse, *dense]}
    # a dense branch scores by cosine similarity (an engine scoring otherwise, such as
    # pgvector's negated distance, replaces it on its hits)
    similarity_of = {hit.id: hit.score for hit in dense}

    def fused_score(point_id: uuid.UUID) -> float:
        return sum(1 / (k + r[point_id]) for r in (dense_ranks, sparse_ranks) if point_id in r)

    ordered = sorted(projection_of, key=lambda i: (-fused_score(i), i))[:limit]
    return [
        IndexHit(
            point_id,
            rank,
            dense_ranks.get(point_id),
            sparse_ranks.get(point_id),
            *projection_of[point_id],
            similarity=similarity_of.get(point_id),
        )
        for rank, point_id in enumerate(ordered, start=1)
    ]


@dataclass(frozen=True)
class Generations:
    """A workspace's generations where an engine keeps them side by side in one shared
    table or collection (pgvector, qdrant-client): the one serving recall, and the one
    a rebuild builds (None: no rebuild under way, nor an interrupted one)."""

    serving: int
    building: int | None

    def written(self) -> list[int]:
        """The generations a save writes: the serving one, and the one being built, so
        that the switch finds the save there whichever process made it."""
        return [self.serving] if self.building is None else [self.serving, self.building]


class IndexGeneration(Protocol):
    """What a rebuild of one workspace writes to. An engine that can builds a new
    generation beside the one serving recall and ``switch``es atomically at the end;
    otherwise the rebuild writes in place (``InPlaceGeneration``)."""

    # Whether the points written survive an interruption in a generation of their own,
    # so that the next rebuild skips the cards they hold at their current projection.
    resumable: bool

    def records(self) -> list[PointRecord]: ...

    def upsert(self, points: Sequence[IndexPoint]) -> None: ...

    def delete(self, ids: Sequence[uuid.UUID]) -> None: ...

    def optimize(self) -> None:
        """Index what was written so far (called now and then during a rebuild)."""

    def switch(self) -> None:
        """Make this generation serve recall; the replaced one is removed."""


class InPlaceGeneration:
    """A rebuild that rewrites the serving points themselves: for an engine without
    generations (every shipped engine has them), and the bulk projection of an import
    into the serving points (``IndexProjector.sync``). An interrupted rewrite starts
    over: the points it already rewrote cannot be told from the ones it had not
    reached."""

    resumable = False

    def __init__(self, index: SearchIndex, workspace: str) -> None:
        self.index = index
        self.workspace = workspace

    def records(self) -> list[PointRecord]:
        return self.index.scroll_ids(self.workspace)

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if points:
            self.index.upsert(points)

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        self.index.delete(self.workspace, ids)

    def optimize(self) -> None:
        return None  # once, at the end (``switch``): a server indexes on its own

    def switch(self) -> None:
        self.index.optimize()


def begin_generation(index: SearchIndex, workspace: str) -> IndexGeneration:
    """The generation a rebuild of the workspace writes: a new one beside the serving
    one where the engine offers it (``Generational``), else the serving points."""
    generations = index.capabilities().generations
    if generations is None:
        return InPlaceGeneration(index, workspace)
    return generations.begin_generation(workspace)
