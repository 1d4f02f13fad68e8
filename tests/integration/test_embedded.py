"""The zero-setup default: no THT_CATALOG_* variable, the embedded PostgreSQL in THT_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from tht.db.embedded import EmbeddedPostgres
from tht.demo import demo_cards
from tht.service.client import stop_service


def run(home, *args, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env["THT_HOME"] = str(home)
    proc = subprocess.run(
        [sys.executable, "-m", "tht", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.fixture
def home(tmp_path):
    """A fresh THT_HOME on the default path: the commands start a service there
    (THT_SERVICE unset), which is stopped with the embedded server afterwards."""
    home = tmp_path / "home"
    yield home
    if (home / "run").is_dir():
        stop_service(str(home))
    if (home / "postgres" / "postmaster.pid").exists():
        EmbeddedPostgres(home).stop()


def test_first_use_prepares_everything_and_later_runs_reuse_it(home, tmp_path):
    # two commands at once on a fresh home: both succeed, preparation happens once
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run(home, "workspace", "list"), range(2)))
    assert [code for code, _, _ in results] == [0, 0], results
    # the default on the embedded engines: the commands ran in one auto-started service
    assert (home / "run" / "service.log").read_text().count("listening on") == 1
    expected = len(demo_cards())
    code, demo, _ = run(home, "demo", timeout=600)
    assert code == 0 and demo["created"] and demo["total"] == expected
    code, again, _ = run(home, "demo")
    assert code == 0 and not again["created"] and again["total"] == expected

    config = tmp_path / "runtime.yaml"
    config.write_text("workspace: demo\ndatabase: california_schools\nschema: public\n")
    code, listing, _ = run(
        home, "memory", "list", "-c", str(config), "--filters", '{"q": "excellence rate"}'
    )
    assert code == 0 and listing["total"] >= 1
    # the service's faces (HTTP, MCP) recall bound to the demo's DWH, which no sync scans
    code, status, _ = run(home, "catalog", "status", "-c", str(config))
    assert code == 0 and status["binding"]["connection"] is None, status
    assert (status["binding"]["database"], status["binding"]["schema"]) == (
        "california_schools",
        "public",
    )

    embedded = EmbeddedPostgres(home)
    with psycopg.connect(embedded.superuser_conninfo("thoth")) as conn:
        row = conn.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = 'thoth_runtime'"
        ).fetchone()
        assert row == (False, False)
        versions = conn.execute("SELECT version FROM thoth_memory.schema_migrations").fetchall()
        assert versions
    code, status, _ = run(home, "db", "status")
    assert code == 0 and status["running"] is True
    code, stopped, _ = run(home, "db", "stop")
    assert code == 0 and stopped["stopped"] is True
    code, listing, _ = run(home, "memory", "list", "-c", str(config))  # starts again on demand
    assert code == 0 and listing["total"] == expected
    code, found, _ = run(
        home, "memory", "search", "what is the excellence rate of a school", "-c", str(config)
    )
    assert code == 0 and found["results"], found  # the demo was indexed with the default embedder


def test_migrate_module_entry_point(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env["THT_HOME"] = str(home)
    proc = subprocess.run(
        [sys.executable, "-m", "tht.memory.migrate"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["database"] == "embedded" and report["runtime_login"] == "thoth_runtime"
