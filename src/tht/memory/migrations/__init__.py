"""The memory migration pack: numbered SQL files, applied in order, one transaction each.

Each applied migration is recorded with the SHA-256 of its file. A recorded migration
whose file changed, or one this package does not know, is refused: the database was
prepared by other code and guessing would risk the archive.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql

from tht.errors import MigrationRefused, SchemaNotReady

_FILE_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
# Serializes concurrent migration runners across processes (session-level lock).
_MIGRATION_LOCK_KEY = 0x7468_6D65_6D6D_6967  # "thmemmig"
RUNTIME_ROLE = "thoth_memory_runtime"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def available_migrations() -> list[Migration]:
    folder = resources.files(__package__)
    found = []
    for entry in folder.iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationRefused("two migration files share a version number")
    return found


def _bootstrap_sql() -> str:
    return resources.files(__package__).joinpath("bootstrap.sql").read_text()


def _applied(conn: psycopg.Connection) -> dict[int, tuple[str, str]]:
    rows = conn.execute(
        "SELECT version, name, checksum FROM thoth_memory.schema_migrations ORDER BY version"
    ).fetchall()
    return {version: (name, checksum) for version, name, checksum in rows}


def _refuse_drift(applied: dict[int, tuple[str, str]], known: list[Migration]) -> None:
    by_version = {m.version: m for m in known}
    for version, (name, checksum) in sorted(applied.items()):
        migration = by_version.get(version)
        if migration is None:
            raise MigrationRefused(
                f"applied migration {version:03d}_{name} is unknown to this version of thoth-memory",
                details={"version": version, "name": name},
            )
        if migration.checksum != checksum:
            raise MigrationRefused(
                f"applied migration {version:03d}_{name} differs from its file (checksum mismatch)",
                details={"version": version, "recorded": checksum, "file": migration.checksum},
            )


def migrate(conn: psycopg.Connection, runtime_login: str | None = None, *,
            target_version: int | None = None) -> dict:
    """Apply pending migrations on a migrator connection (autocommit mode).

    Returns which versions were applied now and which were already there. When
    ``runtime_login`` is given, that login is granted membership in the runtime role
    (idempotent), as the installation's runtime user. ``target_version`` stops after
    that version (tests of a later migration's data changes use it).
    """
    if not conn.autocommit:
        raise ValueError("migrate() manages its own transactions: pass an autocommit connection")
    known = available_migrations()
    conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK_KEY,))
    try:
        with conn.transaction():
            conn.execute(_bootstrap_sql())
        applied = _applied(conn)
        _refuse_drift(applied, known)
        newly = []
        for migration in known:
            if migration.version in applied or (target_version and migration.version > target_version):
                continue
            try:
                with conn.transaction():
                    conn.execute(migration.text)
                    conn.execute(
                        "INSERT INTO thoth_memory.schema_migrations (version, name, checksum)"
                        " VALUES (%s, %s, %s)",
                        (migration.version, migration.name, migration.checksum),
                    )
            except psycopg.Error as exc:
                raise MigrationRefused(
                    f"migration {migration.version:03d}_{migration.name} failed and was rolled back:"
                    f" {str(exc).strip().splitlines()[0]}",
                    details={"version": migration.version, "sqlstate": exc.sqlstate},
                ) from exc
            newly.append(f"{migration.version:03d}_{migration.name}")
        if runtime_login:
            with conn.transaction():
                conn.execute(
                    sql.SQL("GRANT {} TO {}").format(
                        sql.Identifier(RUNTIME_ROLE), sql.Identifier(runtime_login)
                    )
                )
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK_KEY,))
    return {
        "applied": newly,
        "already_applied": [f"{v:03d}_{n}" for v, (n, _) in sorted(applied.items())],
        "runtime_login": runtime_login,
    }


def check_schema(conn: psycopg.Connection) -> None:
    """Raise SchemaNotReady unless every known migration is applied unchanged.

    Used by ordinary (runtime) commands, which never migrate.
    """
    known = available_migrations()
    try:
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(RUNTIME_ROLE)))
            applied = _applied(conn)
    except psycopg.errors.InvalidSchemaName as exc:
        raise SchemaNotReady(
            "the thoth_memory schema is missing: run `python -m tht.memory.migrate`"
            " (or `tht memory migrate`) with the migrator credentials",
            details={"expected_version": known[-1].version},
        ) from exc
    except psycopg.errors.UndefinedTable as exc:
        raise SchemaNotReady(
            "the thoth_memory schema is missing: run `python -m tht.memory.migrate`"
            " (or `tht memory migrate`) with the migrator credentials",
            details={"expected_version": known[-1].version},
        ) from exc
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.InvalidParameterValue,
            psycopg.errors.UndefinedObject) as exc:
        raise SchemaNotReady(
            "the runtime login cannot read thoth_memory.schema_migrations: it is not a member of"
            f" {RUNTIME_ROLE}; run the migration with the runtime login configured",
        ) from exc
    try:
        _refuse_drift(applied, known)
    except MigrationRefused as exc:
        raise SchemaNotReady(exc.message, details=exc.details) from exc
    missing = [f"{m.version:03d}_{m.name}" for m in known if m.version not in applied]
    if missing:
        raise SchemaNotReady(
            f"the memory schema is at version {max(applied, default=0):03d} but this version of"
            f" thoth-memory needs {known[-1].version:03d}; missing: {', '.join(missing)}."
            " Run `python -m tht.memory.migrate` with the migrator credentials.",
            details={"missing": missing},
        )
