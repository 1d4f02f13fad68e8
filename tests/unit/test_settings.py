"""Runtime file and database environment resolution: pure, no database."""

from __future__ import annotations

import itertools
import os
import time

import pytest
from psycopg.conninfo import conninfo_to_dict

from tht.errors import ConfigurationError
from tht.settings import database_settings, load_runtime_config


def test_runtime_file_round_trip(tmp_path):
    path = tmp_path / "rt.yaml"
    path.write_text("workspace: acme\ndatabase: dwh\nschema: sales\n")
    config = load_runtime_config(path)
    assert (config.workspace, config.database, config.schema_name) == ("acme", "dwh", "sales")


def test_missing_runtime_file(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_runtime_config(tmp_path / "nope.yaml")


def test_no_variables_means_embedded(tmp_path):
    settings = database_settings({"THT_HOME": str(tmp_path)})
    assert settings.embedded and settings.embedded_home == tmp_path


def test_url_variables():
    settings = database_settings(
        {
            "THT_CATALOG_DATABASE_URL": "postgresql://rt@db/x",
            "THT_CATALOG_MIGRATOR_DATABASE_URL": "postgresql://mig@db/x",
        }
    )
    assert not settings.embedded and settings.runtime_login == "rt"
    explicit = database_settings(
        {
            "THT_CATALOG_DATABASE_URL": "postgresql://a@db/x",
            "THT_CATALOG_RUNTIME_DATABASE_URL": "postgresql://b@db/x",
        }
    )
    assert explicit.runtime_login == "b"


def test_host_variables_with_password_files(tmp_path):
    (tmp_path / "rt").write_text("s3cret\n")
    (tmp_path / "mig").write_text("m1grate")
    settings = database_settings(
        {
            "THT_CATALOG_DB_HOST": "db.internal",
            "THT_CATALOG_DB_PORT": "6432",
            "THT_CATALOG_DB_NAME": "thoth",
            "THT_CATALOG_RUNTIME_USER": "rt",
            "THT_CATALOG_RUNTIME_PASSWORD_FILE": str(tmp_path / "rt"),
            "THT_CATALOG_MIGRATOR_USER": "mig",
            "THT_CATALOG_MIGRATOR_PASSWORD_FILE": str(tmp_path / "mig"),
        }
    )
    runtime = conninfo_to_dict(settings.runtime_conninfo)
    assert runtime == {
        "host": "db.internal",
        "port": "6432",
        "dbname": "thoth",
        "user": "rt",
        "password": "s3cret",
    }
    assert conninfo_to_dict(settings.migrator_conninfo)["password"] == "m1grate"


def test_incomplete_or_broken_variables_are_clear_errors(tmp_path):
    with pytest.raises(ConfigurationError, match="THT_CATALOG_DB_HOST"):
        database_settings({"THT_CATALOG_RUNTIME_USER": "rt", "THT_CATALOG_DB_NAME": "x"})
    with pytest.raises(ConfigurationError, match="cannot be read"):
        database_settings(
            {
                "THT_CATALOG_DB_HOST": "h",
                "THT_CATALOG_DB_NAME": "x",
                "THT_CATALOG_RUNTIME_USER": "rt",
                "THT_CATALOG_RUNTIME_PASSWORD_FILE": str(tmp_path / "missing"),
            }
        )
    with pytest.raises(ConfigurationError, match="incomplete"):
        database_settings({"THT_CATALOG_DB_PORT": "5432"})


def _alias_bomb() -> str:
    """A few hundred bytes that expand to 9**9 strings ("billion laughs")."""
    levels = "abcdefghi"
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, level in itertools.pairwise(levels):
        lines.append(f"{level}: &{level} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "workspace: acme\n" + "\n".join(lines) + "\n"


def test_yaml_aliases_are_refused_at_once(tmp_path):
    path = tmp_path / "rt.yaml"
    path.write_text(_alias_bomb())
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match="aliases") as refused:
        load_runtime_config(path)
    assert refused.value.code == "invalid_configuration" and refused.value.exit_code == 2
    assert time.monotonic() - started < 1


def test_installation_configuration_refuses_yaml_aliases(tmp_path):
    from tht.installation import load_installation

    path = tmp_path / "config.yaml"
    path.write_text(_alias_bomb())
    with pytest.raises(ConfigurationError, match="aliases"):
        load_installation(path)


@pytest.mark.parametrize(
    "text, lines",
    [
        (
            "# User Database\nroot:*:0:0:System Administrator: /var/root\nnobody:*:-2:-2:Unprivileged: x\n",
            "lines 2, 3",
        ),
        ("workspace: acme\nsecret-agent:*:7:7:Spy: /var/spy\n", "line 2"),
    ],
)
def test_a_file_that_is_not_ours_is_named_by_line_not_echoed(tmp_path, text, lines):
    path = tmp_path / "passwd"
    path.write_text(text)
    with pytest.raises(ConfigurationError) as refused:
        load_runtime_config(path)
    message = refused.value.message
    assert f"the key{'s' if ',' in lines else ''} on {lines}" in message
    assert ":*:" not in message and "Administrator" not in message and "Spy" not in message


def test_yaml_syntax_errors_do_not_quote_the_file(tmp_path):
    path = tmp_path / "rt.yaml"
    path.write_text("workspace: acme\nroot:x:0:0:the root: /root: classified\n")
    with pytest.raises(
        ConfigurationError, match=r"not valid YAML: .*\(line 2, column \d+\)"
    ) as refused:
        load_runtime_config(path)
    assert "classified" not in refused.value.message and "the root" not in refused.value.message


def test_an_unknown_setting_of_ours_is_still_named(tmp_path):
    path = tmp_path / "rt.yaml"
    path.write_text("workspace: acme\nworkspase: typo\n")
    with pytest.raises(ConfigurationError, match="`workspase` is not a runtime setting") as refused:
        load_runtime_config(path)
    assert refused.value.code == "setting_not_allowed"
    assert refused.value.details["allowed"] == ["workspace", "database", "schema"]


@pytest.mark.parametrize("xdg", [None, "", "/srv/data"])
def test_the_clients_default_home_is_platformdirs_user_data_dir(monkeypatch, tmp_path, xdg):
    """The client computes THT_HOME's default without importing platformdirs; both must
    name the same directory, or the client would look for the service elsewhere."""
    import platformdirs

    from tht.service.paths import default_home

    monkeypatch.setenv("HOME", str(tmp_path))
    if xdg is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
    env = {k: v for k, v in os.environ.items() if k != "THT_HOME"}
    assert default_home(env) == platformdirs.user_data_dir("thoth-memory", appauthor=False)
    assert default_home({**env, "THT_HOME": "/opt/tht"}) == "/opt/tht"
