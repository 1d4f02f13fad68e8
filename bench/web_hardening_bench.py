"""Web hardening benchmark: a real `tht serve` process on the embedded PostgreSQL,
measured under the attacks of the hardening issue. Not a test.

1. chunked body: POST /api/session, Transfer-Encoding: chunked, 300 x 1 MiB,
   unauthenticated; the server's RSS and peak RSS (VmHWM) before and after, when the
   413 arrived, how many chunks were sent before the connection closed;
2. login latency (median) per kind of name: unknown, token-only user, password user
   (wrong and right password); the failure record is emptied between attempts so the
   backoff does not answer instead of the password check;
3. admin list latency (median, p90) alone and under an 8-thread login flood: from one
   client and one name (what the backoff meets), and spread over names and client
   addresses (X-Forwarded-For, which uvicorn trusts from loopback) so that every
   attempt reaches scrypt.

Run it against another checkout by putting its src first:
    PYTHONPATH=/path/to/other/src .venv/bin/python bench/web_hardening_bench.py
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from tht.db.embedded import MIGRATOR, RUNTIME, EmbeddedPostgres
from tht.memory.migrations import migrate

WORKSPACE = "bench"
PASSWORD = "correct horse battery"
MIB = 1 << 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def request(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: dict | None = None,
    headers: dict | None = None,
) -> tuple[int, float]:
    data = json.dumps(body).encode() if body is not None else None
    started = time.perf_counter()
    conn.request(
        method,
        path,
        body=data,
        headers={**({"Content-Type": "application/json"} if data else {}), **(headers or {})},
    )
    response = conn.getresponse()
    response.read()
    return response.status, (time.perf_counter() - started) * 1000


def chunked_attack(port: int, pid: int, chunks: int) -> dict:
    before = memory_kib(pid)
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    received = bytearray()
    answered: list[float] = []
    closed = threading.Event()

    def read() -> None:
        try:
            while data := sock.recv(65536):
                if not received:
                    answered.append(time.perf_counter())
                received.extend(data)
        except OSError:
            pass
        closed.set()

    threading.Thread(target=read, daemon=True).start()
    sock.sendall(
        f"POST /api/session HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n".encode()
    )
    chunk = f"{MIB:x}\r\n".encode() + b" " * MIB + b"\r\n"
    started, sent, peak = time.perf_counter(), 0, before["VmRSS"]
    try:
        for _ in range(chunks):
            sock.sendall(chunk)
            sent += 1
            peak = max(peak, memory_kib(pid)["VmRSS"])
        sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    finished_sending = time.perf_counter()
    closed.wait(timeout=120)
    sock.close()
    time.sleep(0.5)
    after = memory_kib(pid)
    status = bytes(received).split(b"\r\n", 1)[0].decode(errors="replace")
    return {
        "status_line": status,
        "chunks_sent": sent,
        "chunks": chunks,
        "answer_after_s": round(answered[0] - started, 3) if answered else None,
        "sending_stopped_after_s": round(finished_sending - started, 3),
        "rss_mb_before": round(before["VmRSS"] / 1024),
        "rss_mb_peak_sampled": round(peak / 1024),
        "rss_mb_after": round(after["VmRSS"] / 1024),
        "vmhwm_mb_before": round(before["VmHWM"] / 1024),
        "vmhwm_mb_after": round(after["VmHWM"] / 1024),
    }


def forget_failures(superuser: str) -> None:
    with psycopg.connect(superuser, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('thoth_memory.login_attempts')").fetchone()[0]:
            conn.execute("DELETE FROM thoth_memory.login_attempts")


def login_medians(port: int, superuser: str, attempts: int) -> dict:
    kinds = {
        "unknown name": ("nobody", "wrong password!!"),
        "token-only user": ("token_user", "wrong password!!"),
        "password user, wrong password": ("pw_user", "wrong password!!"),
        "password user, right password": ("pw_user", PASSWORD),
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    timings: dict[str, list[float]] = {kind: [] for kind in kinds}
    statuses: dict[str, set[int]] = {kind: set() for kind in kinds}
    for i in range(attempts + 3):  # interleaved, the first three rounds are warm-up
        for kind, (name, password) in kinds.items():
            forget_failures(superuser)
            status, ms = request(
                conn,
                "POST",
                "/api/session",
                {"name": name, "password": password},
                {"Origin": f"http://127.0.0.1:{port}"},
            )
            statuses[kind].add(status)
            if i >= 3:
                timings[kind].append(ms)
    conn.close()
    return {
        kind: {"median_ms": round(statistics.median(t), 1), "statuses": sorted(statuses[kind])}
        for kind, t in timings.items()
    }


def list_latency(port: int, token: str, count: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    path = f"/api/workspaces/{WORKSPACE}/memory?page_size=20"
    timings = []
    for _ in range(count):
        status, ms = request(conn, "GET", path, headers={"Authorization": f"Bearer {token}"})
        assert status == 200, status
        timings.append(ms)
    conn.close()
    timings.sort()
    return {
        "median_ms": round(statistics.median(timings), 1),
        "p90_ms": round(timings[int(len(timings) * 0.9)], 1),
    }


def under_flood(port: int, token: str, count: int, spread: bool) -> dict:
    stop = threading.Event()
    outcomes: queue.Queue = queue.Queue()

    def flood(worker: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        i = 0
        while not stop.is_set():
            i += 1
            name = f"flood{worker}x{i}" if spread else "pw_user"
            headers = (
                {"X-Forwarded-For": f"10.{worker}.{i // 250 % 250}.{i % 250 + 1}"} if spread else {}
            )
            try:
                status, _ = request(
                    conn,
                    "POST",
                    "/api/session",
                    {"name": name, "password": "wrong password!!"},
                    headers,
                )
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                status = -1
            outcomes.put(status)
        conn.close()

    threads = [threading.Thread(target=flood, args=(w,), daemon=True) for w in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    started = time.perf_counter()
    latency = list_latency(port, token, count)
    elapsed = time.perf_counter() - started
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    counted: dict[int, int] = {}
    while not outcomes.empty():
        status = outcomes.get()
        counted[status] = counted.get(status, 0) + 1
    return {
        **latency,
        "login_answers": counted,
        "login_rate_per_s": round(sum(counted.values()) / (elapsed + 1), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=300)
    parser.add_argument("--attempts", type=int, default=30)
    parser.add_argument("--lists", type=int, default=100)
    args = parser.parse_args()
    import tht

    home = Path(tempfile.mkdtemp(prefix="tht-webbench-"))
    embedded = EmbeddedPostgres(home / "pg")
    process = None
    try:
        embedded.ensure_roles_and_database("webbench")
        with psycopg.connect(embedded.conninfo(MIGRATOR, "webbench"), autocommit=True) as conn:
            migrate(conn, runtime_login=RUNTIME)
        env = {k: v for k, v in os.environ.items() if not k.startswith("THT_CATALOG_")}
        env.update(
            THT_CATALOG_RUNTIME_DATABASE_URL=embedded.conninfo(RUNTIME, "webbench"),
            THT_CATALOG_MIGRATOR_DATABASE_URL=embedded.conninfo(MIGRATOR, "webbench"),
            THT_HOME=str(home / "home"),
        )
        from tht.bootstrap import build_services
        from tht.installation import Installation
        from tht.memory.model import parse_card_input

        installation = Installation.model_validate(
            {
                "index": {"engine": "edge", "path": str(home / "index")},
                "embedders": {"default": {"provider": "hashing", "dimension": 64}},
            }
        )
        services = build_services(env=env, installation=installation)
        try:
            services.workspaces.create(WORKSPACE, "en")
            token = services.accounts.users.create_user("bench_admin", "admin", [WORKSPACE])[
                "token"
            ]
            services.accounts.users.create_user("pw_user", "user", [WORKSPACE], password=PASSWORD)
            services.accounts.users.create_user("token_user", "user", [WORKSPACE])
            for i in range(60):
                services.memory.create_card(
                    WORKSPACE,
                    parse_card_input(
                        {
                            "family": "sql_rule",
                            "title": f"Rule {i}",
                            "content": "Filter cancelled rows first.",
                            "scope": "Sales",
                            "rationale": "They are not revenue.",
                            "concepts": ["revenue"],
                        }
                    ),
                )
        finally:
            services.close()
        config = home / "serve.yaml"
        config.write_text(
            f"index: {{engine: edge, path: {home / 'index'}}}\nembedding: {{provider: hashing, dimension: 64}}\n"
        )
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "tht", "serve", "--port", str(port), "-c", str(config)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=home,
        )
        json.loads(process.stdout.readline())
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        superuser = embedded.superuser_conninfo("webbench")
        report = {"code": str(Path(tht.__file__).parent), "cpus": os.cpu_count()}
        report["list_alone"] = list_latency(port, token, args.lists)
        report["list_under_flood_one_client_one_name"] = under_flood(
            port, token, args.lists, spread=False
        )
        forget_failures(superuser)
        report["list_under_flood_spread"] = under_flood(port, token, args.lists, spread=True)
        forget_failures(superuser)
        report["login_medians"] = login_medians(port, superuser, args.attempts)
        report["chunked_attack"] = chunked_attack(port, process.pid, args.chunks)
        print(json.dumps(report, indent=2))
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
