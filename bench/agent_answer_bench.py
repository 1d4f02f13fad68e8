"""What an agent reads: the size of a top-10 recall answer on the demo workspace, in
characters and in tokens, for the full card and the compact answer.

The demo workspace (`tht demo`: BIRD Mini-Dev evidence of three databases) is loaded in
a fresh THT_HOME; each Mini-Dev question of those databases is asked through
``memory search`` widened to every reusable family (what an agent reads when it asks
once for everything) and through ``memory rules``, bound to the question's own database.
Tokens are counted with the o200k_base encoding when the ``quicktok`` package is
importable (it ships the encodings: ``pip install quicktok-v1``, outside the product's
lock), else estimated as characters / 4. The size is that of the JSON text an MCP
client hands the model (the tool result's text content).

    .venv/bin/python bench/agent_answer_bench.py --questions 60
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the BIRD data is not in the repository: --evalcases DIR, else this variable
EVALCASES_ENV = "THT_EVALCASES"
QUESTIONS = Path("raw", "bird_mini_dev", "mini_dev_sqlite.json")
VIEWS = os.environ.get("BENCH_VIEWS", "full,compact").split(",")
DEMO_DATABASES = ("california_schools", "debit_card_specializing", "financial")


def token_counter() -> tuple[str, Callable[[str], int]]:
    try:
        import quicktok  # type: ignore[import-not-found]
    except ImportError:
        return "characters / 4", lambda text: round(len(text) / 4)
    encoding = quicktok.get_encoding("o200k_base")
    return "o200k_base tokens", lambda text: len(encoding.encode(text))


def text_of(document: dict[str, Any]) -> str:
    """The tool result's text, as the MCP server writes it (tht.mcp.server.answer)."""
    return json.dumps(document, ensure_ascii=False, default=str)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    default = os.environ.get(EVALCASES_ENV)
    parser.add_argument(
        "--evalcases",
        type=Path,
        default=Path(default) if default else None,
        help=f"the folder holding raw/bird_mini_dev (default: ${EVALCASES_ENV})",
    )
    parser.add_argument("--questions", type=int, default=60, help="per database (default 60)")
    args = parser.parse_args(argv)
    if args.evalcases is None or not (args.evalcases / QUESTIONS).is_file():
        parser.error(
            f"BIRD Mini-Dev is not there: pass --evalcases DIR or set {EVALCASES_ENV}, the"
            " folder that holds raw/bird_mini_dev (not in this repository)"
        )
    questions = [
        q
        for q in json.loads((args.evalcases / QUESTIONS).read_text())
        if q["db_id"] in DEMO_DATABASES
    ]
    by_database: dict[str, list[str]] = {}
    for q in questions:
        by_database.setdefault(q["db_id"], []).append(q["question"])
    home = Path(tempfile.mkdtemp(prefix="tht-agent-answer-bench-"))
    os.environ.update({"THT_HOME": str(home), "THT_SERVICE": "off"})
    from tht.bootstrap import build_services, embedded_database
    from tht.demo import DEMO_WORKSPACE, load_demo
    from tht.memory.recall_service import parse_recall_query
    from tht.usecases.recall_and_proposals import DwhBinding, recall_command

    label, count = token_counter()
    sizes: dict[str, dict[str, list[int]]] = {}
    services = build_services()
    try:
        load_demo(services)
        asks = [
            ("search, widened", "search", {"families": ["domain_clarification", "sql_rule"]}),
            ("rules", "rules", {}),
        ]
        for database, texts in by_database.items():
            binding = DwhBinding(database, "public")
            for question in texts[: args.questions]:
                for name, kind, filters in asks:
                    for view in VIEWS:
                        answer = recall_command(
                            services,
                            DEMO_WORKSPACE,
                            kind,
                            question,
                            parse_recall_query({**filters, "top": 10}),
                            binding=binding,
                            **({} if view == "full" else {"view": view}),
                        )
                        text = text_of(answer)
                        part = sizes.setdefault(f"{name}: {view}", {"chars": [], "tokens": []})
                        part["chars"].append(len(text))
                        part["tokens"].append(count(text))
    finally:
        services.close()
        embedded = embedded_database()
        if embedded is not None:
            embedded.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(f"top-10 answers on the demo workspace ({label}), median / mean / max:", file=sys.stderr)
    rows = []
    for name, part in sizes.items():
        row = {
            "answer": name,
            "answers": len(part["chars"]),
            "chars_median": statistics.median(part["chars"]),
            "tokens_median": statistics.median(part["tokens"]),
            "tokens_mean": round(statistics.mean(part["tokens"]), 1),
            "tokens_max": max(part["tokens"]),
        }
        rows.append(row)
        print(
            f"| {name} | {row['answers']} | {row['chars_median']:.0f} | {row['tokens_median']:.0f}"
            f" | {row['tokens_mean']:.0f} | {row['tokens_max']} |",
            file=sys.stderr,
        )
    print(json.dumps({"tokens": label, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
