"""HTTP recall through HAProxy with one replica and with two (docs/scale-out.md): the
cluster of scripts/cluster.py (PostgreSQL 18 with pgvector over TCP, two `tht serve`
replicas, HAProxy), one workspace of generated cards, the hashing embedder, concurrent
clients recalling for a fixed time.

    .venv/bin/python bench/cluster_bench.py recall --cards 100000 --clients 8 --seconds 30 --rounds 2
    .venv/bin/python bench/cluster_bench.py burst --cards 10000 --writers 4 --clients 4 --seconds 30

With ``--keep DIR`` the cluster and its cards stay in DIR for the next invocation, so
that loading and measuring can be separate runs (a 100 000-card load takes minutes):

    .venv/bin/python bench/cluster_bench.py load --cards 100000 --keep /tmp/tht-bench-100k
    .venv/bin/python bench/cluster_bench.py recall --cards 100000 --keep /tmp/tht-bench-100k
    .venv/bin/python bench/cluster_bench.py down --keep /tmp/tht-bench-100k

The two variants take turns on the same cluster (this machine is noisy): "1 replica" puts
replica 2 in maintenance through HAProxy's admin socket, "2 replicas" enables it again.
Each turn prints recalls per second, p50 and p99, and the CPU each process spent per
recall (the replicas, every PostgreSQL process, HAProxy, and this client), read from
/proc before and after the turn. The ratio of the two variants' throughputs is the
figure to compare; absolute figures depend on what else the machine runs.

`burst` is tests/integration/test_scale_out.py's burst at full length: writers on each
replica (each save with an idempotency key) and agents recalling through HAProxy; it
prints the throughput, and whether every acknowledged write is stored once and archive
and index agree (`tht memory check`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import yaml
from psycopg.conninfo import make_conninfo

from bench_common import load_cards, ms, vocabulary

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "cluster.py"
WORKSPACE = "bench"
QUESTION_WORDS = 6


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class BenchCluster:
    def __init__(self, root: Path, dimension: int) -> None:
        self.root = root
        self.config = root.parent / "config.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "index": {"engine": "pgvector"},
                    "embedders": {"default": {"provider": "hashing", "dimension": dimension}},
                    "sessions_root": str(root / "sessions"),
                    "dwh": {"warehouse": {"url_env": "WAREHOUSE_URL"}},
                }
            )
        )
        self.status: dict[str, Any] = {}

    def script(self, *args: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), *args, "--dir", str(self.root)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"cluster.py {args[0]} failed: {done.stderr}")
        return json.loads(done.stdout)

    def up(self) -> None:
        if (self.root / "cluster.json").exists():  # a kept cluster: its ports as they were
            self.status = self.script("up", "--replicas", "2", "--config", str(self.config))
            return
        replica = free_port()
        while not _free(replica + 1):
            replica = free_port()
        self.status = self.script(
            "up", "--replicas", "2", "--config", str(self.config),
            "--pg-port", str(free_port()), "--port", str(free_port()),
            "--replica-port", str(replica),
        )  # fmt: skip

    def down(self) -> None:
        subprocess.run(
            [sys.executable, str(SCRIPT), "down", "--purge", "--dir", str(self.root)],
            capture_output=True,
        )

    def operator_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
        for line in (self.root / "env").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'")
        return env | {"THT_HOME": str(self.root / "operator")}

    def tht(self, *args: str, accept: tuple[int, ...] = (0,)) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "tht", *args],
            env=self.operator_env(),
            capture_output=True,
            text=True,
            cwd=self.root,
        )
        if done.returncode not in accept:
            raise SystemExit(f"tht {' '.join(args)}: {done.stdout}{done.stderr}")
        return dict(json.loads(done.stdout))

    def conninfo(self, login: str) -> str:
        users = {"runtime": "memory_app", "migrator": "memory_migrator"}
        return make_conninfo(
            host="127.0.0.1",
            port=self.status["postgres"]["port"],
            dbname="thoth",
            user=users[login],
            password=(self.root / "secrets" / f"{login}.password").read_text().strip(),
            sslmode="disable",
        )

    def load(self, cards: int, words: list[str]) -> str:
        """The workspace, bound and granted to the admin, with ``cards`` generated cards
        indexed; its runtime file. A kept cluster already loaded with as many cards is
        used as it is."""
        runtime = self.root / "bench.yaml"
        marker = self.root / "loaded.json"
        if marker.exists():
            loaded_cards = json.loads(marker.read_text())["cards"]
            if loaded_cards != cards:
                raise SystemExit(f"{self.root} holds {loaded_cards} cards, not {cards}")
            return str(runtime)
        self.tht("workspace", "create", WORKSPACE, "--language", "en")
        runtime.write_text(
            yaml.safe_dump({"workspace": WORKSPACE, "database": "dwh", "schema": "public"})
        )
        self.tht("catalog", "bind", "-c", str(runtime), "--connection", "warehouse")
        self.tht("user", "grant", "admin", "--workspace", WORKSPACE)
        started = time.perf_counter()
        load_cards(self.conninfo("runtime"), WORKSPACE, cards, random.Random(11), words)
        loaded = time.perf_counter()
        self.tht("memory", "index", "-c", str(runtime))
        indexed = time.perf_counter()
        with psycopg.connect(self.conninfo("migrator"), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        timing = {
            "cards": cards,
            "archive_load_s": round(loaded - started, 1),
            "index_s": round(indexed - loaded, 1),
            "vacuum_analyze_s": round(time.perf_counter() - indexed, 1),
        }
        marker.write_text(json.dumps(timing))
        print(json.dumps(timing), file=sys.stderr)
        return str(runtime)

    def haproxy(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX) as connection:
            connection.connect(self.status["haproxy"]["socket"])
            connection.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := connection.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def replicas_in_use(self, count: int) -> None:
        """Replica 2 in maintenance (one replica) or back (two), as HAProxy sees it."""
        self.haproxy(f"{'enable' if count == 2 else 'disable'} server replicas/replica-2")
        wanted = "UP" if count == 2 else "MAINT"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.script("status")["replicas"][1]["haproxy"] == wanted:
                return
            time.sleep(0.2)
        raise SystemExit(f"replica-2 never became {wanted}")

    def processes(self) -> dict[str, list[psutil.Process]]:
        postmaster = psutil.Process(self.status["postgres"]["pid"])
        return {
            "replicas": [psutil.Process(r["pid"]) for r in self.status["replicas"]],
            "postgres": [postmaster, *postmaster.children(recursive=True)],
            "haproxy": [psutil.Process(self.status["haproxy"]["pid"])],
            "client": [psutil.Process()],
        }


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cpu_seconds(processes: dict[str, list[psutil.Process]]) -> dict[str, dict[int, float]]:
    """CPU seconds (user + system) each process spent so far, by group and pid."""
    found: dict[str, dict[int, float]] = {}
    for group, members in processes.items():
        found[group] = {}
        for process in members:
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            found[group][process.pid] = times.user + times.system
    return found


def spent(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]) -> dict:
    """CPU seconds per group between two readings (a process gone since is not counted)."""
    return {
        group: sum(after[group][pid] - before[group].get(pid, 0.0) for pid in after[group])
        for group in after
    }


def turn(
    cluster: BenchCluster,
    url: str,
    token: str,
    words: list[str],
    clients: int,
    seconds: float,
    warmup: float,
) -> dict[str, Any]:
    times: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def client(seed: int, until: float, record: bool) -> None:
        rng = random.Random(seed)
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as session:
            while time.perf_counter() < until:
                question = " ".join(rng.choices(words, k=QUESTION_WORDS))
                started = time.perf_counter()
                response = session.post(
                    f"/api/workspaces/{WORKSPACE}/memory/search", json={"question": question}
                )
                elapsed = time.perf_counter() - started
                if record:
                    with lock:
                        times.append(elapsed)
                        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    before: dict[str, dict[int, float]] = {}
    for record, length in ((False, warmup), (True, seconds)):
        processes = cluster.processes()
        before = cpu_seconds(processes)
        started = time.perf_counter()
        deadline = started + length
        threads = [
            threading.Thread(target=client, args=(n + int(started), deadline, record))
            for n in range(clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    elapsed = time.perf_counter() - started
    used = spent(before, cpu_seconds(cluster.processes()))
    count = len(times)
    return {
        "recalls_per_second": round(count / elapsed, 1),
        "latency_ms": ms(times) if times else {},
        "statuses": statuses,
        "cpu_ms_per_recall": {g: round(s * 1000 / max(count, 1), 2) for g, s in used.items()},
        "cpu_cores_busy": {g: round(s / elapsed, 2) for g, s in used.items()},
    }


def recall(cluster: BenchCluster, args: argparse.Namespace, words: list[str]) -> dict:
    """One replica against two, taking turns, on one workspace of ``args.cards`` cards."""
    cluster.load(args.cards, words)
    token = Path(cluster.status["admin_token_file"]).read_text().strip()
    turns: dict[str, list[dict[str, Any]]] = {"1 replica": [], "2 replicas": []}
    for round_ in range(args.rounds):
        for count in (1, 2) if round_ % 2 == 0 else (2, 1):
            cluster.replicas_in_use(count)
            name = "1 replica" if count == 1 else "2 replicas"
            result = turn(
                cluster,
                cluster.status["url"],
                token,
                words,
                args.clients,
                args.seconds,
                args.warmup,
            )
            turns[name].append(result)
            if set(result["statuses"]) != {200}:
                raise SystemExit(f"{name}: answers other than 200: {result['statuses']}")
            print(f"{name}: {json.dumps(result)}", file=sys.stderr)
    cluster.replicas_in_use(2)  # a kept cluster is left as `cluster.py up` expects it
    one = statistics.median(t["recalls_per_second"] for t in turns["1 replica"])
    two = statistics.median(t["recalls_per_second"] for t in turns["2 replicas"])
    return {
        "scenario": "cluster http recall",
        "cards": args.cards,
        "embedder": f"hashing {args.dimension}",
        "index": "pgvector",
        "clients": args.clients,
        "seconds": args.seconds,
        "cpus": os.cpu_count(),
        "turns": turns,
        "two_over_one": round(two / one, 2) if one else None,
    }


def burst(cluster: BenchCluster, args: argparse.Namespace, words: list[str]) -> dict:
    """``args.writers`` writers on each replica, each save with an idempotency key, and
    ``args.clients`` agents recalling through HAProxy for ``args.seconds``; then every
    acknowledged write must be stored once and `tht memory check` must agree (the
    scale-out test's burst, at the length the test shortens)."""
    runtime = cluster.load(args.cards, words)
    token = Path(cluster.status["admin_token_file"]).read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}
    acknowledged: dict[str, str] = {}
    problems: list[str] = []
    recalls: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    base = f"/api/workspaces/{WORKSPACE}/memory"

    def writer(number: int, url: str) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            n = 0
            while not stop.is_set():
                title = f"writer {number} card {n}"
                body = {
                    "family": "sql_rule",
                    "title": title,
                    "content": " ".join(random.choices(words, k=20)),
                    "scope": "Sales",
                    "rationale": "because",
                    "dependencies": [{"database": "dwh", "schema": "public", "table": "t"}],
                }
                key = str(uuid.uuid4())
                response = client.post(base, json=body, headers={"Idempotency-Key": key})
                with lock:
                    if response.status_code in (200, 201):
                        acknowledged[title] = response.json()["card"]["id"]
                    else:
                        problems.append(f"{title}: {response.status_code} {response.text[:200]}")
                n += 1

    def agent(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=cluster.status["url"], headers=headers, timeout=60) as client:
            while not stop.is_set():
                started = time.perf_counter()
                response = client.post(
                    f"{base}/search", json={"question": " ".join(rng.choices(words, k=6))}
                )
                with lock:
                    recalls.append(time.perf_counter() - started)
                    if response.status_code != 200:
                        problems.append(f"recall: {response.status_code}")

    urls = [r["url"] for r in cluster.status["replicas"]]
    threads = [
        threading.Thread(target=writer, args=(n, urls[n % len(urls)]))
        for n in range(args.writers * len(urls))
    ] + [threading.Thread(target=agent, args=(n,)) for n in range(args.clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(args.seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    stored: list[dict[str, Any]] = []
    with httpx.Client(base_url=cluster.status["url"], headers=headers, timeout=60) as client:
        page = 1
        while True:
            listed = client.get(base, params={"page_size": 100, "page": page}).json()
            stored += listed["items"]
            if len(stored) >= listed["total"] or not listed["items"]:
                break
            page += 1
    titles = [c["title"] for c in stored if c["title"].startswith("writer ")]
    by_title = {c["title"]: c["id"] for c in stored}
    check = cluster.tht("memory", "check", "-c", runtime, accept=(0, 8))  # 8: index_drift
    return {
        "scenario": "cluster burst",
        "cards_before": args.cards,
        "writers": args.writers * len(urls),
        "agents": args.clients,
        "seconds": round(elapsed, 1),
        "writes_acknowledged": len(acknowledged),
        "writes_per_second": round(len(acknowledged) / elapsed, 1),
        "recalls_per_second": round(len(recalls) / elapsed, 1),
        "recall_latency_ms": ms(recalls) if recalls else {},
        "problems": problems[:20],
        "stored_twice": len(titles) - len(set(titles)),
        "acknowledged_missing": sum(1 for t, i in acknowledged.items() if by_title.get(t) != i),
        "check": check.get("error") or {k: check.get(k) for k in ("cards", "points", "pending")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "scenario", choices=["recall", "burst", "load", "down"], nargs="?", default="recall"
    )
    parser.add_argument("--cards", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8, help="recalling clients (agents)")
    parser.add_argument("--writers", type=int, default=4, help="writers per replica (burst)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2, help="turns of each variant")
    parser.add_argument("--dimension", type=int, default=384, help="the hashing embedder's")
    parser.add_argument(
        "--keep",
        type=Path,
        help="the cluster's folder, kept for the next invocation (default: a temporary one)",
    )
    args = parser.parse_args()
    if args.keep is None:
        folder = Path(tempfile.mkdtemp(prefix="tht-cluster-bench-"))
    else:
        folder = args.keep.resolve()
        folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o711)  # PostgreSQL runs as another user when this runs as root
    cluster = BenchCluster(folder / "cluster", args.dimension)
    words = vocabulary(random.Random(7))
    if args.scenario == "down":
        cluster.down()
        subprocess.run(["rm", "-rf", str(folder)], check=False)
        return
    try:
        cluster.up()
        if args.scenario == "load":
            cluster.load(args.cards, words)
        else:
            run = recall if args.scenario == "recall" else burst
            print(json.dumps(run(cluster, args, words), indent=2))
    finally:
        if args.keep is None:
            cluster.down()
            subprocess.run(["rm", "-rf", str(folder)], check=False)


if __name__ == "__main__":
    main()
