"""Database logins the DBA got wrong are configuration errors that say what to do: a
second installation's migrator that may not grant the shared runtime role, and a
superuser as the runtime login."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tht.catalog.migrations import PACK as CATALOG_PACK
from tht.errors import RuntimeLoginPrivileged, RuntimeRoleNotGrantable
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.migrations import RUNTIME_ROLE, migrate


@pytest.fixture
def second_installation(cluster):
    """Another migrator (CREATEROLE, owner of its own database) and runtime login on the
    cluster whose thoth_memory_runtime role the first installation created."""
    suffix = uuid.uuid4().hex[:8]
    migrator, runtime, name = f"mig_{suffix}", f"run_{suffix}", f"second_{suffix}"
    with cluster.admin() as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN CREATEROLE NOSUPERUSER NOBYPASSRLS").format(
                sql.Identifier(migrator)
            )
        )
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(runtime))
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(migrator)
            )
        )
    yield migrator, runtime, name
    with cluster.admin() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        for role in (runtime, migrator):
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_second_installation_migration_names_the_grant_the_dba_must_make(
    cluster, second_installation
):
    migrator, runtime, name = second_installation
    with psycopg.connect(cluster.conninfo(migrator, name), autocommit=True) as conn:
        with pytest.raises(RuntimeRoleNotGrantable) as refused:
            migrate(conn, runtime_login=runtime)
    error = refused.value
    assert error.exit_code == 2 and error.code == "runtime_role_not_grantable"
    assert error.details["runtime_login"] == runtime and error.details["migrator"] == migrator
    assert error.details["dba"] == [f'GRANT "{RUNTIME_ROLE}" TO "{runtime}";']
    # the DBA runs what it names; then the same migration completes (membership is there)
    with cluster.admin() as conn:
        conn.execute(error.details["dba"][0])
    with psycopg.connect(cluster.conninfo(migrator, name), autocommit=True) as conn:
        report = migrate(conn, runtime_login=runtime)
        migrate(conn, runtime_login=runtime, pack=CATALOG_PACK)
    assert report["applied"] == [] and report["already_applied"]
    with PostgresArchive(cluster.conninfo(runtime, name)):
        pass  # the runtime of the second installation starts


def test_second_installation_migration_through_the_cli_exits_2(
    cli, cluster, second_installation, monkeypatch
):
    migrator, runtime, name = second_installation
    monkeypatch.setenv("THT_CATALOG_MIGRATOR_DATABASE_URL", cluster.conninfo(migrator, name))
    monkeypatch.setenv("THT_CATALOG_RUNTIME_DATABASE_URL", cluster.conninfo(runtime, name))
    result = cli("memory", "migrate")
    assert result.code == 2
    assert result.document["error"]["code"] == "runtime_role_not_grantable"
    assert f'GRANT "{RUNTIME_ROLE}" TO "{runtime}"' in result.document["error"]["message"]


def test_a_superuser_runtime_login_is_a_configuration_error(database, cli, monkeypatch):
    with pytest.raises(RuntimeLoginPrivileged) as refused:
        PostgresArchive(database.superuser).open()
    assert refused.value.exit_code == 2 and refused.value.details["superuser"] is True
    assert refused.value.details["dba"][1] == f"GRANT {RUNTIME_ROLE} TO <runtime_login>;"
    monkeypatch.setenv("THT_CATALOG_RUNTIME_DATABASE_URL", database.superuser)
    result = cli("workspace", "list")
    assert result.code == 2
    assert result.document["error"]["code"] == "runtime_login_privileged"
    assert "NOSUPERUSER" in result.document["error"]["message"]
