"""Physical cleanup: after a successful Catalog sync, delete the cards whose structured
dependencies name a removed table or column, with their incident links and their
search projections.

The Catalog hands over the exact removals of one run (database, schema, tables,
columns). The archive step runs once per run: one locked transaction deletes the
matching cards (dependencies and links cascade), queues their index deletes in the
projection outbox, writes a tombstone per card and the run's receipt. A repeated
delivery of the same run finds the receipt and deletes nothing more; it only finishes
the index deletes that the tombstones still list. The same run with other removals is
refused. Nothing else decides a deletion: a card without dependencies, or with
dependencies only on the database or the schema, or outside the synchronized scope,
never matches.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from tht.errors import Conflict, ThothError
from tht.faults import crash_point
from tht.memory.archive.port import Archive, ArchiveTx
from tht.memory.model import uuid_to_card_id


@dataclass(frozen=True)
class PhysicalRemovals:
    """What one Catalog run proved removed, in one database and schema."""

    run_id: uuid.UUID
    database: str
    schema: str
    tables: tuple[str, ...] = ()
    columns: tuple[tuple[str, str], ...] = ()  # (table, column)

    def canonical(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "schema": self.schema,
            "tables": sorted(set(self.tables)),
            "columns": [{"table": t, "column": c} for t, c in sorted(set(self.columns))],
        }

    def digest(self) -> str:
        text = json.dumps(
            self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class CleanupReceipt:
    """Memory's answer for one run: what it deleted, and whether the index agrees yet."""

    run_id: uuid.UUID
    deleted_cards: list[dict[str, Any]] = field(default_factory=list)  # {id, title, family}
    links_removed: int = 0
    status: str = "index_pending"  # or "completed"
    error: str | None = None
    repeated: bool = False  # the receipt already existed: nothing was deleted this time

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": str(self.run_id),
            "deleted_cards": self.deleted_cards,
            "links_removed": self.links_removed,
            "status": self.status,
            "error": self.error,
            "repeated": self.repeated,
        }


class PhysicalCleanup:
    """The application service the Catalog calls after committing a physical change."""

    def __init__(self, archive: Archive, projector: Any | None = None) -> None:
        self.archive = archive
        self.projector = projector  # IndexProjector; None: index deletes stay pending

    def apply(self, workspace: str, removals: PhysicalRemovals) -> CleanupReceipt:
        """Delete the matching cards once per run, then remove their points from the
        index. Repeatable: a second call with the same run only finishes the index."""
        digest = removals.digest()
        with self.archive.transaction(workspace, lock=True) as tx:
            tx.require_workspace()
            existing = tx.cleanup.receipt(removals.run_id)
            if existing is not None:
                if existing["removals_digest"] != digest:
                    raise Conflict(
                        f"run {removals.run_id} was already applied with other removals",
                        details={
                            "run_id": str(removals.run_id),
                            "recorded": existing["removals"],
                            "given": removals.canonical(),
                        },
                    )
                repeated = True
            else:
                repeated = False
                self._delete_matching(tx, removals, digest)
        crash_point("cleanup.after_archive_delete")
        receipt = self._finish_index(workspace, removals.run_id)
        receipt.repeated = repeated
        return receipt

    def _delete_matching(self, tx: ArchiveTx, removals: PhysicalRemovals, digest: str) -> None:
        canonical = removals.canonical()
        records = tx.cleanup
        matches = records.matching_cards(
            removals.database, removals.schema, canonical["tables"], canonical["columns"]
        )
        ids = [m["id"] for m in matches]
        links_removed = 0
        if ids:
            links_removed = records.incident_link_count(ids)
            for card_uuid, revision in records.delete_cards(ids):
                # the deletion is one revision past the card's last one (as MemoryService)
                tx.enqueue(card_uuid, "delete", revision + 1)
        deleted = [
            {"id": uuid_to_card_id(m["id"]), "title": m["title"], "family": m["family"]}
            for m in matches
        ]
        records.insert_receipt(
            removals.run_id,
            database=removals.database,
            schema=removals.schema,
            removals=canonical,
            digest=digest,
            deleted=deleted,
            links_removed=links_removed,
        )
        if ids:
            records.insert_tombstones(removals.run_id, ids)

    def _finish_index(self, workspace: str, run_id: uuid.UUID) -> CleanupReceipt:
        with self.archive.transaction(workspace) as tx:
            open_ids = tx.cleanup.open_tombstones(run_id)
        error = None
        if open_ids:
            if self.projector is None:
                error = "no search index is configured: the index deletes stay pending"
            else:
                try:
                    report = self.projector.sync(workspace, open_ids)
                    error = report.error if report.failed else None
                except ThothError as exc:
                    error = exc.message
            with self.archive.transaction(workspace, lock=True) as tx:
                if error:
                    tx.cleanup.record_failure(run_id, error[:2000])
                else:
                    tx.cleanup.mark_tombstones_removed(run_id, open_ids)
        with self.archive.transaction(workspace, lock=True) as tx:
            if not error:
                tx.cleanup.complete_receipt(run_id)
            row = tx.cleanup.receipt(run_id)
        if row is None:  # written by apply() before this
            raise ThothError(f"the cleanup receipt of run {run_id} is missing")
        return CleanupReceipt(
            run_id=run_id,
            deleted_cards=row["deleted_cards"],
            links_removed=row["links_removed"],
            status=row["status"],
            error=error or row["last_error"],
        )

    def receipt(self, workspace: str, run_id: uuid.UUID) -> CleanupReceipt | None:
        with self.archive.transaction(workspace) as tx:
            row = tx.cleanup.receipt(run_id)
        if row is None:
            return None
        return CleanupReceipt(
            run_id=run_id,
            deleted_cards=row["deleted_cards"],
            links_removed=row["links_removed"],
            status=row["status"],
            error=row["last_error"],
        )
