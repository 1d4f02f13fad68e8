"""Physical cleanup's records in the archive: the cards that match a run's removals,
their deletion, the run's receipt and the tombstones of the index deletes still owed.
Typed methods over the named SQL of ``sql/cleanup.sql``, inside an archive transaction
(``tx.cleanup``)."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from tht.sqlfiles import named_queries

if TYPE_CHECKING:
    from tht.memory.archive.postgres import ArchiveTransaction

# A cleanup receipt as stored: run_id, database_name, schema_name, removals,
# removals_digest, deleted_cards, links_removed, status, last_error, created_at,
# completed_at.
CleanupReceiptRow = dict[str, Any]


def _queries() -> dict[str, str]:
    return named_queries("tht.memory.archive", "sql/cleanup.sql")


class CleanupRecords:
    def __init__(self, tx: ArchiveTransaction) -> None:
        self._tx = tx._using(_queries())

    def receipt(self, run_id: uuid.UUID) -> CleanupReceiptRow | None:
        return self._tx._row("receipt_get", run_id=run_id)

    def matching_cards(
        self, database: str, schema: str, tables: list[str], columns: list[dict[str, str]]
    ) -> list[dict[str, Any]]:
        """The cards (id, title, family, revision) with a dependency on one of these
        tables or columns of ``database``.``schema``, locked for the deletion."""
        return self._tx._rows(
            "matching_cards",
            database=database,
            schema=schema,
            tables=tables,
            columns=json.dumps(columns),
        )

    def incident_link_count(self, ids: list[uuid.UUID]) -> int:
        count: int = self._tx._one("incident_links", ids=ids)["count"]
        return count

    def delete_cards(self, ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, int]]:
        """Delete the cards (dependencies and incident links cascade): (id, last revision)."""
        return [(row["id"], row["revision"]) for row in self._tx._rows("cards_delete", ids=ids)]

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
    ) -> None:
        self._tx._execute(
            "receipt_insert",
            run_id=run_id,
            database=database,
            schema=schema,
            removals=json.dumps(removals),
            digest=digest,
            deleted=json.dumps(deleted),
            links_removed=links_removed,
        )

    def insert_tombstones(self, run_id: uuid.UUID, ids: list[uuid.UUID]) -> None:
        self._tx._execute("tombstones_insert", run_id=run_id, ids=ids)

    def open_tombstones(self, run_id: uuid.UUID) -> list[uuid.UUID]:
        """The run's cards whose index delete is not confirmed yet."""
        return [row["card_id"] for row in self._tx._rows("tombstones_open", run_id=run_id)]

    def mark_tombstones_removed(self, run_id: uuid.UUID, ids: list[uuid.UUID]) -> None:
        self._tx._execute("tombstones_removed", run_id=run_id, ids=ids)

    def complete_receipt(self, run_id: uuid.UUID) -> None:
        """Completed, unless a tombstone of the run is still open."""
        self._tx._rows("receipt_completed", run_id=run_id)

    def record_failure(self, run_id: uuid.UUID, error: str) -> None:
        self._tx._execute("receipt_failed", run_id=run_id, error=error)
