"""Build the packaged demo data (src/tht/demo_data/bird_demo.json) from BIRD Mini-Dev.

Evidence sentences become domain clarifications (definitions) or SQL rules (formulas
and value encodings), column value descriptions become clarifications, and a few
questions with their gold SQL become solved questions; dependencies are the tables and
columns a text names. BIRD data is CC BY-SA 4.0: the output keeps the attribution.

    python scripts/build_demo_data.py [../shared/evalcases]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

DATABASES = ["california_schools", "financial", "debit_card_specializing"]
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "tht" / "demo_data" / "bird_demo.json"


def main() -> None:
    evalcases = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "evalcases"
    raw = evalcases / "raw"
    if not (raw / "bird_mini_dev").is_dir():
        sys.exit(f"BIRD Mini-Dev is not in {evalcases}: give the folder holding raw/bird_mini_dev")
    schemas = {
        d["name"]: d
        for d in json.loads((raw / "bird_dev" / "dev_tables_cleaned_arcwise.json").read_text())
    }
    questions = json.loads((raw / "bird_mini_dev" / "mini_dev_postgresql.json").read_text())
    cards: list[dict] = []
    for database in DATABASES:
        tables = schemas[database]["tables"]
        columns = [(t["name"], c) for t in tables for c in t["columns"]]

        def dependencies(
            text: str, columns: list = columns, database: str = database
        ) -> list[dict]:
            found = []
            for table, column in columns:
                names = {column["name"], column.get("original_name") or column["name"]}
                if any(
                    len(n) > 3
                    and re.search(r"(?<![\w`])" + re.escape(n) + r"(?![\w`])", text, re.I)
                    for n in names
                ):
                    found.append(
                        {
                            "database": database,
                            "schema": "public",
                            "table": table,
                            "column": column["name"],
                        }
                    )
            return found[:4]

        seen: set[str] = set()
        for q in [q for q in questions if q["db_id"] == database]:
            for sentence in re.split(r";\s*", q["evidence"] or ""):
                sentence = sentence.strip().rstrip(".")
                if len(sentence) < 15 or sentence.lower() in seen:
                    continue
                seen.add(sentence.lower())
                formula = "=" in sentence or "refers to" in sentence.lower()
                title = sentence.split("=")[0].split(" refers to ")[0].strip()[:80]
                card = {
                    "family": "sql_rule" if formula else "domain_clarification",
                    "title": title[:1].upper() + title[1:],
                    "content": sentence + ".",
                    "scope": database.replace("_", " ").title(),
                    "concepts": [w.lower() for w in re.findall(r"[A-Za-z]{5,}", title)][:3],
                    "dependencies": dependencies(sentence),
                }
                if formula:
                    card["rationale"] = (
                        "BIRD Mini-Dev evidence: the definition the gold SQL relies on."
                    )
                cards.append(card)
        for table, column in columns:
            if column.get("value_description") and len(column["value_description"]) > 20:
                text = " ".join(column["value_description"].split())[:600]
                cards.append(
                    {
                        "family": "domain_clarification",
                        "title": f"{table}.{column['name']}: {column.get('description') or column['name']}"[
                            :120
                        ],
                        "content": text,
                        "scope": database.replace("_", " ").title(),
                        "dependencies": [
                            {
                                "database": database,
                                "schema": "public",
                                "table": table,
                                "column": column["name"],
                            }
                        ],
                    }
                )
        for q in [q for q in questions if q["db_id"] == database][:5]:
            cards.append(
                {
                    "family": "solved_question",
                    "title": q["question"][:120],
                    "question": q["question"],
                    "sql": q["SQL"],
                    "context": f"BIRD Mini-Dev question {q['question_id']} ({q['difficulty']})",
                    "dependencies": dependencies(q["SQL"]),
                }
            )
    OUT.write_text(
        json.dumps(
            {
                "attribution": "Derived from BIRD Mini-Dev (bird-bench/mini_dev), CC BY-SA 4.0; shared under the same licence.",
                "cards": cards,
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )
    print(f"{len(cards)} cards -> {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
