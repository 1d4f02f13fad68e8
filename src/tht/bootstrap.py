"""The one place that builds adapters from settings; entry points never build them."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import psycopg

from tht.catalog.migrations import PACK as CATALOG_PACK
from tht.catalog.service import Catalog
from tht.catalog.store import CatalogStore
from tht.errors import ArchiveUnavailable, ConfigurationError
from tht.installation import IndexConfig, Installation, load_installation
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.cleanup import PhysicalCleanup
from tht.memory.embedding import CachedQueryEmbedder, Embedder, build_embedder
from tht.memory.index import SearchIndex
from tht.memory.index.engines import ENGINES, EngineSite
from tht.memory.indexing import IndexProjector
from tht.memory.migrations import ARCHIVE, MigrationPack, migrate
from tht.memory.recall_log import RecallLog
from tht.memory.recall_service import RecallService
from tht.memory.workspace_projection import WorkspaceProjector, WorkspaceRecall
from tht.settings import DatabaseSettings, database_settings, default_home
from tht.usecases.card_administration import MemoryAdmin

if TYPE_CHECKING:
    from tht.access import Accounts
    from tht.db.embedded import EmbeddedPostgres
    from tht.memory.benchmark import Benchmarks
    from tht.workflow.proposals import ProposalService
    from tht.workflow.review import ReviewService
    from tht.workflow.session import SessionStore
    from tht.workflow.summary import SummaryService


def embedded_database(env: Mapping[str, str] | None = None) -> EmbeddedPostgres | None:
    """The embedded PostgreSQL of THT_HOME (not started here), or None when the
    THT_CATALOG_* settings name an external database."""
    settings = database_settings(env)
    if settings.embedded_home is None:
        return None
    from tht.db.embedded import EmbeddedPostgres  # pgserver only when it is the engine

    return EmbeddedPostgres(settings.embedded_home)


def engine_pack(engine: str | None) -> MigrationPack | None:
    """The migration pack of the index engine's tables in PostgreSQL (None: it keeps
    none, or no engine is named)."""
    return ENGINES[engine].migration_pack() if engine in ENGINES else None


def migration_packs(*, engine: str | None = None) -> tuple[MigrationPack, ...]:
    """The installation's migration packs, in the order they apply: the archive's (it
    creates the runtime role), the Catalog's, and the index engine's when it has one."""
    pack = engine_pack(engine)
    return (ARCHIVE, CATALOG_PACK, *((pack,) if pack is not None else ()))


def resolve_database(
    env: Mapping[str, str] | None = None, *, engine: str | None = None
) -> DatabaseSettings:
    """External settings as given, or the embedded server started and prepared (with
    the index engine's tables when it has some)."""
    embedded = embedded_database(env)
    if embedded is None:
        return database_settings(env)
    settings, _ = embedded.prepare(migration_packs(engine=engine))
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


def run_migrations(
    env: Mapping[str, str] | None = None, *, engine: str | None = None
) -> dict[str, Any]:
    """Apply the migration pack with the migrator login (never the runtime one); with
    an ``engine`` that keeps tables in PostgreSQL (pgvector), then that engine's pack
    (the Qdrant engines keep nothing there)."""
    env = os.environ if env is None else env
    pack = engine_pack(engine)
    embedded = embedded_database(env)
    if embedded is not None:
        _, report = embedded.prepare(migration_packs(engine=engine), force=True)
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
            if pack is not None:
                # pgvector needs the extension, which only a superuser can create: the
                # pack's first migration refuses with that instruction when it is missing
                report[pack.report_key] = migrate(
                    conn, runtime_login=settings.runtime_login, pack=pack
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


def build_index(
    config: IndexConfig,
    collection: str,
    env: Mapping[str, str] | None = None,
    *,
    holder: str = "command",
) -> SearchIndex:
    """The index adapter of one collection of the installation's engine
    (``tht.memory.index.engines``); only the configured engine is imported
    (qdrant-client alone costs 0.6-1 s)."""
    engine = config.engine
    site = EngineSite(
        config,
        collection,
        holder,
        home=lambda: default_home(env),
        conninfo=lambda: _runtime_conninfo(resolve_database(env, engine=engine)),
    )
    return ENGINES[engine].build(site)


@dataclass
class Services:
    archive: PostgresArchive
    memory: MemoryService
    workspaces: WorkspaceService
    admin: MemoryAdmin
    projector: WorkspaceProjector
    recall: WorkspaceRecall
    cleanup: PhysicalCleanup
    catalog: Catalog
    installation: Installation
    engines: Engines
    recall_log: RecallLog  # what agents asked (the engines': one writer per process)
    owns_engines: bool = False  # built for these services alone: closed with them

    # The accounts, the benchmarks and the workflow's sessions and services are built
    # (and imported) on first use: a recall or a card edit in its own process does not
    # pay for them.

    @cached_property
    def accounts(self) -> Accounts:
        from tht.access import Accounts

        return Accounts(self.archive)

    @cached_property
    def benchmarks(self) -> Benchmarks:
        """The workspaces' benchmark cases and runs."""
        from tht.memory.benchmark import Benchmarks

        return Benchmarks(self.archive, self.recall, self.projector)

    @cached_property
    def sessions(self) -> SessionStore:
        """The workflow's session directories (the installation's sessions_root)."""
        from tht.workflow.session import SessionStore

        return SessionStore(self.installation.sessions_root)

    @cached_property
    def proposals(self) -> ProposalService:
        from tht.workflow.proposals import ProposalService

        return ProposalService(self.archive, self.sessions)

    @cached_property
    def summaries(self) -> SummaryService:
        from tht.workflow.summary import SummaryService

        return SummaryService(self.archive, self.sessions)

    @cached_property
    def review(self) -> ReviewService:
        from tht.workflow.review import ReviewService

        return ReviewService(self.archive, self.projector, self.sessions)

    def close(self) -> None:
        if self.owns_engines:
            self.engines.close()


# How long a process trusts what it read of a workspace's embedder profile: another
# replica may switch it (a rebuild to a new profile), and until this process reads it
# again its recall finds only the cards the switch left current.
PROFILE_SECONDS = 2.0


class Engines:
    """The adapters a process keeps, all from the installation's configuration: the
    archive's connection pool, the index adapter of each embedder profile's collection
    and each profile's embedder. A command in its own process builds them for itself;
    the service builds them once and serves every command with them (the only opener
    of the embedded index). A request never adds one: the profiles are the
    installation's, a workspace only names one.

    Nothing here touches the index or loads a model: that happens on first use, so
    browsing and editing work while the index or the embedder is down.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        installation: Installation | None = None,
        max_connections: int = 4,
        holder: str = "command",
        one_command: bool = False,
    ) -> None:
        self.env = env
        self.installation = installation if installation is not None else load_installation(env=env)
        self.holder = holder  # what holds an embedded index: "service" keeps it till it stops
        self.archive = PostgresArchive(
            _runtime_conninfo(resolve_database(env)), max_connections=max_connections
        ).open()
        self._projections: dict[str, tuple[IndexProjector, RecallService]] = {}
        self._profiles: dict[str, tuple[float, str]] = {}  # workspace -> (read at, profile)
        self._lock = threading.Lock()
        # one per process: its writer thread batches every command's recalls (engines
        # built for one command write it once: no term table kept for later batches)
        self.recall_log = RecallLog(
            self.archive, self.installation.recall_log, whole_frequencies=not one_command
        )

    def projection(self, profile: str) -> tuple[IndexProjector, RecallService]:
        """The projector and recall of one of the installation's embedder profiles."""
        settings = self.installation.profile(profile)
        with self._lock:
            if profile not in self._projections:
                index = build_index(
                    self.installation.index,
                    self.installation.index.collection_of(profile),
                    self.env,
                    holder=self.holder,
                )
                # an agent's recalls of one question embed it once
                embedder = CachedQueryEmbedder(build_embedder(settings))
                projector = IndexProjector(
                    self.archive,
                    index,
                    embedder,
                    collection=self.installation.index.collection_of(profile),
                    profile=profile,
                )
                self._projections[profile] = (
                    projector,
                    RecallService(self.archive, index, embedder, projector.format),
                )
            return self._projections[profile]

    def profile_of(self, workspace: str) -> str:
        """The embedder profile the workspace records (a missing workspace: NotFound)."""
        now = time.monotonic()
        with self._lock:
            known = self._profiles.get(workspace)
        if known is not None and now - known[0] < PROFILE_SECONDS:
            return known[1]
        with self.archive.transaction(workspace) as tx:
            profile = tx.require_workspace().embedder
        with self._lock:
            self._profiles[workspace] = (now, profile)
        return profile

    def forget_profile(self, workspace: str) -> None:
        """Read the workspace's profile again at its next use (this process switched it)."""
        with self._lock:
            self._profiles.pop(workspace, None)

    def in_use(
        self,
    ) -> tuple[dict[str, SearchIndex], dict[str, Embedder], list[IndexProjector]]:
        """The index adapter and the embedder of every profile of the installation,
        named for a health report (the engine and collection, or the profile and model:
        never a path, URL or key), and the projectors that combine them. Building them
        connects to nothing and loads no model."""
        engine = self.installation.index.engine
        for profile in self.installation.embedders:
            self.projection(profile)
        with self._lock:
            built = list(self._projections.items())
        indexes = {
            f"index:{engine}:{self.installation.index.collection_of(profile)}": projector.index
            for profile, (projector, _) in built
        }
        embedders = {
            f"embedder:{profile}:{projector.embedder.model_id}": projector.embedder
            for profile, (projector, _) in built
        }
        return indexes, embedders, [projector for _, (projector, _) in built]

    def check_schemas(self) -> None:
        """Refuse a database whose schema this code does not know, older or newer: the
        archive's migrations (checked when its pool opened), the Catalog's and, for the
        pgvector engine, its own. A service checks at start, so a replica started
        against such a database stops there with ``schema_not_ready`` (or
        ``index_schema_not_ready``) naming the migrations, instead of serving errors."""
        CatalogStore(self.archive).check_schema()
        indexes, _, _ = self.in_use()
        for index in indexes.values():
            schema = index.capabilities().schema
            if schema is not None:
                schema.check_schema()

    def services(self) -> Services:
        """The application services on these engines; each workspace's projection is
        the one of the profile it records."""
        archive = self.archive
        projector = WorkspaceProjector(self)
        recall = WorkspaceRecall(self)
        memory = MemoryService(archive, projector)
        cleanup = PhysicalCleanup(archive, projector)
        # the Catalog connects on first use: memory commands never depend on its schema
        catalog = Catalog(
            CatalogStore(archive),
            cleanup,
            self.env,
            connections=self.installation.dwh,
        )
        return Services(
            archive,
            memory,
            WorkspaceService(archive, tuple(self.installation.embedders)),
            MemoryAdmin(memory, projector),
            projector=projector,
            recall=recall,
            cleanup=cleanup,
            catalog=catalog,
            installation=self.installation,
            engines=self,
            recall_log=self.recall_log,
        )

    def close(self) -> None:
        with self._lock:
            built, self._projections = list(self._projections.values()), {}
        try:
            self.recall_log.close()  # what is queued is written while the archive is open
            for projector, _ in built:
                projector.index.close()
        finally:
            self.archive.close()


def build_services(
    env: Mapping[str, str] | None = None, *, installation: Installation | None = None
) -> Services:
    """Engines of their own with their services, closed together (a command in its own
    process, a test): the installation's configuration, or ``installation``."""
    engines = Engines(env, installation=installation, one_command=True)
    try:
        services = engines.services()
    except BaseException:
        engines.close()
        raise
    services.owns_engines = True
    return services
