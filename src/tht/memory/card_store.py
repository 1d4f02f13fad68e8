"""The card store: a card's writes and reads on the archive, for the CLI, the API and
the workflow.

A mutation commits the card, its dependencies, its outgoing links and its pending
projection operation in one transaction, under the workspace's advisory lock. Bringing
the search index up to date is a separate step (see ``Projector``): when it fails or
is not configured, the card is saved and its operation stays pending, visibly.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from tht.errors import (
    Conflict,
    FamilyImmutable,
    InvalidInput,
    NotFound,
    StaleRevision,
    ThothError,
)
from tht.faults import crash_point, pause_point
from tht.memory.archive.port import Archive, ArchiveTx
from tht.memory.idempotency import IdempotencyKey, request_digest
from tht.memory.model import (
    DEFAULT_PROFILE,
    WORKSPACE_ID_PATTERN,
    Card,
    CardInput,
    CardSummary,
    ListQuery,
    PendingOperation,
    Source,
    Workspace,
    card_id_to_uuid,
    uuid_to_card_id,
)
from tht.memory.projection_format import KnownFormat

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexOutcome:
    """What happened to the search projection after a committed mutation."""

    status: str  # "current" or "pending"
    operation: str
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "operation": self.operation, "error": self.error}


class Projector(Protocol):
    """Brings the search index up to date with one card's current archive state."""

    def propagate(self, workspace: str, card_uuid: uuid.UUID) -> IndexOutcome: ...

    def known_format_of(self, workspace: str, language: str) -> KnownFormat: ...


@dataclass
class MutationResult:
    card: Card | None
    index: IndexOutcome
    deleted: str | None = None
    links_removed: int = 0
    # the answer recorded under an idempotency key, sent again instead of a new mutation
    replayed: dict[str, Any] | None = None

    @classmethod
    def replay(cls, document: dict[str, Any]) -> MutationResult:
        return cls(card=None, index=IndexOutcome(**document["index"]), replayed=document)

    @property
    def status(self) -> str:
        return "saved" if self.index.status == "current" else "saved_index_incomplete"

    def as_json(self) -> dict[str, Any]:
        if self.replayed is not None:
            return self.replayed
        data: dict[str, Any] = {"status": self.status, "index": self.index.as_json()}
        if self.card is not None:
            data["card"] = self.card.as_json()
        if self.deleted is not None:
            data["deleted"] = self.deleted
            data["links_removed"] = self.links_removed
        return data


@dataclass
class CardPage:
    items: list[CardSummary]
    total: int
    page: int
    page_size: int

    def as_json(self) -> dict[str, Any]:
        return {
            "items": [item.model_dump(mode="json") for item in self.items],
            "total": self.total,
            "page": self.page,
            "page_size": self.page_size,
        }


@dataclass
class WorkspaceDetail:
    workspace: Workspace
    cards: dict[str, int] = field(default_factory=dict)
    pending: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            **self.workspace.model_dump(mode="json"),
            "cards": self.cards,
            "pending": self.pending,
        }


def _digest(operation: str, card_id: str | None, body: Any) -> str:
    if isinstance(body, CardInput):
        body = body.model_dump(mode="json", exclude_unset=True)
    return request_digest(operation, card_id, body)


class MemoryService:
    def __init__(self, archive: Archive, projector: Projector | None = None) -> None:
        self.archive = archive
        self.projector = projector

    # --- reading ------------------------------------------------------------------

    def list_cards(self, workspace: str, query: ListQuery) -> CardPage:
        with self.archive.transaction(workspace) as tx:
            language = tx.require_workspace().language
            items, total = tx.list_cards(query, language)
        return CardPage(items, total, query.page, query.page_size)

    def get_card(self, workspace: str, card_id: str) -> Card:
        """The complete card, with what the search index holds of it (``index``)."""
        card_uuid = card_id_to_uuid(card_id)
        with self.archive.transaction(workspace) as tx:
            language = tx.require_workspace().language
            card = tx.card(card_uuid)
            if card is not None:
                card.index = tx.card_index(card_uuid, self._known_format(workspace, language))
        if card is None:
            raise NotFound(
                f"card {card_id} does not exist in workspace '{workspace}'", details={"id": card_id}
            )
        return card

    def _known_format(self, workspace: str, language: str) -> KnownFormat | None:
        """The running projection format of the workspace's profile, None without an
        index; never a call to the embedder: browsing and pending work need neither the
        embedder nor the index."""
        if self.projector is None:
            return None
        return self.projector.known_format_of(workspace, language)

    def pending(self, workspace: str) -> list[PendingOperation]:
        """Outstanding operations, plus cards whose projection is missing or of an older
        format (after a model change or migration 002): both are excluded from recall.
        Read from the archive alone, as browsing is: no embedder or index is asked."""
        with self.archive.transaction(workspace) as tx:
            language = tx.require_workspace().language
            items = tx.pending_operations()
            running = self._known_format(workspace, language)
            if running is not None:
                items += [
                    PendingOperation(
                        card_id=uuid_to_card_id(stale.id),
                        operation="upsert",
                        revision=stale.revision,
                        attempts=0,
                        title=stale.title,
                        reason="projection_outdated",
                        last_error=(
                            "not indexed yet"
                            if stale.fingerprint is None
                            else "indexed in an older format or revision"
                        ),
                    )
                    for stale in tx.stale_projections(running)
                ]
            return items

    # --- mutations ----------------------------------------------------------------

    def create_card(
        self,
        workspace: str,
        data: CardInput,
        *,
        origin: str = "manual",
        source: Source | None = None,
        idempotency: IdempotencyKey | None = None,
    ) -> MutationResult:
        if origin == "manual" and source is not None:
            raise InvalidInput("a manual card has no workflow source")
        if data.revision is not None:
            raise InvalidInput("a new card has no revision to check")
        card_uuid = uuid.uuid4()
        digest = _digest("create", None, data)
        with self.archive.transaction(workspace, lock=True) as tx:
            language = tx.require_workspace().language
            if idempotency is not None and (seen := idempotency.recorded(tx, digest)):
                return MutationResult.replay(seen)
            links = self._checked_links(tx, card_uuid, data)
            revision = tx.insert_card(
                card_uuid, data, language=language, origin=origin, source=source
            )
            saved = self._save_relations(tx, card_uuid, revision, data, links, idempotency, digest)
        return self._after_save(workspace, card_uuid, saved, idempotency, digest)

    def update_card(
        self,
        workspace: str,
        card_id: str,
        data: CardInput,
        *,
        idempotency: IdempotencyKey | None = None,
    ) -> MutationResult:
        card_uuid = card_id_to_uuid(card_id)
        digest = _digest("update", card_id, data)
        with self.archive.transaction(workspace, lock=True) as tx:
            tx.require_workspace()
            if idempotency is not None and (seen := idempotency.recorded(tx, digest)):
                return MutationResult.replay(seen)
            locked = tx.lock_card_family(card_uuid)
            if locked is None:
                raise NotFound(
                    f"card {card_id} does not exist in workspace '{workspace}'",
                    details={"id": card_id},
                )
            current, family = locked
            self._check_revision(card_id, data.revision, current)
            if data.family != family:
                raise FamilyImmutable(
                    f"card {card_id} is a {family}: its family cannot change to {data.family};"
                    " create a new card of that family (and delete this one) instead",
                    details={
                        "id": card_id,
                        "field": "family",
                        "current": family,
                        "requested": data.family,
                    },
                )
            links = self._checked_links(tx, card_uuid, data)
            revision = tx.update_card(card_uuid, data)
            saved = self._save_relations(tx, card_uuid, revision, data, links, idempotency, digest)
        return self._after_save(workspace, card_uuid, saved, idempotency, digest)

    def delete_card(
        self,
        workspace: str,
        card_id: str,
        expected_revision: int | None = None,
        *,
        idempotency: IdempotencyKey | None = None,
    ) -> MutationResult:
        card_uuid = card_id_to_uuid(card_id)
        digest = _digest("delete", card_id, {"revision": expected_revision})
        with self.archive.transaction(workspace, lock=True) as tx:
            tx.require_workspace()
            if idempotency is not None and (seen := idempotency.recorded(tx, digest)):
                return MutationResult.replay(seen)
            current = tx.lock_card(card_uuid)
            if current is None:
                raise NotFound(
                    f"card {card_id} does not exist in workspace '{workspace}'",
                    details={"id": card_id},
                )
            self._check_revision(card_id, expected_revision, current)
            revision, links_removed = tx.delete_card(card_uuid)
            # the deletion is one revision past the card's last one
            tx.enqueue(card_uuid, "delete", revision + 1)
            self._record(
                tx, idempotency, digest, None, "delete", card_id, links_removed=links_removed
            )
            crash_point("delete.before_archive_commit")
        crash_point("delete.after_archive_commit")
        result = self._after_commit(workspace, card_uuid, "delete", None)
        result.deleted = card_id
        result.links_removed = links_removed
        self._answer(workspace, idempotency, digest, result)
        return result

    @staticmethod
    def _check_revision(card_id: str, expected: int | None, current: int) -> None:
        if expected is not None and expected != current:
            raise StaleRevision(
                f"card {card_id} is at revision {current}, not {expected}: reload it and edit again",
                details={"id": card_id, "expected": expected, "current": current},
            )

    @staticmethod
    def _checked_links(
        tx: ArchiveTx, card_uuid: uuid.UUID, data: CardInput
    ) -> list[tuple[uuid.UUID, str]]:
        links = [(card_id_to_uuid(link.target), link.meaning) for link in data.links]
        if any(target == card_uuid for target, _ in links):
            raise Conflict("a card cannot link to itself")
        missing = {target for target, _ in links} - tx.existing_cards([t for t, _ in links])
        if missing:
            names = sorted(uuid_to_card_id(m) for m in missing)
            raise NotFound(
                f"link target {', '.join(names)} does not exist in workspace '{tx.workspace_id}'",
                details={"missing_targets": names},
            )
        return sorted(links)

    @staticmethod
    def _record(
        tx: ArchiveTx,
        idempotency: IdempotencyKey | None,
        digest: str,
        card: Card | None,
        operation: str,
        deleted: str | None = None,
        links_removed: int = 0,
    ) -> None:
        """In the mutation's transaction: the answer as of the commit (the index update
        still to come) under the request's idempotency key."""
        if idempotency is None:
            return
        answer = MutationResult(
            card=card,
            index=IndexOutcome("pending", operation, "the index update had not run yet"),
            deleted=deleted,
            links_removed=links_removed,
        )
        idempotency.record(tx, digest, answer.as_json())

    def _answer(
        self,
        workspace: str,
        idempotency: IdempotencyKey | None,
        digest: str,
        result: MutationResult,
    ) -> None:
        """The final answer replaces the one recorded with the commit. The mutation is
        done whatever happens here: a failure keeps the first answer (true when written)."""
        if idempotency is None:
            return
        try:
            idempotency.answer(self.archive, workspace, digest, result.as_json())
        except ThothError as exc:
            log.warning("idempotency key %s keeps its first answer: %s", idempotency.key, exc)

    def _save_relations(
        self,
        tx: ArchiveTx,
        card_uuid: uuid.UUID,
        revision: int,
        data: CardInput,
        links: list[tuple[uuid.UUID, str]],
        idempotency: IdempotencyKey | None,
        digest: str,
    ) -> Card:
        """The rest of a created or updated card's save, in its transaction: its
        dependencies and links, its indexing operation and the idempotency record;
        the card as it will commit."""
        tx.replace_dependencies(card_uuid, data.dependencies)
        tx.replace_outgoing_links(card_uuid, links)
        tx.enqueue(card_uuid, "upsert", revision)
        saved = tx.card(card_uuid)
        assert saved is not None  # written in this transaction
        self._record(tx, idempotency, digest, saved, "upsert")
        crash_point("save.before_archive_commit")
        pause_point("save.before_archive_commit")  # a test stops the server here
        return saved

    def _after_save(
        self,
        workspace: str,
        card_uuid: uuid.UUID,
        saved: Card,
        idempotency: IdempotencyKey | None,
        digest: str,
    ) -> MutationResult:
        crash_point("save.after_archive_commit")
        pause_point("save.after_archive_commit")
        return self._after_commit(workspace, card_uuid, "upsert", saved, idempotency, digest)

    def _after_commit(
        self,
        workspace: str,
        card_uuid: uuid.UUID,
        operation: str,
        card: Card | None,
        idempotency: IdempotencyKey | None = None,
        digest: str = "",
    ) -> MutationResult:
        """The answer of a committed mutation. ``card``: the card as committed, read in
        the mutation's transaction, so that nothing after the commit can turn a saved
        card into a failure (an archive lost now leaves the index update pending)."""
        if self.projector is None:
            outcome = IndexOutcome("pending", operation, "no search index is configured")
        else:
            try:
                outcome = self.projector.propagate(workspace, card_uuid)
            except ThothError as exc:  # the save is committed: this is "index update incomplete"
                outcome = IndexOutcome("pending", operation, exc.message)
        crash_point(
            "save.after_index_update" if operation == "upsert" else "delete.after_index_update"
        )
        result = MutationResult(card=card, index=outcome)
        if operation == "upsert":
            self._answer(workspace, idempotency, digest, result)
        return result


class WorkspaceService:
    def __init__(self, archive: Archive, profiles: Collection[str] = (DEFAULT_PROFILE,)) -> None:
        self.archive = archive
        self.profiles = profiles  # the installation's embedder profiles

    def create(
        self,
        workspace_id: str,
        language: str,
        name: str | None = None,
        embedder: str = DEFAULT_PROFILE,
    ) -> Workspace:
        """A new workspace with its language and the embedder profile its vectors come
        from (one of the installation's)."""
        if embedder not in self.profiles:
            raise NotFound(
                f"embedder profile '{embedder}' is not defined by this installation"
                f" (defined: {', '.join(sorted(self.profiles))})",
                details={"embedder": embedder, "defined": sorted(self.profiles)},
            )
        if language not in ("en", "it"):
            raise InvalidInput(f"language must be 'en' or 'it', not '{language}'")
        if not re.match(WORKSPACE_ID_PATTERN, workspace_id):
            raise InvalidInput(
                f"'{workspace_id}' is not a valid workspace id (lowercase letters, digits, '-' and '_',"
                " starting with a letter or digit, at most 63 characters)"
            )
        name = (name or workspace_id).strip()
        if not 1 <= len(name) <= 200:
            raise InvalidInput("a workspace name has 1 to 200 characters")
        with self.archive.transaction(workspace_id, lock=True) as tx:
            created = tx.insert_workspace(name, language, embedder)
        if created is None:
            raise Conflict(
                f"workspace '{workspace_id}' already exists", details={"workspace": workspace_id}
            )
        return created

    def list(self) -> list[Workspace]:
        with self.archive.transaction(None, directory=True) as tx:
            return tx.list_workspaces()

    def show(self, workspace_id: str) -> WorkspaceDetail:
        with self.archive.transaction(workspace_id) as tx:
            workspace = tx.require_workspace()
            counts, pending = tx.workspace_counts()
        return WorkspaceDetail(workspace, counts, pending)
