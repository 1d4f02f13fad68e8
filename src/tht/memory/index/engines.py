"""The index engines an installation may name (``index.engine``), one entry each: how
it is built, what it is, the installation's ``index`` keys it reads and the migration
pack of the tables it keeps in PostgreSQL. The wiring (``tht.bootstrap.build_index``),
the installation's settings, ``tht memory migrate --engine`` and its help, and the
index contract suite read this table; a new engine is a class implementing
``SearchIndex`` and a row here.

Standard library only at import: an adapter's module (and its engine: qdrant-client
alone costs 0.6-1 s of imports) is imported when the engine is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tht.db.migrations import MigrationPack
    from tht.memory.index.port import SearchIndex


class EngineSettings(Protocol):
    """The installation's ``index`` section (``tht.installation.IndexConfig``)."""

    @property
    def path(self) -> Path | None: ...
    @property
    def url(self) -> str | None: ...
    @property
    def timeout(self) -> float: ...
    @property
    def open_timeout(self) -> float: ...


@dataclass(frozen=True)
class EngineSite:
    """What building one collection's adapter may ask of the installation."""

    settings: EngineSettings
    collection: str
    holder: str  # what holds an embedded index: "service" keeps it till it stops
    home: Callable[[], Path]  # $THT_HOME (the embedded engine's default data directory)
    # the runtime login of the archive's database, with the engine's tables prepared
    conninfo: Callable[[], str]


@dataclass(frozen=True)
class IndexEngine:
    name: str
    description: str
    build: Callable[[EngineSite], SearchIndex]
    # the installation's ``index`` keys it reads, beside ``engine`` and ``collection``
    keys: tuple[str, ...]
    required: tuple[str, ...] = ()  # of those, the ones it cannot do without
    # the module whose ``PACK`` holds the engine's tables in PostgreSQL (None: it keeps
    # none), applied by ``tht memory migrate --engine NAME``
    migrations: str | None = None

    def migration_pack(self) -> MigrationPack | None:
        if self.migrations is None:
            return None
        pack: MigrationPack = importlib.import_module(self.migrations).PACK
        return pack


def _edge(site: EngineSite) -> SearchIndex:
    from tht.memory.index.edge import EdgeIndex

    path = site.settings.path or site.home() / "index"
    return EdgeIndex(
        path, site.collection, open_timeout=site.settings.open_timeout, holder=site.holder
    )


def _qdrant(site: EngineSite) -> SearchIndex:
    from tht.memory.index.qdrant_server import QdrantServerIndex

    assert site.settings.url is not None  # a required key of this engine
    return QdrantServerIndex.connect(
        site.settings.url, site.collection, timeout=site.settings.timeout
    )


def _pgvector(site: EngineSite) -> SearchIndex:
    # the runtime login, in the archive's database; nothing connects until first use
    from tht.memory.index.pgvector import PgVectorIndex

    return PgVectorIndex(site.conninfo(), site.collection, timeout=site.settings.timeout)


ENGINES: dict[str, IndexEngine] = {
    engine.name: engine
    for engine in (
        IndexEngine(
            "edge",
            "Qdrant Edge, embedded: one process opens it (the service), files under `path`",
            _edge,
            keys=("path", "open_timeout"),
        ),
        IndexEngine(
            "qdrant",
            "a Qdrant server or cluster at `url` (its key in THT_QDRANT_API_KEY)",
            _qdrant,
            keys=("url", "timeout"),
            required=("url",),
        ),
        IndexEngine(
            "pgvector",
            "pgvector, in the archive's own PostgreSQL database (its extension must exist)",
            _pgvector,
            keys=("timeout",),
            migrations="tht.memory.index.pgvector_migrations",
        ),
    )
}
DEFAULT_ENGINE = "edge"


def engine_names(*, with_tables: bool | None = None) -> list[str]:
    """The engines' names, in the table's order; ``with_tables``: only those that keep
    (True) or keep no (False) tables in PostgreSQL."""
    return [
        name
        for name, engine in ENGINES.items()
        if with_tables is None or (engine.migrations is not None) == with_tables
    ]


def spoken(names: list[str], last: str = "or") -> str:
    """``a, b or c``: names as a sentence lists them."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"
