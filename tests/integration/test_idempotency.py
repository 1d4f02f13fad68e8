"""Idempotency keys: a retry under the same key answers the first
result and changes nothing; another request under the key is refused; concurrent
duplicates make one card; the key is committed with the mutation or not at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import psycopg
import pytest

from tests.factories import card, card_document
from tht.faults import CRASH_EXIT_CODE
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService
from tht.memory.idempotency import IdempotencyKey, IdempotencyKeyReused

BASE = "/api/workspaces/ws-a/memory"


def key_rows(database) -> list[tuple[str, str, str]]:
    with psycopg.connect(database.superuser) as conn:
        return conn.execute(
            "SELECT workspace_id, principal, key FROM thoth_memory.idempotency_keys ORDER BY 1, 2, 3"
        ).fetchall()


def card_count(archive, workspace: str) -> int:
    with archive.transaction(workspace) as tx:
        return len(tx.card_revisions())


def test_a_retry_after_a_successful_create_creates_nothing_new(memory, workspaces, archive):
    workspaces.create("acme", "en")
    key = IdempotencyKey("order-7f3a", "alice")
    first = memory.create_card("acme", card(), idempotency=key)
    again = memory.create_card("acme", card(), idempotency=key)
    assert again.as_json()["card"]["id"] == first.card.id
    assert again.as_json() == first.as_json()  # the recorded answer, index outcome included
    assert card_count(archive, "acme") == 1
    # without a key, the same body is a new card: the key is what makes it a retry
    memory.create_card("acme", card())
    assert card_count(archive, "acme") == 2


def test_the_same_key_with_another_request_is_refused(memory, workspaces, archive):
    workspaces.create("acme", "en")
    key = IdempotencyKey("k-1", "alice")
    first = memory.create_card("acme", card(), idempotency=key)
    with pytest.raises(IdempotencyKeyReused) as refused:
        memory.create_card("acme", card(title="Another title"), idempotency=key)
    assert refused.value.http_status == 409 and refused.value.details["key"] == "k-1"
    with pytest.raises(IdempotencyKeyReused):  # another operation under the key
        memory.delete_card("acme", first.card.id, idempotency=key)
    assert card_count(archive, "acme") == 1


def test_keys_belong_to_one_principal_in_one_workspace(memory, workspaces, archive):
    workspaces.create("acme", "en")
    workspaces.create("other", "en")
    memory.create_card("acme", card(), idempotency=IdempotencyKey("k", "alice"))
    memory.create_card("acme", card(), idempotency=IdempotencyKey("k", "bob"))
    memory.create_card("other", card(), idempotency=IdempotencyKey("k", "alice"))
    assert card_count(archive, "acme") == 2 and card_count(archive, "other") == 1


def test_update_and_delete_retries_answer_the_first_result(memory, workspaces, archive):
    workspaces.create("acme", "en")
    created = memory.create_card("acme", card()).card
    edit = card(title="Edited", revision=created.revision)
    key = IdempotencyKey("edit-1", "alice")
    first = memory.update_card("acme", created.id, edit, idempotency=key)
    again = memory.update_card("acme", created.id, edit, idempotency=key)
    assert first.card.revision == created.revision + 1
    assert again.as_json()["card"]["revision"] == first.card.revision  # not a stale_revision
    assert memory.get_card("acme", created.id).revision == first.card.revision
    gone = IdempotencyKey("delete-1", "alice")
    deleted = memory.delete_card("acme", created.id, idempotency=gone)
    assert memory.delete_card("acme", created.id, idempotency=gone).as_json() == deleted.as_json()


def test_concurrent_duplicate_requests_create_one_card(database, workspaces):
    workspaces.create("acme", "en")
    archive = PostgresArchive(database.runtime, max_connections=8).open()
    try:
        memory = MemoryService(archive)
        key = IdempotencyKey("burst", "alice")
        start = threading.Barrier(8)
        answers: list[str] = []
        errors: list[BaseException] = []

        def send() -> None:
            start.wait()
            try:
                answers.append(
                    memory.create_card("acme", card(), idempotency=key).as_json()["card"]["id"]
                )
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=send) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        assert len(answers) == 8 and len(set(answers)) == 1
        assert card_count(archive, "acme") == 1
    finally:
        archive.close()


def test_expired_keys_are_pruned_and_new_again(memory, workspaces, archive, database):
    workspaces.create("acme", "en")
    key = IdempotencyKey("old", "alice")
    memory.create_card("acme", card(), idempotency=key)
    with psycopg.connect(database.superuser, autocommit=True) as conn:
        conn.execute(
            "UPDATE thoth_memory.idempotency_keys SET created_at = now() - interval '25 hours'"
        )
    memory.create_card("acme", card(title="New request"), idempotency=key)  # no longer refused
    assert card_count(archive, "acme") == 2
    assert key_rows(database) == [("acme", "alice", "old")]  # the expired row was pruned


def test_invalid_keys_are_refused_before_anything_runs():
    for bad in ("", "with space", "x" * 256, "caf\u00e9"):
        with pytest.raises(Exception) as refused:
            IdempotencyKey(bad, "alice")
        assert getattr(refused.value, "code", None) == "invalid_input"


# --- HTTP ---------------------------------------------------------------------------------


def test_http_post_and_put_with_an_idempotency_key(world, database):
    headers = {**world.bearer("admin_a"), "Idempotency-Key": "b2c7e1"}
    before = card_count(world.services.archive, "ws-a")
    first = world.client.post(BASE, json=card_document(), headers=headers)
    again = world.client.post(BASE, json=card_document(), headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert card_count(world.services.archive, "ws-a") == before + 1
    reused = world.client.post(BASE, json=card_document(title="Other"), headers=headers)
    assert reused.status_code == 409
    assert reused.json()["error"]["code"] == "idempotency_key_reused"

    card_id = first.json()["card"]["id"]
    edit = {**card_document(title="Edited"), "revision": 1}
    put_headers = {**world.bearer("admin_a"), "Idempotency-Key": "edit-9"}
    saved = world.client.put(f"{BASE}/{card_id}", json=edit, headers=put_headers)
    retried = world.client.put(f"{BASE}/{card_id}", json=edit, headers=put_headers)
    assert saved.status_code == retried.status_code == 200, retried.json()
    assert retried.json()["card"]["revision"] == saved.json()["card"]["revision"] == 2
    # another admin's key of the same name is its own: not a replay of admin_a's answer
    other = world.client.post(
        "/api/workspaces/ws-b/memory",
        json=card_document(),
        headers={**world.bearer("admin_b"), "Idempotency-Key": "b2c7e1"},
    )
    assert other.status_code == 201 and other.json()["card"]["id"] != card_id
    bad = world.client.post(
        BASE, json=card_document(), headers={**world.bearer("admin_a"), "Idempotency-Key": "a b"}
    )
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["field"] == (
        "Idempotency-Key"
    )
    assert ("ws-a", "admin_a", "b2c7e1") in key_rows(database)
    gone = {**world.bearer("admin_a"), "Idempotency-Key": "del-1"}
    deleted = world.client.delete(f"{BASE}/{card_id}", headers=gone)
    again_deleted = world.client.delete(f"{BASE}/{card_id}", headers=gone)
    assert deleted.status_code == again_deleted.status_code == 200  # not 404
    assert again_deleted.json() == deleted.json() and deleted.json()["deleted"] == card_id


# --- the CLI, and a crash around the commit ------------------------------------------------


def test_cli_idempotency_key_on_create_update_and_delete(cli, runtime_file, tmp_path):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme")
    data = tmp_path / "card.json"
    data.write_text(json.dumps(card_document()))
    create = ("memory", "create", "-c", config, "--data", str(data), "--idempotency-key", "c-1")
    first, again = cli(*create), cli(*create)
    assert first.code == again.code == 0 and again.document == first.document
    assert cli("memory", "list", "-c", config).document["total"] == 1
    card_id = first.document["card"]["id"]
    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps({**card_document(title="Edited"), "revision": 1}))
    update = ("memory", "update", card_id, "-c", config, "--data", str(edit))
    assert cli(*update, "--idempotency-key", "u-1").code == 0
    replay = cli(*update, "--idempotency-key", "u-1")
    assert replay.code == 0 and replay.document["card"]["revision"] == 2
    assert cli(*update).document["error"]["code"] == "stale_revision"  # without the key: stale
    delete = ("memory", "delete", card_id, "--yes", "-c", config, "--idempotency-key", "d-1")
    assert cli(*delete).code == 0
    assert cli(*delete).document["deleted"] == card_id  # a replay, not not_found
    reused = cli(*create[:-1], "d-1")
    assert reused.code == 4 and reused.document["error"]["code"] == "idempotency_key_reused"


def test_a_crash_records_the_key_with_the_card_or_neither(database, runtime_file, tmp_path):
    """The key is written in the card's transaction: killed before the commit, neither
    exists (the retry creates the card once); killed just after it, both exist (the
    retry answers the recorded card and creates nothing)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env.update(database.env(), THT_HOME=str(tmp_path / "home"), THT_SERVICE="off")
    config = runtime_file("acme")
    data = tmp_path / "card.json"
    data.write_text(json.dumps(card_document()))

    def tht(*args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
        extra = {"THT_CRASH_AT": crash} if crash else {}
        return subprocess.run(
            [sys.executable, "-m", "tht", *args],
            capture_output=True,
            text=True,
            env={**env, **extra},
            timeout=300,
        )

    assert tht("workspace", "create", "acme", "--language", "en").returncode == 0
    create = ("memory", "create", "-c", config, "--data", str(data), "--idempotency-key")
    before = tht(*create, "k-before", crash="save.before_archive_commit")
    assert before.returncode == CRASH_EXIT_CODE
    assert key_rows(database) == []
    after = tht(*create, "k-after", crash="save.after_archive_commit")
    assert after.returncode == CRASH_EXIT_CODE
    assert key_rows(database) == [("acme", "(operator)", "k-after")]
    retried = tht(*create, "k-after")
    assert retried.returncode == 0, retried.stdout
    listed = json.loads(tht("memory", "list", "-c", config).stdout)
    assert listed["total"] == 1
    assert json.loads(retried.stdout)["card"]["id"] == listed["items"][0]["id"]
