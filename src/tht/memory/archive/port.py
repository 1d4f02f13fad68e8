"""The Archive port: what an application service may ask of the archive, typed.

``PostgresArchive`` (tht.memory.archive.postgres) is the adapter; the services typed
against this port (memory, recall, the projector, the workflow, physical cleanup,
accounts, idempotency, import and export) never see SQL, rows or the driver, so a
service-level test may hand them an in-memory fake where speed matters. Raw
``_row``/``_rows``/``_execute`` are private to the adapter and its record classes
(``*_records.py``), which own the SQL of ``sql/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict

from tht.memory.model import (
    Card,
    CardIndex,
    CardInput,
    CardSummary,
    Dependency,
    ListQuery,
    PendingOperation,
    Source,
    Workspace,
)
from tht.memory.projection_format import KnownFormat
from tht.memory.recall_filters import CardFacts

if TYPE_CHECKING:
    from tht.memory.archive.account_records import (
        AuditEntry,
        CreatedUser,
        LockedUser,
        LoginFailures,
        SessionUser,
        TokenUser,
        UserByName,
        UserDetail,
    )
    from tht.memory.archive.idempotency_records import RecordedAnswer
    from tht.memory.archive.transfer_records import ImportedCard


@dataclass(frozen=True)
class RecordedProjection:
    """What ``record_projections`` records of one card."""

    card_uuid: uuid.UUID
    revision: int
    terms: Sequence[int]
    indexed_chars: int
    embedded_chars: int | None


@dataclass(frozen=True)
class ProjectionState:
    """A card's revision next to what the index is recorded to hold for it."""

    revision: int
    projected_revision: int | None
    fingerprint: str | None
    operation: str | None  # outstanding work, if any

    def current(self, fingerprint: str) -> bool:
        return (
            self.operation is None
            and self.projected_revision == self.revision
            and self.fingerprint == fingerprint
        )


RecallFacts = tuple[ProjectionState, CardFacts]


class IndexedFields(TypedDict):
    """The fields a card's indexed text is built from, besides its dependencies (a
    row as read: a model would cost recall more than the text itself): these, and
    every text field of the model (TEXT_FIELDS), by name."""

    id: uuid.UUID
    revision: int
    family: str
    title: str
    concepts: list[str] | None


@dataclass(frozen=True)
class SeedFacts:
    facts: dict[uuid.UUID, RecallFacts]
    links: dict[uuid.UUID, list[tuple[uuid.UUID, str]]]  # outgoing links by source
    target_facts: dict[uuid.UUID, RecallFacts]
    terms: dict[uuid.UUID, frozenset[int]]  # BM25 terms recorded with each projection
    titles: dict[uuid.UUID, str]
    fields: dict[uuid.UUID, IndexedFields]  # of projections recorded without terms


@dataclass(frozen=True)
class StaleProjection:
    """A card without outstanding work whose projection is missing (fingerprint None),
    behind its revision, or of another format."""

    id: uuid.UUID
    title: str
    revision: int
    fingerprint: str | None


class ReviewStore(Protocol):
    """The workflow's records: review receipts, proposal and error-rule lookups."""

    def receipt(self, session: str) -> dict[str, Any] | None: ...

    def insert_receipt(
        self,
        session: str,
        *,
        request_digest: str,
        proposals_digest: str,
        outcome: str,
        reviewer: str,
        result: dict[str, Any],
    ) -> dict[str, Any]: ...

    def mark_ledger_appended(self, session: str) -> None: ...

    def exact_duplicates(
        self, family: str, *, content: str, scope: str, question: str, sql: str, context: str
    ) -> list[uuid.UUID]: ...

    def error_signature_matches(self, signature: str) -> list[uuid.UUID]: ...


class CleanupStore(Protocol):
    """Physical cleanup's records: matching cards, receipts, tombstones."""

    def receipt(self, run_id: uuid.UUID) -> dict[str, Any] | None: ...

    def matching_cards(
        self, database: str, schema: str, tables: list[str], columns: list[dict[str, str]]
    ) -> list[dict[str, Any]]: ...

    def incident_link_count(self, ids: list[uuid.UUID]) -> int: ...

    def delete_cards(self, ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, int]]: ...

    def insert_receipt(
        self,
        run_id: uuid.UUID,
        *,
        database: str,
        schema: str,
        removals: dict[str, Any],
        digest: str,
        deleted: list[dict[str, Any]],
        links_removed: int,
    ) -> None: ...

    def insert_tombstones(self, run_id: uuid.UUID, ids: list[uuid.UUID]) -> None: ...

    def open_tombstones(self, run_id: uuid.UUID) -> list[uuid.UUID]: ...

    def mark_tombstones_removed(self, run_id: uuid.UUID, ids: list[uuid.UUID]) -> None: ...

    def complete_receipt(self, run_id: uuid.UUID) -> None: ...

    def record_failure(self, run_id: uuid.UUID, error: str) -> None: ...


class AccountStore(Protocol):
    """Users, memberships, web sessions, login failures and the audit log (an archive
    transaction in the accounts mode)."""

    def insert_user(
        self,
        user_id: uuid.UUID,
        *,
        name: str,
        role: str,
        password_hash: str | None,
        token_hash: str,
        token_seconds: int | None,
    ) -> CreatedUser | None: ...

    def insert_membership(self, user_id: uuid.UUID, workspace: str) -> None: ...

    def ensure_membership(self, user_id: uuid.UUID, workspace: str) -> None: ...

    def add_membership(self, user_id: uuid.UUID, workspace: str) -> bool: ...

    def revoke_membership(self, user_id: uuid.UUID, workspace: str) -> bool: ...

    def user_by_name(self, name: str) -> UserByName | None: ...

    def user_workspaces(self, user_id: uuid.UUID) -> list[str]: ...

    def token_user(self, token_hash: str) -> TokenUser | None: ...

    def lock_user(self, name: str) -> LockedUser | None: ...

    def lock_admins(self) -> list[str]: ...

    def set_role(self, user_id: uuid.UUID, role: str) -> None: ...

    def set_token(
        self, user_id: uuid.UUID, token_hash: str, seconds: int | None
    ) -> datetime | None: ...

    def delete_user(self, user_id: uuid.UUID) -> None: ...

    def users(self) -> list[UserDetail]: ...

    def expire_sessions(self) -> None: ...

    def insert_session(
        self, id_hash: str, user_id: uuid.UUID, *, one_time: bool, seconds: int
    ) -> None: ...

    def session_user(self, id_hash: str) -> SessionUser | None: ...

    def delete_session(self, id_hash: str) -> bool: ...

    def close_user_sessions(self, user_id: uuid.UUID) -> None: ...

    def login_failures(self, name: str, client: str, window: int) -> LoginFailures: ...

    def record_login_failure(self, name: str, client: str, window: int) -> None: ...

    def clear_login_failures(self, name: str) -> None: ...

    def insert_audit(
        self,
        *,
        actor: str | None,
        action: str,
        target_user: str | None,
        workspace: str | None,
        client: str | None,
        details: Mapping[str, Any],
    ) -> None: ...

    def audit(
        self,
        *,
        since: datetime | None,
        user: str | None,
        limit: int,
        workspaces: list[str] | None,
    ) -> list[AuditEntry]: ...


class IdempotencyStore(Protocol):
    """The answers recorded for idempotency keys (under the workspace's lock)."""

    def prune(self, retention: timedelta) -> None: ...

    def answer_of(self, principal: str, key: str) -> RecordedAnswer | None: ...

    def record(self, principal: str, key: str, digest: str, response: dict[str, Any]) -> None: ...

    def replace_answer(
        self, principal: str, key: str, digest: str, response: dict[str, Any]
    ) -> None: ...


class TransferStore(Protocol):
    """Bulk import's batches, the imports' records (list, undo) and export's count."""

    def insert_cards(
        self,
        language: str,
        created: Sequence[tuple[uuid.UUID, ImportedCard]],
        import_id: uuid.UUID,
    ) -> None: ...

    def mark_replaced(self, import_id: uuid.UUID, card_uuids: Sequence[uuid.UUID]) -> None: ...

    def record_import(
        self, import_id: uuid.UUID, file_name: str, fmt: str, principal: str | None
    ) -> None: ...

    def finish_import(self, import_id: uuid.UUID, status: str, summary: dict[str, Any]) -> None: ...

    def imports(
        self, import_id: uuid.UUID | None = None, limit: int = 100
    ) -> list[dict[str, Any]]: ...

    def lock_import(self, import_id: uuid.UUID) -> dict[str, Any] | None: ...

    def cards_of_import(
        self, import_id: uuid.UUID, after: uuid.UUID, limit: int
    ) -> list[dict[str, Any]]: ...

    def delete_imported(
        self, import_id: uuid.UUID, card_uuids: Sequence[uuid.UUID]
    ) -> tuple[list[uuid.UUID], int]: ...

    def mark_undone(
        self, import_id: uuid.UUID, principal: str | None, undo: dict[str, Any]
    ) -> None: ...

    def add_links(self, links: Sequence[tuple[uuid.UUID, uuid.UUID, str]]) -> None: ...

    def enqueue_upserts(self, revisions: Mapping[uuid.UUID, int]) -> None: ...

    def refresh_statistics(self) -> None: ...

    def analyzed_cards(self) -> int: ...

    def card_count(self) -> int: ...


@dataclass(frozen=True)
class NewCase:
    """A case as written: its expected cards with their revisions now."""

    id: uuid.UUID
    name: str | None
    question: str
    command: str
    filters: Mapping[str, Any]
    expected: Sequence[uuid.UUID]
    revisions: Sequence[int]
    origin: str


@dataclass(frozen=True)
class LogRow:
    """One recall as the log writes it."""

    at: datetime
    principal: str | None
    command: str
    question: str | None
    error: str | None
    session: str | None
    returned: Sequence[uuid.UUID]
    scores: Sequence[float | None]
    terms: Sequence[int]
    coverage: float | None


class CurationStore(Protocol):
    """The workspace's benchmark (cases, stored runs) and its recall log."""

    def card_revisions(
        self, card_uuids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, dict[str, Any]]: ...

    def cases(self, limit: int) -> list[dict[str, Any]]: ...

    def case(self, case_id: uuid.UUID) -> dict[str, Any] | None: ...

    def insert_cases(self, cases: Sequence[NewCase], principal: str | None) -> None: ...

    def update_cases(self, cases: Sequence[NewCase]) -> None: ...

    def delete_case(self, case_id: uuid.UUID) -> bool: ...

    def insert_run(
        self, run_id: uuid.UUID, principal: str | None, run: Mapping[str, Any]
    ) -> None: ...

    def last_run(self) -> dict[str, Any] | None: ...

    def runs(self, limit: int) -> list[dict[str, Any]]: ...

    def run(self, run_id: uuid.UUID) -> dict[str, Any] | None: ...

    def prune_runs(self, keep: int) -> None: ...

    def card_edits(
        self, intervals: Sequence[tuple[datetime, datetime]], sample: int
    ) -> list[dict[str, Any]]: ...

    def commit_without_waiting(self) -> None: ...

    def projection_terms(self, card_uuids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[int]]: ...

    def term_frequencies(
        self, terms: Sequence[int] | None = None
    ) -> tuple[dict[int, int], int]: ...

    def insert_log(self, rows: Sequence[LogRow]) -> None: ...

    def mark_proposed(self, session: str, at: datetime) -> None: ...

    def log_count(self) -> int: ...

    def drop_oldest(self, keep: int) -> int: ...

    def expire(self, days: int) -> int: ...

    def add_to_state(self, *, dropped: int = 0, expired: int = 0, lost: int = 0) -> None: ...

    def log_state(self) -> dict[str, Any]: ...

    def log_entries(
        self, limit: int, before: int | None = None, principal: str | None = None
    ) -> list[dict[str, Any]]: ...

    def log_window(self, since: datetime, limit: int) -> list[dict[str, Any]]: ...


class ArchiveTx(Protocol):
    """One archive transaction, scoped to its workspace."""

    @property
    def workspace_id(self) -> str | None: ...

    @property
    def reviews(self) -> ReviewStore: ...

    @property
    def cleanup(self) -> CleanupStore: ...

    @property
    def accounts(self) -> AccountStore: ...

    @property
    def idempotency(self) -> IdempotencyStore: ...

    @property
    def transfer(self) -> TransferStore: ...

    @property
    def curation(self) -> CurationStore: ...

    # --- workspaces -------------------------------------------------------------------

    def workspace(self) -> Workspace | None: ...

    def require_workspace(self) -> Workspace: ...

    def insert_workspace(
        self, name: str, language: str, embedder: str = "default"
    ) -> Workspace | None: ...

    def set_workspace_embedder(self, embedder: str) -> Workspace: ...

    def list_workspaces(self) -> list[Workspace]: ...

    def workspace_counts(self) -> tuple[dict[str, int], int]: ...

    def use_nonce(self, nonce: str, expires_at: datetime | None) -> bool: ...

    # --- cards ------------------------------------------------------------------------

    def card(self, card_uuid: uuid.UUID) -> Card | None: ...

    def cards(
        self, card_uuids: list[uuid.UUID], *, links: bool = True
    ) -> dict[uuid.UUID, Card]: ...

    def lock_card(self, card_uuid: uuid.UUID) -> int | None: ...

    def lock_card_family(self, card_uuid: uuid.UUID) -> tuple[int, str] | None: ...

    def existing_cards(self, card_uuids: list[uuid.UUID]) -> set[uuid.UUID]: ...

    def insert_card(
        self,
        card_uuid: uuid.UUID,
        data: CardInput,
        *,
        language: str,
        origin: str,
        source: Source | None,
    ) -> int: ...

    def update_card(self, card_uuid: uuid.UUID, data: CardInput) -> int: ...

    def delete_card(self, card_uuid: uuid.UUID) -> tuple[int, int]: ...

    def replace_dependencies(self, card_uuid: uuid.UUID, deps: list[Dependency]) -> None: ...

    def replace_outgoing_links(
        self, card_uuid: uuid.UUID, links: list[tuple[uuid.UUID, str]]
    ) -> None: ...

    def card_revisions(self) -> dict[uuid.UUID, int]: ...

    def revisions_of(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, int]: ...

    def card_ids_after(self, after: uuid.UUID, limit: int) -> list[uuid.UUID]: ...

    def list_cards(self, query: ListQuery, language: str) -> tuple[list[CardSummary], int]: ...

    # --- the outbox and the projections -----------------------------------------------

    def enqueue(self, card_uuid: uuid.UUID, operation: str, revision: int) -> None: ...

    def pending_operations(self) -> list[PendingOperation]: ...

    def operations_for(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]: ...

    def operation_ids(self, limit: int, settled: float = 0.0) -> list[uuid.UUID]:
        """The pending operations' cards, oldest first; with ``settled``, only those
        nobody touched for that many seconds."""
        ...

    def clear_operation(self, card_uuid: uuid.UUID, revision: int) -> None: ...

    def clear_operations(self, done: dict[uuid.UUID, int]) -> None: ...

    def record_failure(self, card_uuids: list[uuid.UUID], error: str) -> None: ...

    def projection_states(
        self, card_uuids: list[uuid.UUID]
    ) -> dict[uuid.UUID, ProjectionState]: ...

    def record_projections(
        self, fingerprint: str, projections: Sequence[RecordedProjection]
    ) -> None: ...

    def forget_projections(self, card_uuids: list[uuid.UUID]) -> None: ...

    def has_projections(self) -> bool: ...

    def projections(self) -> dict[uuid.UUID, tuple[int, str]]: ...

    def card_index(self, card_uuid: uuid.UUID, running: KnownFormat | None) -> CardIndex | None: ...

    def stale_projections(self, running: KnownFormat) -> list[StaleProjection]: ...

    # --- recall -----------------------------------------------------------------------

    def recall_facts(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, RecallFacts]: ...

    def links_with_facts(
        self, card_uuids: list[uuid.UUID]
    ) -> tuple[dict[uuid.UUID, list[tuple[uuid.UUID, str]]], dict[uuid.UUID, RecallFacts]]: ...

    def seed_facts(self, card_uuids: list[uuid.UUID]) -> SeedFacts: ...


class Archive(Protocol):
    def held(self, name: str) -> AbstractContextManager[bool]:
        """Hold the lock ``name`` across every process sharing the archive, for a block;
        tried without waiting: whether it was taken."""

    def transaction(
        self,
        workspace: str | None,
        *,
        lock: bool | Literal["shared"] = False,
        directory: bool = False,
        accounts: bool = False,
        snapshot: bool = False,
    ) -> AbstractContextManager[ArchiveTx]: ...
