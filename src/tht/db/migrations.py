"""The migration runner: a pack is a folder of numbered SQL files with its own ledger,
applied in order, one transaction each. The packs live beside the code that owns
their schema (the archive's, the Catalog's, the pgvector engine's) and are passed in.

Each applied migration is recorded with the SHA-256 of its file. A recorded migration
whose file changed, or one the pack does not know, is refused: the database was
prepared by other code and guessing would risk the archive.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from tht.errors import (
    DatabaseRolesMisconfigured,
    MigrationRefused,
    RuntimeRoleNotGrantable,
    SchemaNotReady,
)

_FILE_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
# Serializes concurrent migration runners across processes (session-level lock).
_MIGRATION_LOCK_KEY = 0x7468_6D65_6D6D_6967  # "thmemmig"
RUNTIME_ROLE = "thoth_memory_runtime"


@dataclass(frozen=True)
class MigrationPack:
    """A folder of numbered migrations with its ledger ``<schema>.schema_migrations``
    (created by the folder's ``bootstrap.sql``)."""

    package: str  # the Python package holding the .sql files
    schema: str
    command: str  # what an operator runs to apply the pack, for error messages
    # where its report goes in a migration report that applies several packs (the
    # first pack's report is the report itself)
    report_key: str = ""
    # extensions a superuser creates before the pack is applied (the migrator cannot:
    # they are not trusted extensions)
    extensions: tuple[str, ...] = ()

    def ledger(self) -> sql.Composed:
        return sql.SQL("{}.schema_migrations").format(sql.Identifier(self.schema))


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def available_migrations(pack: MigrationPack) -> list[Migration]:
    folder = resources.files(pack.package)
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


def _bootstrap_sql(pack: MigrationPack) -> str:
    return resources.files(pack.package).joinpath("bootstrap.sql").read_text()


def _applied(conn: psycopg.Connection, pack: MigrationPack) -> dict[int, tuple[str, str]]:
    rows = conn.execute(
        sql.SQL("SELECT version, name, checksum FROM {} ORDER BY version").format(pack.ledger())
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


def migrate(
    conn: psycopg.Connection,
    pack: MigrationPack,
    runtime_login: str | None = None,
    *,
    target_version: int | None = None,
) -> dict[str, Any]:
    """Apply pending migrations on a migrator connection (autocommit mode).

    Returns which versions were applied now and which were already there. When
    ``runtime_login`` is given, that login is granted membership in the runtime role
    (idempotent), as the installation's runtime user. ``target_version`` stops after
    that version (tests of a later migration's data changes use it).
    """
    if not conn.autocommit:
        raise ValueError("migrate() manages its own transactions: pass an autocommit connection")
    known = available_migrations(pack)
    # One lock for every pack: one migration at a time per database.
    conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK_KEY,))
    try:
        with conn.transaction():
            conn.execute(_bootstrap_sql(pack))
        applied = _applied(conn, pack)
        _refuse_drift(applied, known)
        newly = []
        for migration in known:
            if migration.version in applied or (
                target_version and migration.version > target_version
            ):
                continue
            try:
                with conn.transaction():
                    conn.execute(migration.text)
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {} (version, name, checksum) VALUES (%s, %s, %s)"
                        ).format(pack.ledger()),
                        (migration.version, migration.name, migration.checksum),
                    )
            except psycopg.errors.InsufficientPrivilege as exc:
                raise DatabaseRolesMisconfigured(
                    f"migration {migration.version:03d}_{migration.name} needs a privilege the"
                    f" migrator login lacks, and was rolled back: {str(exc).strip().splitlines()[0]}."
                    " The migrator must own the database (and have CREATEROLE while the runtime"
                    f" role {RUNTIME_ROLE} does not exist)",
                    details={"version": migration.version, "sqlstate": exc.sqlstate},
                ) from exc
            except psycopg.Error as exc:
                raise MigrationRefused(
                    f"migration {migration.version:03d}_{migration.name} failed and was rolled back:"
                    f" {str(exc).strip().splitlines()[0]}",
                    details={"version": migration.version, "sqlstate": exc.sqlstate},
                ) from exc
            newly.append(f"{migration.version:03d}_{migration.name}")
        if runtime_login:
            grant_runtime_role(conn, runtime_login)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK_KEY,))
    return {
        "applied": newly,
        "already_applied": [f"{v:03d}_{n}" for v, (n, _) in sorted(applied.items())],
        "runtime_login": runtime_login,
    }


def grant_runtime_role(conn: psycopg.Connection, runtime_login: str) -> None:
    """Make ``runtime_login`` a member of the runtime role (nothing to do when it is one).

    Granting a role takes ADMIN OPTION on it, which a CREATEROLE migrator has only on the
    roles it created: on a cluster where another installation's migrator created the
    runtime role, the grant is the DBA's to make, and the error says which."""
    member = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_auth_members m"
        " JOIN pg_roles r ON r.oid = m.roleid JOIN pg_roles u ON u.oid = m.member"
        " WHERE r.rolname = %s AND u.rolname = %s)",
        (RUNTIME_ROLE, runtime_login),
    ).fetchone()
    if member and member[0]:
        return
    statement = sql.SQL("GRANT {} TO {}").format(
        sql.Identifier(RUNTIME_ROLE), sql.Identifier(runtime_login)
    )
    try:
        with conn.transaction():
            conn.execute(statement)
    except psycopg.errors.UndefinedObject as exc:
        raise DatabaseRolesMisconfigured(
            f"the runtime login '{runtime_login}' does not exist: create it (LOGIN NOSUPERUSER"
            " NOBYPASSRLS) or correct THT_CATALOG_RUNTIME_USER / the runtime URL",
            details={
                "runtime_login": runtime_login,
                "dba": [
                    sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '...';")
                    .format(sql.Identifier(runtime_login))
                    .as_string(conn)
                ],
            },
        ) from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        migrator = conn.execute("SELECT current_user").fetchone()
        migrator_name = migrator[0] if migrator else "the migrator"
        grant = statement.as_string(conn) + ";"
        raise RuntimeRoleNotGrantable(
            f"the migrator login '{migrator_name}' may not grant {RUNTIME_ROLE} to the runtime"
            f" login '{runtime_login}' (the role exists already, created by another login: a"
            f" second installation on this cluster). A superuser (or a holder of ADMIN OPTION"
            f" on {RUNTIME_ROLE}) must run `{grant}` once; then migrate again.",
            details={
                "runtime_role": RUNTIME_ROLE,
                "runtime_login": runtime_login,
                "migrator": migrator_name,
                "sqlstate": exc.sqlstate,
                "dba": [grant],
                "or": sql.SQL("GRANT {} TO {} WITH ADMIN OPTION;")
                .format(sql.Identifier(RUNTIME_ROLE), sql.Identifier(migrator_name))
                .as_string(conn),
            },
        ) from exc


def check_schema(conn: psycopg.Connection, pack: MigrationPack) -> None:
    """Raise SchemaNotReady unless every known migration is applied unchanged.

    Used by ordinary (runtime) commands, which never migrate.
    """
    known = available_migrations(pack)
    try:
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(RUNTIME_ROLE)))
            applied = _applied(conn, pack)
    except psycopg.errors.InvalidSchemaName as exc:
        raise SchemaNotReady(
            f"the {pack.schema} schema is missing: run {pack.command} with the migrator credentials",
            details={"expected_version": known[-1].version},
        ) from exc
    except psycopg.errors.UndefinedTable as exc:
        raise SchemaNotReady(
            f"the {pack.schema} schema is missing: run {pack.command} with the migrator credentials",
            details={"expected_version": known[-1].version},
        ) from exc
    except (
        psycopg.errors.InsufficientPrivilege,
        psycopg.errors.InvalidParameterValue,
        psycopg.errors.UndefinedObject,
    ) as exc:
        raise SchemaNotReady(
            f"the runtime login cannot read {pack.schema}.schema_migrations: it is not a member of"
            f" {RUNTIME_ROLE}; run the migration with the runtime login configured",
        ) from exc
    try:
        _refuse_drift(applied, known)
    except MigrationRefused as exc:
        raise SchemaNotReady(exc.message, details=exc.details) from exc
    missing = [f"{m.version:03d}_{m.name}" for m in known if m.version not in applied]
    if missing:
        raise SchemaNotReady(
            f"the {pack.schema} schema is at version {max(applied, default=0):03d} but this version of"
            f" thoth-memory needs {known[-1].version:03d}; missing: {', '.join(missing)}."
            f" Run {pack.command} with the migrator credentials.",
            details={"missing": missing},
        )
