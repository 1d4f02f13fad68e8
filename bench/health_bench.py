"""Health and connection-limit benchmark: a real `tht serve` process on an embedded
PostgreSQL of its own, measured under the faults of the health-and-limits issue. Not
a test.

1. a hung embedder (a local listener that accepts and never answers; the embedder's
   timeout 40 s): how long one `/healthz` takes, then a second one, then how long an
   admin's list request takes while 45 anonymous `/healthz` requests are in flight;
2. a hung PostgreSQL (its postmaster and backends SIGSTOPped): how long `/healthz`
   takes and what it answers (the client gives up after 60 s), then SIGCONT;
3. 230 half-sent request heads from 127.0.0.2: what a request from 127.0.0.1 gets,
   and how many of the 230 connections the server still holds after a second.

Run it against another checkout by putting its src first:
    PYTHONPATH=/path/to/other/src .venv/bin/python bench/health_bench.py
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tht.db.embedded import MIGRATOR, EmbeddedPostgres

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import prepare_database

DATABASE = "healthbench"
WORKSPACE = "bench"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class HungListener:
    """Accepts connections and never answers (what a stuck embedder looks like)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.held: list[socket.socket] = []
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
            self.held.append(connection)


def timed_get(port: int, path: str, token: str | None = None, timeout: float = 60) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    started = time.perf_counter()
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        status: int | str = response.status
    except (OSError, http.client.HTTPException) as exc:
        status, body = type(exc).__name__, b""
    finally:
        conn.close()
    seconds = round(time.perf_counter() - started, 3)
    try:
        document = json.loads(body) if body else None
    except ValueError:
        document = None
    return {"status": status, "seconds": seconds, "document": document}


@contextmanager
def serving(home: Path, env: dict[str, str], embedding: str) -> Iterator[tuple[int, str, int]]:
    """`tht serve` with ``embedding`` (YAML flow mapping); yields (port, admin token, pid)."""
    config = home / "serve.yaml"
    config.write_text(f"index: {{engine: edge, path: {home / 'index'}}}\nembedding: {embedding}\n")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tht", "serve", "--port", str(port), "-c", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=home,
    )
    try:
        ready = json.loads(process.stdout.readline())
        token = Path(ready["admin_token_file"]).read_text().strip()
        yield port, token, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def hung_embedder(port: int, token: str, concurrent: int) -> dict:
    first = timed_get(port, "/healthz")
    second = timed_get(port, "/healthz")
    results: list[dict] = []
    threads = [
        threading.Thread(target=lambda: results.append(timed_get(port, "/healthz")))
        for _ in range(concurrent)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # the anonymous requests are in flight
    listed = timed_get(port, f"/api/workspaces/{WORKSPACE}/memory", token)
    for thread in threads:
        thread.join(timeout=120)
    return {
        "first_healthz": {k: first[k] for k in ("status", "seconds")},
        "first_document": first["document"],
        "second_healthz_seconds": second["seconds"],
        "admin_list_during_flood": {k: listed[k] for k in ("status", "seconds")},
        "flood_requests": concurrent,
        "flood_all_answered_after_s": round(time.perf_counter() - started, 3),
        "flood_slowest_s": max((r["seconds"] for r in results), default=None),
    }


def postgres_pids(pgdata: Path) -> list[int]:
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster:
                children.append(int(entry.name))
    return [postmaster, *children]


def hung_postgres(port: int, pgdata: Path) -> dict:
    before = timed_get(port, "/healthz")
    pids = postgres_pids(pgdata)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)  # past any cached answer
        hung = timed_get(port, "/healthz")
        again = timed_get(port, "/healthz")
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 60
    recovered = timed_get(port, "/healthz")
    while recovered["status"] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
        recovered = timed_get(port, "/healthz")
    return {
        "before": {k: before[k] for k in ("status", "seconds")},
        "stopped_processes": len(pids),
        "hung": {k: hung[k] for k in ("status", "seconds")},
        "hung_document": hung["document"],
        "hung_again": {k: again[k] for k in ("status", "seconds")},
        "after_sigcont_status": recovered["status"],
    }


def half_sent_heads(port: int, count: int) -> dict:
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.2", 0))
        sock.settimeout(5)
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        except OSError:
            pass
        held.append(sock)
    time.sleep(1.0)
    still_open = 0
    for sock in held:
        sock.setblocking(False)
        try:
            sock.recv(1, socket.MSG_PEEK)  # closed, or answered (then closed)
        except BlockingIOError:
            still_open += 1  # nothing to read, not closed: the server holds it
        except OSError:
            pass
    other = timed_get(port, "/healthz", timeout=30)
    for sock in held:
        sock.close()
    return {
        "half_sent_from_127_0_0_2": count,
        "held_open_after_1s": still_open,
        "request_from_127_0_0_1": {k: other[k] for k in ("status", "seconds")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=45)
    parser.add_argument("--half-sent", type=int, default=230)
    args = parser.parse_args()
    import tht

    home = Path(tempfile.mkdtemp(prefix="tht-healthbench-"))
    embedded = EmbeddedPostgres(home / "pg")
    listener = HungListener()
    try:
        runtime = prepare_database(embedded, DATABASE)
        env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
        env.update(
            THT_CATALOG_RUNTIME_DATABASE_URL=runtime,
            THT_CATALOG_MIGRATOR_DATABASE_URL=embedded.conninfo(MIGRATOR, DATABASE),
            THT_HOME=str(home / "home"),
            THT_SERVICE="off",
        )
        subprocess.run(
            [sys.executable, "-m", "tht", "workspace", "create", WORKSPACE, "--language", "en"],
            env=env,
            check=True,
            capture_output=True,
        )
        report: dict = {"code": str(Path(tht.__file__).parent), "cpus": os.cpu_count()}
        hung = f"{{provider: openai, url: '{listener.url}', model: stuck, timeout: 40}}"
        with serving(home, env, hung) as (port, token, _pid):
            report["hung_embedder"] = hung_embedder(port, token, args.concurrent)
        with serving(home, env, "{provider: hashing, dimension: 64}") as (port, token, _pid):
            report["hung_postgres"] = hung_postgres(port, embedded.pgdata)
            report["half_sent_heads"] = half_sent_heads(port, args.half_sent)
        print(json.dumps(report, indent=2))
    finally:
        listener.sock.close()
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
