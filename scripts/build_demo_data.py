"""Build the packaged demo data (src/tht/demo_data/bird_demo.json) from BIRD Mini-Dev.

From three BIRD databases:

- each evidence sentence of a question becomes an SQL rule (a formula or a value
  encoding: `=`, `refers to`) or a domain clarification (a definition), once however many
  questions give it (the same text up to case, spacing and a final period or `%`);
- each column's value description becomes a domain clarification;
- the first five questions of each database that fit in a title become solved questions
  with their gold SQL.

Dependencies come from the gold SQL (PostgreSQL dialect), parsed with sqlglot: the tables
it reads and the columns it names, each column resolved to its table through the query's
aliases (an unqualified one to the table of its scope that has it). A solved question
depends on all of them; an evidence sentence on the columns of its questions' SQL that it
names, else on the tables that SQL reads; a value description on its column.

A title is a short phrase: what a sentence defines (its words before `=`, `refers to`,
`means`, `can be represented by`...), else the sentence itself (its first sentence);
a solved question's title is its question. Every card's context says where in BIRD
Mini-Dev it comes from. BIRD data is CC BY-SA 4.0: the output keeps the attribution.

    python scripts/build_demo_data.py [EVALCASES]  # the folder holding raw/bird_mini_dev
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

DATABASES = ["california_schools", "financial", "debit_card_specializing"]
SOLVED_PER_DATABASE = 5
MAX_QUESTION_TITLE = 120  # a longer question does not make a title: not a solved example here
SCHEMA = "public"
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "tht" / "demo_data" / "bird_demo.json"
SOURCE = "BIRD Mini-Dev (CC BY-SA 4.0)"
ATTRIBUTION = (
    "Derived from BIRD Mini-Dev (bird-bench/mini_dev), CC BY-SA 4.0; shared under the same licence."
)

# What a definition defines comes before its connector. Strong connectors first: `is`
# and its kin only when no strong one is there ("the credit card is high-level refers
# to card.type = 'gold'" defines "the credit card is high-level").
STRONG = re.compile(
    r"\s*=\s*|\s+(?:refers? to|means|mapps to|stands for|represents(?: for)?|pertains to"
    r"|appears? in|can (?:be (?:represented|presented|computed|acquired|found) (?:by|as|in)"
    r"|refer to|represent))\s+",
    re.IGNORECASE,
)
WEAK = re.compile(r"\s+(?:is|are|has|contains|should include)\s+", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[\w')])\.\s+(?=[A-Z'\"])")  # not "no. of"

Table = dict[str, Any]  # a BIRD table: name, columns (name, original_name, descriptions)


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
    cards: list[dict[str, Any]] = []
    for database in DATABASES:
        tables = schemas[database]["tables"]
        asked = [q for q in questions if q["db_id"] == database]
        cards += evidence_cards(database, tables, asked)
        cards += value_description_cards(database, tables)
        cards += solved_question_cards(database, tables, asked)
    OUT.write_text(
        json.dumps({"attribution": ATTRIBUTION, "cards": cards}, indent=1, ensure_ascii=False)
        + "\n"
    )
    print(f"{len(cards)} cards -> {OUT.relative_to(ROOT)}")


# --- dependencies ------------------------------------------------------------------------


def sql_columns(sql: str, tables: list[Table]) -> tuple[list[str], list[tuple[str, str]]]:
    """The tables ``sql`` reads and its (table, column) pairs, with the schema's names."""
    by_name = {t["name"].lower(): t for t in tables}
    read: list[str] = []
    columns: list[tuple[str, str]] = []
    for scope in traverse_scope(sqlglot.parse_one(sql, read="postgres")):
        sources: dict[str, Table] = {}
        for alias, source in scope.sources.items():
            if isinstance(source, exp.Table) and source.name.lower() in by_name:
                table = by_name[source.name.lower()]
                sources[alias.lower()] = table
                if table["name"] not in read:
                    read.append(table["name"])
        for column in scope.columns:
            if column.table:
                candidates = (
                    [sources[column.table.lower()]] if column.table.lower() in sources else []
                )
            else:  # unqualified: the table of this scope that has it (never a guess among several)
                candidates = [t for t in sources.values() if _column(t, column.name)]
            if len(candidates) == 1:
                found = _column(candidates[0], column.name)
                pair = (candidates[0]["name"], found["name"]) if found else None
                if pair and pair not in columns:
                    columns.append(pair)
    return read, columns


def _column(table: Table, name: str) -> dict[str, Any] | None:
    for column in table["columns"]:
        if column["name"].lower() == name.lower():
            return column
    return None


def dependency(database: str, table: str, column: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"database": database, "schema": SCHEMA, "table": table}
    if column is not None:
        found["column"] = column
    return found


def named_in(text: str, table: Table, column: str) -> bool:
    """Whether ``text`` names the column (its name or BIRD's original name), as a word."""
    described = _column(table, column) or {}
    names = {column, described.get("original_name") or column}
    return any(
        re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text, re.IGNORECASE)
        for name in names
        if len(name) >= 2
    )


# --- cards ---------------------------------------------------------------------------------


def evidence_cards(
    database: str, tables: list[Table], questions: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    by_name = {t["name"]: t for t in tables}
    cards: dict[str, dict[str, Any]] = {}  # by the sentence's key
    given_with: dict[str, list[dict[str, Any]]] = {}
    for question in questions:
        read, columns = sql_columns(question["SQL"], tables)
        for sentence in re.split(r";\s*", question["evidence"] or ""):
            text = " ".join(sentence.split()).rstrip(". ")
            if len(text) < 15:
                continue
            # "… * 100%." and "… * 100." are one evidence
            key = re.sub(r"[\s.%]+$", "", text).casefold()
            named = [
                dependency(database, table, column)
                for table, column in columns
                if named_in(text, by_name[table], column)
            ]
            found = named or [dependency(database, table) for table in read]
            if key in cards:  # the same evidence given with another question
                card = cards[key]
                card["dependencies"] += [d for d in found if d not in card["dependencies"]]
                given_with[key].append(question)
                continue
            formula = "=" in text or "refers to" in text.lower()
            title = title_of(text)
            card = {
                "family": "sql_rule" if formula else "domain_clarification",
                "title": title,
                "content": text + ".",
                "scope": scope_of(database),
                "concepts": [w.lower() for w in re.findall(r"[A-Za-z]{5,}", title)][:3],
                "dependencies": found,
            }
            if formula:
                card["rationale"] = "BIRD Mini-Dev evidence: the definition the gold SQL relies on."
            cards[key] = card
            given_with[key] = [question]
    for key, card in cards.items():
        card["context"] = evidence_context(database, given_with[key])
    return list(cards.values())


def evidence_context(database: str, questions: list[dict[str, Any]]) -> str:
    first = questions[0]
    more = len(questions) - 1
    also = f" (and with {more} other question{'s' if more > 1 else ''})" if more else ""
    return (
        f"{SOURCE}, database {database}: evidence given with question {first['question_id']},"
        f" “{first['question']}”{also}."
    )


def value_description_cards(database: str, tables: list[Table]) -> list[dict[str, Any]]:
    cards = []
    for table in tables:
        for column in table["columns"]:
            text = " ".join((column.get("value_description") or "").split())
            if len(text) <= 20:
                continue
            label = column_label(column)
            name = f"{table['name']}.{column['name']}"
            cards.append(
                {
                    "family": "domain_clarification",
                    "title": f"{name}: {label}" if label else f"Values of {name}",
                    "content": text,
                    "scope": scope_of(database),
                    "context": f"{SOURCE}, database {database}: the value description of column {name}.",
                    "dependencies": [dependency(database, table["name"], column["name"])],
                }
            )
    return cards


def column_label(column: dict[str, Any]) -> str | None:
    """A short name for what the column holds: BIRD's original name or its description,
    when one is a phrase of its own (not the column's name again, not a paragraph)."""
    for label in (column.get("original_name"), column.get("description")):
        label = " ".join((label or "").split()).rstrip(".,")
        if label and label.lower() != column["name"].lower() and len(label) <= 60:
            return label
    return None


def solved_question_cards(
    database: str, tables: list[Table], questions: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    cards = []
    for question in questions:
        text = " ".join(question["question"].split())
        if len(text) > MAX_QUESTION_TITLE:
            continue
        read, columns = sql_columns(question["SQL"], tables)
        with_columns = {table for table, _ in columns}
        cards.append(
            {
                "family": "solved_question",
                "title": text,
                "question": text,
                "sql": question["SQL"],
                "context": (
                    f"{SOURCE}, database {database}: question {question['question_id']}"
                    f" ({question['difficulty']}) with its gold SQL."
                ),
                "dependencies": [dependency(database, t, c) for t, c in columns]
                + [dependency(database, t) for t in read if t not in with_columns],
            }
        )
        if len(cards) == SOLVED_PER_DATABASE:
            break
    return cards


def title_of(sentence: str) -> str:
    """What the sentence defines, when the words before its connector are a phrase of
    their own; else its first sentence, whole."""
    for connector in (STRONG, WEAK):
        match = connector.search(sentence)
        if match:
            head = sentence[: match.start()].strip().strip("'\"`").strip()
            if _is_phrase(head):
                return _capitalized(head)
            break
    return _capitalized(SENTENCE_END.split(sentence)[0])


def _is_phrase(head: str) -> bool:
    # "Female" or "A11" alone says nothing; "If A, it" is a clause cut in two
    return (
        len(head.split()) >= 2
        and 6 <= len(head) <= 100
        and "," not in head
        and not re.match(r"(?i)(if|when)\b", head)
    )


def _capitalized(text: str) -> str:
    first = text.split(" ", 1)[0]
    if not first.isalpha():  # an identifier (k_symbol, A11) or a quoted value keeps its case
        return text
    return text[:1].upper() + text[1:]


def scope_of(database: str) -> str:
    return database.replace("_", " ").title()


if __name__ == "__main__":
    main()
