"""The migration pack: checksums, repeatability, refusal of drift, and the schema it builds."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from tht.db.embedded import MIGRATOR, RUNTIME
from tht.errors import MigrationRefused, SchemaNotReady
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.migrations import available_migrations, check_schema, migrate

SNAPSHOT = Path(__file__).with_name("schema_snapshot.txt")


def schema_description(conninfo: str) -> str:
    """A stable text rendering of everything the migrations create in thoth_memory."""
    queries = {
        "columns": """SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                             pg_get_expr(d.adbin, d.adrelid), a.attgenerated
                        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                        JOIN pg_namespace n ON n.oid = c.relnamespace
                        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                       WHERE n.nspname = 'thoth_memory' AND c.relkind = 'r' AND a.attnum > 0
                         AND NOT a.attisdropped ORDER BY 1, a.attnum""",
        "constraints": """SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k
                            JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE n.nspname = 'thoth_memory'
                             -- PostgreSQL 18 lists NOT NULL as constraints too; the columns say it
                             AND k.contype <> 'n' ORDER BY 1, 2""",
        "indexes": """SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'thoth_memory' ORDER BY 1""",
        "row security": """SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class c
                             JOIN pg_namespace n ON n.oid = c.relnamespace
                            WHERE n.nspname = 'thoth_memory' AND c.relkind = 'r' ORDER BY 1""",
        "policies": """SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check
                         FROM pg_policies WHERE schemaname = 'thoth_memory' ORDER BY 1, 2""",
        "functions": """SELECT p.proname, pg_get_function_arguments(p.oid), p.provolatile, p.prosecdef,
                               p.proconfig::text, p.proacl::text
                          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                         WHERE n.nspname = 'thoth_memory' ORDER BY 1""",
        "grants": """SELECT table_name, privilege_type FROM information_schema.role_table_grants
                      WHERE grantee = 'thoth_memory_runtime' AND table_schema = 'thoth_memory' ORDER BY 1, 2""",
    }
    lines = []
    with psycopg.connect(conninfo) as conn:
        for title, query in queries.items():
            lines.append(f"## {title}")
            for row in conn.execute(query):
                lines.append(" | ".join("" if v is None else str(v) for v in row))
    # the migrator's name is the installation's choice
    return "\n".join(lines).replace(MIGRATOR, "<migrator>") + "\n"


def test_schema_built_from_migrations_matches_the_snapshot(database):
    actual = schema_description(database.superuser)
    if os.environ.get("THT_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(actual)
    assert actual == SNAPSHOT.read_text(), (
        "schema changed: review it, then rerun with THT_UPDATE_SNAPSHOT=1"
    )


def test_fresh_database_from_migrations_equals_the_template(empty_database, database):
    with psycopg.connect(empty_database.migrator, autocommit=True) as conn:
        report = migrate(conn, runtime_login=RUNTIME)
    assert report["applied"] == [f"{m.version:03d}_{m.name}" for m in available_migrations()]
    assert schema_description(empty_database.superuser) == schema_description(database.superuser)


def test_second_run_is_a_noop(database):
    before = schema_description(database.superuser)
    with psycopg.connect(database.migrator, autocommit=True) as conn:
        report = migrate(conn, runtime_login=RUNTIME)
        recorded = conn.execute("SELECT count(*) FROM thoth_memory.schema_migrations").fetchone()[0]
    assert report["applied"] == [] and len(report["already_applied"]) == len(available_migrations())
    assert recorded == len(available_migrations())
    assert schema_description(database.superuser) == before


def test_tampered_applied_migration_is_refused(database):
    with psycopg.connect(database.migrator, autocommit=True) as conn:
        conn.execute(
            "UPDATE thoth_memory.schema_migrations SET checksum = 'tampered' WHERE version = 1"
        )
        with pytest.raises(MigrationRefused, match="001_archive differs from its file"):
            migrate(conn, runtime_login=RUNTIME)
    with pytest.raises(SchemaNotReady, match="differs"):
        PostgresArchive(database.runtime).open()


def test_unknown_applied_migration_is_refused(database):
    with psycopg.connect(database.migrator, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO thoth_memory.schema_migrations (version, name, checksum) VALUES (999, 'future', 'x')"
        )
        with pytest.raises(MigrationRefused, match="999_future is unknown"):
            migrate(conn, runtime_login=RUNTIME)


def test_runtime_never_migrates_a_missing_schema(empty_database):
    with pytest.raises(SchemaNotReady) as raised:
        PostgresArchive(empty_database.runtime).open()
    assert "migrate" in raised.value.message
    with psycopg.connect(empty_database.superuser) as conn:
        assert (
            conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = 'thoth_memory'"
            ).fetchone()[0]
            == 0
        )


def test_runtime_reports_a_missing_migration_version(database):
    with psycopg.connect(database.migrator, autocommit=True) as conn:
        conn.execute("DELETE FROM thoth_memory.schema_migrations WHERE version = 1")
    with (
        psycopg.connect(database.runtime) as conn,
        pytest.raises(SchemaNotReady, match="001_archive"),
    ):
        check_schema(conn)
