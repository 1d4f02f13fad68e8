"""The one place that builds adapters from settings; entry points never build them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import psycopg

from tht.errors import ArchiveUnavailable, ConfigurationError
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.migrations import migrate
from tht.memory.service import MemoryService, WorkspaceService
from tht.settings import DatabaseSettings, database_settings


def resolve_database(env: Mapping[str, str] | None = None) -> DatabaseSettings:
    """External settings as given, or the embedded server started and prepared."""
    settings = database_settings(env)
    if settings.embedded:
        from tht.db.embedded import EmbeddedPostgres

        settings, _ = EmbeddedPostgres(settings.embedded_home).prepare()
    return settings


def open_archive(env: Mapping[str, str] | None = None) -> PostgresArchive:
    settings = resolve_database(env)
    if not settings.runtime_conninfo:
        raise ConfigurationError(
            "no runtime database login: set THT_CATALOG_DATABASE_URL (or THT_CATALOG_RUNTIME_DATABASE_URL,"
            " or THT_CATALOG_DB_HOST, THT_CATALOG_DB_NAME and THT_CATALOG_RUNTIME_USER)"
        )
    return PostgresArchive(settings.runtime_conninfo).open()


def run_migrations(env: Mapping[str, str] | None = None) -> dict:
    """Apply the migration pack with the migrator login (never the runtime one)."""
    env = os.environ if env is None else env
    settings = database_settings(env)
    if settings.embedded:
        from tht.db.embedded import EmbeddedPostgres

        _, report = EmbeddedPostgres(settings.embedded_home).prepare(force=True)
        return {"database": "embedded", **(report or {})}
    if not settings.migrator_conninfo:
        raise ConfigurationError(
            "no migrator login: set THT_CATALOG_MIGRATOR_DATABASE_URL, or THT_CATALOG_DB_HOST,"
            " THT_CATALOG_DB_NAME and THT_CATALOG_MIGRATOR_USER (with THT_CATALOG_MIGRATOR_PASSWORD_FILE)"
        )
    try:
        with psycopg.connect(settings.migrator_conninfo, autocommit=True, connect_timeout=10) as conn:
            report = migrate(conn, runtime_login=settings.runtime_login)
    except psycopg.OperationalError as exc:
        raise ArchiveUnavailable(f"cannot reach the database to migrate: {str(exc).strip().splitlines()[0]}") from exc
    return {"database": "external", **report}


@dataclass
class Services:
    archive: PostgresArchive
    memory: MemoryService
    workspaces: WorkspaceService

    def close(self) -> None:
        self.archive.close()


def build_services(env: Mapping[str, str] | None = None) -> Services:
    archive = open_archive(env)
    return Services(archive=archive, memory=MemoryService(archive), workspaces=WorkspaceService(archive))
