"""`/healthz` and `tht health` under hung dependencies, against real `tht serve`
processes: an embedder that accepts and never answers, a PostgreSQL whose processes
are stopped (SIGSTOP). Each probe is bounded and runs off the requests' threads, one
probe of a dependency at a time; anonymous callers see statuses, administrators and
the operator the details."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.embedding_server import EmbeddingServer
from tests.factories import installation_of
from tests.integration.service_support import Installation, installation, wait_for
from tht.bootstrap import build_services
from tht.web.app import WebSettings, create_app

# A client that waits longer than this saw a hang (the probes' bound is 2 s; the hung
# embedder's own timeout is 40 s): a hang detector, not a performance target.
HANG = 10.0


class HungListener:
    """A local TCP listener that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self.sock.close()
        for connection in self.accepted:
            connection.close()


def get(url: str, token: str | None = None, timeout: float = HANG) -> tuple[int, dict]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(tht: Installation, embedding: str) -> tuple[object, str, str]:
    """`tht serve` with ``embedding`` (YAML); returns the process, its URL and the
    first admin's token."""
    (tht.home / "server.yaml").write_text(
        f"embedders: {{default: {embedding}}}\nindex: {{path: {tht.home / 'index'}}}\n"
    )
    port = free_port()
    server = tht.start("serve", "--port", str(port), "-c", str(tht.home / "server.yaml"))
    ready = json.loads(server.stdout.readline())
    assert "error" not in ready, ready
    token = Path(ready["admin_token_file"]).read_text().strip()
    return server, f"http://127.0.0.1:{port}", token


# --- who sees what -----------------------------------------------------------------------


def test_healthz_shows_anonymous_callers_statuses_and_administrators_the_details(
    database, tmp_path
):
    embedder = EmbeddingServer()
    embedder.mode = "error"  # every embedding answers 500: the embedder is down
    embedder.start()
    services = build_services(
        env=database.env(),
        installation=installation_of(
            index=tmp_path / "index",
            embedder={"provider": "openai", "url": embedder.url, "model": "m", "dimension": 3},
        ),
    )
    try:
        services.workspaces.create("acme", "en")
        tokens = {
            role: services.accounts.users.create_user(f"{role}-1", role, ["acme"])["token"]
            for role in ("admin", "user", "agent")
        }
        with TestClient(create_app(services, WebSettings())) as web:

            def health(token: str | None):
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                return web.get("/healthz", headers=headers)

            detailed = health(tokens["admin"])
            assert detailed.status_code == 200 and detailed.json()["status"] == "degraded"
            down = {d["kind"]: d for d in detailed.json()["dependencies"]}["embedder"]
            assert down["status"] == "down" and down["error"]["code"] == "embedder_unavailable"
            assert embedder.url in down["error"]["message"]  # the administrator's clue
            assert all("latency_ms" in d for d in detailed.json()["dependencies"])

            for caller in (None, tokens["user"], tokens["agent"], "not-a-token"):
                answer = health(caller)
                assert answer.status_code == 200, (caller, answer.text)
                document = answer.json()
                assert document["status"] == "degraded"
                assert [
                    (d["name"], d["kind"], d["required"], d["status"])
                    for d in document["dependencies"]
                ] == [
                    (d["name"], d["kind"], d["required"], d["status"])
                    for d in detailed.json()["dependencies"]
                ]
                shown = {d["kind"]: d for d in document["dependencies"]}
                assert shown["embedder"]["error"] == {"code": "embedder_unavailable"}
                assert set(shown["archive"]) == {"name", "kind", "required", "status"}
                assert "127.0.0.1" not in answer.text and "latency_ms" not in answer.text
                assert "pending_retries" not in document
    finally:
        services.close()
        embedder.stop()


# --- a hung embedder -----------------------------------------------------------------------


@pytest.fixture
def tht(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    found = installation(database, home)
    yield found
    found.stop()


def test_a_hung_embedder_is_probed_once_and_holds_no_request(tht):
    hung = HungListener()
    assert tht.run("workspace", "create", "acme", "--language", "en", THT_SERVICE="off").code == 0
    server, url, token = serve(
        tht, f"{{provider: openai, url: '{hung.url}', model: stuck, dimension: 3, timeout: 40}}"
    )
    try:
        code, first = get(url + "/healthz", token)  # HANG < the embedder's 40 s
        assert code == 200 and first["status"] == "degraded", first
        embedder = {d["kind"]: d for d in first["dependencies"]}["embedder"]
        assert embedder["error"]["code"] == "embedder_unavailable"
        assert "no answer within 2 s" in embedder["error"]["message"]

        # 45 anonymous health checks in flight hold neither each other nor an
        # administrator's request; the hung embedder was asked once in all
        answers: list[int] = []

        def check() -> None:
            answers.append(get(url + "/healthz")[0])

        flood = [threading.Thread(target=check) for _ in range(45)]
        for thread in flood:
            thread.start()
        listed = get(url + "/api/workspaces/acme/memory", token)
        for thread in flood:
            thread.join(timeout=2 * HANG)
        assert listed[0] == 200, listed
        assert answers == [200] * 45
        assert len(hung.accepted) == 1  # one probe, still waiting for its answer
        # the operator asks on the socket: the same report, with the details
        asked = tht.run("health", timeout=HANG)
        assert asked.code == 0 and asked.document["status"] == "degraded"
        assert "latency_ms" in asked.document["dependencies"][0]
    finally:
        server.terminate()
        server.wait(30)
        hung.close()


# --- a hung PostgreSQL ---------------------------------------------------------------------


def postgres_processes(pgdata: Path) -> list[int]:
    """The postmaster of ``pgdata`` and its children (the backends and workers)."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == postmaster:
            children.append(int(entry.name))
    return [postmaster, *children]


def test_a_hung_postgresql_makes_healthz_answer_503_archive_unavailable_in_bounded_time():
    # An embedded PostgreSQL of this test's own (never the session's shared one), in
    # /tmp itself: run as root, the server's own user must reach the folder.
    home = Path(tempfile.mkdtemp(prefix="tht-test-hung-pg-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    tht = Installation(home, {**env, "THT_HOME": str(home), "THT_SERVICE": "off"})
    server = None
    try:
        assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
        server, url, token = serve(tht, "{provider: hashing}")
        assert get(url + "/healthz", token)[0] == 200
        stopped = postgres_processes(home / "postgres")
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            # the next probe finds it hung (an answer serves the requests of one second)
            assert wait_for(lambda: get(url + "/healthz")[0] == 503, HANG)
            code, document = get(url + "/healthz")
            assert (code, document["status"]) == (503, "unavailable")
            archive = {d["kind"]: d for d in document["dependencies"]}["archive"]
            assert archive["status"] == "down"
            assert archive["error"] == {"code": "archive_unavailable"}
            asked = tht.run("health", timeout=HANG)  # the operator's view, with the message
            assert asked.code == 10 and asked.document["status"] == "unavailable"
            error = asked.document["dependencies"][0]["error"]
            assert error["code"] == "archive_unavailable" and error["message"]
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        assert wait_for(lambda: get(url + "/healthz")[0] == 200, 60)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        tht.run("db", "stop")
        shutil.rmtree(home, ignore_errors=True)
