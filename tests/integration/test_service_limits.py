"""The service's Unix socket under hostile peers: a peer of another user (a real process
running as ``nobody``, through a link to the socket as an agent's sandbox would get it)
may send no more than an HTTP client before its token is checked, nor take longer
than its deadline; beyond the connection cap, a connection is answered at once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile

import pytest

from tests.integration.service_support import wait_for
from tht.memory.model import MAX_DOCUMENT_BYTES
from tht.service import paths
from tht.service.server import MAX_PEER_REQUEST_BYTES, Service

NOBODY = 65534
HANG = 20.0  # a peer that waits longer than this for an answer saw a hang

# What the peer of another user does, with the standard library only; prints one JSON line.
PEER = r"""
import json, socket, sys

path, mode = sys.argv[1], sys.argv[2]


def connect():
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(float(sys.argv[3]))
    sock.connect(path)
    return sock


def answer(sock):
    line = sock.makefile("rb").readline()
    return json.loads(line) if line else None


out = {}
sock = connect()
if mode == "silent":
    out["answer"] = answer(sock)
    out["closed"] = sock.recv(1) == b""
elif mode == "partial":
    sock.sendall(b'{"op": "hea')
    out["answer"] = answer(sock)
    out["closed"] = sock.recv(1) == b""
elif mode == "large":
    sent, block = 0, b"x" * 65536
    try:
        while sent < 64 << 20:
            sock.sendall(block)
            sent += len(block)
    except OSError:
        pass
    out["sent"] = sent
    out["answer"] = answer(sock)
elif mode == "health":
    sock.sendall(b'{"op": "health"}\n')
    out["answer"] = answer(sock)
elif mode == "hold":
    held = [sock, connect()]
    third = connect()  # beyond the cap of other users' connections
    out["answer"] = answer(third)
    print(json.dumps(out), flush=True)
    sys.stdin.readline()  # held until the test is done
    sys.exit(0)
print(json.dumps(out), flush=True)
"""


class Peer:
    """The socket as another user reaches it: a hard link in a directory anyone may
    enter, the socket's mode opened (the service's own directory stays 0700)."""

    def __init__(self, socket_path: str) -> None:
        self.folder = tempfile.mkdtemp(prefix="tht-peer-")
        os.chmod(self.folder, 0o755)
        os.chmod(socket_path, 0o666)
        self.path = os.path.join(self.folder, "service.sock")
        os.link(socket_path, self.path)

    def start(self, mode: str, timeout: float = HANG) -> subprocess.Popen:
        return subprocess.Popen(
            ["/usr/bin/python3", "-c", PEER, self.path, mode, str(timeout)],
            user=NOBODY,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, mode: str) -> dict:
        process = self.start(mode)
        out, _ = process.communicate(timeout=2 * HANG)
        assert process.returncode == 0, out
        return json.loads(out)

    def close(self) -> None:
        os.unlink(self.path)
        os.rmdir(self.folder)


def refusal(answer: dict) -> tuple[int, dict]:
    return answer["exit"], json.loads(answer["stdout"])["error"]


@pytest.fixture
def start_service(database, tmp_path, monkeypatch):
    """A service in this process (its socket and threads are real) on the test
    database, with the limits a test gives."""
    for key in list(os.environ):
        if key.startswith("THT_"):
            monkeypatch.delenv(key)
    for key, value in database.env().items():
        monkeypatch.setenv(key, value)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("THT_HOME", str(home))
    started: list[tuple[Service, Peer]] = []

    def start(**limits) -> tuple[Service, Peer]:
        service = Service(home, **limits)
        service.acquire()
        service.start()
        started.append((service, Peer(paths.socket_path(home))))
        return started[-1]

    yield start
    for service, peer in started:
        peer.close()
        service.close()


def operator_connection(service: Service) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(HANG)
    sock.connect(paths.socket_path(service.home))
    return sock


def ask(sock: socket.socket, request: dict) -> dict:
    sock.sendall(json.dumps(request).encode() + b"\n")
    return json.loads(sock.makefile("rb").readline())


def test_a_peer_of_another_user_may_send_no_more_than_an_http_client_before_its_token(
    start_service,
):
    service, peer = start_service()
    assert MAX_PEER_REQUEST_BYTES == MAX_DOCUMENT_BYTES  # the HTTP body limit
    large = peer.run("large")  # tries to send 64 MiB without a newline
    code, error = refusal(large["answer"])
    assert (code, error["code"]) == (2, "payload_too_large")
    assert error["details"] == {"limit": MAX_PEER_REQUEST_BYTES}
    # the service stopped reading at the limit: the rest never left the peer (a few
    # socket buffers at most)
    assert large["sent"] < 8 * MAX_PEER_REQUEST_BYTES, large["sent"]
    # the operator's request of the same size is read whole (then judged: not JSON)
    with operator_connection(service) as sock:
        sock.sendall(b"x" * (4 * MAX_PEER_REQUEST_BYTES) + b"\n")
        answer = json.loads(sock.makefile("rb").readline())
    assert refusal(answer) == (
        2,
        {"code": "invalid_input", "message": "the request is not JSON", "details": None},
    )


def test_a_peer_of_another_user_that_sends_nothing_or_half_a_line_is_closed(start_service):
    service, peer = start_service(peer_request_seconds=1.0)
    for mode in ("silent", "partial"):
        seen = peer.run(mode)
        code, error = refusal(seen["answer"])
        assert (code, error["code"]) == (2, "request_timeout"), (mode, seen)
        assert seen["closed"], mode
    # the operator is not timed (its client reads the files it sends once connected)
    with operator_connection(service) as sock:
        sock.settimeout(3.0)
        with pytest.raises(TimeoutError):
            sock.recv(1)
        sock.settimeout(HANG)
        assert ask(sock, {"op": "status"})["status"]["pid"] == os.getpid()


def test_connections_beyond_the_cap_are_answered_service_busy_at_once(start_service, database):
    service, peer = start_service(max_connections=4, max_peer_connections=2)
    holder = peer.start("hold")  # two connections held, a third refused
    try:
        held = json.loads(holder.stdout.readline())
        code, error = refusal(held["answer"])
        assert (code, error["code"]) == (10, "service_busy")
        assert error["details"] == {"limit": 2} and "other users" in error["message"]
        # the operator keeps its room: two more connections, then the cap of all
        mine = [operator_connection(service) for _ in range(2)]
        with operator_connection(service) as beyond:
            code, error = refusal(json.loads(beyond.makefile("rb").readline()))
        assert (code, error["code"], error["details"]) == (10, "service_busy", {"limit": 4})
        # the commands a user types get the same answer, exit 10
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("THT_")},
            **database.env(),
            "THT_HOME": str(service.home),
            "THT_SERVICE": "auto",
        }
        for command in (["health"], ["workspace", "list"]):
            done = subprocess.run(
                [sys.executable, "-m", "tht", *command],
                env=env,
                capture_output=True,
                text=True,
                timeout=2 * HANG,
            )
            assert done.stdout, (command, done.returncode, done.stderr[-3000:])
            document = json.loads(done.stdout)
            assert (done.returncode, document["error"]["code"]) == (10, "service_busy"), command
        # a connection that closes gives its place back
        mine.pop().close()
        assert wait_for(lambda: _status_answers(service), HANG)
        for sock in mine:
            sock.close()
    finally:
        holder.stdin.close()
        holder.wait(timeout=HANG)


def _status_answers(service: Service) -> bool:
    """The service answers a new connection (False while it still refuses one: the
    slots of closed connections come back once the service has seen them close)."""
    try:
        with operator_connection(service) as sock:
            return "status" in ask(sock, {"op": "status"})
    except (OSError, ValueError):
        return False


def test_health_on_the_socket_gives_the_details_to_the_operator_only(start_service):
    service, peer = start_service()
    with operator_connection(service) as sock:
        mine = ask(sock, {"op": "health"})
    assert mine["http_status"] == 200 and "latency_ms" in mine["health"]["dependencies"][0]
    theirs = peer.run("health")["answer"]
    assert theirs["http_status"] == 200
    assert theirs["health"]["status"] == "ok"
    # statuses only: no latency, no message, no URL
    assert [set(d) for d in theirs["health"]["dependencies"]] == [
        {"name", "kind", "required", "status"}
    ] * len(mine["health"]["dependencies"])
    assert theirs["health"]["dependencies"][0] == {
        "name": "archive",
        "kind": "archive",
        "required": True,
        "status": "ok",
    }
