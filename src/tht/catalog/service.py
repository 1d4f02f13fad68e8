"""The Catalog application service: bind, sync, retry, forget, and the run history.

A sync scans the bound DWH schema first, outside any transaction. Only a successful
scan is compared with the last successful snapshot of the same scope (workspace,
database, schema). One Catalog transaction then records the new snapshot and the run
with its exact removals; when there are removals the run is committed 'pending' in
phase 'memory_cleanup' before Memory is called directly. The run completes only when
Memory's receipt says its cards are deleted and out of the index; otherwise it keeps
its removals, blocks new syncs of the workspace, and `retry` finishes that same
operation (never a new scan or diff). A failed scan and a manual `forget` never call
Memory.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tht.catalog.model import Binding, Removals, Tables, diff, run_id_to_uuid, uuid_to_run_id
from tht.catalog.store import CatalogRun, CatalogStore, CatalogTransaction
from tht.errors import (
    CleanupPending,
    ConfigurationError,
    DwhUnavailable,
    InvalidInput,
    NotFound,
    ThothError,
)
from tht.faults import crash_point
from tht.installation import DwhConnection
from tht.memory.archive.port import ArchiveTx
from tht.memory.cleanup import CleanupReceipt, PhysicalRemovals

log = logging.getLogger(__name__)
Scanner = Callable[[Binding, DwhConnection, Mapping[str, str]], Tables]


class MemoryCleanup(Protocol):
    """Memory's side of a physical change (tht.memory.cleanup.PhysicalCleanup)."""

    def apply(self, workspace: str, removals: PhysicalRemovals) -> CleanupReceipt: ...


def run_json(workspace: str, run: CatalogRun) -> dict[str, Any]:
    return {
        "run_id": uuid_to_run_id(run.id),
        "workspace": workspace,
        "kind": run.kind,
        "database": run.database_name,
        "schema": run.schema_name,
        "status": run.status,
        "phase": run.phase,
        "removed": {
            "tables": list(run.removed_tables),
            "columns": [{"table": c["table"], "column": c["column"]} for c in run.removed_columns],
        },
        "forgotten": run.forgotten,
        "tables_scanned": run.tables_scanned,
        "deleted_cards": run.deleted_cards,
        "links_removed": run.links_removed,
        "errors": run.errors,
        "attempts": run.attempts,
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


def _recorded(tx: CatalogTransaction, run_id: uuid.UUID) -> CatalogRun:
    """A run this transaction knows exists (it is pending, or was just read)."""
    run = tx.run(run_id)
    if run is None:
        raise ThothError("the catalog query run_get returned no row")
    return run


class Catalog:
    def __init__(
        self,
        store: CatalogStore,
        cleanup: MemoryCleanup,
        env: Mapping[str, str] | None = None,
        scanner: Scanner | None = None,  # None: the DWH scanner, imported on first scan
        *,
        connections: Mapping[str, DwhConnection] | None = None,
    ) -> None:
        self.store = store
        self.cleanup = cleanup
        self.env = os.environ if env is None else env  # the installation's, never a caller's
        self.scanner = scanner
        self.connections = dict(connections or {})  # the installation's DWH connections

    # --- bindings -------------------------------------------------------------------

    def connection(self, name: str) -> DwhConnection:
        if name not in self.connections:
            defined = sorted(self.connections)
            raise ConfigurationError(
                f"DWH connection '{name}' is not defined by this installation"
                + (
                    f" (defined: {', '.join(defined)})"
                    if defined
                    else " (it defines none:"
                    " `dwh: {NAME: {url_env: VARIABLE}}` in its configuration)"
                ),
                details={"connection": name, "defined": defined},
            )
        return self.connections[name]

    def bind(self, binding: Binding) -> dict[str, Any]:
        if binding.connection is not None:
            self.connection(binding.connection)  # a binding names a connection that exists
        with self.store.transaction(binding.workspace, lock=True) as tx:
            tx.put_binding(binding)
            bound = tx.binding()
            assert bound is not None  # just written
            return bound.as_json()

    def binding(self, workspace: str) -> Binding | None:
        with self.store.transaction(workspace) as tx:
            return tx.binding()

    def binding_in(self, tx: ArchiveTx) -> Binding | None:
        """The binding of the workspace the archive transaction ``tx`` is scoped to."""
        return self.store.binding_in(tx)

    def status(self, workspace: str) -> dict[str, Any]:
        """The binding, the last snapshot of its scope and the pending run, if any."""
        with self.store.transaction(workspace) as tx:
            binding = tx.binding()
            snapshot = None
            if binding is not None:
                taken = tx.snapshot(binding.database, binding.schema)
                if taken is not None:
                    snapshot = {
                        "run_id": uuid_to_run_id(taken.run_id),
                        "taken_at": taken.taken_at.isoformat(),
                        "tables": len(taken.tables),
                        "columns": sum(len(c) for c in taken.tables.values()),
                    }
            pending = tx.pending_run_id()
            pending_run = run_json(workspace, _recorded(tx, pending)) if pending else None
        return {
            "workspace": workspace,
            "binding": binding.as_json() if binding else None,
            "snapshot": snapshot,
            "pending_run": pending_run,
        }

    # --- runs -----------------------------------------------------------------------

    def runs(self, workspace: str, limit: int = 50) -> list[dict[str, Any]]:
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500")
        with self.store.transaction(workspace) as tx:
            return [run_json(workspace, run) for run in tx.runs(limit)]

    def run(self, workspace: str, run_id: str) -> dict[str, Any]:
        with self.store.transaction(workspace) as tx:
            found = tx.run(run_id_to_uuid(run_id))
        if found is None:
            raise NotFound(
                f"run {run_id} does not exist in workspace '{workspace}'",
                details={"run_id": run_id},
            )
        return run_json(workspace, found)

    def _refuse_if_pending(self, tx: CatalogTransaction) -> None:
        pending = tx.pending_run_id()
        if pending is not None:
            run_id = uuid_to_run_id(pending)
            raise CleanupPending(
                f"workspace '{tx.workspace}' has a pending Memory cleanup from run {run_id}: complete it with"
                f" `tht catalog retry {run_id}` before a new sync",
                details={"run_id": run_id, "workspace": tx.workspace},
            )

    # --- sync -----------------------------------------------------------------------

    def sync(
        self,
        workspace: str,
        binding: Binding | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """Scan, diff, record, clean Memory. ``binding`` (from a runtime file) is
        recorded first; without it the stored binding is used (the web page)."""
        say = progress or (lambda _message: None)
        if binding is not None:
            if binding.workspace != workspace:
                raise InvalidInput("the binding is for another workspace")
            self.bind(binding)
        else:
            binding = self.binding(workspace)
            if binding is None:
                raise NotFound(
                    f"workspace '{workspace}' has no DWH binding: bind it with `tht catalog bind"
                    " -c runtime.yaml --connection NAME` (the runtime file's database and schema,"
                    " one of the installation's DWH connections)",
                    details={"workspace": workspace, "reason": "no_binding"},
                )
        if binding.connection is None:
            raise InvalidInput(
                f"workspace '{workspace}' is bound to {binding.database}.{binding.schema} for"
                " recall only: no DWH connection to scan; bind it with `tht catalog bind -c"
                " runtime.yaml --connection NAME` (one of the installation's DWH connections)",
                details={"workspace": workspace, "reason": "no_connection"},
            )
        with self.store.transaction(workspace) as tx:
            self._refuse_if_pending(tx)  # before a possibly long scan
        run_id = uuid.uuid4()
        connection = self.connection(binding.connection)
        say(f"scanning {binding.database}.{binding.schema} (connection {binding.connection})")
        try:
            tables = (self.scanner or scan_dwh)(binding, connection, self.env)
        except DwhUnavailable as exc:
            # recorded, but nothing else: a failed scan proves no removal
            with self.store.transaction(workspace, lock=True) as tx:
                self._insert_run(
                    tx,
                    run_id,
                    "sync",
                    binding,
                    status="failed",
                    phase="scan",
                    errors=[{"phase": "scan", "code": exc.code, "message": exc.message}],
                )
            exc.details = {**(exc.details or {}), "run_id": uuid_to_run_id(run_id)}
            raise
        say(f"scanned {len(tables)} tables and views")
        with self.store.transaction(workspace, lock=True) as tx:
            self._refuse_if_pending(tx)  # a concurrent sync may have committed meanwhile
            previous = tx.snapshot(binding.database, binding.schema)
            removals = diff(previous.tables if previous else None, tables)
            status, phase = ("pending", "memory_cleanup") if removals else ("completed", "done")
            self._insert_run(
                tx,
                run_id,
                "sync",
                binding,
                status=status,
                phase=phase,
                removals=removals,
                tables_scanned=len(tables),
            )
            tx.put_snapshot(binding.database, binding.schema, run_id, tables)
        crash_point("catalog.after_catalog_commit")
        if removals:
            say(
                f"removed: {len(removals.tables)} tables, {len(removals.columns)} columns; cleaning Memory"
            )
            self._clean(workspace, run_id)
        return self.run(workspace, uuid_to_run_id(run_id))

    def _insert_run(
        self,
        tx: CatalogTransaction,
        run_id: uuid.UUID,
        kind: str,
        binding: Binding,
        *,
        status: str,
        phase: str,
        removals: Removals | None = None,
        forgotten: Any = None,
        tables_scanned: int | None = None,
        errors: list[Any] | None = None,
    ) -> None:
        tx.insert_run(
            run_id,
            kind,
            binding.database,
            binding.schema,
            status=status,
            phase=phase,
            removals=removals or Removals(),
            forgotten=forgotten,
            tables_scanned=tables_scanned,
            errors=errors or [],
        )

    def _clean(self, workspace: str, run_uuid: uuid.UUID) -> None:
        """Hand the run's recorded removals to Memory; complete the run on a complete
        receipt, else keep it pending with the error (and raise it)."""
        with self.store.transaction(workspace) as tx:
            run = _recorded(tx, run_uuid)
        removals = PhysicalRemovals(
            run_id=run_uuid,
            database=run.database_name,
            schema=run.schema_name,
            tables=tuple(run.removed_tables),
            columns=tuple((c["table"], c["column"]) for c in run.removed_columns),
        )
        try:
            receipt = self.cleanup.apply(workspace, removals)
        except ThothError as exc:
            self._record_failure(workspace, run_uuid, exc.code, exc.message)
            exc.details = {
                **(exc.details if isinstance(exc.details, dict) else {"cause": exc.details}),
                "run_id": uuid_to_run_id(run_uuid),
            }
            raise
        if not receipt.completed:
            message = receipt.error or "the search index still holds deleted cards"
            self._record_failure(workspace, run_uuid, "cleanup_incomplete", message, receipt)
            from tht.memory.index import IndexUnavailable

            raise IndexUnavailable(
                f"Memory deleted {len(receipt.deleted_cards)} cards for run {uuid_to_run_id(run_uuid)} but the"
                f" search index could not be updated ({message}); the run stays pending:"
                f" `tht catalog retry {uuid_to_run_id(run_uuid)}`",
                details={
                    "run_id": uuid_to_run_id(run_uuid),
                    "deleted_cards": receipt.deleted_cards,
                },
            )
        with self.store.transaction(workspace, lock=True) as tx:
            tx.complete_run(run_uuid, receipt.deleted_cards, receipt.links_removed)

    def _record_failure(
        self,
        workspace: str,
        run_uuid: uuid.UUID,
        code: str,
        message: str,
        receipt: CleanupReceipt | None = None,
    ) -> None:
        try:
            with self.store.transaction(workspace, lock=True) as tx:
                tx.record_cleanup_failure(
                    run_uuid,
                    code,
                    message[:2000],
                    receipt.deleted_cards if receipt else None,
                    receipt.links_removed if receipt else None,
                )
        except ThothError as exc:  # the run stays pending either way
            log.warning("could not record the cleanup failure of run %s: %s", run_uuid, exc.message)

    def retry(self, workspace: str, run_id: str) -> dict[str, Any]:
        """Complete a pending run's Memory cleanup with its recorded removals. A
        completed run is left as it is (a no-op); a failed scan has nothing to retry."""
        run_uuid = run_id_to_uuid(run_id)
        current = self.run(workspace, run_id)
        if current["status"] == "failed":
            raise InvalidInput(
                f"run {run_id} failed at its scan and changed nothing: run a new sync instead",
                details={"run_id": run_id},
            )
        if current["status"] == "pending":
            self._clean(workspace, run_uuid)
        return self.run(workspace, run_id)

    # --- manual Catalog cleanup -------------------------------------------------------

    def forget(
        self,
        workspace: str,
        table: str | None = None,
        column: str | None = None,
        everything: bool = False,
    ) -> dict[str, Any]:
        """Remove objects from the Catalog's snapshot only. Memory is never told: a
        manual cleanup proves nothing about the DWH."""
        if everything == bool(table):
            raise InvalidInput("name a --table (optionally with --column), or --all")
        if column and not table:
            raise InvalidInput("--column needs its --table")
        run_id = uuid.uuid4()
        with self.store.transaction(workspace, lock=True) as tx:
            binding = tx.binding()
            if binding is None:
                raise NotFound(
                    f"workspace '{workspace}' has no DWH binding", details={"workspace": workspace}
                )
            taken = tx.snapshot(binding.database, binding.schema)
            if taken is None:
                raise NotFound(
                    f"the Catalog has no snapshot of {binding.database}.{binding.schema}",
                    details={"workspace": workspace},
                )
            tables: Tables = taken.tables
            if everything:
                tx.delete_snapshot(binding.database, binding.schema)
                forgotten: dict[str, Any] = {"all": True, "tables": len(tables)}
            else:
                if table not in tables or (column and column not in tables[table]):
                    what = f"{table}.{column}" if column else table
                    raise NotFound(
                        f"the Catalog's snapshot has no {what}",
                        details={"table": table, "column": column},
                    )
                if column:
                    tables[table] = [c for c in tables[table] if c != column]
                    forgotten = {"table": table, "column": column}
                else:
                    del tables[table]
                    forgotten = {"table": table}
                tx.put_snapshot(binding.database, binding.schema, taken.run_id, tables)
            self._insert_run(
                tx, run_id, "forget", binding, status="completed", phase="done", forgotten=forgotten
            )
        return self.run(workspace, uuid_to_run_id(run_id))


def scan_dwh(binding: Binding, connection: DwhConnection, env: Mapping[str, str]) -> Tables:
    """The DWH scanner (its drivers, sqlite3 among them, are imported by a scan only)."""
    from tht.catalog.scan import scan

    return scan(binding, connection, env)
