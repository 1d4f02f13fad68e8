"""A caller names a workspace, a database and a schema; the installation owns engines,
paths, URLs and embedders. Each case is a finding of an attack on the service through
its documented faces (an agent's token over HTTP, `/api/cli`): the runtime file names
what only the installation decides, and the service must refuse it before anything
runs, with no request to the URL, no file touched and no engine built."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading

import pytest

from tests.factories import card_document
from tests.integration.service_support import installation


class Listener:
    """A local TCP listener that counts the connections it is offered (a URL an
    attacker names must never be called)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def served(database, tmp_path):
    """`tht serve` on the tests' installation, an agent and an admin of workspace acme,
    and a way to run `tht` against it over HTTP with a token (never the socket)."""
    home = tmp_path / "home"
    home.mkdir()
    tht = installation(database, home)
    config = tht.runtime("acme")
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    tokens = {
        role: tht.run(
            "user", "create", f"the-{role}", "--role", role, "--workspace", "acme"
        ).document["token"]
        for role in ("agent", "admin")
    }
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tht.stop()
    server = tht.start("serve", "--port", str(port))
    assert "error" not in json.loads(server.stdout.readline())
    url = f"http://127.0.0.1:{port}"

    def remote(*args: str, role: str = "agent", stdin: str | None = None):
        return tht.run(*args, token=tokens[role], stdin=stdin, THT_SERVICE_URL=url)

    try:
        yield tht, config, remote, url
    finally:
        server.terminate()
        server.wait(30)


def runtime_with(tmp_path, section: str) -> str:
    path = tmp_path / "attack.yaml"
    path.write_text(f"workspace: acme\ndatabase: dwh\nschema: sales\n{section}\n")
    return str(path)


@pytest.mark.parametrize("role", ["agent", "admin"])
def test_a_url_in_the_runtime_file_is_never_called(served, tmp_path, role):
    _tht, _config, remote, _url = served
    listener = Listener()
    try:
        for section in (
            f"embedding: {{provider: openai, url: '{listener.url}/admin/x?confirm=yes#', model: m}}",
            f"index: {{engine: qdrant, url: '{listener.url}'}}",
        ):
            config = runtime_with(tmp_path, section)
            for command in (
                ("memory", "search", "orders", "-c", config),
                ("memory", "index", "-c", config),
            ):
                refused = remote(*command, role=role)
                assert refused.code == 2, refused.document
                error = refused.document["error"]
                assert error["code"] == "setting_not_allowed"
                assert error["details"]["key"] in ("embedding", "index")
                assert "body" not in json.dumps(error)
        assert listener.accepted == 0
    finally:
        listener.close()


def test_a_path_in_the_runtime_file_is_never_touched(served, tmp_path):
    _tht, _config, remote, url = served
    target = tmp_path / "victim"
    target.mkdir(mode=0o755)
    before = sorted(os.listdir(target)), stat.S_IMODE(target.stat().st_mode)
    sessions = runtime_with(tmp_path, f"sessions_root: {target}")
    index = runtime_with(tmp_path, f"index: {{engine: edge, path: {target}}}")
    proposals = tmp_path / "proposals.json"
    proposals.write_text(json.dumps({"version": 1, "proposals": []}))
    attempts = [
        remote("memory", "propose", "--session", "s-1", "--data", str(proposals), "-c", sessions),
        remote("memory", "search", "orders", "-c", index),
        remote("memory", "index", "-c", index, role="admin"),
        remote(
            "memory",
            "summary",
            "--session",
            "s-1",
            "-c",
            runtime_with(tmp_path, "sessions_root: /"),
        ),
    ]
    for refused in attempts:
        assert refused.code == 2 and refused.document["error"]["code"] == "setting_not_allowed"
    import httpx

    assert httpx.get(f"{url}/healthz", timeout=30).status_code in (200, 503)
    assert (sorted(os.listdir(target)), stat.S_IMODE(target.stat().st_mode)) == before


def test_a_dwh_variable_in_the_runtime_file_is_refused(served, tmp_path):
    _tht, _config, remote, _url = served
    database = tmp_path / "secret.sqlite"
    config = runtime_with(tmp_path, "dwh: {url_env: HOME}")
    for command in (
        ("catalog", "bind", "-c", config, "--connection", "x"),
        ("catalog", "sync", "-c", config),
    ):
        refused = remote(*command, role="admin")
        assert refused.code == 2 and refused.document["error"]["code"] == "setting_not_allowed"
    assert not database.exists()


def test_requests_cannot_register_engines(served, tmp_path):
    """Distinct embedder settings in 40 requests build nothing: the health report lists
    the installation's engines, the same number before and after."""
    _tht, config, remote, url = served
    import httpx

    admin_token = remote("user", "token", "rotate", "the-admin", role="admin").document["token"]
    headers = {"Authorization": f"Bearer {admin_token}"}

    def dependencies() -> int:
        return len(httpx.get(f"{url}/healthz", headers=headers, timeout=30).json()["dependencies"])

    assert (
        remote(
            "memory",
            "create",
            "-c",
            config,
            "--data",
            "-",
            role="agent",
            stdin=json.dumps(card_document()),
        ).code
        == 5
    )  # an agent may not create
    before = dependencies()
    for i in range(40):
        attack = runtime_with(tmp_path, f"embedding: {{provider: hashing, dimension: {i + 2}}}")
        assert remote("memory", "search", "orders", "-c", attack).code == 2
    assert dependencies() == before
