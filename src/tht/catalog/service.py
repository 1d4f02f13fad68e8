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

import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tht.catalog.model import Binding, Removals, Tables, diff, run_id_to_uuid, uuid_to_run_id
from tht.catalog.scan import scan as scan_dwh
from tht.catalog.store import CatalogStore, CatalogTransaction
from tht.errors import CleanupPending, DwhUnavailable, InvalidInput, NotFound, ThothError
from tht.faults import crash_point
from tht.memory.cleanup import CleanupReceipt, PhysicalRemovals

log = logging.getLogger(__name__)
Scanner = Callable[[Binding, Mapping[str, str]], Tables]


class MemoryCleanup(Protocol):
    """Memory's side of a physical change (tht.memory.cleanup.PhysicalCleanup)."""

    def apply(self, workspace: str, removals: PhysicalRemovals) -> CleanupReceipt: ...


def run_json(workspace: str, row: dict) -> dict[str, Any]:
    return {
        "run_id": uuid_to_run_id(row["id"]),
        "workspace": workspace,
        "kind": row["kind"],
        "database": row["database_name"],
        "schema": row["schema_name"],
        "status": row["status"],
        "phase": row["phase"],
        "removed": {
            "tables": list(row["removed_tables"]),
            "columns": [
                {"table": c["table"], "column": c["column"]} for c in row["removed_columns"]
            ],
        },
        "forgotten": row["forgotten"],
        "tables_scanned": row["tables_scanned"],
        "deleted_cards": row["deleted_cards"],
        "links_removed": row["links_removed"],
        "errors": row["errors"],
        "attempts": row["attempts"],
        "started_at": row["started_at"].isoformat(),
        "finished_at": row["finished_at"].isoformat() if row["finished_at"] else None,
    }


class Catalog:
    def __init__(
        self,
        store: CatalogStore,
        cleanup: MemoryCleanup,
        env: Mapping[str, str] | None = None,
        scanner: Scanner = scan_dwh,
    ) -> None:
        self.store = store
        self.cleanup = cleanup
        self.env = os.environ if env is None else env
        self.scanner = scanner

    # --- bindings -------------------------------------------------------------------

    def bind(self, binding: Binding) -> dict[str, Any]:
        with self.store.transaction(binding.workspace, lock=True) as tx:
            tx.rows(
                "binding_upsert",
                database=binding.database,
                schema=binding.schema,
                url_env=binding.url_env,
            )
            bound = self._binding(tx)
            assert bound is not None  # just written
            return bound.as_json()

    def binding(self, workspace: str) -> Binding | None:
        with self.store.transaction(workspace) as tx:
            return self._binding(tx)

    @staticmethod
    def _binding(tx: CatalogTransaction) -> Binding | None:
        row = tx.row("binding_get")
        if row is None:
            return None
        return Binding(
            tx.workspace,
            row["database_name"],
            row["schema_name"],
            row["url_env"],
            updated_at=row["updated_at"],
        )

    def status(self, workspace: str) -> dict[str, Any]:
        """The binding, the last snapshot of its scope and the pending run, if any."""
        with self.store.transaction(workspace) as tx:
            binding = self._binding(tx)
            snapshot = None
            if binding is not None:
                row = tx.row("snapshot_get", database=binding.database, schema=binding.schema)
                if row is not None:
                    snapshot = {
                        "run_id": uuid_to_run_id(row["run_id"]),
                        "taken_at": row["taken_at"].isoformat(),
                        "tables": len(row["tables"]),
                        "columns": sum(len(c) for c in row["tables"].values()),
                    }
            pending = tx.row("pending_run")
            pending_run = (
                run_json(workspace, tx.one("run_get", id=pending["id"])) if pending else None
            )
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
            return [run_json(workspace, row) for row in tx.rows("runs_list", limit=limit)]

    def run(self, workspace: str, run_id: str) -> dict[str, Any]:
        with self.store.transaction(workspace) as tx:
            row = tx.row("run_get", id=run_id_to_uuid(run_id))
        if row is None:
            raise NotFound(
                f"run {run_id} does not exist in workspace '{workspace}'",
                details={"run_id": run_id},
            )
        return run_json(workspace, row)

    def _refuse_if_pending(self, tx: CatalogTransaction) -> None:
        pending = tx.row("pending_run")
        if pending is not None:
            run_id = uuid_to_run_id(pending["id"])
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
                    f"workspace '{workspace}' has no DWH binding: run `tht catalog sync -c runtime.yaml`"
                    " (or `tht catalog bind`) with a runtime file naming database, schema and"
                    " dwh.url_env",
                    details={"workspace": workspace},
                )
        with self.store.transaction(workspace) as tx:
            self._refuse_if_pending(tx)  # before a possibly long scan
        run_id = uuid.uuid4()
        say(f"scanning {binding.database}.{binding.schema} ({binding.url_env})")
        try:
            tables = self.scanner(binding, self.env)
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
            previous = tx.row("snapshot_get", database=binding.database, schema=binding.schema)
            removals = diff(previous["tables"] if previous else None, tables)
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
            tx.rows(
                "snapshot_put",
                database=binding.database,
                schema=binding.schema,
                run_id=run_id,
                tables=json.dumps(tables),
            )
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
        errors: list | None = None,
    ) -> None:
        removals = removals or Removals()
        tx.rows(
            "run_insert",
            id=run_id,
            kind=kind,
            database=binding.database,
            schema=binding.schema,
            status=status,
            phase=phase,
            tables=removals.tables,
            columns=json.dumps([{"table": t, "column": c} for t, c in removals.columns]),
            forgotten=json.dumps(forgotten) if forgotten is not None else None,
            tables_scanned=tables_scanned,
            errors=json.dumps(errors or []),
        )

    def _clean(self, workspace: str, run_uuid: uuid.UUID) -> None:
        """Hand the run's recorded removals to Memory; complete the run on a complete
        receipt, else keep it pending with the error (and raise it)."""
        with self.store.transaction(workspace) as tx:
            row = tx.one("run_get", id=run_uuid)
        removals = PhysicalRemovals(
            run_id=run_uuid,
            database=row["database_name"],
            schema=row["schema_name"],
            tables=tuple(row["removed_tables"]),
            columns=tuple((c["table"], c["column"]) for c in row["removed_columns"]),
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
            tx.rows(
                "run_completed",
                id=run_uuid,
                deleted=json.dumps(receipt.deleted_cards),
                links_removed=receipt.links_removed,
            )

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
                tx.rows(
                    "run_cleanup_failed",
                    id=run_uuid,
                    code=code,
                    message=message[:2000],
                    deleted=json.dumps(receipt.deleted_cards) if receipt else None,
                    links_removed=receipt.links_removed if receipt else None,
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
            binding = self._binding(tx)
            if binding is None:
                raise NotFound(
                    f"workspace '{workspace}' has no DWH binding", details={"workspace": workspace}
                )
            row = tx.row("snapshot_get", database=binding.database, schema=binding.schema)
            if row is None:
                raise NotFound(
                    f"the Catalog has no snapshot of {binding.database}.{binding.schema}",
                    details={"workspace": workspace},
                )
            tables: Tables = row["tables"]
            if everything:
                tx.rows("snapshot_delete", database=binding.database, schema=binding.schema)
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
                tx.rows(
                    "snapshot_put",
                    database=binding.database,
                    schema=binding.schema,
                    run_id=row["run_id"],
                    tables=json.dumps(tables),
                )
            self._insert_run(
                tx, run_id, "forget", binding, status="completed", phase="done", forgotten=forgotten
            )
        return self.run(workspace, uuid_to_run_id(run_id))
