"""Export benchmark: how long `memory export` holds its snapshot open, and what saves
to the same workspace cost meanwhile.

Loads N generated cards into a workspace on the embedded PostgreSQL in a temporary
home, then takes turns: saves alone (the baseline), and an export of the workspace
(to a discarded sink, one snapshot) with a thread saving cards into the same
workspace until it ends. It prints the export's cards/s and seconds (the time its
snapshot is open) and the saves' latencies in both turns: a writer blocked by the
export would wait about as long as the export; one that is not only shares the CPU.

    .venv/bin/python bench/export_bench.py [--cards 10000] [--rounds 3] [--saves 50]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench_common import analyze, load_cards, percentile, prepare_database, vocabulary
from tht.db.embedded import EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.model import parse_card_input
from tht.memory.transfer.service import CardTransfer

WORKSPACE = "bench"


def save(memory: MemoryService, n: int) -> float:
    """Seconds one save of a new card takes (its own locked transaction)."""
    document = {
        "family": "domain_clarification",
        "title": f"Saved {n}",
        "content": f"Saved {n}.",
        "scope": "Sales",
    }
    started = time.perf_counter()
    memory.create_card(WORKSPACE, parse_card_input(document))
    return time.perf_counter() - started


def figures(latencies: list[float]) -> dict:
    milliseconds = [x * 1000 for x in latencies]
    return {
        "saves": len(milliseconds),
        "p50_ms": round(percentile(milliseconds, 0.5), 1),
        "p95_ms": round(percentile(milliseconds, 0.95), 1),
        "max_ms": round(max(milliseconds), 1),
    }


def export_while_saving(
    transfer: CardTransfer, memory: MemoryService, first: int
) -> tuple[dict, int, list[float]]:
    """The export's summary and characters, and the latencies of the saves a thread
    made into the same workspace while the export's snapshot was open."""
    during: list[float] = []
    exporting, done = threading.Event(), threading.Event()
    size = [0]

    def writer() -> None:
        exporting.wait()
        while not done.is_set():
            during.append(save(memory, first + len(during)))

    def sink(text: str) -> None:
        exporting.set()  # the first batch is out: the snapshot is open
        size[0] += len(text)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        summary = transfer.export(WORKSPACE, "jsonl", sink)
    finally:
        exporting.set()
        done.set()
        thread.join()
    return summary, size[0], during


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--saves", type=int, default=50, help="saves in a baseline turn")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tht-export-bench-"))
    embedded = EmbeddedPostgres(home)
    try:
        runtime = prepare_database(embedded, "export_bench")
        archive = PostgresArchive(runtime).open()
        WorkspaceService(archive).create(WORKSPACE, "en")
        rng = random.Random(7)
        load_cards(runtime, WORKSPACE, args.cards, rng, vocabulary(rng))
        analyze(embedded, "export_bench")
        memory = MemoryService(archive)
        transfer = CardTransfer(archive)
        saved = 0
        turns = []
        for _ in range(args.rounds):
            alone = []
            for _ in range(args.saves):
                alone.append(save(memory, saved))
                saved += 1
            summary, size, during = export_while_saving(transfer, memory, saved)
            saved += len(during)
            turns.append(
                {
                    "exported_cards": summary["cards"],
                    "export_seconds": summary["seconds"],
                    "export_cards_per_second": round(summary["cards"] / summary["seconds"], 1),
                    "megabytes": round(size / 1e6, 1),
                    "saves_alone": figures(alone),
                    "saves_during_export": figures(during) if during else None,
                }
            )
        print(
            json.dumps(
                {
                    "cards": args.cards,
                    "rounds": args.rounds,
                    "turns": turns,
                    "median_export_seconds": statistics.median(t["export_seconds"] for t in turns),
                },
                indent=2,
            )
        )
        archive.close()
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
