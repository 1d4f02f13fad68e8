"""Keeping one embedder profile's search index in step with the archive.

``IndexProjector`` puts the jobs together and is what the application calls; each
job lives in a module of its own: a save's projection, its retry and the outbox's
drain (``writes``), the chunked pipeline of rebuilds and bulk projections
(``pipeline``), rebuilds and embedder switches (``rebuild``), the drift check
(``drift``), compactions (``compaction``) and an import's projections embedded ahead
(``ahead``). Recall reads only the projection format (``ProjectionFormat``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from tht.memory.archive.port import Archive
from tht.memory.card_store import IndexOutcome
from tht.memory.embedding import Embedder
from tht.memory.index import SearchIndex
from tht.memory.indexing.ahead import AheadWrites
from tht.memory.indexing.claims import WorkspaceClaims
from tht.memory.indexing.compaction import Compactions
from tht.memory.indexing.drift import DriftCheck
from tht.memory.indexing.pipeline import ChunkPipeline
from tht.memory.indexing.rebuild import Progress, Rebuilds
from tht.memory.indexing.target import IndexTarget, Prepared, ProjectionInputs, SyncReport
from tht.memory.indexing.writes import IndexWrites
from tht.memory.projection_format import KnownFormat, ProjectedCard, ProjectionFormat


class IndexProjector:
    """The projection of one embedder profile: its index, embedder and format, and the
    jobs that keep the index in step with the archive (``writes``, ``rebuilds``,
    ``drift``, ``compactions``, ``ahead``), each call handed to its job."""

    def __init__(
        self,
        archive: Archive,
        index: SearchIndex,
        embedder: Embedder,
        *,
        collection: str = "",
        profile: str | None = None,
    ) -> None:
        self.target = IndexTarget(archive, index, embedder, collection=collection, profile=profile)
        claims = WorkspaceClaims()
        chunks = ChunkPipeline(self.target)
        self.writes = IndexWrites(self.target, chunks)
        self.rebuilds = Rebuilds(self.target, chunks, self.writes, claims)
        self.drift = DriftCheck(self.target, self.writes)
        self.compactions = Compactions(self.target, claims)
        self.ahead = AheadWrites(self.target, chunks)

    @property
    def archive(self) -> Archive:
        return self.target.archive

    @property
    def index(self) -> SearchIndex:
        return self.target.index

    @property
    def embedder(self) -> Embedder:
        return self.target.embedder

    @property
    def format(self) -> ProjectionFormat:
        return self.target.format

    def of(self, workspace: str) -> IndexProjector:
        """The projector of ``workspace``: this one serves every workspace it is given
        (``WorkspaceProjector`` gives each workspace the projector of its profile)."""
        return self

    def known_format_of(self, workspace: str, language: str) -> KnownFormat:
        return self.target.format.known_format(language)

    # --- saves, retries, the outbox ------------------------------------------------------

    def sync(self, workspace: str, card_uuids: Sequence[uuid.UUID]) -> SyncReport:
        return self.writes.sync(workspace, card_uuids)

    def propagate(self, workspace: str, card_uuid: uuid.UUID) -> IndexOutcome:
        return self.writes.propagate(workspace, card_uuid)

    def retry(self, workspace: str, card_id: str) -> IndexOutcome:
        return self.writes.retry(workspace, card_id)

    def drain(self, workspace: str, settled: float = 0.0) -> dict[str, Any]:
        return self.writes.drain(workspace, settled)

    # --- rebuilds, the drift check -------------------------------------------------------

    def rebuild(self, workspace: str, progress: Progress | None = None) -> dict[str, Any]:
        return self.rebuilds.rebuild(workspace, progress)

    def rebuilding_now(self, workspace: str) -> bool:
        return self.rebuilds.rebuilding_now(workspace)

    def check(self, workspace: str, repair: bool = False) -> dict[str, Any]:
        return self.drift.check(workspace, repair)

    # --- compactions, an import's writes -------------------------------------------------

    def compact_quiet(self, quiet: float | None = None) -> dict[str, dict[str, Any]]:
        return self.compactions.compact_quiet(quiet)

    def importing(self, workspace: str) -> AbstractContextManager[None]:
        return self.compactions.importing(workspace)

    def inputs_of(self, cards: Sequence[ProjectedCard], language: str) -> ProjectionInputs:
        return self.ahead.inputs_of(cards, language)

    def embed_inputs(self, inputs: ProjectionInputs) -> list[Prepared]:
        return self.ahead.embed_inputs(inputs)

    def write_embedded(
        self, workspace: str, language: str, prepared: dict[uuid.UUID, Prepared]
    ) -> tuple[int, list[uuid.UUID]]:
        return self.ahead.write_embedded(workspace, language, prepared)
