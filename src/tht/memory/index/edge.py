"""Qdrant Edge: the Qdrant engine in-process, data in a directory (the embedded default).

Layout: ``<path>/<collection>/`` holds ``layout.json`` (the dense dimension) and one
engine shard per workspace under ``workspaces/<workspace>/``. A workspace's shard is
its tenant boundary: BM25's IDF is the shard's own, and no query pays for a workspace
filter or for counting the workspace's points (with one shard for every workspace,
``IdfParams(corpus=<workspace filter>)`` costs about 1 ms a query at 100 000 cards).

Shards are single-process (each write-ahead log is locked), so a process holds the
whole collection: ``<path>/<collection>.lock`` (an advisory file lock) while any
shard is open, and ``<path>/<collection>.pid`` names it. Opening waits a bounded time
for another process to let go, then raises ``IndexBusy``.

A rebuild never writes into the shard that serves recall: it builds a new generation
of the workspace's shard beside it (``workspaces/<workspace>.g<stamp>``, named by
``workspaces/<workspace>.building``), and switches by replacing the one-line file
``workspaces/<workspace>.current`` that names the generation serving recall (absent:
``workspaces/<workspace>`` itself, the layout of earlier versions). Saves made
meanwhile in this process are written to both generations; an interrupted build is
picked up again by the next rebuild. A compaction (``compact``) copies the serving
shard's files into a new generation, named by ``workspaces/<workspace>.compacting``
too, and indexes it: left by an interruption, the next compaction discards it and the
next rebuild takes it up. Generations left by a crash are removed at the next switch.
The first write to a workspace since its last compaction began leaves
``workspaces/<workspace>.written``, so that a service started after a stop still
compacts what the one before wrote (``owed_compactions``).

A collection written by earlier versions as one shard for every workspace is moved
into this layout, vectors included, the first time it is opened.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

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
    Capabilities,
    EncodedPoint,
    IndexHit,
    IndexPoint,
    PointRecord,
    fuse,
    projection,
)
from tht.memory.model import WORKSPACE_ID_PATTERN
from tht.memory.recall_filters import RecallFilters

_RETRY_PAUSE = 0.1
_SCROLL_PAGE = 1000
_LAYOUT = "layout.json"
_WORKSPACES = "workspaces"
_DAMAGED = "damaged"  # unreadable workspace shards a rebuild moved aside
_DAMAGED_KEPT = 5  # the newest of them, for whoever investigates; older ones are removed
_CURRENT = ".current"  # beside a workspace's shard folders: the generation serving recall
_BUILDING = ".building"  # the generation a rebuild is writing (kept until it switches)
# Names the generation being written when it is a compaction's: a copy of the serving
# points, which the next compaction discards if it was left (a rebuild's is resumed).
_COMPACTING = ".compacting"
# Beside a workspace's shard folders: written since its last compaction began. What
# ``settled_writes`` knows is lost with the process; this is not.
_WRITTEN = ".written"
# Segments of at most this many kilobytes (about 20 000 cards of 384 dimensions): a
# rebuild indexes each full one while it embeds the next, instead of all at the end.
_MAX_SEGMENT_KB = 32_000
# What a rebuild's switch merges those segments into, when it wrote more than one:
# segments of up to this many points, one of them for a workspace of up to this size. Every search visits every segment,
# and each costs about as much as one ten times its size (measured at 100 000 cards,
# 384 dimensions: 3.5 ms a recall's engine query over six segments of 20 000 points, a
# plain scan each under recall's family filter; 1.1 ms over one merged segment; the
# merge indexes every point again: about a minute at that size). A save or an import
# compaction adds segments of at most ``_MAX_SEGMENT_KB`` again, until the next rebuild.
_SERVING_SEGMENT_POINTS = 160_000
# Plain (unindexed) dense vectors in a serving shard before an import compacts it: one
# full segment, searched by brute force in about 3 ms.
COMPACT_UNINDEXED = 20_000
# The engine's default indexing threshold: a segment whose dense vectors take fewer
# bytes stays plain (brute force) when optimized.
ENGINE_INDEXES_FROM_BYTES = 10_000 * 1024
# A generation whose dense vectors take fewer bytes is indexed in this process: below
# that threshold the engine builds no index, so the call takes milliseconds, less than
# starting the child process (about 0.2 s).
IN_PROCESS_OPTIMIZE_BYTES = 8_000_000
# What an earlier version's single shard left in the collection directory.
_LEGACY_SHARD = ("edge_config.json", "segments", "wal", "temp_segments")
# Dense candidates found with the int8 copies are scored with the original vectors.
DENSE_PARAMS = qe.SearchParams(quantization=qe.QuantizationSearchParams(rescore=True))
# Shard names: a workspace id is used as it is; any other name is hex-encoded.
_PLAIN_NAME = re.compile(WORKSPACE_ID_PATTERN)
log = logging.getLogger(__name__)
SERVICE = "service"  # the holder that keeps the collection for its whole life


class EdgeIndex:
    """The process that opens it keeps the collection until it closes: the service for
    every command, or one command run in its own process (THT_SERVICE=off)."""

    def __init__(
        self,
        path: Path | str,
        collection: str = "memory",
        *,
        open_timeout: float = 10.0,
        holder: str = "command",
    ) -> None:
        self.root = Path(path)
        # written beside the pid: another process that finds the collection held by the
        # service fails at once, as the service keeps it until it stops (a command ends)
        self.holder = holder
        self.collection_path = self.root / collection
        self._lock_path = self.root / f"{collection}.lock"
        self._pid_file = self.root / f"{collection}.pid"
        self.open_timeout = open_timeout
        self._held: IO[str] | None = None  # the collection's lock file, while held
        self._layout_checked = False  # an earlier version's layout moved, for this hold
        self._shards: dict[str, qe.EdgeShard] = {}
        # a rebuild's new generation per workspace: saves write it too
        self._building: dict[str, EdgeGeneration] = {}
        # replaced generations still being read by a thread: closed and removed by the last
        self._users: dict[int, int] = {}
        self._retired: dict[int, tuple[qe.EdgeShard, Path]] = {}
        # workspaces whose serving shard saves wrote: when last (time.monotonic())
        self._written: dict[str, float] = {}
        # workspaces this process wrote since their last compaction began: their
        # ``.written`` marker is there, and this process's upkeep will compact them
        self._owing: set[str] = set()
        self._lock = threading.RLock()
        # one write at a time into a workspace's generations: a save's writes to the
        # serving and the new generation, or a compaction's copy of the serving files
        self._writes = threading.Lock()

    @contextmanager
    def session(self) -> Iterator[EdgeIndex]:
        """Hold the collection for a unit of work (taking it, with the bounded wait, if
        needed). Callers take it before the archive's workspace lock."""
        with self._lock:
            self._hold()
            if not self._layout_checked:  # once per hold: the layout cannot change under it
                self._upgrade_legacy()
                self._layout_checked = True
        yield self

    def shard(self, workspace: str, *, create: bool = False) -> qe.EdgeShard | None:
        """The workspace's shard, opened on first use; None if the workspace has no
        points yet (unless ``create``). Call inside ``session()``."""
        with self._lock:
            if workspace in self._shards:
                return self._shards[workspace]
            path = self.workspace_path(workspace)
            if (path / "edge_config.json").is_file():
                try:
                    with _engine_errors():
                        shard = qe.EdgeShard.load(str(path))
                except IndexUnavailable as exc:
                    raise IndexUnavailable(
                        f"the embedded index's shard of workspace '{workspace}' cannot be opened ({exc.message});"
                        " `tht memory index` for this workspace replaces it",
                        details={"workspace": workspace, "path": str(path)},
                    ) from exc
            elif create:
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with _engine_errors():
                    shard = qe.EdgeShard.create(str(path), _config(self._dimension()))
                _private(path)
            else:
                return None
            try:
                self._check_shard(shard, path)
            except BaseException:
                shard.close()
                raise
            self._shards[workspace] = shard
            return shard

    def workspace_path(self, workspace: str) -> Path:
        """The folder of the workspace's shard generation that serves recall."""
        base = self._base_path(workspace)
        return _named(base.with_name(base.name + _CURRENT)) or base

    def _base_path(self, workspace: str) -> Path:
        name = workspace if _PLAIN_NAME.match(workspace) else "_" + workspace.encode().hex()
        return self.collection_path / _WORKSPACES / name

    @contextmanager
    def _serving(self, workspace: str, *, create: bool = False) -> Iterator[qe.EdgeShard | None]:
        """The shard serving the workspace, kept open while the caller uses it, even if a
        rebuild switches to a new generation meanwhile."""
        with self._lock:
            shard = (
                self.shard(workspace, create=True) if create else self._existing_shard(workspace)
            )
            if shard is not None:
                self._users[id(shard)] = self._users.get(id(shard), 0) + 1
        try:
            yield shard
        finally:
            if shard is not None:
                with self._lock:
                    self._users[id(shard)] -= 1
                    if not self._users[id(shard)]:
                        del self._users[id(shard)]
                        retired = self._retired.pop(id(shard), None)
                        if retired is not None:
                            _discard(*retired)

    # -- generations (rebuilds beside the serving shard) ------------------------------

    def begin_generation(self, workspace: str) -> EdgeGeneration:
        """The new generation a rebuild of the workspace writes: the one an interrupted
        rebuild or compaction left (its points are kept: the rebuild skips what is
        current there, and it is the rebuild's from then on), or a new empty shard.
        Saves of this process write to it too until it switches."""
        with self.session(), self._lock:
            base = self._base_path(workspace)
            # taken up by a rebuild: never discarded by a compaction
            base.with_name(base.name + _COMPACTING).unlink(missing_ok=True)
            if workspace in self._building and not self._building[workspace]._closed:
                return self._building[workspace]
            path = _named(base.with_name(base.name + _BUILDING))
            shard = None
            if path is not None and (path / "edge_config.json").is_file():
                try:
                    with _engine_errors():
                        shard = qe.EdgeShard.load(str(path))
                    try:
                        self._check_shard(shard, path)
                    except BaseException:
                        shard.close()
                        raise
                except IndexUnavailable as exc:
                    log.warning("starting the rebuild of %s afresh: %s", workspace, exc.message)
                    shard = None
            if shard is None or path is None:
                if path is not None:
                    shutil.rmtree(path, ignore_errors=True)
                path = _new_generation_path(base)
                with _engine_errors():
                    shard = qe.EdgeShard.create(str(path), _config(self._dimension()))
                try:
                    self._check_shard(shard, path)
                except BaseException:
                    shard.close()
                    raise
                _private(path)
                _name_building(base, path)
            generation = EdgeGeneration(self, workspace, shard, path)
            self._building[workspace] = generation
            return generation

    def _copy_serving(self, workspace: str) -> EdgeGeneration:
        """A new generation holding the serving shard's files as they are: flushed,
        then copied while no save writes (saves wait for the copy: about 0.6 s per
        60 000 points here), then named as a compaction's, so saves reach it from then
        on. It is not open: its ``optimize`` opens it in the child process first. The
        caller (``compact``) holds the collection."""
        base = self._base_path(workspace)
        path = _new_generation_path(base)
        with self._writes:
            try:
                with self._serving(workspace) as shard:
                    assert shard is not None  # checked by the caller; nothing removes it
                    with _engine_errors():
                        shard.flush()
                    shutil.copytree(self.workspace_path(workspace), path, dirs_exist_ok=True)
            except OSError as exc:  # a full disk, say: the serving shard is untouched
                shutil.rmtree(path, ignore_errors=True)
                raise IndexUnavailable(
                    f"copying the embedded index of workspace {workspace} failed:"
                    f" {_copy_failure(exc)}",
                    details={"path": str(path), "workspace": workspace},
                ) from exc
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)
                raise
            _private(path)
            with self._lock:
                _name_building(base, path, compaction=True)
                generation = EdgeGeneration(self, workspace, None, path)
                self._building[workspace] = generation
        return generation

    def _switch(self, generation: EdgeGeneration) -> None:
        """Make the generation serve recall: one atomic replacement of the pointer file;
        the replaced generation is closed and removed once no thread reads it."""
        workspace = generation.workspace
        with self.session(), self._lock:
            if self._shards.get(workspace) is generation.shard:
                return  # already serving
            base = self._base_path(workspace)
            old_path = self.workspace_path(workspace)
            _private(generation.path)
            _write_text(base.with_name(base.name + _CURRENT), generation.path.name)
            base.with_name(base.name + _BUILDING).unlink(missing_ok=True)
            base.with_name(base.name + _COMPACTING).unlink(missing_ok=True)
            self._building.pop(workspace, None)
            old = self._shards.pop(workspace, None)
            self._shards[workspace] = generation.shard
            if old is not None and id(old) in self._users:
                self._retired[id(old)] = (old, old_path)
            elif old is not None:
                _discard(old, old_path)
            elif old_path != generation.path:
                shutil.rmtree(old_path, ignore_errors=True)
            self._prune_generations(workspace)

    def _prune_generations(self, workspace: str) -> None:
        """Remove generation folders of the workspace that neither serve nor are being
        built (a crash between the switch and the removal leaves one)."""
        base = self._base_path(workspace)
        keep = {self.workspace_path(workspace), _named(base.with_name(base.name + _BUILDING))}
        keep |= {path for _, path in self._retired.values()}
        for path in base.parent.glob(f"{base.name}.g*"):
            if path.is_dir() and path not in keep:
                shutil.rmtree(path, ignore_errors=True)
        if base.is_dir() and base not in keep:
            shutil.rmtree(base, ignore_errors=True)

    # -- collection ---------------------------------------------------------------

    def collection_exists(self) -> bool:
        return (self.collection_path / _LAYOUT).is_file() or self._legacy_present()

    def ensure_collection(self, dimension: int) -> None:
        # The lock file keeps other processes out; the thread lock keeps this
        # process's threads from creating the collection twice.
        with self.session(), self._lock:
            if not self.collection_exists():
                self.collection_path.mkdir(mode=0o700, parents=True, exist_ok=True)
                _write_json(self.collection_path / _LAYOUT, {"dimension": dimension})
            try:
                found = self._dimension()
            except IndexUnavailable as exc:
                # Damaged collection metadata must not lock every workspace out of its
                # rebuild: it is rewritten, and each shard is still checked against it
                # when opened (a rebuild replaces a shard that does not fit).
                log.warning(
                    "rewriting the embedded index's unreadable %s (%s)", _LAYOUT, exc.message
                )
                _write_json(self.collection_path / _LAYOUT, {"dimension": dimension})
                found = dimension
            if found != dimension:
                raise IndexIncompatible(
                    f"the embedded index at {self.collection_path} has dense vectors of size {found}, "
                    f"this projection needs size {dimension} with Cosine distance; rebuild the index",
                    details={"found": found, "dimension": dimension},
                )
            # Workspace shards are checked when first used, never here: nothing of one
            # workspace may depend on another's files (a damaged shard would otherwise
            # fail every workspace's saves and rebuilds).

    def discard_unreadable(self, workspace: str) -> str | None:
        """Before a rebuild of the workspace: a shard that cannot be opened (damaged
        segment or write-ahead log, lost ``edge_config.json``, incompatible vectors) is
        moved aside into ``<collection>/damaged/``, so the rebuild recreates it from the
        archive; kept, not deleted, for whoever investigates. Returns where it went."""
        with self.session(), self._lock:
            path = self.workspace_path(workspace)
            if workspace in self._shards or not path.exists():
                return None
            try:
                if self.shard(workspace) is not None:
                    return None
                reason = "it has no edge_config.json"
            except IndexBusy:
                raise
            except IndexUnavailable as exc:
                reason = exc.message
            aside = (
                self.collection_path / _DAMAGED / f"{path.name}-{time.strftime('%Y%m%dT%H%M%S')}-"
                f"{uuid.uuid4().hex[:8]}"
            )
            aside.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.replace(path, aside)
            kept = sorted(aside.parent.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in kept[_DAMAGED_KEPT:]:
                shutil.rmtree(old, ignore_errors=True)
            log.warning(
                "moved the unreadable shard of workspace %s to %s (%s); the rebuild recreates it",
                workspace,
                aside,
                reason,
            )
            return str(aside)

    def drop_collection(self) -> None:
        with self._lock:
            # Deleting files under another process's open shard would corrupt it.
            self._hold()
            self._close_shards()
            shutil.rmtree(self.collection_path, ignore_errors=True)
            self._release()

    def close(self) -> None:
        with self._lock:
            self._release()

    def capabilities(self) -> Capabilities:
        """Generations, its own point form, and compactions (it indexes nothing on its own)."""
        return Capabilities(generations=self, encoding=self, compaction=self)

    # -- points -------------------------------------------------------------------

    def encode_points(self, points: Sequence[IndexPoint]) -> list[IndexPoint]:
        """The points with their engine form, for ``upsert`` (see ``port.encode_points``)."""
        return [
            EncodedPoint(
                p.id, p.dense, p.sparse, p.card, p.revision, p.fingerprint, p.symptom, _point(p)
            )
            for p in points
        ]

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        by_workspace: dict[str, list[qe.Point]] = {}
        for p in points:
            by_workspace.setdefault(p.card.workspace, []).append(_point(p))
        with self.session():
            for workspace, edge_points in by_workspace.items():
                self._update(workspace, qe.UpdateOperation.upsert_points(edge_points), create=True)

    def delete(self, workspace: str, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            with self.session():
                self._update(workspace, qe.UpdateOperation.delete_points(list(ids)))

    def _update(
        self, workspace: str, operation: qe.UpdateOperation, *, create: bool = False
    ) -> None:
        """Apply a save's write to the serving shard and, during a rebuild, to the new
        generation. The generation is looked up first: a switch in between then makes
        both the same shard (written once), never leaves the new one without the write."""
        with self._writes:
            with self._lock:
                building = self._building.get(workspace)
                present = create or self.shard(workspace) is not None
            if present:
                with self._serving(workspace, create=create) as shard:
                    if shard is not None and (building is None or not building.holds(shard)):
                        with _engine_errors():
                            shard.update(operation)
                with self._lock:
                    self._written[workspace] = time.monotonic()
                    if workspace not in self._owing:
                        self._owe_compaction(workspace)
            if building is not None:
                building.apply(operation)

    def hybrid_search(
        self, dense: Sequence[float], sparse: SparseVector, filters: RecallFilters, limit: int
    ) -> list[IndexHit]:
        if limit < 1:
            raise InvalidInput("the search limit must be at least 1")
        # The shard is the workspace: no workspace condition, and BM25's IDF (the
        # shard's own) is computed over this workspace only.
        where = _filter(f.recall_condition(filters, tenant=False))
        dense_query = qe.Query.Nearest(list(dense), using=DENSE)
        sparse_query = qe.Query.Nearest(
            qe.SparseVector(list(sparse.indices), list(sparse.values)), using=SPARSE
        )
        # Both branches in one batch, each filtered before candidate selection; the
        # fusion happens in ``fuse`` (deterministic ties).
        dense_only = qe.QueryRequest(
            limit=limit,
            query=dense_query,
            filter=where,
            params=DENSE_PARAMS,
            with_payload=PROJECTION_FIELDS,
        )
        sparse_only = qe.QueryRequest(
            limit=limit, query=sparse_query, filter=where, with_payload=PROJECTION_FIELDS
        )
        with self.session(), self._serving(filters.workspace) as shard:
            if shard is None:
                return []
            with _engine_errors():
                dense_points, sparse_points = shard.query_batch(
                    qe.QueryBatchRequest([dense_only, sparse_only])
                )
        return fuse(_branch(dense_points), _branch(sparse_points), limit)

    def scroll_ids(self, workspace: str) -> list[PointRecord]:
        with self.session(), self._serving(workspace) as shard:
            records = _scroll(shard, with_payload=PROJECTION_FIELDS) if shard is not None else []
        return [PointRecord(_card_id(r.id), *projection(r.payload)) for r in records]

    def dense_vectors(
        self, workspace: str, ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, list[float]]:
        if not ids:
            return {}
        with self.session(), self._serving(workspace) as shard:
            if shard is None:
                return {}
            with _engine_errors():
                records = shard.retrieve(list(ids), False, [DENSE])
        return {_card_id(r.id): _dense(r.vector) for r in records}

    def count(self, workspace: str) -> int:
        with self.session(), self._serving(workspace) as shard:
            if shard is None:
                return 0
            with _engine_errors():
                return shard.count(qe.CountRequest(exact=True))

    def unindexed(self, workspace: str) -> int:
        """The workspace's dense vectors in plain segments, searched by brute force."""
        with self.session(), self._serving(workspace) as shard:
            if shard is None:
                return 0
            with _engine_errors():
                info = shard.info()
        # every point has a BM25 vector (always indexed) and a dense one
        return 2 * info.points_count - info.indexed_vectors_count

    def settled_writes(self, quiet: float) -> list[str]:
        """The workspaces written since the last call and not for ``quiet`` seconds;
        forgotten until written again."""
        cutoff = time.monotonic() - quiet
        with self._lock:
            settled = sorted(w for w, last in self._written.items() if last <= cutoff)
            for workspace in settled:
                del self._written[workspace]
        return settled

    def owed_compactions(self) -> list[str]:
        """The workspaces an earlier process may have left unindexed: written since
        their last compaction began (``.written``: a service stopped before its upkeep
        came round, or whose compaction failed), or whose compaction it left half done
        (its copy is still named ``.compacting``). Nothing else would compact them, nor
        free a copy's disk space, until the workspace is written again. Those this
        process wrote since are left to its own upkeep (``settled_writes``)."""
        folder = self.collection_path / _WORKSPACES
        written = {
            _workspace_of(m.name.removesuffix(_WRITTEN)) for m in folder.glob(f"*{_WRITTEN}")
        }
        with self._lock:
            written -= self._owing
        return sorted(
            written.union(
                _workspace_of(m.name.removesuffix(_COMPACTING))
                for m in folder.glob(f"*{_COMPACTING}")
            )
        )

    def _owe_compaction(self, workspace: str) -> None:
        """Record that the workspace awaits a compaction, for a later process too."""
        with self._lock:
            self._owing.add(workspace)
            base = self._base_path(workspace)
            try:
                base.with_name(base.name + _WRITTEN).touch(mode=0o600)
            except OSError as exc:  # the write is done; only a later process would miss it
                log.warning("workspace %s: no record that it awaits compaction: %s", workspace, exc)

    def optimize(self) -> None:
        """Compact every workspace written since the last call (see ``compact``)."""
        for workspace in self.settled_writes(0.0):
            self.compact(workspace)

    def compact(
        self,
        workspace: str,
        starting: Callable[[int], None] | None = None,
        *,
        least: int | None = None,
    ) -> int:
        """Replace the workspace's serving shard by an indexed copy when at least
        ``COMPACT_UNINDEXED`` of its dense vectors are in plain segments, or ``least``
        if given (but never fewer than one segment the engine indexes: the shard would
        be copied for nothing); returns the points copied (0: not compacted).
        ``starting`` hears the number of plain vectors it indexes when it starts
        (about 30 s per 100 000 here).

        Edge has no background optimizer: what saves and imports write stays in plain
        segments, searched by brute force (the engine's query 23 ms at 100 000 points
        here, 4.7 ms indexed), and deleted points are never vacuumed. The serving shard cannot be
        optimized in place without stopping recall (the engine's optimize holds the
        GIL; a child process needs the shard closed), so its files are copied into a
        new generation (``_copy_serving``), whose plain segments are indexed in a child
        process (the indexed ones are kept as they are), which is checked to hold as
        many points and switched to like a rebuild's: saves meanwhile reach both.
        Nothing is embedded again. A compaction's generation left by an interrupted
        one is discarded first (a copy; saves since may have missed it). Skipped while
        a rebuild's generation exists (its switch brings indexed segments anyway; an
        interrupted one waits for ``tht memory index``, logged). Callers keep rebuilds
        of the workspace out meanwhile (``IndexProjector``)."""
        with self.session():
            with self._lock:  # writes from now on owe the next one; so does a failure
                self._owing.discard(workspace)
                base = self._base_path(workspace)
                base.with_name(base.name + _WRITTEN).unlink(missing_ok=True)
            try:
                return self._compact(workspace, starting, least)
            except BaseException:
                self._owe_compaction(workspace)
                raise

    def _compact(
        self, workspace: str, starting: Callable[[int], None] | None, least: int | None
    ) -> int:
        """The body of ``compact``, run inside its session."""
        plain = self.unindexed(workspace)
        if least is None:
            least = COMPACT_UNINDEXED
        else:  # fewer than the engine indexes: a copy for nothing
            least = max(least, ENGINE_INDEXES_FROM_BYTES // (4 * self._dimension()))
        # a copy an interrupted compaction left goes, even with too little to compact
        # (it holds its disk space, and ``owed_compactions`` would list it at every start)
        discarded = self._discard_compaction(workspace)
        if plain < least:
            return 0
        if not discarded:
            log.warning(
                "workspace %s is not compacted: a rebuild's generation is being built or"
                " was left by an interrupted one (`tht memory index` finishes it)",
                workspace,
            )
            return 0
        if starting is not None:
            starting(plain)
        generation = self._copy_serving(workspace)
        try:
            generation.optimize()
        except IndexUnavailable:
            if not generation.closed:  # it failed (a full disk, say), not interrupted:
                self._discard_compaction(workspace)  # its copy would only hold the disk
            raise
        with self._writes, self._serving(workspace) as shard:  # no save in between
            assert shard is not None
            with _engine_errors():
                exact = qe.CountRequest(exact=True)
                serving, copied = shard.count(exact), generation.shard.count(exact)
        if copied != serving:  # never switch to a copy that lost points
            self._discard_compaction(workspace)
            raise IndexUnavailable(
                f"the copy of workspace {workspace}'s embedded index holds {copied} points,"
                f" the serving shard {serving}: not compacted",
                details={"workspace": workspace, "serving": serving, "copied": copied},
            )
        self._switch(generation)
        return copied

    def _discard_compaction(self, workspace: str) -> bool:
        """Remove the generation an interrupted compaction of the workspace left, in
        this process or on disk. False when a rebuild's generation is there."""
        with self._lock:
            base = self._base_path(workspace)
            pointer = base.with_name(base.name + _BUILDING)
            marker = base.with_name(base.name + _COMPACTING)
            left = _named(pointer)
            if left is None and workspace not in self._building:
                marker.unlink(missing_ok=True)  # a crash before its generation was named
                return True
            if left is None or _named(marker) != left:
                return False
            generation = self._building.pop(workspace, None)
            if generation is not None:
                generation.close()
            log.info("discarding the generation an interrupted compaction left: %s", left)
            pointer.unlink()
            marker.unlink()
            shutil.rmtree(left, ignore_errors=True)
            return True

    # -- holding the collection -------------------------------------------------------

    def _existing_shard(self, workspace: str) -> qe.EdgeShard | None:
        if not self.collection_exists():
            raise self._no_collection()
        return self.shard(workspace)

    def _no_collection(self) -> IndexUnavailable:
        return IndexUnavailable(
            f"the embedded index at {self.collection_path} has no collection yet; "
            "write a card or run the index rebuild",
            details={"path": str(self.collection_path)},
        )

    def _hold(self) -> None:
        """Take the collection's lock file, waiting at most ``open_timeout``."""
        if self._held is not None:
            return
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.root.stat().st_mode & 0o077:  # an index written before it was kept private
            # the folder itself and what is ours in it: a configured path may hold more
            _restrict(self.root, 0o700)
            _private(self.collection_path)
            for own in (self._lock_path, self._pid_file):
                if own.exists():
                    _restrict(own)
        held = open(self._lock_path, "a+")
        deadline = time.monotonic() + self.open_timeout
        while True:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline or _holder(self._pid_file)[1] == SERVICE:
                    held.close()
                    raise self._busy() from None
                time.sleep(_RETRY_PAUSE)
        self._held = held
        self._pid_file.write_text(f"{os.getpid()} {self.holder}")
        for own in (self._lock_path, self._pid_file):
            _restrict(own)

    def _busy(self) -> IndexBusy:
        pid, holder = _holder(self._pid_file)
        details = {"path": str(self.collection_path), "pid": pid, "holder": holder}
        if holder == SERVICE:
            return IndexBusy(
                f"the embedded index at {self.collection_path} is held by the running service"
                f" (pid {pid}), which keeps it until it stops: run the command through it"
                " (THT_SERVICE=auto, the default), or stop the service first",
                details={**details, "waited_seconds": 0},
            )
        who = f" (pid {pid})" if pid else ""
        return IndexBusy(
            f"the embedded index at {self.collection_path} is held by another process{who}; "
            "retry, or point the CLI at the running server",
            details={**details, "waited_seconds": self.open_timeout},
        )

    def _close_shards(self) -> None:
        shards, self._shards = dict(self._shards), {}
        for workspace, shard in shards.items():
            shard.close()
            _private(self.workspace_path(workspace))  # closing writes files (the WAL's among them)
        building, self._building = dict(self._building), {}
        for generation in building.values():  # the next rebuild picks it up again
            generation.close()
        retired, self._retired = dict(self._retired), {}
        for shard, path in retired.values():
            _discard(shard, path)

    def _release(self) -> None:
        try:
            self._close_shards()
        finally:
            self._layout_checked = False
            if self._held is not None:
                held, self._held = self._held, None
                if _holder(self._pid_file)[0] == os.getpid():
                    self._pid_file.unlink(missing_ok=True)
                held.close()  # closing the file releases the lock

    def _dimension(self) -> int:
        layout = self.collection_path / _LAYOUT
        try:
            return int(json.loads(layout.read_text())["dimension"])
        except FileNotFoundError:
            raise self._no_collection() from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise IndexUnavailable(
                f"the embedded index's {layout} is unreadable ({exc}); rebuild the index",
                details={"path": str(layout)},
            ) from exc

    def _check_shard(self, shard: qe.EdgeShard, path: Path) -> None:
        # The engine offers no call that reads a shard's vector configuration; it
        # persists it in edge_config.json, which is read here.
        with _engine_errors():
            config = json.loads((path / "edge_config.json").read_text())
        dense = config.get("vectors", {}).get(DENSE)
        dimension = self._dimension()
        if dense is None or dense.get("size") != dimension or dense.get("distance") != "Cosine":
            raise IndexIncompatible(
                f"the embedded index at {path} has dense vector {dense!r}, "
                f"this projection needs size {dimension} with Cosine distance; rebuild the index",
                details={"found": dense, "dimension": dimension},
            )
        sparse = config.get("sparse_vectors", {}).get(SPARSE)
        with _engine_errors():
            if sparse is None:
                shard.update(
                    qe.UpdateOperation.create_sparse_vector(SPARSE, modifier=qe.Modifier.Idf)
                )
            elif sparse.get("modifier") != "idf":
                raise IndexIncompatible(
                    f"the embedded index at {path} has a BM25 vector without the IDF modifier; rebuild the index",
                    details={"found": sparse},
                )
            # The workspace keeps its tenant index although queries never filter on it
            # here (the shard is the workspace): the payload schema is every engine's.
            wanted = {TENANT_FIELD: qe.KeywordIndexParams(is_tenant=True)}
            wanted.update({name: qe.KeywordIndexParams() for name in KEYWORD_FIELDS})
            present = set(shard.info().payload_schema)
            for name, params in wanted.items():
                if name not in present:
                    shard.update(qe.UpdateOperation.create_field_index(name, params))

    # -- the single-shard layout of earlier versions -------------------------------------

    def _legacy_present(self) -> bool:
        return (self.collection_path / "edge_config.json").is_file()

    def _upgrade_legacy(self) -> None:
        """Move an earlier version's single shard into one shard per workspace (vectors
        and payloads as they are: nothing is embedded again). Safe to interrupt: the
        old shard is removed only after ``layout.json`` records the new layout, and a
        repeated move upserts the same points."""
        if not self._legacy_present():
            return
        if not (self.collection_path / _LAYOUT).is_file():
            with _engine_errors():
                config = json.loads((self.collection_path / "edge_config.json").read_text())
                dimension = config["vectors"][DENSE]["size"]
            # the new shards need the dimension before layout.json may say the move is done
            (self.collection_path / _WORKSPACES).mkdir(parents=True, exist_ok=True)
            _write_json(self.collection_path / f"{_LAYOUT}.moving", {"dimension": dimension})
            log.warning(
                "moving the embedded index at %s into one shard per workspace (once; about a "
                "minute per 100 000 cards)",
                self.collection_path,
            )
            started = time.monotonic()
            with _engine_errors():
                legacy = qe.EdgeShard.load(str(self.collection_path))
            try:
                moved = self._move_points(legacy, dimension)
            finally:
                legacy.close()
            log.warning("moved %d points in %.1f s", moved, time.monotonic() - started)
            _private(self.collection_path)
            os.replace(self.collection_path / f"{_LAYOUT}.moving", self.collection_path / _LAYOUT)
        for name in _LEGACY_SHARD:
            target = self.collection_path / name
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)

    def _move_points(self, legacy: qe.EdgeShard, dimension: int) -> int:
        by_workspace: dict[str, list[qe.Point]] = {}
        for record in _scroll(legacy, with_payload=True, with_vector=True):
            workspace = (record.payload or {}).get("workspace")
            if not isinstance(workspace, str) or not workspace:
                continue  # a point of no workspace serves no recall
            by_workspace.setdefault(workspace, []).append(_copy(record))
        for workspace, points in by_workspace.items():
            path = self.workspace_path(workspace)
            with _engine_errors():
                shard = (
                    qe.EdgeShard.load(str(path))
                    if (path / "edge_config.json").is_file()
                    else qe.EdgeShard.create(str(path), _config(dimension))
                )
                try:
                    for start in range(0, len(points), _SCROLL_PAGE):
                        shard.update(
                            qe.UpdateOperation.upsert_points(points[start : start + _SCROLL_PAGE])
                        )
                    shard.optimize()
                finally:
                    shard.close()
        return sum(len(points) for points in by_workspace.values())


@contextmanager
def _engine_errors() -> Iterator[None]:
    try:
        yield
    except ThothError:
        raise
    except Exception as exc:  # the engine raises bare Exception
        raise IndexUnavailable(f"the embedded index failed: {exc}") from exc


def _segments(dimension: int, *, merge: bool) -> tuple[int, int]:
    """The optimizer's segment size (KB) and target segment count (0: the engine's,
    one per CPU) that indexing a generation uses: a rebuild's switch merges (see
    ``_SERVING_SEGMENT_POINTS``); indexing while building or compacting keeps the
    segments at ``_MAX_SEGMENT_KB``."""
    if merge:
        return -(-_SERVING_SEGMENT_POINTS * dimension * 4 // 1024), 1
    return _MAX_SEGMENT_KB, 0


def _config(dimension: int) -> qe.EdgeConfig:
    # Payloads in memory: recall reads every hit's revision and fingerprint, which
    # costs twice as much from the on-disk store. Dense vectors also kept as int8
    # (a quarter of the memory besides the originals): the graph search compares
    # those, and the candidates are rescored with the originals (DENSE_PARAMS), so
    # scores stay the exact cosine. About 0.7 ms of recall at 100 000 cards; the
    # quality benchmark is unchanged.
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        on_disk_payload=False,
        quantization_config=qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, always_ram=True),
        optimizers=qe.EdgeOptimizersConfig(max_segment_size=_MAX_SEGMENT_KB),
    )


def _workspace_of(name: str) -> str:
    """The workspace of a shard folder's name (``EdgeIndex._base_path``)."""
    return bytes.fromhex(name[1:]).decode() if name.startswith("_") else name


def _copy_failure(exc: OSError) -> str:
    """What stopped a copy, in one line: ``copytree`` goes on past a file it cannot
    copy and raises one error listing them all (on a full disk, every file, with both
    paths: tens of kilobytes of log)."""
    failures = exc.args[0] if isinstance(exc, shutil.Error) and exc.args else None
    if isinstance(failures, list) and failures:
        more = f" (and {len(failures) - 1} more files)" if len(failures) > 1 else ""
        return f"{failures[0][2]}{more}"
    return str(exc)


def _edge_point(
    point_id: qe.PointId, vectors: qe.Vector, payload: dict[str, Any] | None
) -> qe.Point:
    return qe.Point(point_id, vectors, payload or {})


class EdgeGeneration:
    """A new generation of one workspace's shard, written by a rebuild beside the one
    serving recall; ``switch`` makes it serve.

    Its segments are indexed in a child process (``edge_optimizer.py``): the engine's
    optimize holds the GIL for seconds, which in the service would stop recall. The
    shard is closed meanwhile (a shard is single-process); saves that reach it then are
    held back and applied, in order, when it is opened again."""

    resumable = True  # what it holds survives an interruption, for the next rebuild to skip

    def __init__(
        self, index: EdgeIndex, workspace: str, shard: qe.EdgeShard | None, path: Path
    ) -> None:
        """``shard`` None: the folder holds a shard not opened yet (a compaction's copy),
        which ``optimize`` opens; writes are held back until then."""
        self.index = index
        self.workspace = workspace
        self.path = path
        self._gate = threading.Lock()  # the shard's state: open, being indexed, closed
        # while not open (being indexed, or a copy not opened yet): applied when it opens
        self._held_back: list[qe.UpdateOperation] | None = None if shard is not None else []
        self._shard = shard
        self._optimizer: subprocess.Popen[bytes] | None = None
        self._closed = False

    @property
    def shard(self) -> qe.EdgeShard:
        if self._shard is None:
            raise self._closed_error()
        return self._shard

    @property
    def closed(self) -> bool:
        """Let go (the index closed, or a failed load): the next rebuild takes it up."""
        return self._closed

    def holds(self, shard: qe.EdgeShard) -> bool:
        """Whether this generation's shard is that one (it serves, already switched)."""
        return self._shard is shard

    def records(self) -> list[PointRecord]:
        return [
            PointRecord(_card_id(r.id), *projection(r.payload))
            for r in _scroll(self.shard, with_payload=PROJECTION_FIELDS)
        ]

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        if points:
            self.apply(qe.UpdateOperation.upsert_points([_point(p) for p in points]))

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            self.apply(qe.UpdateOperation.delete_points(list(ids)))

    def apply(self, operation: qe.UpdateOperation) -> None:
        with self._gate:
            if self._closed:  # abandoned: the next rebuild writes what its points lack
                return
            if self._held_back is not None:
                self._held_back.append(operation)
                return
            with _engine_errors():
                self.shard.update(operation)

    def optimize(self, *, merge: bool = False) -> None:
        """Index the segments filled so far, in a child process; with ``merge``, also
        merge them into as few as ``_SERVING_SEGMENT_POINTS`` allows (the switch's
        last indexing). This process stalls only while the engine closes and opens the
        shard again (longest stall 0.3 s at 20 000 points, 0.8-1.7 s at 100 000 here,
        against 5 s and 30-45 s for the optimize run in this process;
        bench/edge_stall_bench.py)."""
        segment_kb, segments = _segments(self.index._dimension(), merge=merge)
        with self._gate:
            if self._closed or self._optimizer is not None:
                raise self._closed_error()
            if self._held_back is None:  # open (else a copy, opened by the child first)
                with _engine_errors():
                    points = self.shard.info().points_count
                    if points * self.index._dimension() * 4 < IN_PROCESS_OPTIMIZE_BYTES:
                        self.shard.optimize()
                        return
                self.shard.close()
                self._held_back = []
            self._optimizer = subprocess.Popen(
                # -P: the script's folder (this package's modules) stays off sys.path
                [
                    sys.executable,
                    "-P",
                    str(_OPTIMIZER),
                    str(self.path),
                    str(os.getpid()),
                    str(segment_kb),
                    str(segments),
                    SPARSE,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C reaches the rebuild, which stops it
            )
        optimizer = self._optimizer
        try:
            _, stderr = optimizer.communicate()
        finally:
            if optimizer.poll() is None:  # interrupted: the engine's optimize is crash-safe
                optimizer.kill()
                optimizer.wait()
            self._reopen()
        if optimizer.returncode != 0:
            # the child's last line: the engine's error, not the traceback above it
            reason = (stderr.decode(errors="replace").strip().splitlines() or [""])[-1][-500:]
            raise IndexUnavailable(
                f"indexing the embedded index's new generation {self.path} failed "
                f"(exit {optimizer.returncode}): {reason}",
                details={"path": str(self.path), "workspace": self.workspace},
            )

    def _reopen(self) -> None:
        with self._gate:
            self._optimizer = None
            held_back, self._held_back = self._held_back or [], None
            if self._closed:  # the index let go meanwhile: the next rebuild opens it
                raise self._closed_error()
            try:
                with _engine_errors():
                    self._shard = shard = qe.EdgeShard.load(str(self.path))
                    for operation in held_back:
                        shard.update(operation)
            except BaseException:
                self._closed = True  # abandoned; the next rebuild opens the folder again
                raise
            _private(self.path)  # the new segments' files

    def switch(self) -> None:
        # merged when the rebuild indexed more than one segment of it already (beside
        # the one being filled): below that, a merge would index it again for nothing
        with self._gate, _engine_errors():
            is_open = self._held_back is None and self._shard is not None
            written = self._shard.info().segments_count if is_open and self._shard else 0
        self.optimize(merge=written > 2)
        self.index._switch(self)

    def close(self) -> None:
        with self._gate:
            self._closed = True
            if self._optimizer is not None:
                self._optimizer.kill()
            if self._held_back is None and self._shard is not None:  # open
                self._shard.close()
                _private(self.path)

    def _closed_error(self) -> IndexUnavailable:
        return IndexUnavailable(
            f"the embedded index was closed while its new generation {self.path} was being"
            " built; the next rebuild resumes it",
            details={"path": str(self.path), "workspace": self.workspace},
        )


_OPTIMIZER = Path(__file__).with_name("edge_optimizer.py")


def _copy(record: qe.Record) -> qe.Point:
    """A point read back with its vectors, to write into another shard."""
    if record.vector is None:  # read with its vectors: every point has some
        raise IndexIncompatible(f"point {record.id} of the embedded index has no vectors")
    return _edge_point(record.id, record.vector, record.payload)


def _point(p: IndexPoint) -> qe.Point:
    if isinstance(p, EncodedPoint) and p.engine is not None:
        return cast(qe.Point, p.engine)
    return _edge_point(
        p.id,
        {
            DENSE: list(p.dense),
            SPARSE: qe.SparseVector(list(p.sparse.indices), list(p.sparse.values)),
        },
        p.payload(),
    )


def _new_generation_path(base: Path) -> Path:
    """A new, empty folder for a generation of the shard at ``base``."""
    path = base.with_name(f"{base.name}.g{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}")
    # the folder of every workspace's shards too, when a rebuild creates the first one
    # (``mkdir(parents=True)`` gives parents the umask's mode)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.mkdir(mode=0o700)
    return path


def _name_building(base: Path, path: Path, *, compaction: bool = False) -> None:
    """Name the generation being built, once its folder is there (a crash leaves no
    dangling name); a compaction's marker first, so that it is never taken for a
    rebuild's."""
    if compaction:
        _write_text(base.with_name(base.name + _COMPACTING), path.name)
    _write_text(base.with_name(base.name + _BUILDING), path.name)


def _named(pointer: Path) -> Path | None:
    """The folder a pointer file names (beside it), None without one."""
    try:
        name = pointer.read_text().strip()
    except FileNotFoundError:
        return None
    return pointer.with_name(name) if name else None


def _write_text(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.chmod(partial, 0o600)
    os.replace(partial, path)


def _discard(shard: qe.EdgeShard, path: Path) -> None:
    try:
        shard.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _write_json(path: Path, document: dict[str, Any]) -> None:
    _write_text(path, json.dumps(document))


def _restrict(path: Path, mode: int = 0o600) -> None:
    try:
        os.chmod(path, mode)
    except OSError as exc:  # another owner's file: never a failure
        log.debug("cannot restrict %s: %s", path, exc)


def _private(path: Path) -> None:
    """Owner only, like the database directory: points hold scopes, concepts and
    dependency names in plain text. The engine creates its files with the process's
    umask, and changing the umask would change it for every thread, so the files are
    restricted after the engine writes them (and the folders keep others out meanwhile)."""
    for folder, _, files in os.walk(path):
        for target, mode in [
            (folder, 0o700),
            *((os.path.join(folder, name), 0o600) for name in files),
        ]:
            try:
                os.chmod(target, mode)
            except OSError as exc:  # another owner's file, or gone meanwhile: never a failure
                log.debug("cannot restrict %s: %s", target, exc)


def _scroll(
    shard: qe.EdgeShard, *, with_payload: qe.WithPayloadType, with_vector: bool = False
) -> list[qe.Record]:
    records: list[qe.Record] = []
    offset = None
    while True:
        request = qe.ScrollRequest(
            offset=offset, limit=_SCROLL_PAGE, with_payload=with_payload, with_vector=with_vector
        )
        with _engine_errors():
            page, offset = shard.scroll(request)
        records.extend(page)
        if offset is None:
            return records


def _holder(pid_file: Path) -> tuple[int | None, str | None]:
    """The live process that holds the collection, and what it is ("service",
    "command"; None from a version that wrote the pid alone); (None, None) if none."""
    try:
        pid, *role = pid_file.read_text().split()
        os.kill(int(pid), 0)
    except (OSError, ValueError):
        return None, None
    return int(pid), role[0] if role else None


def _branch(points: Sequence[qe.ScoredPoint]) -> list[BranchHit]:
    return [BranchHit(_card_id(p.id), p.score, *projection(p.payload)) for p in points]


def _card_id(point_id: qe.PointId) -> uuid.UUID:
    """A point's id, the card's UUID: the engine returns the UUID every point here was
    written with."""
    if isinstance(point_id, uuid.UUID):
        return point_id
    raise IndexIncompatible(f"point {point_id!r} is not a card's: its id is not a UUID")


def _dense(vector: qe.Vector | None) -> list[float]:
    """A retrieved point's dense vector ([] without one)."""
    named = vector.get(DENSE) if isinstance(vector, dict) else None
    # the engine types any named vector as dense, multi-dense or sparse: DENSE is
    # configured as one dense vector (`_config`), so it is a list of floats
    return list(cast(list[float], named)) if isinstance(named, list) else []


def _filter(condition: f.All) -> qe.Filter | None:
    return _every(condition) if condition.conditions else None


def _every(condition: f.All) -> qe.Filter:
    return qe.Filter(must=[_condition(c) for c in condition.conditions])


def _condition(condition: f.Condition) -> qe.ConditionType:
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
            return _every(condition)
        case f.AnyOf(conditions):
            return qe.Filter(should=[_condition(c) for c in conditions])
        case f.Nested(key, inner):
            return qe.NestedCondition(key, _every(inner))
    raise TypeError(f"unknown filter condition {condition!r}")
