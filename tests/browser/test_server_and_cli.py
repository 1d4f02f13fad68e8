"""While `tht serve` holds the embedded index, CLI commands on the same data directory
keep working: they run in the server, the installation's service."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.browser.conftest import WORKSPACE, _server_env


def test_cli_commands_work_beside_the_running_server(server, database, tmp_path):
    created = server.api(
        "POST",
        f"/api/workspaces/{WORKSPACE}/memory",
        {
            "family": "domain_clarification",
            "title": "Quokka habitat",
            "content": "quokka wallaby island",
            "scope": "Fauna",
        },
    )
    assert created["status"] == "saved"  # the server has just used (and holds) the index
    config = tmp_path / "runtime.yaml"
    config.write_text(f"workspace: {WORKSPACE}\ndatabase: dwh\nschema: sales\n")
    env = {**_server_env(database, server.home), "THT_SERVICE": "auto"}
    for args in (["memory", "search", "quokka wallaby island"], ["memory", "check"]):
        proc = subprocess.run(
            [sys.executable, "-m", "tht", *args, "-c", str(config)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        document = json.loads(proc.stdout)
        if args[1] == "search":
            assert document["results"][0]["id"] == created["card"]["id"]
        else:
            assert document["missing"] == [] and document["pending"] == 0
    service = json.loads((server.home / "run" / "service.json").read_text())
    assert service["pid"] == server.process.pid and service["web"]  # no second service was started
    # and the server takes the index back for its next save
    card = created["card"]
    saved = server.api(
        "PUT",
        f"/api/workspaces/{WORKSPACE}/memory/{card['id']}",
        {
            "family": "domain_clarification",
            "title": "Quokka habitat",
            "content": "quokka on Rottnest",
            "scope": "Fauna",
            "revision": card["revision"],
        },
    )
    assert saved["status"] == "saved" and saved["card"]["revision"] == 2
