"""The PostgreSQL archive: the only source of truth for cards, links and dependencies.

Every transaction switches to the restricted runtime role and sets the workspace with
transaction-local settings (``SET LOCAL ROLE``, ``set_config(..., true)``), so nothing
leaks into the next use of a pooled connection. Mutating transactions also take the
workspace's advisory lock, which serializes them.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal, TypeVar, cast

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.rows import dict_row

from tht import audit
from tht.db.connector import (
    PostgresConnector,
    StoreErrors,
    batched_transaction,
    commit_outcome_unknown,
    connection_lost,
    translate,
)
from tht.errors import (
    ArchiveUnavailable,
    Conflict,
    InvalidInput,
    NotFound,
    RuntimeLoginPrivileged,
    SchemaNotReady,
    ThothError,
    first_line,
)
from tht.memory.archive.account_records import AccountRecords
from tht.memory.archive.cleanup_records import CleanupRecords
from tht.memory.archive.curation_records import CurationRecords
from tht.memory.archive.idempotency_records import IdempotencyRecords
from tht.memory.archive.port import (
    IndexedFields,
    ProjectionState,
    RecallFacts,
    RecordedProjection,
    SeedFacts,
    StaleProjection,
)
from tht.memory.archive.review_records import ReviewRecords
from tht.memory.archive.transfer_records import TransferRecords
from tht.memory.migrations import RUNTIME_ROLE, check_schema
from tht.memory.model import (
    TEXT_FIELDS,
    Card,
    CardIndex,
    CardInput,
    CardSummary,
    Dependency,
    ImportRef,
    IncomingLink,
    Link,
    ListQuery,
    PendingOperation,
    Source,
    Workspace,
    import_to_id,
    import_uuid,
    uuid_to_card_id,
)
from tht.memory.projection_format import KnownFormat
from tht.memory.recall_filters import CardFacts
from tht.sqlfiles import named_queries

log = logging.getLogger(__name__)

Row = dict[str, Any]  # a row as psycopg's dict_row reads it

TS_CONFIG = {"en": "english", "it": "italian"}
_WORD = re.compile(r"\w+", re.UNICODE)
_ID_PREFIX = re.compile(r"^(?:mem-)?([0-9a-f][0-9a-f-]{0,35})$")

_ORDER_BY = {
    ("updated_at", "desc"): "c.updated_at DESC, c.id DESC",
    ("updated_at", "asc"): "c.updated_at ASC, c.id ASC",
    ("created_at", "desc"): "c.created_at DESC, c.id DESC",
    ("created_at", "asc"): "c.created_at ASC, c.id ASC",
    ("title", "asc"): "c.title ASC, c.id ASC",
    ("title", "desc"): "c.title DESC, c.id DESC",
    ("family", "asc"): "c.family ASC, c.id ASC",
    ("family", "desc"): "c.family DESC, c.id DESC",
    (
        "relevance",
        "desc",
    ): "ts_rank_cd(c.search_vector, to_tsquery(%(ts_config)s::regconfig, %(tsquery)s)) DESC, c.id ASC",
    (
        "relevance",
        "asc",
    ): "ts_rank_cd(c.search_vector, to_tsquery(%(ts_config)s::regconfig, %(tsquery)s)) ASC, c.id ASC",
}


def queries() -> dict[str, str]:
    return named_queries(__package__, "sql/queries.sql", texts=TEXT_FIELDS)


def _q(name: str) -> str:
    return queries()[name]


def text_search_terms(text: str) -> str | None:
    """A prefix-matching tsquery from free text: every word must match (AND)."""
    words = _WORD.findall(text)
    if not words:
        return None
    return " & ".join(f"'{w}':*" for w in words[:32])


def id_prefix(text: str) -> str | None:
    """The UUID prefix when the search text is a card id or the start of one."""
    match = _ID_PREFIX.match(text.strip().lower())
    if not match or (not text.strip().lower().startswith("mem-") and len(match.group(1)) < 8):
        # bare hex shorter than 8 characters is more likely a word than an id
        return None
    return match.group(1)


def _login_refused(message: str | None) -> ThothError:
    return SchemaNotReady(f"the runtime login cannot use {RUNTIME_ROLE}: {message}")


def _privileged_login(login: str, superuser: bool, bypassrls: bool) -> RuntimeLoginPrivileged:
    what = "a superuser" if superuser else "a login that bypasses row-level security"
    quoted = '"' + login.replace('"', '""') + '"'
    return RuntimeLoginPrivileged(
        f"refusing to run: the runtime database login '{login}' is {what}, so row-level"
        " security would not isolate workspaces. Configure a restricted login (LOGIN"
        f" NOSUPERUSER NOBYPASSRLS, a member of {RUNTIME_ROLE}) as the runtime login;"
        " the superuser belongs to the DBA, never to the runtime",
        details={
            "login": login,
            "superuser": superuser,
            "bypassrls": bypassrls,
            "dba": [
                "CREATE ROLE <runtime_login> LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '...';",
                f"GRANT {RUNTIME_ROLE} TO <runtime_login>;",
            ],
            "or": f"ALTER ROLE {quoted} NOSUPERUSER NOBYPASSRLS;",
        },
    )


ERRORS = StoreErrors(
    what="the memory archive (PostgreSQL)",
    unavailable=ArchiveUnavailable,
    schema_missing=lambda: SchemaNotReady(
        "the thoth_memory schema is missing: run the memory migration"
    ),
    failed=lambda line: ThothError(f"archive error: {line}"),
    privileged_login=lambda login, superuser, bypassrls: _privileged_login(
        login, superuser, bypassrls
    ),
    login_refused=_login_refused,
)


def _translate(exc: psycopg.Error) -> ThothError:
    # what the archive's own constraints say, before the errors every store shares
    if isinstance(exc, psycopg.errors.InvalidParameterValue):  # SET ROLE refused
        return _login_refused(exc.diag.message_primary)
    if isinstance(exc, psycopg.errors.ForeignKeyViolation):
        return InvalidInput("a referenced card does not exist in this workspace")
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return Conflict("the record already exists")
    if isinstance(exc, psycopg.DataError):
        return InvalidInput(f"rejected by the archive: {first_line(exc)}")
    if isinstance(exc, psycopg.errors.CheckViolation):
        return InvalidInput(f"rejected by the archive: {exc.diag.constraint_name}")
    return translate(exc, ERRORS)


class PostgresArchive:
    """A pool of runtime-login connections to the archive (tht.db.connector)."""

    def __init__(
        self, conninfo: str, *, max_connections: int = 4, check: bool = True, timeout: float = 10.0
    ) -> None:
        self._conninfo = conninfo  # tests build a login's environment from it
        self._connector = PostgresConnector(
            conninfo,
            ERRORS,
            max_connections=max_connections,
            timeout=timeout,
            probe_timeout=3,
            check=check_schema if check else None,
            check_on_checkout=True,
            name="thoth-memory-archive",
        )

    def open(self) -> PostgresArchive:
        self._connector.open()
        return self

    def ping(self, timeout: float) -> None:
        """One round trip on a pooled connection, waiting at most ``timeout`` seconds for
        one (a health probe: an unavailable archive raises ``ArchiveUnavailable``)."""
        pool = self._connector.open()
        try:
            with pool.connection(timeout=timeout) as conn:
                conn.execute("SELECT 1")
                conn.rollback()
        except psycopg_pool.PoolTimeout as exc:
            raise ArchiveUnavailable(
                f"the memory archive (PostgreSQL) is unavailable: {self._connector.probe()}"
            ) from exc
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    def close(self) -> None:
        self._connector.close()

    def __enter__(self) -> PostgresArchive:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connection(self) -> AbstractContextManager[psycopg.Connection]:
        """A pooled runtime-login connection, for a schema with its own transaction
        context (the Catalog's): the same database and login need no second pool."""
        return self._connector.connection()

    @contextmanager
    def held(self, name: str) -> Iterator[bool]:
        """Hold the lock ``name`` for the block, across every process on this database
        (service replicas included): a session-level advisory lock on a pooled
        connection kept for the block, tried without waiting. Yields whether it was
        taken (False: another session holds it, and nothing is held). A process that
        dies releases it with its connection."""
        try:
            with self._connector.connection() as conn:
                conn.autocommit = True
                try:
                    row = conn.execute(_q("held_try_lock"), {"name": name}).fetchone()
                    taken = bool(row and row[0])
                    try:
                        yield taken
                    finally:
                        if taken:  # a connection lost meanwhile took the lock with it
                            with contextlib.suppress(psycopg.Error):
                                conn.execute(_q("held_unlock"), {"name": name})
                finally:
                    with contextlib.suppress(psycopg.Error):  # a broken one leaves the pool
                        conn.autocommit = False
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    @contextmanager
    def transaction(
        self,
        workspace: str | None,
        *,
        lock: bool | Literal["shared"] = False,
        directory: bool = False,
        accounts: bool = False,
        snapshot: bool = False,
    ) -> Iterator[ArchiveTransaction]:
        """One transaction as the runtime role, scoped to ``workspace``.

        ``lock=True`` serializes with every other mutation of the workspace until
        commit; ``lock="shared"`` only waits for mutations (readers share it).
        ``directory`` allows reading the list of workspaces (never their cards);
        ``accounts`` reaches the users, sessions and nonces (never cards).
        ``snapshot`` makes it read-only and REPEATABLE READ: every query sees the
        archive as it was at the first one (an export's consistent copy, read in
        many batches); writers go on meanwhile, and a write in it is refused.
        """
        committing = False
        try:
            if lock and not workspace:
                raise ValueError("a locked transaction needs a workspace")
            if lock and snapshot:
                # the snapshot would be taken before the lock is granted: it could miss
                # the very mutation the lock waited for
                raise ValueError("a snapshot takes no workspace lock")
            with contextlib.ExitStack() as stack:
                conn = stack.enter_context(self._connector.connection())
                pipeline: psycopg.Pipeline | None
                if (lock == "shared" or accounts) and not snapshot:
                    # Recall's reads and the accounts' (every request's token check), each
                    # round trip paid by a request: BEGIN and the context travel with the
                    # first query, COMMIT with the closing Sync
                    pipeline = stack.enter_context(batched_transaction(conn))
                else:
                    # An export's snapshot and the writers: psycopg's transaction in
                    # pipeline mode (an import's batches send megabytes before a read,
                    # which the batched path's sync would leave partly unsent)
                    plain = stack.enter_context(conn.pipeline())
                    stack.enter_context(conn.transaction())
                    # an export's reads end with a Sync: between two batches the server
                    # waits idle in the transaction, which its timeout guards; a writer's
                    # reads fetch as psycopg does
                    pipeline = plain if snapshot else None
                if snapshot:  # transaction-scoped: nothing is left on the pooled connection
                    conn.execute(_q("snapshot"))
                conn.execute(
                    _q("set_context"),
                    {
                        "role": RUNTIME_ROLE,
                        "workspace": workspace or "",
                        "directory": "on" if directory else "off",
                        "accounts": "on" if accounts else "off",
                        "actor": audit.actor() or "",
                        "via": audit.via() or "",
                        "lock": "shared" if lock == "shared" else "exclusive" if lock else "none",
                    },
                )
                yield ArchiveTransaction(conn, workspace, pipeline=pipeline)
                # The body is done: leaving the blocks sends COMMIT. A connection lost from
                # here on may have committed or not, which a plain outage would misstate.
                committing = True
        except psycopg.Error as exc:
            if committing and connection_lost(exc):
                raise commit_outcome_unknown(exc, ERRORS) from exc
            raise _translate(exc) from exc


def _day_start(value: datetime | date, *, next_day: bool = False) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    start = datetime.combine(value, time.min, tzinfo=UTC)
    return start + timedelta(days=1) if next_day else start


_Row = TypeVar("_Row")


def _only(row: _Row | None) -> _Row:
    """The row of a query that always returns one."""
    if row is None:
        raise ThothError("an archive query that returns one row returned none")
    return row


class ArchiveTransaction:
    """Queries inside one archive transaction; the workspace is already set."""

    def __init__(
        self,
        conn: psycopg.Connection,
        workspace_id: str | None,
        named: Mapping[str, str] | None = None,
        *,
        pipeline: psycopg.Pipeline | None = None,
    ) -> None:
        self.conn = conn
        self.workspace_id = workspace_id
        self._named = named  # the queries row/rows/execute name; the archive's by default
        self._pipeline = pipeline  # a read is synced on it (None: fetched as psycopg does)

    def _sync(self) -> None:
        """Send what is queued, with a Sync, and read its results: one round trip,
        after which the server waits idle in the transaction."""
        if self._pipeline is not None:
            self._pipeline.sync()

    def _using(self, named: Mapping[str, str]) -> ArchiveTransaction:
        """The same transaction, with _row/_rows/_execute naming the queries of another
        SQL file: for the record adapters of this package (``tx.reviews``, ``tx.cleanup``,
        ``tx.accounts``, ``tx.idempotency``, ``tx.transfer``, ``tx.curation``), never for a service."""
        return ArchiveTransaction(self.conn, self.workspace_id, named, pipeline=self._pipeline)

    def _bound_workspace(self) -> str:
        if self.workspace_id is None:
            raise ThothError("this archive transaction is bound to no workspace")
        return self.workspace_id

    def _params(self, **params: Any) -> dict[str, Any]:
        return {"workspace": self.workspace_id, **params}

    def _sql(self, query: str) -> str:
        return _q(query) if self._named is None else self._named[query]

    def row_of(self, sql_text: str, params: Mapping[str, Any]) -> Row | None:
        """The first row of ``sql_text``, for a store that shares this pool and this
        transaction's context (the Catalog's binding read with a request's token)."""
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql_text, params)
            self._sync()
            return cur.fetchone()

    def _row(self, query: str, /, **params: Any) -> Row | None:
        return self.row_of(self._sql(query), self._params(**params))

    def _one(self, query: str, /, **params: Any) -> Row:
        """The row of a query that always returns one (a count, an INSERT ... RETURNING)."""
        return _only(self._row(query, **params))

    def _rows(self, query: str, /, **params: Any) -> list[Row]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self._sql(query), self._params(**params))
            self._sync()
            return cur.fetchall()

    def _execute(self, query: str, /, **params: Any) -> None:
        self.conn.execute(self._sql(query), self._params(**params))

    @property
    def reviews(self) -> ReviewRecords:
        """The workflow's records: review receipts, proposal and error-rule lookups."""
        return ReviewRecords(self)

    @property
    def cleanup(self) -> CleanupRecords:
        """Physical cleanup's records: matching cards, receipts, tombstones."""
        return CleanupRecords(self)

    @property
    def accounts(self) -> AccountRecords:
        """Users, memberships, sessions, login failures, the audit log (accounts mode)."""
        return AccountRecords(self)

    @property
    def idempotency(self) -> IdempotencyRecords:
        """The answers recorded for idempotency keys."""
        return IdempotencyRecords(self)

    @property
    def transfer(self) -> TransferRecords:
        """Bulk import's batches and export's count."""
        return TransferRecords(self)

    @property
    def curation(self) -> CurationRecords:
        """The workspace's benchmark (cases, runs) and its recall log."""
        return CurationRecords(self)

    def use_nonce(self, nonce: str, expires_at: datetime | None) -> bool:
        """Count a signed request's nonce once: False when it was already used."""
        return self._row("nonce_use", nonce=nonce, expires_at=expires_at) is not None

    # --- workspaces -----------------------------------------------------------

    def workspace(self) -> Workspace | None:
        row = self._row("workspace_get")
        return Workspace(**row) if row else None

    def require_workspace(self) -> Workspace:
        """The transaction's workspace: the one place that says it must exist."""
        workspace = self.workspace()
        if workspace is None:
            raise NotFound(
                f"workspace '{self.workspace_id}' does not exist",
                details={"workspace": self.workspace_id},
            )
        return workspace

    def insert_workspace(
        self, name: str, language: str, embedder: str = "default"
    ) -> Workspace | None:
        row = self._row("workspace_insert", name=name, language=language, embedder=embedder)
        return Workspace(**row) if row else None

    def set_workspace_embedder(self, embedder: str) -> Workspace:
        row = self._row("workspace_set_embedder", embedder=embedder)
        if row is None:
            raise NotFound(
                f"workspace '{self.workspace_id}' does not exist",
                details={"workspace": self.workspace_id},
            )
        return Workspace(**row)

    def list_workspaces(self) -> list[Workspace]:
        return [Workspace(**row) for row in self._rows("workspace_list")]

    def workspace_counts(self) -> tuple[dict[str, int], int]:
        counts = {row["family"]: row["cards"] for row in self._rows("workspace_card_counts")}
        pending = self._one("workspace_pending_count")["count"]
        return counts, pending

    # --- cards ----------------------------------------------------------------

    def card(self, card_uuid: uuid.UUID) -> Card | None:
        row = self._row("card_get", id=card_uuid)
        if row is None:
            return None
        incoming = [
            IncomingLink(
                source=uuid_to_card_id(r["source_id"]),
                meaning=r["meaning"],
                source_title=r["title"],
            )
            for r in self._rows("card_links_in", id=card_uuid)
        ]
        return self._cards_from_rows([row], incoming={card_uuid: incoming})[card_uuid]

    def cards(self, card_uuids: list[uuid.UUID], *, links: bool = True) -> dict[uuid.UUID, Card]:
        """Cards by id, in one round trip (no incoming links); missing ids are absent.
        ``links=False`` leaves outgoing links out too (a projection needs none)."""
        if not card_uuids:
            return {}
        params = self._params(ids=list(card_uuids))
        queries = ("cards_rows", "dependencies_of", "links_of")[: 3 if links else 2]
        cursors = [self.conn.cursor(row_factory=dict_row) for _ in queries]
        for cur, name in zip(cursors, queries, strict=True):
            cur.execute(_q(name), params)
        self._sync()
        rows, dep_rows, *link_rows = (cur.fetchall() for cur in cursors)
        return self._cards_from_rows(
            rows, dep_rows=dep_rows, link_rows=link_rows[0] if link_rows else []
        )

    def _cards_from_rows(
        self,
        rows: list[Row],
        incoming: dict[uuid.UUID, list[IncomingLink]] | None = None,
        dep_rows: list[Row] | None = None,
        link_rows: list[Row] | None = None,
    ) -> dict[uuid.UUID, Card]:
        ids = [row["id"] for row in rows]
        if dep_rows is None:
            dep_rows = self._rows("dependencies_of", ids=ids)
        if link_rows is None:
            link_rows = self._rows("links_of", ids=ids)
        deps: dict[uuid.UUID, list[Dependency]] = {i: [] for i in ids}
        for d in dep_rows:
            deps[d["card_id"]].append(
                Dependency(
                    database=d["database_name"],
                    schema_name=d["schema_name"],
                    table=d["table_name"],
                    column=d["column_name"],
                )
            )
        links: dict[uuid.UUID, list[Link]] = {i: [] for i in ids}
        for r in link_rows:
            links[r["source_id"]].append(
                Link(
                    target=uuid_to_card_id(r["target_id"]),
                    meaning=r["meaning"],
                    target_title=r["title"],
                )
            )
        cards = {}
        for row in rows:
            source = None
            if row["origin"] == "workflow":
                source = Source(
                    session=row["source_session"], decisions=row["source_decisions"] or []
                )
            cards[row["id"]] = Card(
                id=uuid_to_card_id(row["id"]),
                workspace=row["workspace_id"],
                family=row["family"],
                title=row["title"],
                **{name: row[name] for name in TEXT_FIELDS},
                error_signature=row["error_signature"],
                concepts=row["concepts"],
                dependencies=deps[row["id"]],
                links=links[row["id"]],
                incoming_links=(incoming or {}).get(row["id"], []),
                origin=row["origin"],
                source=source,
                revision=row["revision"],
                created_at=row["created_at"],
                updated_at=row["updated_at"],
                imported=_import_ref(row),
            )
        return cards

    def lock_card(self, card_uuid: uuid.UUID) -> int | None:
        locked = self.lock_card_family(card_uuid)
        return locked[0] if locked else None

    def lock_card_family(self, card_uuid: uuid.UUID) -> tuple[int, str] | None:
        """Lock the card's row until commit; its revision and family."""
        row = self._row("card_lock", id=card_uuid)
        return (row["revision"], row["family"]) if row else None

    def existing_cards(self, card_uuids: list[uuid.UUID]) -> set[uuid.UUID]:
        if not card_uuids:
            return set()
        return {row["id"] for row in self._rows("cards_existing", ids=card_uuids)}

    def _fields(self, data: CardInput) -> dict[str, Any]:
        return {
            "family": data.family,
            "title": data.title,
            **{name: getattr(data, name) for name in TEXT_FIELDS},
            "error_signature": data.error_signature,
            "concepts": data.concepts,
        }

    def insert_card(
        self,
        card_uuid: uuid.UUID,
        data: CardInput,
        *,
        language: str,
        origin: str,
        source: Source | None,
    ) -> int:
        row = self._one(
            "card_insert",
            id=card_uuid,
            language=language,
            origin=origin,
            source_session=source.session if source else None,
            source_decisions=source.decisions if source else None,
            **self._fields(data),
        )
        revision: int = row["revision"]
        return revision

    def update_card(self, card_uuid: uuid.UUID, data: CardInput) -> int:
        keep_signature = "error_signature" not in data.model_fields_set
        row = self._one(
            "card_update", id=card_uuid, keep_signature=keep_signature, **self._fields(data)
        )
        revision: int = row["revision"]
        return revision

    def delete_card(self, card_uuid: uuid.UUID) -> tuple[int, int]:
        """Delete the card, locked by the caller (dependencies and incident links
        cascade); returns (last revision, number of incident links removed)."""
        links = self._one("card_incident_link_count", id=card_uuid)["count"]
        return self._one("card_delete", id=card_uuid)["revision"], links

    def replace_dependencies(self, card_uuid: uuid.UUID, deps: list[Dependency]) -> None:
        self.conn.execute(_q("dependencies_clear"), self._params(id=card_uuid))
        if deps:
            with self.conn.cursor() as cur:
                cur.executemany(
                    _q("dependency_insert"),
                    [
                        self._params(
                            id=card_uuid,
                            position=i,
                            database=d.database,
                            schema=d.schema_name,
                            table=d.table,
                            column=d.column,
                        )
                        for i, d in enumerate(deps)
                    ],
                )

    def replace_outgoing_links(
        self, card_uuid: uuid.UUID, links: list[tuple[uuid.UUID, str]]
    ) -> None:
        self.conn.execute(_q("links_clear_outgoing"), self._params(id=card_uuid))
        if links:
            with self.conn.cursor() as cur:
                cur.executemany(
                    _q("link_insert"),
                    [
                        self._params(id=card_uuid, target=target, meaning=meaning)
                        for target, meaning in links
                    ],
                )

    # --- the outbox -----------------------------------------------------------

    def enqueue(self, card_uuid: uuid.UUID, operation: str, revision: int) -> None:
        self.conn.execute(
            _q("operation_enqueue"),
            self._params(id=card_uuid, operation=operation, revision=revision),
        )

    def pending_operations(self) -> list[PendingOperation]:
        return [
            PendingOperation(
                card_id=uuid_to_card_id(r["card_id"]),
                operation=r["operation"],
                revision=r["revision"],
                attempts=r["attempts"],
                last_error=r["last_error"],
                title=r["title"],
                created_at=r["created_at"],
                updated_at=r["updated_at"],
            )
            for r in self._rows("operations_list")
        ]

    # --- projections -----------------------------------------------------------

    def projection_states(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, ProjectionState]:
        return {
            r["id"]: ProjectionState(
                r["revision"], r["projected_revision"], r["fingerprint"], r["operation"]
            )
            for r in self._rows("projection_states", ids=list(card_uuids))
        }

    def recall_facts(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, RecallFacts]:
        return {r["id"]: self._facts(r) for r in self._rows("recall_facts", ids=list(card_uuids))}

    def links_with_facts(
        self, card_uuids: list[uuid.UUID]
    ) -> tuple[dict[uuid.UUID, list[tuple[uuid.UUID, str]]], dict[uuid.UUID, RecallFacts]]:
        """Outgoing links of these cards, and the recall facts of every target."""
        return self._links_and_target_facts(self._rows("links_with_facts", ids=list(card_uuids)))

    def seed_facts(self, card_uuids: list[uuid.UUID]) -> SeedFacts:
        """What recall reads about its seeds, in one round trip: their ``recall_facts``
        with their titles and the BM25 terms recorded with their projections, and their
        outgoing links with the targets' facts (the first hop is then already known). Projections
        recorded without terms (before migration 006) cost a second round trip, for the
        fields their indexed text is built from."""
        params = self._params(ids=list(card_uuids))
        facts, links = (
            self.conn.cursor(row_factory=dict_row),
            self.conn.cursor(row_factory=dict_row),
        )
        facts.execute(_q("recall_facts"), params)
        links.execute(_q("links_with_facts"), params)
        self._sync()
        fact_rows = facts.fetchall()
        by_source, target_facts = self._links_and_target_facts(links.fetchall())
        without_terms = [
            r["id"] for r in fact_rows if r["terms"] is None and r["projected_revision"] is not None
        ]
        return SeedFacts(
            facts={r["id"]: self._facts(r) for r in fact_rows},
            links=by_source,
            target_facts=target_facts,
            terms={r["id"]: frozenset(r["terms"]) for r in fact_rows if r["terms"] is not None},
            titles={r["id"]: r["title"] for r in fact_rows},
            fields={
                r["id"]: cast(IndexedFields, r)
                for r in self._rows("indexed_fields", ids=without_terms)
            }
            if without_terms
            else {},
        )

    def _links_and_target_facts(
        self, rows: list[Row]
    ) -> tuple[dict[uuid.UUID, list[tuple[uuid.UUID, str]]], dict[uuid.UUID, RecallFacts]]:
        links: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = {}
        facts = {}
        for r in rows:
            links.setdefault(r["source_id"], []).append((r["target_id"], r["meaning"]))
            facts[r["target_id"]] = self._facts(r)
        return links, facts

    def _facts(self, row: Row) -> RecallFacts:
        deps = tuple(
            Dependency.model_construct(database=d[0], schema_name=d[1], table=d[2], column=d[3])
            for d in row["deps"]
        )
        return (
            ProjectionState(
                row["revision"], row["projected_revision"], row["fingerprint"], row["operation"]
            ),
            CardFacts(
                self._bound_workspace(), row["family"], row["scope"], tuple(row["concepts"]), deps
            ),
        )

    def operations_for(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        return {
            r["card_id"]: (r["operation"], r["revision"])
            for r in self._rows("operations_for", ids=list(card_uuids))
        }

    def has_projections(self) -> bool:
        row = self._row("projections_exist")
        return bool(row and row["present"])

    def operation_ids(self, limit: int, settled: float = 0.0) -> list[uuid.UUID]:
        return [r["card_id"] for r in self._rows("operation_ids", limit=limit, settled=settled)]

    def clear_operation(self, card_uuid: uuid.UUID, revision: int) -> None:
        self.conn.execute(_q("operation_clear"), self._params(id=card_uuid, revision=revision))

    def record_failure(self, card_uuids: list[uuid.UUID], error: str) -> None:
        self.conn.execute(
            _q("operation_failed"), self._params(ids=list(card_uuids), error=error[:2000])
        )

    def record_projections(
        self, fingerprint: str, projections: Sequence[RecordedProjection]
    ) -> None:
        """What the index now holds for these cards, in one round trip. Per card:
        ``terms``, the BM25 term ids of the point's sparse vector (recall's coverage);
        ``indexed_chars``, the length of the indexed text; ``embedded_chars``, the
        length of its prefix the dense vector was computed from, None for all of it."""
        if not projections:
            return
        self.conn.execute(
            _q("projections_record"),
            self._params(
                fingerprint=fingerprint,
                ids=[p.card_uuid for p in projections],
                revisions=[p.revision for p in projections],
                terms=["{" + ",".join(map(str, sorted(set(p.terms)))) + "}" for p in projections],
                indexed_chars=[p.indexed_chars for p in projections],
                embedded_chars=[p.embedded_chars for p in projections],
            ),
        )

    def clear_operations(self, done: dict[uuid.UUID, int]) -> None:
        """``clear_operation`` of many cards (card -> the revision projected)."""
        if done:
            self.conn.execute(
                _q("operations_clear"),
                self._params(ids=list(done), revisions=list(done.values())),
            )

    def revisions_of(self, card_uuids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
        return {r["id"]: r["revision"] for r in self._rows("revisions_of", ids=list(card_uuids))}

    def card_index(self, card_uuid: uuid.UUID, running: KnownFormat | None) -> CardIndex | None:
        """The card's projection as `show` reports it; ``running``: the running
        projection format (None when no index is configured: nothing is current)."""
        row = self._row("projection_detail", id=card_uuid)
        if row is None:
            return None
        state = ProjectionState(
            row["revision"], row["projected_revision"], row["fingerprint"], row["operation"]
        )
        return CardIndex(
            revision=row["projected_revision"],
            current=running is not None
            and state.operation is None
            and state.projected_revision == state.revision
            and running.matches(state.fingerprint),
            indexed_chars=row["indexed_chars"],
            embedded_chars=row["embedded_chars"],
        )

    def forget_projections(self, card_uuids: list[uuid.UUID]) -> None:
        self.conn.execute(_q("projection_forget"), self._params(ids=list(card_uuids)))

    def projections(self) -> dict[uuid.UUID, tuple[int, str]]:
        return {
            r["card_id"]: (r["revision"], r["fingerprint"]) for r in self._rows("projection_ids")
        }

    def card_revisions(self) -> dict[uuid.UUID, int]:
        return {r["id"]: r["revision"] for r in self._rows("card_revisions")}

    def card_ids_after(self, after: uuid.UUID, limit: int) -> list[uuid.UUID]:
        return [r["id"] for r in self._rows("card_ids_after", after=after, limit=limit)]

    def stale_projections(self, running: KnownFormat) -> list[StaleProjection]:
        return [
            StaleProjection(r["id"], r["title"], r["revision"], r["fingerprint"])
            for r in self._rows("stale_projection_ids", format=running.pattern)
        ]

    # --- the admin list -------------------------------------------------------

    def list_cards(self, query: ListQuery, language: str) -> tuple[list[CardSummary], int]:
        tsquery = prefix = None
        if query.q:
            prefix = id_prefix(query.q)
            if prefix is None:
                tsquery = text_search_terms(query.q)
                if tsquery is None:  # only punctuation: nothing can match
                    return [], 0
        sort = query.sort or ("relevance" if tsquery else "updated_at")
        if sort == "relevance" and not tsquery:
            sort = "updated_at"
        order = query.order or ("asc" if sort in ("title", "family") else "desc")
        by_dependency = any((query.database, query.schema_name, query.table, query.column))
        candidates = None
        if tsquery or query.concepts:
            # selective GIN filters first: the list query then reads these rows by key
            found = self.conn.execute(
                _q("matching_card_ids"),
                {
                    "ts_config": TS_CONFIG[language],
                    "tsquery": tsquery,
                    "concepts": query.concepts,
                },
            ).fetchone()
            candidates = _only(found)[0]
            if not candidates:
                return [], 0
        params = self._params(
            tsquery=tsquery,
            ts_config=TS_CONFIG[language],
            id_prefix=prefix,
            candidates=candidates,
            families=query.family,
            origin=query.origin,
            import_id=import_uuid(query.import_id) if query.import_id else None,
            updated_from=_day_start(query.updated_from) if query.updated_from else None,
            updated_before=(
                None
                if query.updated_to is None
                else query.updated_to + timedelta(microseconds=1)
                if isinstance(query.updated_to, datetime)
                else _day_start(query.updated_to, next_day=True)
            ),
            by_dependency=by_dependency,
            database=query.database,
            schema=query.schema_name,
            table=query.table,
            column=query.column,
            limit=query.page_size,
            offset=(query.page - 1) * query.page_size,
        )
        filters = sql.SQL(_q("list_filters"))
        page = sql.SQL(_q("list_page")).format(
            filters=filters, order_by=sql.SQL(_ORDER_BY[(sort, order)])
        )
        with self.conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(page, params).fetchall()
            if query.page == 1 and len(rows) < query.page_size:
                total = len(rows)  # the first page holds everything
            else:
                total = _only(
                    cur.execute(
                        sql.SQL(_q("list_count")).format(filters=filters), params
                    ).fetchone()
                )["count"]
        items = [
            CardSummary(
                id=uuid_to_card_id(r["id"]),
                family=r["family"],
                title=r["title"],
                scope=r["scope"],
                concepts=r["concepts"],
                origin=r["origin"],
                revision=r["revision"],
                created_at=r["created_at"],
                updated_at=r["updated_at"],
                pending=r["pending"],
                import_id=import_to_id(r["import_id"]) if r["import_id"] else None,
            )
            for r in rows
        ]
        return items, total


def _import_ref(row: dict[str, Any]) -> ImportRef | None:
    if row.get("import_id") is None:
        return None
    return ImportRef(
        id=import_to_id(row["import_id"]),
        file=row.get("import_file"),
        format=row.get("import_format"),
        at=row.get("import_at"),
        by=row.get("import_by"),
        action=row["import_action"],
    )
