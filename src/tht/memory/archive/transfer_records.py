"""Bulk import and export in the archive: a batch of new cards with their
dependencies, links and projection operations in one statement each, and the count
an export starts from. Typed methods over the named SQL of ``sql/transfer.sql``,
inside an archive transaction (``tx.transfer``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from psycopg.types.json import Jsonb

from tht.memory.model import TEXT_FIELDS, CardInput
from tht.sqlfiles import named_queries

if TYPE_CHECKING:
    from tht.memory.archive.postgres import ArchiveTransaction


class ImportedCard(Protocol):
    """A card as an import writes it (tht.memory.transfer.formats.ImportCard): what it
    keeps of an export (origin, source references, revision, timestamps; None: a new
    card's defaults) next to its data."""

    @property
    def data(self) -> CardInput: ...
    @property
    def origin(self) -> str: ...
    @property
    def source_session(self) -> str | None: ...
    @property
    def source_decisions(self) -> list[str] | None: ...
    @property
    def revision(self) -> int | None: ...
    @property
    def created_at(self) -> datetime | None: ...
    @property
    def updated_at(self) -> datetime | None: ...


def _queries() -> dict[str, str]:
    return named_queries("tht.memory.archive", "sql/transfer.sql", texts=TEXT_FIELDS)


class TransferRecords:
    def __init__(self, tx: ArchiveTransaction) -> None:
        self._tx = tx._using(_queries())

    def insert_cards(
        self,
        language: str,
        created: Sequence[tuple[uuid.UUID, ImportedCard]],
        import_id: uuid.UUID,
    ) -> None:
        """New cards, with their dependencies (their links: ``add_links``), naming
        the import that creates them."""
        self._tx._execute(
            "import_cards_insert", language=language, import_id=import_id, **_new_cards(created)
        )
        self._tx._execute("import_dependencies_add", **_dependencies(created))

    def mark_replaced(self, import_id: uuid.UUID, card_uuids: Sequence[uuid.UUID]) -> None:
        """Cards the import replaced (--on-conflict update) name it, at their revision."""
        self._tx._execute("import_cards_replaced", import_id=import_id, ids=list(card_uuids))

    # --- the imports' records -------------------------------------------------------

    def record_import(
        self, import_id: uuid.UUID, file_name: str, fmt: str, principal: str | None
    ) -> None:
        self._tx._execute(
            "import_insert", id=import_id, file_name=file_name, format=fmt, principal=principal
        )

    def finish_import(self, import_id: uuid.UUID, status: str, summary: dict[str, Any]) -> None:
        self._tx._execute("import_finish", id=import_id, status=status, summary=Jsonb(summary))

    def imports(self, import_id: uuid.UUID | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The workspace's imports, newest first (one, when ``import_id`` is given)."""
        rows: list[dict[str, Any]] = self._tx._rows("import_list", id=import_id, limit=limit)
        return rows

    def lock_import(self, import_id: uuid.UUID) -> dict[str, Any] | None:
        row: dict[str, Any] | None = self._tx._row("import_lock", id=import_id)
        return row

    def cards_of_import(
        self, import_id: uuid.UUID, after: uuid.UUID, limit: int
    ) -> list[dict[str, Any]]:
        """(id, revision, import_revision, import_action) of the import's cards after
        ``after``, in id order."""
        rows: list[dict[str, Any]] = self._tx._rows(
            "import_cards_after", import_id=import_id, after=after, limit=limit
        )
        return rows

    def delete_imported(
        self, import_id: uuid.UUID, card_uuids: Sequence[uuid.UUID]
    ) -> tuple[list[uuid.UUID], int]:
        """Delete those of ``card_uuids`` the import created and nobody changed since,
        with their deletions' projection operations: (deleted ids, links removed)."""
        row = self._tx._one("import_cards_delete", import_id=import_id, ids=list(card_uuids))
        deleted, revisions = list(row["ids"]), list(row["revisions"])
        if deleted:
            self._tx._execute("import_deletions_enqueue", ids=deleted, revisions=revisions)
        return deleted, int(row["links"] or 0) if deleted else 0

    def mark_undone(
        self, import_id: uuid.UUID, principal: str | None, undo: dict[str, Any]
    ) -> None:
        self._tx._execute("import_undone", id=import_id, principal=principal, undo=Jsonb(undo))

    def add_links(self, links: Sequence[tuple[uuid.UUID, uuid.UUID, str]]) -> None:
        """(source, target, meaning); a link already there is left as it is."""
        self._tx._execute(
            "import_links_add",
            sources=[s for s, _, _ in links],
            targets=[t for _, t, _ in links],
            meanings=[m for _, _, m in links],
        )

    def enqueue_upserts(self, revisions: Mapping[uuid.UUID, int]) -> None:
        """The projection operations of these cards (card -> revision to project)."""
        self._tx._execute(
            "import_operations_enqueue", ids=list(revisions), revisions=list(revisions.values())
        )

    def refresh_statistics(self) -> None:
        """ANALYZE of the cards' tables, as after any bulk load (migration 014)."""
        self._tx._execute("refresh_statistics")

    def analyzed_cards(self) -> int:
        """The cards of every workspace when the statistics were last taken (0: never)."""
        count: int = self._tx._one("analyzed_cards")["cards"]
        return count

    def card_count(self) -> int:
        count: int = self._tx._one("export_count")["cards"]
        return count


def _new_cards(created: Sequence[tuple[uuid.UUID, ImportedCard]]) -> dict[str, list[Any]]:
    """The columns of import_cards_insert: one array per column, one element per card."""
    data = [item.data for _, item in created]
    items = [item for _, item in created]
    columns: dict[str, list[Any]] = {
        "ids": [card_uuid for card_uuid, _ in created],
        "families": [d.family for d in data],
        "titles": [d.title for d in data],
        # the text fields' arrays: "contents", "scopes", ... (import_cards_insert)
        **{f"{name}s": [getattr(d, name) for d in data] for name in TEXT_FIELDS},
    }
    columns["error_signatures"] = [i.data.error_signature for i in items]
    columns["concepts"] = [json.dumps(i.data.concepts) for i in items]
    columns["origins"] = [i.origin for i in items]
    columns["source_sessions"] = [i.source_session for i in items]
    columns["source_decisions"] = [
        None if i.source_decisions is None else json.dumps(i.source_decisions) for i in items
    ]
    columns["revisions"] = [i.revision for i in items]
    columns["created_ats"] = [i.created_at for i in items]
    columns["updated_ats"] = [i.updated_at for i in items]
    return columns


def _dependencies(created: Sequence[tuple[uuid.UUID, ImportedCard]]) -> dict[str, list[Any]]:
    rows = [
        (card_uuid, position, dep)
        for card_uuid, item in created
        for position, dep in enumerate(item.data.dependencies)
    ]
    return {
        "ids": [r[0] for r in rows],
        "positions": [r[1] for r in rows],
        "databases": [r[2].database for r in rows],
        "schemas": [r[2].schema_name for r in rows],
        "tables": [r[2].table for r in rows],
        "columns": [r[2].column for r in rows],
    }
