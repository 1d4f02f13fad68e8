"""What a newcomer trips over, refused or answered clearly: a sessions_root that points
nowhere, an inverted date range, `tht --version` without an installation, and the
interactive API docs served from this machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.integration.web_support import build_world
from tht.errors import ConfigurationError
from tht.installation import load_installation


def test_an_installation_whose_sessions_root_does_not_exist_is_refused(cli, runtime_file, tmp_path):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    missing = tmp_path / "sessions"
    refused = cli("memory", "list", "-c", runtime_file(sessions_root=str(missing)))
    assert refused.code == 2
    error = refused.document["error"]
    assert error["code"] == "invalid_configuration"
    assert "sessions_root" in error["message"] and "does not exist" in error["message"]
    assert error["details"] == {"setting": "sessions_root", "path": str(missing)}
    afile = tmp_path / "a-file"
    afile.write_text("")
    not_a_directory = cli("memory", "list", "-c", runtime_file(sessions_root=str(afile)))
    assert not_a_directory.code == 2
    assert "is not a directory" in not_a_directory.document["error"]["message"]
    missing.mkdir()
    assert cli("memory", "list", "-c", runtime_file(sessions_root=str(missing))).code == 0


def test_a_server_file_whose_sessions_root_does_not_exist_is_refused(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text(f"sessions_root: {tmp_path / 'nowhere'}\n")
    with pytest.raises(ConfigurationError, match=r"sessions_root .*nowhere does not exist"):
        load_installation(config)
    (tmp_path / "nowhere").mkdir()
    assert load_installation(config).sessions_root == tmp_path / "nowhere"


def test_an_inverted_date_range_is_refused_by_the_cli_and_the_api(
    cli, runtime_file, database, tmp_path
):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file()
    inverted = '{"updated_from": "2026-12-31", "updated_to": "2026-01-01"}'
    refused = cli("memory", "list", "-c", config, "--filters", inverted)
    assert refused.code == 2 and refused.document["error"]["code"] == "invalid_input"
    assert (
        "updated_from (2026-12-31) is after updated_to (2026-01-01)"
        in (refused.document["error"]["message"])
    )
    same_day = '{"updated_from": "2026-01-01", "updated_to": "2026-01-01"}'
    assert cli("memory", "list", "-c", config, "--filters", same_day).code == 0

    world = build_world(database, tmp_path / "web")
    try:
        base = "/api/workspaces/ws-a/memory"
        answer = world.client.get(
            base,
            params={"updated_from": "2026-12-31", "updated_to": "2026-01-01"},
            headers=world.bearer("admin_a"),
        )
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "invalid_input"
    finally:
        world.close()


def test_version_answers_without_an_installation_or_a_service(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "THT_HOME": str(home), "THT_SERVICE": "auto"}
    env.pop("THT_SERVICE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "tht", "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r'\{"version": "\d+\.\d+\.\d+.*"\}\n', done.stdout)
    assert not home.exists()  # no service started, no database created


def test_the_api_docs_are_interactive_and_served_from_here(database, tmp_path):
    world = build_world(database, tmp_path)
    try:
        page = world.client.get("/api/docs")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sources and all(s.startswith("/") for s in sources), sources  # no CDN
        assert "'self'" in page.headers["content-security-policy"]
        for source in sources:
            asset = world.client.get(source)
            assert asset.status_code == 200, source
        bundle = world.client.get("/api/docs/assets/swagger-ui-bundle.js")
        assert "SwaggerUIBundle" in bundle.text[:2000]
        document = world.client.get("/api/openapi.json").json()
        assert document["openapi"].startswith("3.") and "/api/workspaces" in document["paths"]
    finally:
        world.close()
