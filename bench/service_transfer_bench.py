"""Bulk export and import through the service: the service's peak memory while a large
export streams to the client (read at full speed, or by a slow reader), and while a
large file is imported through the Unix socket.

Runs the installed `tht` on a fresh THT_HOME with the embedded engines, as a user
types it. The figure is the service process's resident memory sampled every 10 ms
(its growth over what it held before the command); the export's size is printed
beside it. Compare with an older build by running this script with that build's
sources first on PYTHONPATH (the service the client starts inherits it).

    .venv/bin/python bench/service_transfer_bench.py --cards 100000 [--slow-kib-s 4096]
    .venv/bin/python bench/service_transfer_bench.py --cards 0 --import-mib 100
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_common import load_cards, vocabulary
from tht.bootstrap import migration_packs
from tht.db.embedded import EmbeddedPostgres

THT = [sys.executable, "-m", "tht"]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Sampler:
    """The peak resident memory of a process while a block runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = rss_kib(pid)
        self.peak = self.before
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, rss_kib(self.pid))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def figures(self) -> dict:
        return {
            "service_rss_before_mib": round(self.before / 1024, 1),
            "service_rss_peak_mib": round(self.peak / 1024, 1),
            "growth_mib": round((self.peak - self.before) / 1024, 1),
        }


def service_pid(home: Path) -> int:
    return int(json.loads((home / "run" / "service.json").read_text())["pid"])


def export(env: dict, config: str, home: Path, slow_kib_s: int | None) -> dict:
    """`tht memory export` through the service, its stdout read at full speed (to a
    file) or at ``slow_kib_s``."""
    out = home / "export.jsonl"
    started = time.perf_counter()
    with Sampler(service_pid(home)) as sampler:
        if slow_kib_s is None:
            with out.open("wb") as sink:
                done = subprocess.run(
                    [*THT, "memory", "export", "-c", config], env=env, stdout=sink, check=False
                )
            code, size = done.returncode, out.stat().st_size
        else:
            command = subprocess.Popen(
                [*THT, "memory", "export", "-c", config], env=env, stdout=subprocess.PIPE
            )
            assert command.stdout is not None
            size = 0
            while block := command.stdout.read(64 * 1024):
                size += len(block)
                time.sleep(len(block) / 1024 / slow_kib_s)
            code = command.wait()
    assert code == 0, code
    return {
        "reader": "full speed" if slow_kib_s is None else f"{slow_kib_s} KiB/s",
        "export_mib": round(size / 2**20, 1),
        "seconds": round(time.perf_counter() - started, 1),
        **sampler.figures(),
    }


def import_file(env: dict, config: str, home: Path, mib: int) -> list[dict]:
    """`tht memory import` of a generated jsonl file of ``mib`` MiB through the socket,
    then (into another workspace) in its own process: the peak memory of the service's
    growth beside the peak of the process doing the same import alone."""
    path = home / "big.jsonl"
    count = 0
    with path.open("w") as out:
        while out.tell() < mib * 2**20:
            document = {
                "family": "sql_rule",
                "title": f"Rule {count}",
                "content": f"rule {count} " + "c" * 19_000,
                "scope": "Accounting",
                "rationale": "r" * 19_000,
                "context": "x" * 19_000,
                "sql": "SELECT 1 -- " + "s" * 45_000,
            }
            out.write(json.dumps(document) + "\n")
            count += 1
    started = time.perf_counter()
    with Sampler(service_pid(home)) as sampler:
        done = subprocess.run(
            [*THT, "memory", "import", str(path), "-c", config],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr[-1000:]
    summary = json.loads(done.stdout)
    through = {
        "import_mib": round(path.stat().st_size / 2**20, 1),
        "where": "service (file passed open)",
        "created": summary["created"],
        "seconds": round(time.perf_counter() - started, 1),
        **sampler.figures(),
    }
    from tht.service.client import stop_service

    stop_service(str(home))  # the embedded index admits one process
    subprocess.run(
        [*THT, "workspace", "create", "alone", "--language", "en"],
        env={**env, "THT_SERVICE": "off"},
        check=True,
        capture_output=True,
    )
    alone_config = home / "alone.yaml"
    alone_config.write_text("workspace: alone\nembedding: {provider: hashing, dimension: 384}\n")
    started = time.perf_counter()
    process = subprocess.Popen(
        [*THT, "memory", "import", str(path), "-c", str(alone_config)],
        env={**env, "THT_SERVICE": "off"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, process.returncode
    alone = {
        "import_mib": through["import_mib"],
        "where": "own process (THT_SERVICE=off)",
        "seconds": round(time.perf_counter() - started, 1),
        "process_peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }
    return [through, alone]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=100_000, help="cards to export")
    parser.add_argument("--slow-kib-s", type=int, default=0, help="also a reader at this pace")
    parser.add_argument("--import-mib", type=int, default=0, help="also import a file this big")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tht-transfer-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env["THT_HOME"] = str(home)
    config = home / "bench.yaml"
    config.write_text("workspace: bench\nembedding: {provider: hashing, dimension: 384}\n")
    results: list[dict] = []
    try:
        subprocess.run(
            [*THT, "workspace", "create", "bench", "--language", "en"],
            env={**env, "THT_SERVICE": "off"},
            check=True,
            capture_output=True,
        )
        if args.cards:
            settings, _ = EmbeddedPostgres(home).prepare(migration_packs())
            rng = random.Random(11)
            load_cards(settings.runtime_conninfo, "bench", args.cards, rng, vocabulary(rng))
        subprocess.run([*THT, "workspace", "list"], env=env, check=True, capture_output=True)
        if args.cards:
            results.append(export(env, str(config), home, None))
            if args.slow_kib_s:
                results.append(export(env, str(config), home, args.slow_kib_s))
        if args.import_mib:
            results += import_file(env, str(config), home, args.import_mib)
    finally:
        from tht.service.client import stop_service

        stop_service(str(home))
        EmbeddedPostgres(home).stop()
        shutil.rmtree(home, ignore_errors=True)
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
