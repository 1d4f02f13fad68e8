"""The memory migration pack: numbered SQL files in this folder (schema
``thoth_memory``), applied in order by the runner of ``tht.db.migrations``. Its
functions here apply this pack unless told another.
"""

from __future__ import annotations

from typing import Any

import psycopg

from tht.db import migrations as runner
from tht.db.migrations import RUNTIME_ROLE, Migration, MigrationPack

__all__ = [
    "ARCHIVE",
    "RUNTIME_ROLE",
    "Migration",
    "MigrationPack",
    "available_migrations",
    "check_schema",
    "migrate",
]

ARCHIVE = MigrationPack(
    __package__, "thoth_memory", "`python -m tht.memory.migrate` (or `tht memory migrate`)"
)


def available_migrations(pack: MigrationPack = ARCHIVE) -> list[Migration]:
    return runner.available_migrations(pack)


def migrate(
    conn: psycopg.Connection,
    runtime_login: str | None = None,
    *,
    target_version: int | None = None,
    pack: MigrationPack = ARCHIVE,
) -> dict[str, Any]:
    """Apply the pack's pending migrations on a migrator connection (autocommit mode);
    see ``tht.db.migrations.migrate``."""
    return runner.migrate(conn, pack, runtime_login, target_version=target_version)


def check_schema(conn: psycopg.Connection, pack: MigrationPack = ARCHIVE) -> None:
    """Raise SchemaNotReady unless every migration of the pack is applied unchanged."""
    runner.check_schema(conn, pack)
