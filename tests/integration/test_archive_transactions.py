"""The archive's transactions as the pool runs them: BEGIN and COMMIT travel with the
queries (one pipeline), an exception rolls everything back, and a connection the
server ended is replaced when it is taken, without an error reaching the caller."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tht.errors import NotFound, ThothError
from tht.memory.archive.postgres import PostgresArchive

LATER = datetime.now(UTC) + timedelta(hours=1)
KEPT, DROPPED = "nonce-committed-0001", "nonce-rolled-back-0001"


def _names(archive: PostgresArchive) -> set[str]:
    with archive.transaction(None, directory=True) as tx:
        return {w.id for w in tx.list_workspaces()}


def test_a_transaction_commits_what_it_wrote(archive):
    with archive.transaction("acme", lock=True) as tx:
        assert tx.insert_workspace("Acme", "en") is not None
    assert "acme" in _names(archive)
    with archive.transaction("acme") as tx:
        assert tx.require_workspace().language == "en"


def test_an_exception_inside_rolls_back_what_was_written(archive):
    with pytest.raises(RuntimeError), archive.transaction("acme", lock=True) as tx:
        tx.insert_workspace("Acme", "en")
        raise RuntimeError("the caller gave up")
    assert "acme" not in _names(archive)
    with pytest.raises(NotFound), archive.transaction("acme") as tx:
        tx.require_workspace()


def test_an_accounts_transaction_commits_and_rolls_back_on_the_batched_path(database):
    """The accounts' transactions run batched (BEGIN and COMMIT queued with the
    queries): what one writes is committed, an exception rolls it back, and the one
    pooled connection serves a writer's transaction afterwards."""
    archive = PostgresArchive(database.runtime, max_connections=1).open()
    try:
        with archive.transaction(None, accounts=True) as tx:
            assert tx.use_nonce(KEPT, LATER)
        with pytest.raises(RuntimeError), archive.transaction(None, accounts=True) as tx:
            assert tx.use_nonce(DROPPED, LATER)
            raise RuntimeError("the caller gave up")
        with archive.transaction(None, accounts=True) as tx:
            assert not tx.use_nonce(KEPT, LATER)  # committed: already used
            assert tx.use_nonce(DROPPED, LATER)  # rolled back: never used
        with archive.transaction("acme", lock=True) as tx:
            tx.insert_workspace("Acme", "en")
        assert "acme" in _names(archive)
    finally:
        archive.close()


def test_a_failed_statement_rolls_back_and_the_connection_serves_again(database):
    archive = PostgresArchive(database.runtime, max_connections=1).open()
    try:
        with pytest.raises(ThothError), archive.transaction("acme", lock=True) as tx:
            tx.insert_workspace("Acme", "en")
            tx.conn.execute("SELECT 1 / 0").fetchall()
        assert "acme" not in _names(archive)  # the one connection, back in service
        with archive.transaction("acme", lock=True) as tx:
            tx.insert_workspace("Acme", "en")
        assert "acme" in _names(archive)
    finally:
        archive.close()


def test_a_connection_the_server_ended_is_replaced_when_taken(database):
    """After a restart or a terminated backend, the pool's idle connection is dead: it
    is found so when taken (its socket says so) and replaced, the caller sees nothing."""
    archive = PostgresArchive(database.runtime, max_connections=1).open()
    try:
        with archive.transaction("acme", lock=True) as tx:
            tx.insert_workspace("Acme", "en")
        with psycopg.connect(database.cluster.superuser, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()) t",
                (database.name,),
            ).fetchone()
            assert ended is not None and ended[0] >= 1
            deadline = time.monotonic() + 30
            while admin.execute(  # terminating is asynchronous: until the backends are gone
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                " AND pid <> pg_backend_pid()",
                (database.name,),
            ).fetchone() != (0,):
                assert time.monotonic() < deadline
                time.sleep(0.02)
        for _ in range(3):
            with archive.transaction("acme") as tx:
                assert tx.require_workspace().name == "Acme"
    finally:
        archive.close()


def test_a_statement_a_failed_transaction_skipped_is_not_taken_as_prepared(database):
    """psycopg prepares a statement on its sixth use, with the Parse sent beside the
    execution: a Parse queued after a failed statement is skipped by the server. The
    rollback forgets what was prepared, so the connection's next user prepares again
    instead of running a statement the server does not have."""
    archive = PostgresArchive(database.runtime, max_connections=1).open()
    query = "SELECT current_setting('thoth.workspace', true) AS workspace"
    try:
        for _ in range(8):  # wherever the threshold falls, once in the failed part
            with pytest.raises(ThothError), archive.transaction("acme", lock="shared") as tx:
                tx.conn.execute("SELECT 1 / 0")  # queued: fails with the next sync
                tx.row_of(query, {})
            with archive.transaction("acme", lock="shared") as tx:
                assert tx.row_of(query, {}) == {"workspace": "acme"}
    finally:
        archive.close()


@pytest.mark.parametrize("kind", [{"lock": "shared"}, {"snapshot": True}])
def test_a_transaction_between_two_reads_waits_idle_in_transaction(database, kind):
    """Between two reads the server waits idle in the transaction (each read ends with
    a Sync), so ``idle_in_transaction_session_timeout`` guards a caller that stops
    there: a read transaction, and an export's snapshot read in batches."""
    archive = PostgresArchive(database.runtime, max_connections=1).open()
    try:
        with (
            archive.transaction("acme", **kind) as tx,
            psycopg.connect(database.superuser, autocommit=True) as admin,
        ):
            row = tx.row_of("SELECT pg_backend_pid() AS pid", {})
            assert row is not None
            state = admin.execute(
                "SELECT state FROM pg_stat_activity WHERE pid = %s", (row["pid"],)
            ).fetchone()
            assert state == ("idle in transaction",)
            assert tx.row_of("SELECT 1 AS one", {}) == {"one": 1}
    finally:
        archive.close()


def test_a_writers_large_batch_then_a_read_completes(database):
    """A writer queues large parameters (an import's batches) before it reads: its
    transaction stays off the batched path, where ``Pipeline.sync()`` waits for the
    answer with the end of a large batch still in the client's buffer (both sides then
    wait for ever). A watchdog turns such a hang into a failure."""
    archive = PostgresArchive(database.runtime, max_connections=1).open()
    read: list[object] = []

    def write_then_read() -> None:
        with archive.transaction("acme", lock=True) as tx:
            tx.insert_workspace("Acme", "en")
            for _ in range(8):  # 8 MiB queued before the next read
                tx.conn.execute("SELECT length(%s::text)", ("x" * (1 << 20),))
            read.append(tx.require_workspace().name)

    writer = threading.Thread(target=write_then_read, daemon=True)
    writer.start()
    writer.join(120)
    assert not writer.is_alive(), "the writer's transaction hung after its large batch"
    assert read == ["Acme"]
    archive.close()
