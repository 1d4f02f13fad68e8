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
import psycopg_pool
from psycopg.rows import dict_row

from tht.catalog.migrations import PACK
from tht.errors import ArchiveUnavailable, SchemaNotReady, ThothError
from tht.memory.migrations import RUNTIME_ROLE, check_schema
from tht.sqlfiles import named_queries


def queries() -> dict[str, str]:
    return named_queries("tht.catalog", "sql/queries.sql")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _translate(exc: psycopg.Error) -> ThothError:
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName):
        return SchemaNotReady(f"the {PACK.schema} schema is missing: run {PACK.command}")
    if isinstance(exc, psycopg.OperationalError):
        return ArchiveUnavailable(f"the Catalog database (PostgreSQL) is unavailable: {_first_line(exc)}")
    return ThothError(f"catalog error: {_first_line(exc)}")


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


class CatalogStore:
    """A small pool of runtime-login connections, opened on first use (so memory
    commands never depend on the Catalog's schema)."""

    def __init__(self, conninfo: str, *, timeout: float = 10.0) -> None:
        self._conninfo = conninfo
        self._timeout = timeout
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._opened = False

    def open(self) -> CatalogStore:
        if self._opened:
            return self
        # a closed pool cannot be reopened: a new one after a failed first use
        self._pool = psycopg_pool.ConnectionPool(
            self._conninfo, min_size=0, max_size=2, open=False, timeout=self._timeout,
            kwargs={"connect_timeout": int(self._timeout), "autocommit": False}, name="thoth-catalog")
        self._pool.open(wait=False)
        self._opened = True
        try:
            with self._pool.connection() as conn:
                check_schema(conn, PACK)
        except psycopg_pool.PoolTimeout as exc:
            self.close()
            raise ArchiveUnavailable("the Catalog database (PostgreSQL) did not provide a connection in time") from exc
        except psycopg.Error as exc:
            self.close()
            raise _translate(exc) from exc
        except ThothError:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._opened = False

    @contextmanager
    def transaction(self, workspace: str, *, lock: bool = False) -> Iterator[CatalogTransaction]:
        self.open()
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute(queries()["set_context"], {"role": RUNTIME_ROLE, "workspace": workspace, "lock": lock})
                yield CatalogTransaction(conn, workspace)
        except psycopg_pool.PoolTimeout as exc:
            raise ArchiveUnavailable("the Catalog database (PostgreSQL) did not provide a connection in time") from exc
        except psycopg.Error as exc:
            raise _translate(exc) from exc
