"""The Catalog's PostgreSQL store (schema ``thoth_catalog``): bindings, snapshots, runs.

Same discipline as the archive: every transaction runs as the restricted runtime role
with the workspace set transaction-locally (forced row-level security), and SQL lives
in ``sql/queries.sql``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tht.catalog.migrations import PACK
from tht.db.connector import StoreErrors, translate
from tht.errors import ArchiveUnavailable, SchemaNotReady, ThothError
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.migrations import RUNTIME_ROLE, check_schema
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


class CatalogTransaction:
    def __init__(self, conn: psycopg.Connection, workspace: str) -> None:
        self.conn = conn
        self.workspace = workspace

    def rows(self, name: str, /, **params: Any) -> list[dict]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(queries()[name], {"workspace": self.workspace, **params})
            return cur.fetchall() if cur.description else []

    def row(self, name: str, /, **params: Any) -> dict | None:
        rows = self.rows(name, **params)
        return rows[0] if rows else None

    def one(self, name: str, /, **params: Any) -> dict:
        """The row of a query that always returns one."""
        row = self.row(name, **params)
        if row is None:
            raise ThothError(f"the catalog query {name} returned no row")
        return row


class CatalogStore:
    """The Catalog's transactions, on the archive's connection pool (the same database
    and runtime login). Its schema is checked on first use, so memory commands never
    depend on it, and checked again after a failure (a server keeps working once the
    Catalog is migrated)."""

    def __init__(self, archive: PostgresArchive) -> None:
        self._archive = archive
        self._schema_checked = False

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
