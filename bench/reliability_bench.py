"""Reliability benchmark: what idempotency keys and /healthz cost.

On the embedded PostgreSQL in a temporary home, with the Edge index and the hashing
embedder (the index update is part of every save, as in production):

- card creation with and without an ``Idempotency-Key``, taking turns in one run
  (the machine is noisy: the ratio is the figure), p50 of each and the ratio;
- a retry under the same key (the recorded answer), p50;
- ``/healthz`` (archive, index and embedder probed), p50.

    .venv/bin/python bench/reliability_bench.py [--saves 300]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from fastapi.testclient import TestClient

from bench_common import prepare_database
from tht.bootstrap import build_services
from tht.db.embedded import EmbeddedPostgres
from tht.installation import Installation
from tht.memory.idempotency import IdempotencyKey
from tht.memory.model import parse_card_input
from tht.web.app import WebSettings, create_app


def card(i: int):
    return parse_card_input(
        {
            "family": "domain_clarification",
            "title": f"Clarification {i}",
            "content": f"Definition number {i} of a shipped order.",
            "scope": "Sales",
        }
    )


def ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=300)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tht-bench-reliability-"))
    embedded = EmbeddedPostgres(home)
    try:
        conninfo = prepare_database(embedded, "bench")
        services = build_services(
            env={"THT_CATALOG_RUNTIME_DATABASE_URL": conninfo, "THT_HOME": str(home)},
            installation=Installation.model_validate(
                {
                    "index": {"engine": "edge", "path": str(home / "index")},
                    "embedders": {"default": {"provider": "hashing", "dimension": 64}},
                }
            ),
        )
        try:
            services.workspaces.create("bench", "en")
            for i in range(20):  # warm the pool, the index and the caches
                services.memory.create_card("bench", card(i))
            plain, keyed, replay = [], [], []
            for i in range(args.saves):  # taking turns: both see the same noise
                started = time.perf_counter()
                services.memory.create_card("bench", card(i))
                plain.append(time.perf_counter() - started)
                key = IdempotencyKey(str(uuid.uuid4()), "bench")
                started = time.perf_counter()
                services.memory.create_card("bench", card(i), idempotency=key)
                keyed.append(time.perf_counter() - started)
                started = time.perf_counter()
                services.memory.create_card("bench", card(i), idempotency=key)
                replay.append(time.perf_counter() - started)
            client = TestClient(create_app(services, WebSettings()))
            health = []
            for _ in range(100):
                started = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                health.append(time.perf_counter() - started)
            client.close()
        finally:
            services.close()
        print(
            json.dumps(
                {
                    "saves": args.saves,
                    "create_ms_p50": ms(plain),
                    "create_with_key_ms_p50": ms(keyed),
                    "key_cost_ratio": round(statistics.median(keyed) / statistics.median(plain), 2),
                    "replay_ms_p50": ms(replay),
                    "healthz_ms_p50": ms(health),
                }
            )
        )
        return 0
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
