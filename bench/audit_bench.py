"""Audit log cost: card mutations with the cards' audit trigger (migration 012) and with
it disabled, taking turns, on the embedded PostgreSQL in a temporary home.

Each round creates, updates and deletes ``--cards`` cards (no search index, so only the
archive transaction is timed), once with the trigger and once without; the order
alternates per round. Prints the median milliseconds of each operation per variant and
the ratio (with / without).

    .venv/bin/python bench/audit_bench.py [--rounds 6] [--cards 60]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import psycopg

from tht import audit
from tht.db.embedded import MIGRATOR, RUNTIME, EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.migrations import migrate
from tht.memory.model import parse_card_input

TRIGGERS = ("cards_audit", "cards_audit_update")


def document(i: int, title: str) -> dict:
    return {
        "family": "sql_rule",
        "title": f"{title} {i}",
        "content": "Filter cancelled orders before summing revenue.",
        "scope": "Sales",
        "rationale": "Cancelled orders are not revenue.",
        "dependencies": [{"database": "dwh", "schema": "sales", "table": "orders"}],
    }


def one_round(memory: MemoryService, cards: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {"create": [], "update": [], "delete": []}
    ids = []
    for i in range(cards):
        t0 = time.perf_counter()
        ids.append(memory.create_card("bench", parse_card_input(document(i, "Rule"))).card.id)
        timings["create"].append((time.perf_counter() - t0) * 1000)
    for i, card_id in enumerate(ids):
        data = parse_card_input(document(i, "Edited"), card_id=card_id, workspace="bench")
        t0 = time.perf_counter()
        memory.update_card("bench", card_id, data)
        timings["update"].append((time.perf_counter() - t0) * 1000)
    for card_id in ids:
        t0 = time.perf_counter()
        memory.delete_card("bench", card_id)
        timings["delete"].append((time.perf_counter() - t0) * 1000)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cards", type=int, default=60)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tht-bench-audit-"))
    embedded = EmbeddedPostgres(home)
    try:
        embedded.ensure_roles_and_database("thoth_bench")
        migrator = embedded.conninfo(MIGRATOR, "thoth_bench")
        with psycopg.connect(migrator, autocommit=True) as conn:
            migrate(conn, runtime_login=RUNTIME)
        archive = PostgresArchive(embedded.conninfo(RUNTIME, "thoth_bench")).open()
        WorkspaceService(archive).create("bench", "en")
        memory = MemoryService(archive)
        audit.act_as("bench-admin")
        results: dict[str, dict[str, list[float]]] = {
            "with": {"create": [], "update": [], "delete": []},
            "without": {"create": [], "update": [], "delete": []},
        }
        for round_number in range(args.rounds):
            order = ("with", "without") if round_number % 2 == 0 else ("without", "with")
            for variant in order:
                verb = "ENABLE" if variant == "with" else "DISABLE"
                with psycopg.connect(migrator, autocommit=True) as conn:
                    for trigger in TRIGGERS:
                        conn.execute(f"ALTER TABLE thoth_memory.cards {verb} TRIGGER {trigger}")
                for operation, values in one_round(memory, args.cards).items():
                    results[variant][operation].extend(values)
        archive.close()
        report = {
            operation: {
                "with_ms_p50": round(statistics.median(results["with"][operation]), 3),
                "without_ms_p50": round(statistics.median(results["without"][operation]), 3),
                "ratio": round(
                    statistics.median(results["with"][operation])
                    / statistics.median(results["without"][operation]),
                    3,
                ),
            }
            for operation in ("create", "update", "delete")
        }
        print(json.dumps({"rounds": args.rounds, "cards_per_round": args.cards, **report}))
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
