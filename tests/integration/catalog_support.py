"""Real DWHs for the Catalog tests: a database in the test PostgreSQL cluster (two
schemas and a view) and a SQLite file, with SQLAlchemy URLs to reach them."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.factories import card_document

DWH_ENV = "ACME_DWH_URL"

PG_DDL = """
CREATE SCHEMA sales;
CREATE SCHEMA other;
CREATE TABLE sales.orders (id integer, amount numeric, status text, placed_on date);
CREATE TABLE sales.customers (id integer, name text, region text);
CREATE TABLE other.orders (id integer, amount numeric);
CREATE VIEW sales.order_status AS SELECT id, status FROM sales.orders;
"""


def sqlalchemy_url(conninfo: str) -> str:
    from sqlalchemy.engine import URL

    params = conninfo_to_dict(conninfo)
    host = params.get("host")
    query = {}
    if host and host.startswith("/"):  # a Unix socket directory (the embedded server)
        query["host"] = host
        host = None
    if params.get("port") and host is None:
        query["port"] = str(params["port"])
    return URL.create(
        "postgresql+psycopg",
        username=params.get("user"),
        password=params.get("password"),
        host=host,
        port=int(params["port"]) if params.get("port") and host else None,
        database=params["dbname"],
        query=query,
    ).render_as_string(hide_password=False)


@dataclass
class PostgresDwh:
    name: str
    conninfo: str  # superuser, to change the DWH

    @property
    def url(self) -> str:
        return sqlalchemy_url(self.conninfo)

    def execute(self, statement: str) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(statement)


def create_postgres_dwh(cluster) -> PostgresDwh:
    name = f"dwh_{uuid.uuid4().hex[:10]}"
    with cluster.admin() as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dwh = PostgresDwh(name, make_conninfo(cluster.superuser, dbname=name))
    dwh.execute(PG_DDL)
    return dwh


def drop_postgres_dwh(cluster, dwh: PostgresDwh) -> None:
    with cluster.admin() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dwh.name))
        )


def create_sqlite_dwh(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        conn.executescript("""
            CREATE TABLE orders (id INTEGER, amount NUMERIC, status TEXT);
            CREATE TABLE customers (id INTEGER, name TEXT, region TEXT);
        """)
    conn.close()
    return f"sqlite:///{path}"


def sqlite_execute(path: Path, script: str) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.executescript(script)
        conn.commit()
    finally:
        conn.close()


def dep(
    table: str | None = None,
    column: str | None = None,
    *,
    schema: str | None = "sales",
    database: str = "dwh",
) -> dict:
    found = {"database": database}
    if schema:
        found["schema"] = schema
    if table:
        found["table"] = table
    if column:
        found["column"] = column
    return found


def make_card(
    cli,
    config: str,
    tmp_path: Path,
    family: str,
    title: str,
    deps: list[dict],
    links: list[dict] | None = None,
) -> str:
    path = tmp_path / f"card-{uuid.uuid4().hex[:8]}.json"
    path.write_text(
        json.dumps(card_document(family, title=title, dependencies=deps, links=links or []))
    )
    result = cli("memory", "create", "-c", config, "--data", str(path))
    assert result.code == 0 and result.document["status"] == "saved", result.document
    return result.document["card"]["id"]


def recall_ids(
    cli, config: str, command: str, question: str = "orders amount status customers"
) -> set[str]:
    result = cli("memory", command, question, "-c", config, "--filters", '{"top": 100}')
    assert result.code == 0, result.document
    return {r["id"] for r in result.document["results"]}


def every_recall(cli, config: str) -> set[str]:
    return (
        recall_ids(cli, config, "search")
        | recall_ids(cli, config, "rules")
        | recall_ids(cli, config, "solved-search")
    )


def existing(cli, config: str, ids) -> set[str]:
    found = set()
    for card_id in ids:
        result = cli("memory", "show", card_id, "-c", config)
        assert result.code in (0, 3), result.document
        if result.code == 0:
            found.add(card_id)
    return found


def tht_process(
    args: list[str], env: dict[str, str], crash_at: str | None = None
) -> tuple[int, dict | None, str]:
    """A real `tht` process (crash points end the process, as a kill would)."""
    full = dict(env)
    full.pop("THT_CRASH_AT", None)
    if crash_at:
        full["THT_CRASH_AT"] = crash_at
    done = subprocess.run(
        [sys.executable, "-m", "tht", *args], env=full, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) <= 1, done.stdout
    return done.returncode, (json.loads(lines[0]) if lines else None), done.stderr


def process_env(database, home: Path, dwh_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_CATALOG_")}
    env.update(database.env())
    env["THT_HOME"] = str(home)
    env[DWH_ENV] = dwh_url
    return env
