"""Configuration: the per-command runtime file and the database connection environment.

Credentials never come from YAML: the runtime file is rejected when a key or value
looks like one. PostgreSQL is named by ``THT_CATALOG_*`` variables (exactly as the
installation generates them); with none set, the embedded PostgreSQL in ``THT_HOME``
is used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tht.db.connector import DatabaseSettings as DatabaseSettings
from tht.errors import ConfigurationError, SettingNotAllowed
from tht.memory.model import WORKSPACE_ID_PATTERN
from tht.validation import describe_validation_error, validation_details

_CREDENTIAL_KEY = re.compile(
    r"pass(word|wd)?|secret|token|api[_-]?key|credential|private[_-]?key|dsn", re.IGNORECASE
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuntimeConfig(_Section):
    """The runtime file given with ``-c``: which workspace a command works in and the
    DWH binding (database, schema) recall is limited to. Nothing else: engines, paths,
    URLs and embedders are the installation's, a workspace's embedder and DWH
    connection are recorded in the archive (``MOVED_SETTINGS``)."""

    workspace: str = Field(pattern=WORKSPACE_ID_PATTERN)
    database: str | None = Field(default=None, min_length=1, max_length=128)
    # "schema" shadows a BaseModel attribute, hence the alias.
    schema_name: str | None = Field(default=None, alias="schema", min_length=1, max_length=128)


# Keys runtime files of earlier versions held, and where each setting lives now.
MOVED_SETTINGS = {
    "index": "the index engine is the installation's: `index:` in its configuration"
    " ($THT_HOME/config.yaml, $THT_CONFIG or `tht serve -c`)",
    "embedding": "embedders are the installation's profiles (`embedders:` in its"
    " configuration); a workspace's is recorded with `tht workspace create --embedder` or"
    " changed with `tht workspace embedder`",
    "sessions_root": "the sessions root is the installation's: `sessions_root:` in its"
    " configuration; a session is `<sessions_root>/<workspace>/<session>`",
    "dwh": "DWH connections are the installation's (`dwh: {NAME: {url_env: ...}}` in its"
    " configuration); a workspace is bound to one with `tht catalog bind --connection NAME`",
}


def find_credentials(node: Any, path: str = "") -> list[str]:
    found = []
    if isinstance(node, Mapping):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            # a key ending in _env names the variable that holds a secret: not a secret
            if _CREDENTIAL_KEY.search(str(key)) and not str(key).endswith("_env"):
                found.append(where)
            found.extend(find_credentials(value, where))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(find_credentials(value, f"{path}[{i}]"))
    elif isinstance(node, str) and "://" in node:
        try:
            if urlsplit(node).password:
                found.append(path)
        except ValueError:
            pass
    return found


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without aliases: a few hundred bytes of nested aliases expand into billions
    of nodes ("billion laughs") that the checks below would walk for minutes, and no
    setting of ours needs one."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed", self.peek_event().start_mark
            )
        return super().compose_node(parent, index)


def load_yaml(text: str) -> Any:
    """A YAML document of plain data (safe tags only), refusing aliases."""
    return yaml.load(text, Loader=_NoAliasLoader)


_SETTING_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
RUNTIME_KEYS = ("workspace", "database", "schema")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The parser's problem and where, without its snippet of the file's text."""
    problem = getattr(exc, "problem", None) or type(exc).__name__
    mark = getattr(exc, "problem_mark", None)
    return (
        f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
        if mark is not None
        else problem
    )


def _key_lines(text: str, keys: list[Any]) -> list[int]:
    """The 1-based lines of these top-level keys."""
    root = yaml.compose(text, Loader=_NoAliasLoader)
    wanted = {str(key) for key in keys}
    pairs = root.value if isinstance(root, yaml.MappingNode) else []
    return sorted({key.start_mark.line + 1 for key, _ in pairs if str(key.value) in wanted})


MAX_RUNTIME_FILE_BYTES = 1_048_576


def _read_file(path: str, limit: int) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(limit + 1)


def load_runtime_config(
    path: str | Path, *, read: Callable[[str, int], bytes] = _read_file
) -> RuntimeConfig:
    """The runtime file at ``path``; ``read`` fetches its bytes (the CLI passes the
    client's copy when the command runs in the service)."""
    path = Path(path)
    try:
        raw = read(str(path), MAX_RUNTIME_FILE_BYTES)
    except FileNotFoundError as exc:
        raise ConfigurationError(f"runtime file {path} does not exist") from exc
    except OSError as exc:
        raise ConfigurationError(f"cannot read runtime file {path}: {exc.strerror}") from exc
    if len(raw) > MAX_RUNTIME_FILE_BYTES:
        raise ConfigurationError(
            f"runtime file {path} is larger than {MAX_RUNTIME_FILE_BYTES} bytes"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"runtime file {path} is not UTF-8 text") from exc
    try:
        document = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(
            f"runtime file {path} is not valid YAML: {_yaml_problem(exc)}"
        ) from exc
    if not isinstance(document, Mapping):
        raise ConfigurationError(f"runtime file {path} must be a mapping of settings")
    # A file that is not ours (-c /etc/passwd) must not be echoed into the error, which
    # goes to logs and screens: its keys are named by line, ours by name.
    foreign = [key for key in document if not (isinstance(key, str) and _SETTING_KEY.match(key))]
    if foreign:
        lines = _key_lines(text, foreign)
        plural = len(lines) > 1
        where = (
            (
                f"the key{'s' if plural else ''} on line{'s' if plural else ''} {', '.join(map(str, lines))}"
                f" {'are' if plural else 'is'} not a setting"
            )
            if lines
            else "it has keys that are not settings"
        )
        raise ConfigurationError(
            f"runtime file {path} is not a runtime file: {where}"
            f" (expected {', '.join(RUNTIME_KEYS)})",
            details={"lines": lines},
        )
    credentials = find_credentials(document)
    if credentials:
        raise ConfigurationError(
            f"runtime file {path} contains what looks like a credential ({', '.join(credentials)});"
            " credentials come from the environment (THT_CATALOG_*, THT_QDRANT_API_KEY), never from YAML",
            details={"keys": credentials},
        )
    refused = [key for key in document if key not in RUNTIME_KEYS]
    if refused:
        key = refused[0]
        where = MOVED_SETTINGS.get(key, f"a runtime file holds only {', '.join(RUNTIME_KEYS)}")
        raise SettingNotAllowed(
            f"runtime file {path}: `{key}` is not a runtime setting: {where}",
            details={"key": key, "keys": refused, "allowed": list(RUNTIME_KEYS)},
        )
    try:
        return RuntimeConfig.model_validate(document)
    except ValidationError as exc:
        raise ConfigurationError(
            f"runtime file {path} is invalid: {describe_validation_error(exc)}",
            details=validation_details(exc),
        ) from exc


def require_directory(path: Path, setting: str, source: str) -> Path:
    """``path`` when it is an existing directory: a setting that points nowhere (a typo, a
    volume not mounted) is refused when its file is read, not when a session is first
    looked up there."""
    if not path.is_dir():
        reason = "is not a directory" if path.exists() else "does not exist"
        raise ConfigurationError(
            f"{source}: {setting} {path} {reason}", details={"setting": setting, "path": str(path)}
        )
    return path


# --- database connection settings -------------------------------------------------


def _read_password(env: Mapping[str, str], variable: str) -> str:
    path = env[variable]
    try:
        return Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise ConfigurationError(
            f"{variable} names {path}, which cannot be read ({exc.strerror})"
        ) from exc


def _from_parts(env: Mapping[str, str], role: str) -> str | None:
    user = env.get(f"THT_CATALOG_{role}_USER")
    if not user:
        return None
    missing = [v for v in ("THT_CATALOG_DB_HOST", "THT_CATALOG_DB_NAME") if not env.get(v)]
    if missing:
        raise ConfigurationError(f"THT_CATALOG_{role}_USER is set but {', '.join(missing)} is not")
    params: dict[str, Any] = {
        "host": env["THT_CATALOG_DB_HOST"],
        "port": env.get("THT_CATALOG_DB_PORT", "5432"),
        "dbname": env["THT_CATALOG_DB_NAME"],
        "user": user,
    }
    if env.get(f"THT_CATALOG_{role}_PASSWORD_FILE"):
        params["password"] = _read_password(env, f"THT_CATALOG_{role}_PASSWORD_FILE")
    # TLS: `verify-full` with the server's CA is what a production connection should use
    for variable, key in (("SSLMODE", "sslmode"), ("SSLROOTCERT", "sslrootcert")):
        if env.get(f"THT_CATALOG_DB_{variable}"):
            params[key] = env[f"THT_CATALOG_DB_{variable}"]
    return make_conninfo(**params)


def default_home(env: Mapping[str, str] | None = None) -> Path:
    from tht.home import default_home as home

    return Path(home(env))


def database_settings(env: Mapping[str, str] | None = None) -> DatabaseSettings:
    env = os.environ if env is None else env
    runtime = (
        env.get("THT_CATALOG_RUNTIME_DATABASE_URL")
        or env.get("THT_CATALOG_DATABASE_URL")
        or _from_parts(env, "RUNTIME")
    )
    migrator = env.get("THT_CATALOG_MIGRATOR_DATABASE_URL") or _from_parts(env, "MIGRATOR")
    if runtime or migrator:
        for name, value in (("runtime", runtime), ("migrator", migrator)):
            if value:
                try:
                    conninfo_to_dict(value)
                except Exception as exc:  # psycopg raises ProgrammingError for bad conninfo
                    raise ConfigurationError(f"the {name} database URL is malformed") from exc
        return DatabaseSettings(runtime_conninfo=runtime, migrator_conninfo=migrator)
    stray = sorted(k for k in env if k.startswith("THT_CATALOG_"))
    if stray:
        raise ConfigurationError(
            f"incomplete database settings ({', '.join(stray)}): set THT_CATALOG_DATABASE_URL, or"
            " THT_CATALOG_DB_HOST, THT_CATALOG_DB_NAME and THT_CATALOG_RUNTIME_USER"
        )
    return DatabaseSettings(embedded_home=default_home(env))
