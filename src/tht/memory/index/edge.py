"""Qdrant Edge: the Qdrant engine in-process, data in a directory (the embedded default).

Layout: ``<path>/<collection>/`` is the engine's shard; ``<path>/<collection>.pid``
names the process holding it. A shard is single-process (its write-ahead log is
locked), so opening waits a bounded time for another process to let go, then raises
``IndexBusy``.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from tht.errors import InvalidInput, ThothError
from tht.memory.embedding.sparse import SparseVector
from tht.memory.index import filters as f
from tht.memory.index.errors import IndexBusy, IndexIncompatible, IndexUnavailable
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

_RETRY_PAUSE = 0.1
_SCROLL_PAGE = 1000


class EdgeIndex:
    """``release_after``: a long-running process (the web server) gives the shard up
    after that many idle seconds, so CLI commands on the same data directory get
    their turn; a CLI command keeps it until it closes."""

    def __init__(self, path: Path | str, collection: str = "memory", *, open_timeout: float = 10.0,
                 release_after: float | None = None) -> None:
        self.root = Path(path)
        self.shard_path = self.root / collection
        self._pid_file = self.root / f"{collection}.pid"
        self.open_timeout = open_timeout
        self.release_after = release_after
        self._shard: qe.EdgeShard | None = None
        self._lock = threading.RLock()
        self._in_use = 0
        self._last_used = 0.0
        self._release_timer: threading.Timer | None = None

    @contextmanager
    def session(self) -> Iterator[qe.EdgeShard]:
        """Hold the shard for a unit of work (opening it, with the bounded wait, if
        needed). Callers take it before the archive's workspace lock."""
        with self._lock:
            shard = self._open_existing()
            self._in_use += 1
        try:
            yield shard
        finally:
            with self._lock:
                self._in_use -= 1
                self._last_used = time.monotonic()
                self._schedule_release()

    def _schedule_release(self) -> None:
        if self.release_after is None or self._release_timer is not None or self._shard is None:
            return
        self._release_timer = threading.Timer(self.release_after, self._release_if_idle)
        self._release_timer.daemon = True
        self._release_timer.start()

    def _release_if_idle(self) -> None:
        with self._lock:
            self._release_timer = None
            if self._in_use == 0 and time.monotonic() - self._last_used >= self.release_after:
                self._release()
            else:
                self._schedule_release()

    # -- collection ---------------------------------------------------------------

    def collection_exists(self) -> bool:
        return self._shard is not None or (self.shard_path / "edge_config.json").is_file()

    def ensure_collection(self, dimension: int) -> None:
        with self._lock:
            if self._shard is None:
                self._shard = self._open(create_dimension=dimension)
        with self.session() as shard:
            self._check_collection(shard, dimension)

    def _check_collection(self, shard: qe.EdgeShard, dimension: int) -> None:
        # The engine offers no call that reads a shard's vector configuration; it
        # persists it in edge_config.json, which is read here.
        with _engine_errors():
            config = json.loads((self.shard_path / "edge_config.json").read_text())
        dense = config.get("vectors", {}).get(DENSE)
        if dense is None or dense.get("size") != dimension or dense.get("distance") != "Cosine":
            raise IndexIncompatible(
                f"the embedded index at {self.shard_path} has dense vector {dense!r}, "
                f"this projection needs size {dimension} with Cosine distance; rebuild the index",
                details={"found": dense, "dimension": dimension},
            )
        sparse = config.get("sparse_vectors", {}).get(SPARSE)
        if sparse is None:
            with _engine_errors():
                shard.update(qe.UpdateOperation.create_sparse_vector(SPARSE, modifier=qe.Modifier.Idf))
        elif sparse.get("modifier") != "idf":
            raise IndexIncompatible(
                f"the embedded index at {self.shard_path} has a BM25 vector without the IDF modifier; "
                "rebuild the index",
                details={"found": sparse},
            )
        self._ensure_payload_indexes(shard)

    def drop_collection(self) -> None:
        with self._lock:
            if self._shard is None and self.collection_exists():
                # Deleting files under another process's open shard would corrupt it.
                self._shard = self._open(create_dimension=None)
            self._release()
            shutil.rmtree(self.shard_path, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            if self._release_timer is not None:
                self._release_timer.cancel()
                self._release_timer = None
            self._release()

    # -- points -------------------------------------------------------------------

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if not points:
            return
        edge_points = [
            qe.Point(
                p.id,
                {DENSE: list(p.dense), SPARSE: qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))},
                p.payload(),
            )
            for p in points
        ]
        with self.session() as shard, _engine_errors():
            shard.update(qe.UpdateOperation.upsert_points(edge_points))

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        if not ids:
            return
        with self.session() as shard, _engine_errors():
            shard.update(qe.UpdateOperation.delete_points(list(ids)))

    def hybrid_search(
        self, dense: Sequence[float], sparse: SparseVector, filters: RecallFilters, limit: int
    ) -> list[IndexHit]:
        if limit < 1:
            raise InvalidInput("the search limit must be at least 1")
        where = _filter(f.recall_condition(filters))
        dense_query = qe.Query.Nearest(list(dense), using=DENSE)
        sparse_query = qe.Query.Nearest(qe.SparseVector(list(sparse.indices), list(sparse.values)), using=SPARSE)
        # IDF over this workspace only: another tenant's cards must not change scores here.
        idf = qe.SearchParams(idf=qe.IdfParams(corpus=_filter(f.workspace_condition(filters.workspace))))
        # Both branches in one batch, each filtered before candidate selection; the
        # fusion happens in ``fuse`` (deterministic ties).
        dense_only = qe.QueryRequest(limit=limit, query=dense_query, filter=where, with_payload=PROJECTION_FIELDS)
        sparse_only = qe.QueryRequest(limit=limit, query=sparse_query, filter=where, params=idf,
                                      with_payload=PROJECTION_FIELDS)
        with self.session() as shard, _engine_errors():
            dense_points, sparse_points = shard.query_batch(qe.QueryBatchRequest([dense_only, sparse_only]))
        return fuse(_branch(dense_points), _branch(sparse_points), limit)

    def scroll_ids(self, workspace: str) -> list[PointRecord]:
        where = _filter(f.workspace_condition(workspace))
        records: list[PointRecord] = []
        offset = None
        with self.session() as shard:
            while True:
                request = qe.ScrollRequest(
                    offset=offset, limit=_SCROLL_PAGE, filter=where, with_payload=PROJECTION_FIELDS
                )
                with _engine_errors():
                    page, offset = shard.scroll(request)
                records.extend(PointRecord(r.id, *projection(r.payload)) for r in page)
                if offset is None:
                    return records

    def count(self, workspace: str) -> int:
        request = qe.CountRequest(exact=True, filter=_filter(f.workspace_condition(workspace)))
        with self.session() as shard, _engine_errors():
            return shard.count(request)

    def optimize(self) -> None:
        # Edge has no background optimizer: without this, segments stay unindexed
        # (plain scans) and deleted points are never vacuumed.
        with self.session() as shard, _engine_errors():
            shard.optimize()

    # -- opening ------------------------------------------------------------------

    def _open_existing(self) -> qe.EdgeShard:
        with self._lock:
            if self._shard is None:
                if not self.collection_exists():
                    raise IndexUnavailable(
                        f"the embedded index at {self.shard_path} has no collection yet; "
                        "write a card or run the index rebuild",
                        details={"path": str(self.shard_path)},
                    )
                self._shard = self._open(create_dimension=None)
            return self._shard

    def _open(self, create_dimension: int | None) -> qe.EdgeShard:
        deadline = time.monotonic() + self.open_timeout
        while True:
            try:
                if create_dimension is not None and not self.collection_exists():
                    self.root.mkdir(parents=True, exist_ok=True)
                    shard = qe.EdgeShard.create(str(self.shard_path), _config(create_dimension))
                else:
                    shard = qe.EdgeShard.load(str(self.shard_path))
            except Exception as exc:  # the engine raises bare Exception
                if not _is_lock_error(exc):
                    raise IndexUnavailable(
                        f"cannot open the embedded index at {self.shard_path}: {exc}",
                        details={"path": str(self.shard_path)},
                    ) from exc
                if time.monotonic() >= deadline:
                    raise self._busy() from exc
                time.sleep(_RETRY_PAUSE)
                continue
            self._pid_file.write_text(str(os.getpid()))
            return shard

    def _busy(self) -> IndexBusy:
        holder = _live_pid(self._pid_file)
        who = f" (pid {holder})" if holder else ""
        return IndexBusy(
            f"the embedded index at {self.shard_path} is held by another process{who}; "
            "retry, or point the CLI at the running server",
            details={"path": str(self.shard_path), "pid": holder, "waited_seconds": self.open_timeout},
        )

    def _release(self) -> None:
        if self._shard is not None:
            shard, self._shard = self._shard, None
            try:
                shard.close()
            finally:
                if _live_pid(self._pid_file) == os.getpid():
                    self._pid_file.unlink(missing_ok=True)

    def _ensure_payload_indexes(self, shard: qe.EdgeShard) -> None:
        wanted: dict[str, Any] = {TENANT_FIELD: qe.KeywordIndexParams(is_tenant=True)}
        wanted.update({name: qe.KeywordIndexParams() for name in KEYWORD_FIELDS})
        with _engine_errors():
            present = set(shard.info().payload_schema)
            for name, params in wanted.items():
                if name not in present:
                    shard.update(qe.UpdateOperation.create_field_index(name, params))


@contextmanager
def _engine_errors() -> Iterator[None]:
    try:
        yield
    except ThothError:
        raise
    except Exception as exc:  # the engine raises bare Exception
        raise IndexUnavailable(f"the embedded index failed: {exc}") from exc


def _config(dimension: int) -> qe.EdgeConfig:
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
    )


def _is_lock_error(exc: Exception) -> bool:
    # The engine reports a held shard only through its message: the WAL file lock
    # would block ("Can't init WAL: Kind(WouldBlock)").
    return "WouldBlock" in str(exc)


def _live_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _branch(points: Sequence[Any]) -> list[BranchHit]:
    return [BranchHit(p.id, p.score, *projection(p.payload)) for p in points]


def _filter(condition: f.All) -> qe.Filter:
    return qe.Filter(must=[_condition(c) for c in condition.conditions])


def _condition(condition: f.Condition) -> Any:
    match condition:
        case f.Match(key, value):
            return qe.FieldCondition(key, match=qe.MatchValue(value))
        case f.MatchAny(key, values):
            return qe.FieldCondition(key, match=qe.MatchAny(list(values)))
        case f.IsNull(key):
            return qe.IsNullCondition(key)
        case f.IsEmpty(key):
            return qe.IsEmptyCondition(key)
        case f.All():
            return _filter(condition)
        case f.AnyOf(conditions):
            return qe.Filter(should=[_condition(c) for c in conditions])
        case f.Nested(key, inner):
            return qe.NestedCondition(key, _filter(inner))
    raise TypeError(f"unknown filter condition {condition!r}")
