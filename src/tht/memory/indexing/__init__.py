"""Keeping the search index in step with the archive: saves, retries, the outbox,
rebuilds, the drift check and compactions (``IndexProjector`` and its jobs)."""

from tht.memory.indexing.compaction import ImportCompactions
from tht.memory.indexing.projector import IndexProjector
from tht.memory.indexing.rebuild import Progress
from tht.memory.indexing.target import Prepared, ProjectionInputs, SyncReport

__all__ = [
    "ImportCompactions",
    "IndexProjector",
    "Prepared",
    "Progress",
    "ProjectionInputs",
    "SyncReport",
]
