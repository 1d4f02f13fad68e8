"""Where the HTTP service spends its interpreter time a recall request: `tht serve`
under concurrent HTTP recall clients, sampled by py-spy, the samples sorted into the
parts of a request and divided by the requests served.

    .venv/bin/python bench/http_profile.py prepare --home /tmp/h --cards 30000
    .venv/bin/python bench/http_profile.py run --home /tmp/h --seconds 15 --gil
    .venv/bin/python bench/http_profile.py run --home /tmp/h --seconds 15 --cpu-only

``prepare`` builds an installation (embedded PostgreSQL and Edge, generated cards,
`tht memory index`); ``run`` starts `tht serve` on it, warms it up, then loads it with
``--clients`` clients for ``--seconds`` while py-spy samples the service (``--gil``:
only the thread holding the interpreter lock, the serialized work; without it every
thread that runs). It prints one JSON document: requests/s, latency, the service's CPU
time a request (psutil; without py-spy when ``--cpu-only``, since sampling costs CPU
too), and milliseconds a request by part. The code measured is the one on
``PYTHONPATH`` (another revision's ``src``), the measuring code this file's.
py-spy is not a dependency of the product: ``pip install py-spy`` beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

# A sample belongs to the first of OWNERS that any frame of its stack names (the
# route's work, whatever library it calls), else to the first of LAYERS that its
# innermost frame names (the framework's own work: middleware, routing, parsing).
OWNERS: list[tuple[str, tuple[str, ...]]] = [
    ("engine query (Edge)", ("tht/memory/index/",)),
    ("query embedding", ("tht/memory/embedding/",)),
    ("token check", ("tht/access/", "resolve_principal")),
    ("binding lookup", ("tht/catalog/",)),
    ("recall: verification (archive reads)", ("tht/memory/archive/",)),
    ("recall: ranking, links, answer", ("tht/memory/", "tht/usecases/")),
    ("JSON of the answer", ("JSONResponse.render", "json/encoder")),
    ("body validation", ("request_body_to_args", "pydantic", "_validate")),
    ("request body read", ("Request.body", "Request.json")),
]
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("middleware (tht.web)", ("tht/web/guard", "tht/web/limits", "tht/web/dependencies")),
    ("routing, dependencies (Starlette/FastAPI)", ("starlette/", "fastapi/")),
    ("HTTP parsing and writing (uvicorn)", ("uvicorn/", "h11/", "httptools")),
    ("pool, connections (psycopg)", ("psycopg",)),
    ("thread hand-offs (anyio)", ("anyio/", "concurrent/futures", "threading.py", "queue.py")),
    ("event loop (asyncio)", ("asyncio/", "uvloop")),
]
OTHER = "other"


def part_of(stack: str) -> str:
    for part, markers in OWNERS:
        if any(marker in stack for marker in markers):
            return part
    for frame in reversed(stack.split(";")):
        for part, markers in LAYERS:
            if any(marker in frame for marker in markers):
                return part
    return OTHER


def read_samples(path: Path) -> Counter[str]:
    """py-spy's raw (collapsed) output: one stack a line, its count last."""
    samples: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            samples[stack] += int(count)
    return samples


def breakdown(samples: Counter[str], rate: int, requests: int) -> dict[str, float]:
    """Milliseconds a request by part (a sample stands for 1/rate of a second)."""
    parts: Counter[str] = Counter()
    for stack, count in samples.items():
        parts[part_of(stack)] += count
    per_request = {p: round(c * 1000 / rate / requests, 3) for p, c in parts.most_common()}
    per_request["total"] = round(sum(parts.values()) * 1000 / rate / requests, 3)
    return per_request


def _home(path: str) -> Any:
    import service_bench

    return service_bench.Home("hashing", Path(path))


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    home = _home(args.home)
    home.load("bench", args.cards)
    home.stop_service()
    return {"cards": args.cards, "home": args.home}


def _cpu_seconds(pid: int) -> dict[str, float]:
    """The service's CPU time: user and system, and the event loop's thread (the
    process's first) apart from the others."""
    import psutil

    process = psutil.Process(pid)
    times = process.cpu_times()
    main = next((t for t in process.threads() if t.id == pid), None)
    return {
        "user": times.user,
        "system": times.system,
        "event_loop_thread": (main.user_time + main.system_time) if main else 0.0,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:

    import service_bench
    from bench_common import ms

    home = _home(args.home)
    profile = Path(tempfile.mkdtemp(prefix="http-profile-")) / "samples.txt"
    with service_bench.serving(home) as (url, token):
        pid = service_bench.service_pid(home)
        spy = None
        service_bench.recall_clients(url, token, home, args.clients, args.warmup)
        cpu: dict[str, float] = _cpu_seconds(pid)
        if not args.cpu_only:
            command = [
                str(Path(sys.executable).parent / "py-spy"),
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(int(args.seconds)),
                "--rate",
                str(args.rate),
                "--format",
                "raw",
                "--output",
                str(profile),
                "--nonblocking",
            ]
            if args.gil:
                command.append("--gil")
            spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times = service_bench.timed_recalls(url, token, home, args.clients, args.seconds)
        after = _cpu_seconds(pid)
        if spy is not None:
            spy.wait(60)
    result: dict[str, Any] = {
        "requests_per_second": round(len(times) / args.seconds, 1),
        "latency_ms": ms(times),
        "service_cpu_ms_per_request": round(
            (after["user"] + after["system"] - cpu["user"] - cpu["system"]) * 1000 / len(times), 2
        ),
        "cpu_ms_per_request": {
            key: round((after[key] - cpu[key]) * 1000 / len(times), 2) for key in after
        },
        "load": os.getloadavg()[0],
    }
    if spy is not None:
        samples = read_samples(profile)
        result["gil" if args.gil else "cpu"] = True
        result["ms_per_request"] = breakdown(samples, args.rate, len(times))
        if args.keep_samples:
            shutil.copy(profile, args.keep_samples)
    shutil.rmtree(profile.parent, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--home", required=True)
    p.add_argument("--cards", type=int, default=30_000)
    p = sub.add_parser("run")
    p.add_argument("--home", required=True)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--warmup", type=float, default=5)
    p.add_argument("--rate", type=int, default=100, help="py-spy samples a second")
    p.add_argument("--gil", action="store_true", help="sample the lock holder only")
    p.add_argument("--cpu-only", action="store_true", help="no py-spy: the CPU figures only")
    p.add_argument("--keep-samples", help="copy py-spy's collapsed stacks to this file")
    p = sub.add_parser("breakdown", help="the parts of a kept samples file")
    p.add_argument("samples")
    p.add_argument("--rate", type=int, default=100)
    p.add_argument("--requests", type=int, required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(BENCH))
    if args.command == "breakdown":
        result = breakdown(read_samples(Path(args.samples)), args.rate, args.requests)
    else:
        result = prepare(args) if args.command == "prepare" else run(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
