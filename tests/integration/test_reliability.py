"""The service looks after its dependencies: `/healthz`
reports each one, the embedded PostgreSQL is started again, and pending index work is
retried on start and with a bounded, per-workspace backoff."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.factories import card, card_document, installation_of
from tests.integration.service_support import Installation, Result, wait_for
from tht.bootstrap import build_services
from tht.faults import CRASH_EXIT_CODE
from tht.memory.model import card_id_to_uuid
from tht.service.recovery import PendingRetrier, backoff_delay
from tht.web.app import WebSettings, create_app

PROJECTION = {"embedding": {"provider": "hashing", "dimension": 64}}


def services_for(database, tmp_path):
    return build_services(
        env=database.env(),
        installation=installation_of(index=str(tmp_path / "index")),
    )


def outstanding(database) -> list[tuple[str, int]]:
    with psycopg.connect(database.superuser) as conn:
        return conn.execute(
            "SELECT card_id::text, attempts FROM thoth_memory.projection_ops ORDER BY 1"
        ).fetchall()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# --- backoff ---------------------------------------------------------------------------


def test_backoff_doubles_per_failure_up_to_its_cap():
    assert [backoff_delay(n) for n in range(0, 9)] == [0, 5, 10, 20, 40, 80, 160, 300, 300]
    assert backoff_delay(10_000) == 300  # no overflow, still the cap


# --- /healthz ----------------------------------------------------------------------------


def test_healthz_reports_each_dependency_and_503_when_the_archive_is_down(
    database, tmp_path, monkeypatch
):
    services = services_for(database, tmp_path)
    services.workspaces.create("acme", "en")
    admin = services.accounts.users.create_user("boss", "admin", ["acme"])["token"]
    web = TestClient(create_app(services, WebSettings()))

    def health(token: str | None = None):
        return web.get("/healthz", headers={"Authorization": f"Bearer {token}"} if token else {})

    try:
        healthy = health(admin)
        assert healthy.status_code == 200
        document = healthy.json()
        assert document["status"] == "ok"
        kinds = {d["kind"]: d for d in document["dependencies"]}
        assert set(kinds) == {"archive", "index", "embedder"}
        assert kinds["archive"]["required"] is True and kinds["index"]["required"] is False
        assert all(d["status"] == "ok" and d["latency_ms"] >= 0 for d in kinds.values())

        outage = tmp_path / "outage"
        outage.write_text("index\n")
        monkeypatch.setenv("THT_OUTAGE_FILE", str(outage))
        # an answer serves the requests of the next second: the outage shows after it
        assert wait_for(lambda: health().json()["status"] == "degraded", 30)
        assert health().status_code == 200
        monkeypatch.delenv("THT_OUTAGE_FILE")

        with psycopg.connect(database.cluster.superuser, autocommit=True) as admin_conn:
            admin_conn.execute(f'ALTER DATABASE "{database.name}" ALLOW_CONNECTIONS false')
            admin_conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (database.name,),
            )
            try:
                assert wait_for(lambda: health().status_code == 503, 30)
                down = health(admin)  # the archive cannot say who the token is: statuses only
                assert down.status_code == 503 and down.json()["status"] == "unavailable"
                archive = {d["kind"]: d for d in down.json()["dependencies"]}["archive"]
                assert archive == {
                    "name": "archive",
                    "kind": "archive",
                    "required": True,
                    "status": "down",
                    "error": {"code": "archive_unavailable"},
                }
            finally:
                admin_conn.execute(f'ALTER DATABASE "{database.name}" ALLOW_CONNECTIONS true')
        assert wait_for(lambda: health().status_code == 200, 30)
    finally:
        web.close()
        services.close()


def test_serve_starts_its_stopped_embedded_postgres_again_and_health_says_so():
    # in /tmp itself: run as root, the embedded server's own user must reach the folder
    home = Path(tempfile.mkdtemp(prefix="tht-test-serve-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}  # the embedded engines
    tht = Installation(home, {**env, "THT_HOME": str(home), "THT_SERVICE": "off"})
    (home / "server.yaml").write_text(
        f"embedders: {{default: {{provider: hashing}}}}\nindex: {{path: {home / 'index'}}}\n"
    )
    port = free_port()
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    server = tht.start("serve", "--port", str(port), "-c", str(home / "server.yaml"))
    try:
        ready = json.loads(server.stdout.readline())
        token = Path(ready["admin_token_file"]).read_text().strip()
        base = f"http://127.0.0.1:{port}"
        assert get(base + "/healthz")[0] == 200
        assert tht.run("db", "stop").document["stopped"] is True
        pid_file = home / "postgres" / "postmaster.pid"
        # no request needed: the service notices and starts it again on its own
        assert wait_for(pid_file.exists, 30)
        assert wait_for(lambda: get(base + "/healthz")[0] == 200, 30)
        code, listed = get(base + "/api/workspaces", token)
        assert code == 200 and [w["id"] for w in listed["items"]] == ["acme"]
    finally:
        server.terminate()
        server.wait(30)
        tht.run("db", "stop")
        shutil.rmtree(home, ignore_errors=True)


# --- retrying pending work -----------------------------------------------------------------


def test_pending_work_is_retried_with_backoff_until_the_index_returns(
    database, tmp_path, monkeypatch
):
    services = services_for(database, tmp_path)
    outage = tmp_path / "outage"
    outage.write_text("index\n")
    monkeypatch.setenv("THT_OUTAGE_FILE", str(outage))
    try:
        services.workspaces.create("acme", "en")
        services.workspaces.create("calm", "en")  # nothing pending: never drained
        for i in range(3):
            saved = services.memory.create_card("acme", card(title=f"Card {i}"))
            assert saved.status == "saved_index_incomplete"
        assert [attempts for _, attempts in outstanding(database)] == [1, 1, 1]
        projector = services.projector.of("acme")
        retrier = PendingRetrier(
            services.archive,
            lambda: [projector],
            services.projector.of,
            base=0.2,
            cap=0.8,
            period=0.05,
        )
        retrier.start()
        try:
            time.sleep(2.0)
            state = retrier.state()
            assert set(state) == {"acme"} and state["acme"]["failures"] >= 2
            attempts = [a for _, a in outstanding(database)]
            # 0.2 + 0.4 + 0.8 + 0.8 s: about 4 tries in 2 s, not 40 at the 0.05 s period
            # (a card saved less than a period before a round waits for the next one)
            assert len(attempts) == 3 and 3 <= min(attempts) and max(attempts) <= 7
            outage.write_text("")
            assert wait_for(lambda: outstanding(database) == [], 5)
            assert wait_for(lambda: retrier.state() == {}, 5)
        finally:
            retrier.stop(timeout=10)
        assert not any(t.name == "tht-pending-retry" for t in threading.enumerate())
        with services.archive.transaction("acme") as tx:
            assert len(tx.projections()) == 3
    finally:
        services.close()


def test_the_retry_loop_compacts_the_points_saves_left_unindexed(database, tmp_path, monkeypatch):
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", 10)
    monkeypatch.setattr("tht.memory.indexing.compaction.QUIET_SECONDS", 0.3)
    services = services_for(database, tmp_path)
    try:
        services.workspaces.create("acme", "en")
        projector = services.projector.of("acme")
        index = projector.index
        for i in range(12):
            assert services.memory.create_card("acme", card(title=f"Card {i}")).status == "saved"
        serving = index.workspace_path("acme")
        retrier = PendingRetrier(
            services.archive, lambda: [projector], services.projector.of, period=0.05
        )
        retrier.start()
        try:
            assert wait_for(lambda: index.workspace_path("acme") != serving, 20)
        finally:
            retrier.stop(timeout=10)
        assert index.count("acme") == 12 and outstanding(database) == []
    finally:
        services.close()


def test_the_retrier_leaves_work_younger_than_its_period_to_the_save_in_flight(database, tmp_path):
    """An operation committed a moment ago is most likely its save's own index update
    in flight (in this process or another replica): the retrier drains an operation only
    once it has waited a period untouched, so it neither does that work twice nor takes
    it from under the save; an operator's drain takes it at once."""
    services = services_for(database, tmp_path)
    try:
        services.workspaces.create("acme", "en")
        saved = services.memory.create_card("acme", card())
        with services.archive.transaction("acme", lock=True) as tx:  # pending again
            tx.enqueue(card_id_to_uuid(saved.card.id), "upsert", saved.card.revision)
        projector = services.projector.of("acme")
        retrier = PendingRetrier(
            services.archive, lambda: [projector], services.projector.of, period=1.5
        )
        assert retrier.run_once() == {}  # too young: left to its save
        assert len(outstanding(database)) == 1
        time.sleep(1.6)
        assert retrier.run_once() == {"acme": "drained"}
        assert outstanding(database) == []
        with services.archive.transaction("acme", lock=True) as tx:
            tx.enqueue(card_id_to_uuid(saved.card.id), "upsert", saved.card.revision)
        assert projector.drain("acme")["indexed"] == 1  # the operator's: no wait
        assert outstanding(database) == []
    finally:
        services.close()


def test_two_service_instances_never_drain_one_workspace_at_once(database, tmp_path):
    services = services_for(database, tmp_path)
    try:
        services.workspaces.create("acme", "en")
        saved = services.memory.create_card("acme", card())
        assert saved.status == "saved"
        with services.archive.transaction("acme", lock=True) as tx:  # pending again
            tx.enqueue(card_id_to_uuid(saved.card.id), "upsert", saved.card.revision)
        projector = services.projector.of("acme")
        running, most = [0], [0]
        guard = threading.Lock()

        class SlowDrain:  # the real projector, observed: how many drains run at once
            def drain(self, workspace: str, settled: float = 0.0) -> dict:
                with guard:
                    running[0] += 1
                    most[0] = max(most[0], running[0])
                time.sleep(0.5)
                try:
                    return projector.drain(workspace, settled)
                finally:
                    with guard:
                        running[0] -= 1

        slow = SlowDrain()
        first = PendingRetrier(services.archive, lambda: [slow], lambda _: slow, period=0.2)  # type: ignore[list-item,arg-type,return-value]
        second = PendingRetrier(services.archive, lambda: [slow], lambda _: slow, period=0.2)  # type: ignore[list-item,arg-type,return-value]
        time.sleep(0.3)  # the operation has waited a period: theirs to drain
        outcomes: list[dict | None] = []
        barrier = threading.Barrier(2)

        def round_(retrier: PendingRetrier) -> None:
            barrier.wait()
            outcomes.append(retrier.run_once())

        threads = [threading.Thread(target=round_, args=(r,)) for r in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert most[0] == 1
        assert sorted(o["acme"] for o in outcomes if o) == ["drained", "skipped"]
        assert outstanding(database) == []
    finally:
        services.close()


def test_serve_retries_the_work_a_killed_command_left_pending(database, tmp_path):
    """kill -9 between the commit and the index update leaves the card pending; the
    next service start retries it without anyone running `tht memory retry`."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env.update(database.env(), THT_HOME=str(home), THT_SERVICE="off")
    tht = Installation(home, env)
    config = tht.runtime("acme")
    data = home / "card.json"
    data.write_text(json.dumps(card_document()))
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    killed = subprocess.run(
        [sys.executable, "-m", "tht", "memory", "create", "-c", config, "--data", str(data)],
        env={**env, "THT_CRASH_AT": "save.after_archive_commit"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == CRASH_EXIT_CODE
    assert [a for _, a in outstanding(database)] == [0]  # nothing tried it
    # the retrier takes work left untouched for one period (a save's own update may be
    # in flight until then): a short period, so the wait below is not the default's 30 s
    (home / "server.yaml").write_text(
        f"embedders: {{default: {{provider: hashing}}}}\nindex: {{path: {home / 'index'}}}\n"
        "pending_work: {retry_seconds: 1}\n"
    )
    server = tht.start("serve", "--port", str(free_port()), "-c", str(home / "server.yaml"))
    try:
        json.loads(server.stdout.readline())
        assert wait_for(lambda: outstanding(database) == [], 30)
    finally:
        server.terminate()
        server.wait(30)
    listed = tht.run("memory", "list", "-c", config).document["items"]
    assert len(listed) == 1 and listed[0]["pending"] is None


# --- a write when the server goes away around its commit --------------------------------


@pytest.fixture
def embedded():
    """An installation on an embedded PostgreSQL of its own, which a test may stop."""
    # in /tmp itself: run as root, the embedded server's own user must reach the folder
    home = Path(tempfile.mkdtemp(prefix="tht-test-commit-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    tht = Installation(home, {**env, "THT_HOME": str(home), "THT_SERVICE": "off"})
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    yield tht
    tht.run("db", "stop")
    shutil.rmtree(home, ignore_errors=True)


def stopped_at(tht: Installation, point: str, *args: str) -> Result:
    """`tht ARGS`, with the embedded PostgreSQL stopped (`tht db stop`) while the
    command waits at the pause point ``point``."""
    marker = tht.home / "paused"
    command = tht.start(*args, THT_PAUSE_AT=point, THT_PAUSE_FILE=str(marker))
    try:
        assert wait_for(marker.exists, 120), command.communicate(timeout=30)
        assert tht.run("db", "stop").document["stopped"] is True
    finally:
        marker.unlink(missing_ok=True)
    out, err = command.communicate(timeout=120)
    lines = out.strip().splitlines()
    assert len(lines) == 1, (command.returncode, out, err)
    return Result(command.returncode, json.loads(lines[0]), err)


def test_a_save_committed_before_the_server_stopped_answers_saved(embedded):
    """The commit succeeded, then the server stopped: the answer is the saved card (its
    index update pending), not an outage that would say the save was lost."""
    config = embedded.runtime("acme")
    (embedded.home / "card.json").write_text(json.dumps(card_document(title="Committed first")))
    saved = stopped_at(
        embedded,
        "save.after_archive_commit",
        "memory",
        "create",
        "-c",
        config,
        "--data",
        "card.json",
    )
    assert saved.code == 0, saved.document
    assert saved.document["status"] == "saved_index_incomplete"
    assert saved.document["card"]["title"] == "Committed first"
    shown = embedded.run("memory", "show", saved.document["card"]["id"], "-c", config)
    assert shown.code == 0 and shown.document["revision"] == saved.document["card"]["revision"]


def test_a_connection_lost_while_committing_says_the_outcome_is_unknown(embedded):
    """The server stopped between the save's last statement and its COMMIT: the command
    cannot know whether the server committed, says so, and tells how to find out; the
    write sent again under its idempotency key is applied once."""
    config = embedded.runtime("acme")
    (embedded.home / "card.json").write_text(json.dumps(card_document(title="Unknown outcome")))
    write = ("memory", "create", "-c", config, "--data", "card.json", "--idempotency-key", "k-1")
    lost = stopped_at(embedded, "save.before_archive_commit", *write)
    assert lost.code == 6, lost.document
    error = lost.document["error"]
    assert error["code"] == "commit_outcome_unknown"
    assert "may or may not have been applied" in error["message"]
    assert "idempotency key" in error["message"] and "tht memory" in error["message"]
    assert error["details"]["reason"]
    # here the server was stopped before the COMMIT reached it: nothing was applied
    assert embedded.run("memory", "list", "-c", config).document["total"] == 0
    again = embedded.run(*write)
    replayed = embedded.run(*write)
    assert again.code == 0 and replayed.code == 0, (again.document, replayed.document)
    assert again.document["card"]["id"] == replayed.document["card"]["id"]
    assert embedded.run("memory", "list", "-c", config).document["total"] == 1


@pytest.fixture(autouse=True)
def _no_outage_left(monkeypatch):
    monkeypatch.delenv("THT_OUTAGE_FILE", raising=False)
