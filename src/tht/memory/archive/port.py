"""The Archive port: what an application service may ask of the archive, typed.

``PostgresArchive`` (tht.memory.archive.postgres) is the adapter; the services typed
against this port (the workflow's and physical cleanup's) never see SQL, rows or the
driver, so a service-level test may hand them an in-memory fake where speed matters.
Raw ``row``/``rows``/``execute`` belong to the adapter.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tht.memory.model import Card, CardInput, Dependency, Source, Workspace

if TYPE_CHECKING:
    from tht.memory.archive.postgres import RecallFacts


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


class ArchiveTx(Protocol):
    """One archive transaction, scoped to its workspace."""

    @property
    def workspace_id(self) -> str | None: ...

    @property
    def reviews(self) -> ReviewStore: ...

    @property
    def cleanup(self) -> CleanupStore: ...

    def require_workspace(self) -> Workspace: ...

    def use_nonce(self, nonce: str, expires_at: datetime | None) -> bool: ...

    def cards(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, Card]: ...

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

    def replace_dependencies(self, card_uuid: uuid.UUID, deps: list[Dependency]) -> None: ...

    def replace_outgoing_links(
        self, card_uuid: uuid.UUID, links: list[tuple[uuid.UUID, str]]
    ) -> None: ...

    def enqueue(self, card_uuid: uuid.UUID, operation: str, revision: int) -> None: ...

    def operations_for(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]: ...

    def recall_facts(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, RecallFacts]: ...


class Archive(Protocol):
    def transaction(
        self,
        workspace: str | None,
        *,
        lock: bool | Literal["shared"] = False,
        directory: bool = False,
        accounts: bool = False,
    ) -> AbstractContextManager[ArchiveTx]: ...
