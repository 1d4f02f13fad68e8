"""Each workspace's projection: the index and embedder of the profile it records.

A workspace's vectors come from one embedder profile of the installation (recorded in
the archive, changed only by a rebuild that switches it). The application services
take these two objects where they took one projector and one recall: every call names
its workspace, and is served by that workspace's projector (or recall), so no face can
recall or index a workspace with another model than its own.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from tht.errors import ThothError

if TYPE_CHECKING:
    from tht.memory.card_store import IndexOutcome
    from tht.memory.indexing import IndexProjector, Progress, SyncReport
    from tht.memory.projection_format import KnownFormat
    from tht.memory.recall_service import RecallService

log = logging.getLogger(__name__)


class Projection(Protocol):
    """What the application asks of the projection, each call for one workspace: a
    ``WorkspaceProjector``, or one ``IndexProjector`` serving every workspace."""

    def of(self, workspace: str) -> IndexProjector: ...

    def known_format_of(self, workspace: str, language: str) -> KnownFormat: ...

    def propagate(self, workspace: str, card_uuid: uuid.UUID) -> IndexOutcome: ...

    def sync(self, workspace: str, card_uuids: Sequence[uuid.UUID]) -> SyncReport: ...

    def retry(self, workspace: str, card_id: str) -> IndexOutcome: ...


class Profiles(Protocol):
    """The installation's projections by embedder profile (``tht.bootstrap.Engines``)."""

    def projection(self, profile: str) -> tuple[IndexProjector, RecallService]: ...

    def profile_of(self, workspace: str) -> str: ...

    def forget_profile(self, workspace: str) -> None: ...


class WorkspaceProjector:
    """The ``IndexProjector`` calls the application makes, each served by the
    projector of its workspace's embedder profile."""

    def __init__(self, profiles: Profiles) -> None:
        self._profiles = profiles

    def of(self, workspace: str) -> IndexProjector:
        return self._profiles.projection(self._profiles.profile_of(workspace))[0]

    def switch(
        self, workspace: str, profile: str, progress: Progress | None = None
    ) -> dict[str, Any]:
        """Make ``profile`` the workspace's embedder: every card is projected with it
        into a new generation of its collection while recall goes on with the
        workspace's current profile, which the workspace leaves only when the new
        projection is complete, in one transaction (cards saved meanwhile are then
        pending and projected at once). Refused while the workspace is being rebuilt."""
        started = time.perf_counter()
        previous = self._profiles.profile_of(workspace)
        target = self._profiles.projection(profile)[0]  # an unknown profile: refused here
        if profile == previous:
            return {
                "workspace": workspace,
                "embedder": profile,
                "previous": previous,
                "status": "unchanged",
            }
        source = self._profiles.projection(previous)[0]
        with source.rebuilds.rebuilding(workspace):
            fingerprint, written = target.rebuilds.build_for_switch(workspace, progress)
            with source.archive.transaction(workspace, lock=True) as tx:
                revisions = tx.card_revisions()
                current = [r for r in written.values() if revisions.get(r.card_uuid) == r.revision]
                tx.record_projections(fingerprint, current)
                tx.clear_operations({r.card_uuid: r.revision for r in current})
                done = {r.card_uuid for r in current}
                changed = {i: revision for i, revision in revisions.items() if i not in done}
                for card_uuid, revision in changed.items():
                    tx.enqueue(card_uuid, "upsert", revision)
                tx.set_workspace_embedder(profile)
            self._profiles.forget_profile(workspace)
        gone = [i for i in written if i not in revisions]
        with target.index.session():
            target.index.delete(workspace, gone)
        drained = target.drain(workspace) if changed else None
        left = _remove_points(source, workspace)
        return {
            "workspace": workspace,
            "embedder": profile,
            "previous": previous,
            "status": "switched",
            "cards": len(revisions),
            "indexed": len(current),
            "projected_after_switch": len(changed),
            "pending": (drained or {}).get("pending", 0),
            "previous_points_left": left,
            "seconds": round(time.perf_counter() - started, 3),
        }

    def known_format_of(self, workspace: str, language: str) -> KnownFormat:
        return self.of(workspace).known_format_of(workspace, language)

    def profile_of(self, workspace: str) -> str:
        return self._profiles.profile_of(workspace)

    def rebuilding_now(self, workspace: str) -> bool:
        return self.of(workspace).rebuilding_now(workspace)

    def propagate(self, workspace: str, card_uuid: uuid.UUID) -> IndexOutcome:
        projector = self.of(workspace)
        outcome = projector.propagate(workspace, card_uuid)
        if outcome.status == "pending":
            # the profile read may be another process's switch behind (Engines keeps it
            # a moment): read it again, and project with the new one at once
            self._profiles.forget_profile(workspace)
            switched = self.of(workspace)
            if switched is not projector:
                outcome = switched.propagate(workspace, card_uuid)
        return outcome

    def sync(self, workspace: str, card_uuids: Sequence[uuid.UUID]) -> SyncReport:
        return self.of(workspace).sync(workspace, card_uuids)

    def retry(self, workspace: str, card_id: str) -> IndexOutcome:
        return self.of(workspace).retry(workspace, card_id)

    def drain(self, workspace: str) -> dict[str, Any]:
        return self._read_again(workspace).drain(workspace)

    def rebuild(self, workspace: str, progress: Progress | None = None) -> dict[str, Any]:
        return self._read_again(workspace).rebuild(workspace, progress)

    def check(self, workspace: str, repair: bool = False) -> dict[str, Any]:
        return self._read_again(workspace).check(workspace, repair=repair)

    def _read_again(self, workspace: str) -> IndexProjector:
        """The projector of the profile the workspace records now (an operator's
        command, rare and long: not the profile read a moment ago, which another
        process may have switched since)."""
        self._profiles.forget_profile(workspace)
        return self.of(workspace)

    def importing(self, workspace: str) -> AbstractContextManager[None]:
        return self.of(workspace).importing(workspace)


class WorkspaceRecall:
    """The recall of each workspace's embedder profile."""

    def __init__(self, profiles: Profiles) -> None:
        self._profiles = profiles

    def of(self, workspace: str) -> RecallService:
        return self._profiles.projection(self._profiles.profile_of(workspace))[1]


def _remove_points(projector: IndexProjector, workspace: str) -> str | None:
    """The workspace's points in the collection of the profile it left: removed; a
    failure leaves them there (recall no longer reads them) and says so."""
    try:
        with projector.index.session():
            ids = [record.id for record in projector.index.scroll_ids(workspace)]
            projector.index.delete(workspace, ids)
    except ThothError as exc:
        log.warning("points of workspace %s left in its former collection: %s", workspace, exc)
        return exc.message
    return None
