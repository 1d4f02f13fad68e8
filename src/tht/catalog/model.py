"""Catalog values: the DWH binding, a physical snapshot and the diff of two (pure)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tht.errors import ConfigurationError, InvalidInput
from tht.settings import RuntimeConfig

# table -> its columns (tables and views of one schema)
Tables = dict[str, list[str]]
RUN_PREFIX = "run-"


@dataclass(frozen=True)
class Binding:
    """A workspace's DWH binding: the database and schema its agents query (recall
    returns the cards whose dependencies fit them), and the installation's DWH
    connection (by name) the Catalog scans them through; None: recall only, no sync."""

    workspace: str
    database: str
    schema: str
    connection: str | None
    updated_at: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace,
            "database": self.database,
            "schema": self.schema,
            "connection": self.connection,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


def binding_from_runtime(runtime: RuntimeConfig, connection: str | None) -> Binding:
    """The binding a runtime file's database and schema make with ``connection``."""
    if not runtime.database or not runtime.schema_name:
        raise ConfigurationError(
            "the runtime file needs `database` and `schema`: the DWH scope to bind"
        )
    return Binding(runtime.workspace, runtime.database, runtime.schema_name, connection)


@dataclass(frozen=True)
class Removals:
    tables: list[str] = field(default_factory=list)
    columns: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.tables or self.columns)


def diff(previous: Tables | None, current: Tables) -> Removals:
    """What the current scan no longer has. A removed table's columns are covered by the
    table; additions are not removals. Without a previous snapshot nothing is removed."""
    if previous is None:
        return Removals()
    tables = sorted(t for t in previous if t not in current)
    columns = sorted(
        (t, c) for t, cols in previous.items() if t in current for c in set(cols) - set(current[t])
    )
    return Removals(tables, columns)


def run_id_to_uuid(run_id: str) -> uuid.UUID:
    text = run_id[len(RUN_PREFIX) :] if run_id.startswith(RUN_PREFIX) else run_id
    try:
        return uuid.UUID(text)
    except ValueError as exc:
        raise InvalidInput(f"'{run_id}' is not a run id (run-<uuid>)") from exc


def uuid_to_run_id(value: uuid.UUID) -> str:
    return f"{RUN_PREFIX}{value}"
