"""Tenancy is enforced by PostgreSQL: forced row-level security on every memory table.

`find_leaks` acts as the runtime role with the workspace set to A, to B, and unset,
and tries SELECT / INSERT / UPDATE / DELETE on every table against rows of both
workspaces. The mutation tests prove that it notices a weakened policy.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.conftest import drop_database, new_database
from tests.factories import card
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.model import card_id_to_uuid

TABLES = ["workspaces", "cards", "card_dependencies", "card_links", "projection_ops", "projections"]
OWN, OTHER = "ws-a", "ws-b"


def populate(conninfo: str, migrator: str) -> dict[str, dict[str, uuid.UUID]]:
    """Two workspaces, each with two linked cards, dependencies, an operation and a projection."""
    archive = PostgresArchive(conninfo).open()
    memory, workspaces = MemoryService(archive), WorkspaceService(archive)
    ids = {}
    for ws in (OWN, OTHER):
        workspaces.create(ws, "en")
        first = memory.create_card(ws, card(dependencies=[{"database": "dwh"}])).card
        second = memory.create_card(ws, card(links=[{"target": first.id, "meaning": "m"}])).card
        ids[ws] = {"first": card_id_to_uuid(first.id), "second": card_id_to_uuid(second.id)}
    archive.close()
    with psycopg.connect(migrator) as conn:
        for ws in (OWN, OTHER):
            conn.execute(
                "INSERT INTO thoth_memory.projections (workspace_id, card_id, revision, fingerprint)"
                " VALUES (%s, %s, 1, 'f')",
                (ws, ids[ws]["first"]),
            )
    return ids


def new_row(table: str, ws: str, ids: dict) -> dict:
    mine = ids[ws]
    return {
        "workspaces": {"id": ws if ws not in ids else ws + "-new", "name": "n", "language": "en"},
        "cards": {
            "workspace_id": ws,
            "id": uuid.uuid4(),
            "family": "domain_clarification",
            "language": "en",
            "title": "t",
            "content": "c",
            "scope": "s",
            "origin": "manual",
        },
        "card_dependencies": {
            "workspace_id": ws,
            "card_id": mine["first"],
            "position": 9,
            "database_name": "other_db",
        },
        "card_links": {
            "workspace_id": ws,
            "source_id": mine["first"],
            "target_id": mine["second"],
            "meaning": "m",
        },
        "projection_ops": {
            "workspace_id": ws,
            "card_id": uuid.uuid4(),
            "operation": "upsert",
            "revision": 1,
        },
        "projections": {
            "workspace_id": ws,
            "card_id": uuid.uuid4(),
            "revision": 1,
            "fingerprint": "f",
        },
    }[table]


class _Reached:
    rowcount = 1

    def fetchall(self):
        return []


REACHED = _Reached()


def workspace_column(table: str) -> str:
    return "id" if table == "workspaces" else "workspace_id"


def find_leaks(runtime: str, ids: dict) -> list[str]:
    leaks = []
    with psycopg.connect(runtime) as conn:
        for context in (OWN, OTHER, None):
            foreign = [ws for ws in (OWN, OTHER) if ws != context]
            for table in TABLES:
                col = sql.Identifier(workspace_column(table))
                tbl = sql.Identifier("thoth_memory", table)

                def attempt(statement, params=(), *, context=context):
                    with conn.transaction(force_rollback=True):
                        conn.execute("SET LOCAL ROLE thoth_memory_runtime")
                        conn.execute(
                            "SELECT set_config('thoth.workspace', %s, true)", (context or "",)
                        )
                        try:
                            return conn.execute(statement, params)
                        except psycopg.errors.InsufficientPrivilege:
                            return None  # refused by row-level security
                        except psycopg.Error:
                            # got past row-level security into a constraint: the row was reachable
                            return REACHED

                # SELECT: nothing of another workspace, nothing at all without a workspace
                cur = attempt(sql.SQL("SELECT {} FROM {}").format(col, tbl))
                seen = {row[0] for row in cur.fetchall()}
                if seen - ({context} if context else set()):
                    leaks.append(f"{context}: SELECT {table} saw {sorted(seen)}")
                for ws in foreign:
                    row = new_row(table, ws, ids)
                    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                        tbl,
                        sql.SQL(", ").join(map(sql.Identifier, row)),
                        sql.SQL(", ").join(sql.Placeholder() * len(row)),
                    )
                    if attempt(statement, list(row.values())) is not None:
                        leaks.append(f"{context}: INSERT into {table} for {ws} accepted")
                    cur = attempt(
                        sql.SQL("UPDATE {} SET {} = {} WHERE {} = %s").format(tbl, col, col, col),
                        (ws,),
                    )
                    if cur is not None and cur.rowcount:
                        leaks.append(
                            f"{context}: UPDATE {table} of {ws} touched {cur.rowcount} rows"
                        )
                    cur = attempt(sql.SQL("DELETE FROM {} WHERE {} = %s").format(tbl, col), (ws,))
                    if cur is not None and cur.rowcount:
                        leaks.append(
                            f"{context}: DELETE {table} of {ws} removed {cur.rowcount} rows"
                        )
                if context:
                    # moving an own row into another workspace is refused too
                    other = OTHER if context == OWN else OWN
                    cur = attempt(
                        sql.SQL("UPDATE {} SET {} = %s WHERE {} = %s").format(tbl, col, col),
                        (other, context),
                    )
                    if cur is not None and cur.rowcount:
                        leaks.append(f"{context}: UPDATE moved {table} rows to {other}")
    return leaks


def test_no_leak_for_any_table_operation_or_context(database):
    ids = populate(database.runtime, database.migrator)
    assert find_leaks(database.runtime, ids) == []


def test_own_workspace_rows_are_visible_and_writable(database):
    """The matrix above would also pass if everything were denied: check the positive side."""
    ids = populate(database.runtime, database.migrator)
    with psycopg.connect(database.runtime) as conn, conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL ROLE thoth_memory_runtime")
        conn.execute("SELECT set_config('thoth.workspace', %s, true)", (OWN,))
        for table in TABLES:
            count = conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("thoth_memory", table))
            ).fetchone()[0]
            assert count > 0, table
        row = new_row("projection_ops", OWN, ids)
        conn.execute(
            "INSERT INTO thoth_memory.projection_ops (workspace_id, card_id, operation, revision)"
            " VALUES (%(workspace_id)s, %(card_id)s, %(operation)s, %(revision)s)",
            row,
        )


def test_the_index_assisted_search_function_stays_in_its_workspace(database):
    """matching_card_ids runs as the owner: it must scope itself to the transaction's workspace."""
    ids = populate(database.runtime, database.migrator)
    with psycopg.connect(database.runtime) as conn:
        for context, expected in (
            (OWN, set(ids[OWN].values())),
            (OTHER, set(ids[OTHER].values())),
            (None, set()),
        ):
            with conn.transaction(force_rollback=True):
                conn.execute("SET LOCAL ROLE thoth_memory_runtime")
                conn.execute("SELECT set_config('thoth.workspace', %s, true)", (context or "",))
                found = {
                    row[0]
                    for row in conn.execute(
                        "SELECT thoth_memory.matching_card_ids(to_tsquery('english', 'shipped'), NULL)"
                    )
                }
                assert found == expected, context
    with psycopg.connect(
        database.superuser
    ) as conn:  # PUBLIC cannot call it (the snapshot pins its ACL)
        assert (
            conn.execute(
                "SELECT has_function_privilege('public', 'thoth_memory.matching_card_ids(tsquery, text[])',"
                " 'EXECUTE')"
            ).fetchone()[0]
            is False
        )


def test_catalog_invariants(database):
    with psycopg.connect(database.superuser) as conn:
        tables = conn.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'thoth_memory' AND c.relkind IN ('r', 'p')"
        ).fetchall()
        assert {t for t, *_ in tables} >= set(TABLES) | {"schema_migrations"}
        assert [t for t, enabled, forced in tables if not (enabled and forced)] == []
        for role in ("thoth_memory_runtime", "thoth_runtime"):
            superuser, bypass, createrole, createdb = conn.execute(
                "SELECT rolsuper, rolbypassrls, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = %s",
                (role,),
            ).fetchone()
            assert not (superuser or bypass or createrole or createdb), role
            owned = conn.execute(
                "SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE r.rolname = %s",
                (role,),
            ).fetchone()[0]
            owned += conn.execute(
                "SELECT count(*) FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE r.rolname = %s",
                (role,),
            ).fetchone()[0]
            assert owned == 0, f"{role} owns objects"
        # no DDL: the runtime role cannot create in the schema
        assert (
            conn.execute(
                "SELECT has_schema_privilege('thoth_memory_runtime', 'thoth_memory', 'CREATE')"
            ).fetchone()[0]
            is False
        )
        assert (
            conn.execute(
                "SELECT has_table_privilege('thoth_memory_runtime', 'thoth_memory.schema_migrations',"
                " 'INSERT')"
            ).fetchone()[0]
            is False
        )
        # no foreign key leaves the schema
        outside = conn.execute(
            "SELECT conname FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace"
            " JOIN pg_class f ON f.oid = c.confrelid JOIN pg_namespace fn ON fn.oid = f.relnamespace"
            " WHERE c.contype = 'f' AND n.nspname = 'thoth_memory' AND fn.nspname <> 'thoth_memory'"
        ).fetchall()
        assert outside == []


def test_runtime_ddl_is_refused(database):
    with (
        psycopg.connect(database.runtime) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SET ROLE thoth_memory_runtime")
        conn.execute("CREATE TABLE thoth_memory.intruder (id int)")


def test_a_superuser_runtime_login_is_refused(database):
    from tht.errors import ThothError

    with pytest.raises(ThothError, match="superuser"):
        PostgresArchive(database.superuser).open()


@pytest.mark.parametrize("table", TABLES)
def test_mutation_a_permissive_policy_is_detected(cluster, table):
    db = new_database(cluster)
    try:
        ids = populate(db.runtime, db.migrator)
        with psycopg.connect(db.migrator) as conn:
            conn.execute(
                sql.SQL("DROP POLICY workspace_isolation ON {}").format(
                    sql.Identifier("thoth_memory", table)
                )
            )
            conn.execute(
                sql.SQL(
                    "CREATE POLICY leaky ON {} TO thoth_memory_runtime USING (true) WITH CHECK (true)"
                ).format(sql.Identifier("thoth_memory", table))
            )
        leaks = find_leaks(db.runtime, ids)
        assert any(table in leak for leak in leaks), leaks
    finally:
        drop_database(db)


def test_mutation_disabled_rls_is_detected(cluster):
    db = new_database(cluster)
    try:
        ids = populate(db.runtime, db.migrator)
        with psycopg.connect(db.migrator) as conn:
            conn.execute("ALTER TABLE thoth_memory.card_links DISABLE ROW LEVEL SECURITY")
        assert any("card_links" in leak for leak in find_leaks(db.runtime, ids))
    finally:
        drop_database(db)


def test_pooled_connections_do_not_leak_role_or_workspace(archive, workspaces, memory):
    workspaces.create(OWN, "en")
    memory.create_card(OWN, card())
    for _ in range(20):
        with archive.transaction(OWN) as tx:
            assert (
                tx.conn.execute("SELECT current_setting('thoth.workspace', true)").fetchone()[0]
                == OWN
            )
        with pytest.raises(RuntimeError):
            with archive.transaction(OWN):
                raise RuntimeError("mid-transaction failure")
    with archive.connection() as conn:  # a bare checkout outside any memory transaction
        setting, role = conn.execute(
            "SELECT current_setting('thoth.workspace', true), current_user"
        ).fetchone()
        assert setting in (None, "") and role == "thoth_runtime"
        assert conn.execute("SELECT count(*) FROM thoth_memory.cards").fetchone()[0] == 0
