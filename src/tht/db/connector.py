"""One way to reach PostgreSQL for every store kept there: the memory archive, the
pgvector index (and the Catalog, on the archive's pool).

A ``PostgresConnector`` holds a pool of runtime-login connections, opened and checked on
first use (a login that is a superuser or bypasses row-level security is refused; then
the store's own schema check), and opened again after a failed attempt (a closed
psycopg pool cannot be reopened). When the server cannot be reached, a direct
connection probes why, so the error names the cause rather than a pool timeout.
``translate`` turns a driver error into the product's errors, worded by the store's
``StoreErrors``.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from tht.errors import ArchiveLoginRefused, CommitOutcomeUnknown, ThothError, first_line
from tht.sqlfiles import named_queries


@dataclass(frozen=True)
class DatabaseSettings:
    """Where the archive lives: an external server (URLs) or the embedded one (home)."""

    runtime_conninfo: str | None = None
    migrator_conninfo: str | None = None
    embedded_home: Path | None = None

    @property
    def embedded(self) -> bool:
        return self.embedded_home is not None

    @property
    def runtime_login(self) -> str | None:
        if not self.runtime_conninfo:
            return None
        user = conninfo_to_dict(self.runtime_conninfo).get("user")
        return None if user is None else str(user)


class Connections(Protocol):
    """What lends a connection of a pool (the archive's): a store that shares the
    archive's database and login needs nothing else of it."""

    def connection(self) -> AbstractContextManager[psycopg.Connection]: ...


@runtime_checkable
class PooledTransaction(Protocol):
    """An open transaction on the archive's pool, scoped to a workspace (or to none):
    a store sharing the pool reads its own rows in it, in the caller's checkout and
    round trip, as the Catalog reads a binding with a request's token check."""

    workspace_id: str | None

    def row_of(self, sql_text: str, params: Mapping[str, Any]) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class StoreErrors:
    """How one store words its failures."""

    what: str  # the store, as errors name it: "the memory archive (PostgreSQL)"
    unavailable: Callable[[str], ThothError]  # the server, or a connection, is out of reach
    schema_missing: Callable[[], ThothError]  # its tables are not there: which migration to run
    failed: Callable[[str], ThothError]  # any other driver error (its first line)
    # the runtime login may not use the store's tables (None: a failure like any other)
    login_refused: Callable[[str], ThothError] | None = None
    # a store with a connector of its own: its login would make tenancy moot
    # (called with the login's name and whether it is a superuser, bypasses RLS)
    privileged_login: Callable[[str, bool, bool], ThothError] | None = None

    def refuse_privileged_login(self, login: str, superuser: bool, bypassrls: bool) -> ThothError:
        if self.privileged_login is not None:
            return self.privileged_login(login, superuser, bypassrls)
        return ThothError(
            f"refusing to use {self.what}: the runtime database login is a superuser or"
            " bypasses row-level security"
        )


def translate(exc: BaseException, errors: StoreErrors) -> ThothError:
    """The product's error for a driver error (or a pool timeout) of ``errors``' store."""
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName):
        return errors.schema_missing()
    if errors.login_refused is not None and isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return errors.login_refused(exc.diag.message_primary or first_line(exc))
    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        return errors.unavailable(f"{errors.what} is unavailable: {first_line(exc)}")
    return errors.failed(first_line(exc))


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is the end of the connection (the server gone or ending the
    session: no SQLSTATE, or class 08 or 57P) rather than a statement the server
    refused, which it answered."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith(("08", "57P"))


def commit_outcome_unknown(exc: BaseException, errors: StoreErrors) -> CommitOutcomeUnknown:
    """What a transaction answers when its connection was lost while committing: the
    server may have committed and died before answering, or not; only looking (or a
    write sent again under its idempotency key) tells."""
    return CommitOutcomeUnknown(
        f"the connection to {errors.what} was lost while committing ({first_line(exc)}): the"
        " change may or may not have been applied. Look before writing again (tht memory"
        " show or list, GET the card), or send the same write again with the same"
        " idempotency key (--idempotency-key, the Idempotency-Key header): it is applied once.",
        details={"reason": first_line(exc)},
    )


# libpq reports a refused login in its message only (no SQLSTATE before the session exists)
_REFUSALS = (
    ("password authentication failed", "the password was refused"),
    ("no password supplied", "no password was given"),
    ("certificate verify failed", "the server's certificate did not verify against sslrootcert"),
    ("SSL error", "the TLS handshake failed"),
    ("server does not support SSL", "the server does not offer TLS but sslmode requires it"),
    ("rejects connection", "the server's pg_hba.conf rejects this connection"),
    ("no pg_hba.conf entry", "the server's pg_hba.conf has no entry for this connection"),
    ("does not exist", "the login or the database does not exist"),
)


def login_refusal(exc: psycopg.OperationalError, conninfo: str) -> ArchiveLoginRefused | None:
    """A configuration error when the server answered and refused the login (waiting
    cannot help); None when it could not be reached (it may be starting)."""
    message = str(exc)
    for marker, reason in _REFUSALS:
        if marker in message:
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
            where = {k: params.get(k) for k in ("user", "host", "port", "dbname", "sslmode")}
            return ArchiveLoginRefused(
                f"PostgreSQL refused the login '{where['user']}': {reason}. Check the"
                " THT_CATALOG_* settings (password file, THT_CATALOG_DB_SSLMODE,"
                " THT_CATALOG_DB_SSLROOTCERT) or ask the DBA for this login.",
                details={**where, "server_said": first_line(exc)},
            )
    return None


def _queries() -> dict[str, str]:
    return named_queries("tht.db", "sql/connector.sql")


class PostgresConnector:
    """A pool of connections to one database with one login, for one store."""

    def __init__(
        self,
        conninfo: str,
        errors: StoreErrors,
        *,
        max_connections: int = 4,
        timeout: float = 10.0,
        probe_timeout: float | None = None,
        check: Callable[[psycopg.Connection], None] | None = None,
        check_on_checkout: bool = False,
        name: str | None = None,
    ) -> None:
        self.errors = errors
        self._conninfo = conninfo
        self._max_connections = max_connections
        self._timeout = timeout
        self._probe_timeout = timeout if probe_timeout is None else probe_timeout
        self._check = check
        self._check_on_checkout = check_on_checkout
        self._name = name
        self._pool: psycopg_pool.ConnectionPool | None = None
        self._lock = threading.Lock()

    @property
    def opened(self) -> bool:
        return self._pool is not None

    def open(self) -> psycopg_pool.ConnectionPool:
        """The pool, opened and checked now if it is not yet (a failed check closes it)."""
        with self._lock:
            if self._pool is not None:
                return self._pool
            self._refuse_misconfigured_login()
            pool = psycopg_pool.ConnectionPool(
                self._conninfo,
                min_size=1,
                max_size=self._max_connections,
                open=False,
                timeout=self._timeout,
                kwargs={"connect_timeout": _seconds(self._timeout), "autocommit": False},
                # a connection is checked when it is taken (after PostgreSQL restarts, a
                # long-running service would otherwise hand out dead ones): a round trip
                # only when the server wrote to its idle socket (it does when it ends it)
                check=check_idle_connection if self._check_on_checkout else None,
                name=self._name,
            )
            try:
                pool.open(wait=True, timeout=self._timeout)
            except psycopg_pool.PoolTimeout as exc:
                pool.close()
                raise self.errors.unavailable(
                    f"{self.errors.what} is unavailable: {self.probe()}"
                ) from exc
            try:
                with pool.connection() as conn:
                    login = conn.execute(_queries()["runtime_login"]).fetchone()
                    conn.rollback()
                    if login is not None and (login[1] or login[2]):
                        raise self.errors.refuse_privileged_login(*login)
                    if self._check is not None:
                        self._check(conn)
            except ThothError:
                pool.close()
                raise
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                pool.close()
                raise translate(exc, self.errors) from exc
            self._pool = pool
            return pool

    def _refuse_misconfigured_login(self) -> None:
        """One direct connection first: a refused password or a TLS failure is said at
        once, as a configuration error naming the login, instead of after the pool's
        timeout as an outage."""
        try:
            psycopg.connect(self._conninfo, connect_timeout=_seconds(self._timeout)).close()
        except psycopg.OperationalError as exc:
            refused = login_refusal(exc, self._conninfo)
            if refused is not None:
                raise refused from exc

    def probe(self) -> str:
        """Why a connection cannot be made (the driver's first line), from a direct try."""
        try:
            psycopg.connect(self._conninfo, connect_timeout=_seconds(self._probe_timeout)).close()
        except psycopg.Error as exc:
            return first_line(exc)
        return "timed out waiting for a connection"

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection (the pool opened on first use). Driver errors inside are
        the caller's to translate: a store sharing the pool words its own."""
        pool = self.open()
        try:
            with pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise self.errors.unavailable(
                f"{self.errors.what} did not provide a connection in time"
            ) from exc

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


def check_idle_connection(conn: psycopg.Connection) -> None:
    """Raise if an idle pooled connection is dead. The server writes to an idle
    connection only to end it (a restart, ``pg_terminate_backend``: an error, then the
    socket closes) or for an asynchronous message: only then does the check cost a round
    trip (psycopg_pool's ``check_connection``, an empty query, which then fails or
    consumes the message). A silent socket is taken as alive, without a round trip."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    if readable:
        psycopg_pool.ConnectionPool.check_connection(conn)


@contextmanager
def batched_transaction(conn: psycopg.Connection) -> Iterator[psycopg.Pipeline]:
    """One transaction on ``conn`` (idle) in pipeline mode: BEGIN is queued before the
    first query and COMMIT before the Sync that ends the pipeline, so a transaction of
    one read costs two round trips (psycopg's ``transaction()`` in pipeline mode syncs
    its BEGIN and its end on their own). Inside, the caller sends what is queued with
    ``pipeline.sync()`` before it reads a result: the server then waits idle in the
    transaction, where ``idle_in_transaction_session_timeout`` guards a caller that stops.
    An exception rolls back with ``rollback()``, which leaves an aborted pipeline and
    forgets the prepared statements (a Parse that an aborted pipeline skipped would
    otherwise be taken as done, and run by the connection's next user).

    For transactions that send little before each read: ``pipeline.sync()`` stops
    flushing once its Sync is queued and waits for the answer, so a batch larger than
    the socket takes at once leaves its end in libpq's buffer, which the server never
    sees; both then wait for ever (psycopg's own transaction flushes it all)."""
    conn.autocommit = True  # BEGIN and COMMIT are ours, queued with the queries
    try:
        with conn.pipeline() as pipeline:
            conn.execute("BEGIN")
            try:
                yield pipeline
            except BaseException:
                try:
                    conn.rollback()
                except psycopg.Error:  # a broken connection: the pool discards it
                    pass
                raise
            conn.execute("COMMIT")
    finally:
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            conn.autocommit = False


def _seconds(timeout: float) -> int:
    """libpq's connect_timeout: whole seconds, and 0 would mean no limit."""
    return max(1, round(timeout))
