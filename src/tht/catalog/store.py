"""The Catalog's PostgreSQL store (schema ``thoth_catalog``): bindings, snapshots, runs.

Same discipline as the archive: every transaction runs as the restricted runtime role
with the workspace set transaction-locally (forced row-level security), SQL lives in
``sql/queries.sql``, and the Catalog service calls typed methods of the transaction
(the raw ``_rows``/``_row``/``_one`` stay here).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tht.catalog.migrations import PACK
from tht.catalog.model import Binding, Removals, Tables
from tht.db.connector import Connections, PooledTransaction, StoreErrors, translate
from tht.db.migrations import RUNTIME_ROLE, check_schema
from tht.errors import ArchiveUnavailable, SchemaNotReady, ThothError
from tht.memory.archive.port import ArchiveTx
from tht.sqlfiles import named_queries


def queries() -> dict[str, str]:
    return named_queries("tht.catalog", "sql/queries.sql")


ERRORS = StoreErrors(
    what="the Catalog database (PostgreSQL)",
    unavailable=ArchiveUnavailable,
    schema_missing=lambda: SchemaNotReady(
        f"the {PACK.schema} schema is missing: run {PACK.command}"
    ),
    failed=lambda line: ThothError(f"catalog error: {line}"),
)


@dataclass(frozen=True)
class Snapshot:
    """The last successful scan of a scope: its tables and columns, and its run."""

    tables: Tables
    run_id: uuid.UUID
    taken_at: datetime


@dataclass(frozen=True)
class CatalogRun:
    """A sync or forget run as recorded."""

    id: uuid.UUID
    kind: str
    database_name: str
    schema_name: str
    status: str
    phase: str
    removed_tables: list[str]
    removed_columns: list[dict[str, str]]  # {table, column}
    forgotten: Any
    tables_scanned: int | None
    deleted_cards: Any
    links_removed: int | None
    errors: list[dict[str, Any]]
    attempts: int
    started_at: datetime
    finished_at: datetime | None


def _binding(workspace: str, row: dict[str, Any] | None) -> Binding | None:
    if row is None:
        return None
    return Binding(
        workspace,
        row["database_name"],
        row["schema_name"],
        row["connection"],
        updated_at=row["updated_at"],
    )


class CatalogTransaction:
    def __init__(self, conn: psycopg.Connection, workspace: str) -> None:
        self.conn = conn
        self.workspace = workspace

    def _rows(self, name: str, /, **params: Any) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(queries()[name], {"workspace": self.workspace, **params})
            return cur.fetchall() if cur.description else []

    def _row(self, name: str, /, **params: Any) -> dict[str, Any] | None:
        rows = self._rows(name, **params)
        return rows[0] if rows else None

    # --- the binding ------------------------------------------------------------------

    def binding(self) -> Binding | None:
        return _binding(self.workspace, self._row("binding_get"))

    def put_binding(self, binding: Binding) -> None:
        self._rows(
            "binding_upsert",
            database=binding.database,
            schema=binding.schema,
            connection=binding.connection,
        )

    # --- snapshots --------------------------------------------------------------------

    def snapshot(self, database: str, schema: str) -> Snapshot | None:
        row = self._row("snapshot_get", database=database, schema=schema)
        return Snapshot(**row) if row else None

    def put_snapshot(self, database: str, schema: str, run_id: uuid.UUID, tables: Tables) -> None:
        self._rows(
            "snapshot_put",
            database=database,
            schema=schema,
            run_id=run_id,
            tables=json.dumps(tables),
        )

    def delete_snapshot(self, database: str, schema: str) -> None:
        self._rows("snapshot_delete", database=database, schema=schema)

    # --- runs -------------------------------------------------------------------------

    def pending_run_id(self) -> uuid.UUID | None:
        """The workspace's run still waiting for Memory's cleanup, if any."""
        row = self._row("pending_run")
        return row["id"] if row else None

    def run(self, run_id: uuid.UUID) -> CatalogRun | None:
        row = self._row("run_get", id=run_id)
        return CatalogRun(**row) if row else None

    def runs(self, limit: int) -> list[CatalogRun]:
        """The latest runs, newest first."""
        return [CatalogRun(**row) for row in self._rows("runs_list", limit=limit)]

    def insert_run(
        self,
        run_id: uuid.UUID,
        kind: str,
        database: str,
        schema: str,
        *,
        status: str,
        phase: str,
        removals: Removals,
        forgotten: Any,
        tables_scanned: int | None,
        errors: list[dict[str, Any]],
    ) -> None:
        self._rows(
            "run_insert",
            id=run_id,
            kind=kind,
            database=database,
            schema=schema,
            status=status,
            phase=phase,
            tables=removals.tables,
            columns=json.dumps([{"table": t, "column": c} for t, c in removals.columns]),
            forgotten=json.dumps(forgotten) if forgotten is not None else None,
            tables_scanned=tables_scanned,
            errors=json.dumps(errors),
        )

    def complete_run(
        self, run_id: uuid.UUID, deleted_cards: list[dict[str, Any]], links_removed: int
    ) -> None:
        """A pending run is completed, with what Memory deleted."""
        self._rows(
            "run_completed",
            id=run_id,
            deleted=json.dumps(deleted_cards),
            links_removed=links_removed,
        )

    def record_cleanup_failure(
        self,
        run_id: uuid.UUID,
        code: str,
        message: str,
        deleted_cards: list[dict[str, Any]] | None,
        links_removed: int | None,
    ) -> None:
        """A pending run stays pending, with the error appended to its history (and
        what Memory deleted so far, when known)."""
        self._rows(
            "run_cleanup_failed",
            id=run_id,
            code=code,
            message=message,
            deleted=json.dumps(deleted_cards) if deleted_cards is not None else None,
            links_removed=links_removed,
        )


class CatalogStore:
    """The Catalog's transactions, on the archive's connection pool (the same database
    and runtime login). Its schema is checked on first use, so memory commands never
    depend on it, and checked again after a failure (a server keeps working once the
    Catalog is migrated)."""

    def __init__(self, archive: Connections) -> None:
        self._archive = archive
        self._schema_checked = False

    def check_schema(self) -> None:
        """Raise ``SchemaNotReady`` unless the Catalog's migrations are applied unchanged
        (a service checks at start: a schema its code does not know stops it there)."""
        try:
            with self._archive.connection() as conn:
                check_schema(conn, PACK)
        except psycopg.Error as exc:
            raise translate(exc, ERRORS) from exc
        self._schema_checked = True

    def binding_in(self, tx: ArchiveTx) -> Binding | None:
        """The binding of the workspace ``tx`` is scoped to, read in that archive
        transaction (the same pool, runtime role and workspace context as the Catalog's
        own): a request reads it with its token check, without a transaction of its own."""
        if not isinstance(tx, PooledTransaction) or tx.workspace_id is None:
            raise TypeError(
                "the binding is read in a PostgreSQL archive transaction of a workspace"
            )
        try:
            row = tx.row_of(queries()["binding_get"], {"workspace": tx.workspace_id})
        except psycopg.Error as exc:
            raise translate(exc, ERRORS) from exc
        return _binding(tx.workspace_id, row)

    @contextmanager
    def transaction(self, workspace: str, *, lock: bool = False) -> Iterator[CatalogTransaction]:
        try:
            with self._archive.connection() as conn:
                if not self._schema_checked:
                    check_schema(conn, PACK)
                    self._schema_checked = True
                with conn.transaction():
                    conn.execute(
                        queries()["set_context"],
                        {"role": RUNTIME_ROLE, "workspace": workspace, "lock": lock},
                    )
                    yield CatalogTransaction(conn, workspace)
        except psycopg.Error as exc:
            raise translate(exc, ERRORS) from exc
