"""The import formats: each turns the file's raw records into card records with a
stable key, validated like every other card input. Pure: no I/O but the stream.

- ``jsonl``: the card documents ``tht memory show`` prints and ``export`` writes;
- ``csv``: a header naming card fields, lists and objects as JSON cells;
- ``vanna``: Vanna's training data (``get_training_data()``: id, question, content,
  training_data_type) as CSV, a JSON array of records or JSON Lines: ``sql`` rows
  become solved questions, ``documentation`` rows domain clarifications; ``ddl`` rows
  are counted and skipped (the Catalog owns the physical schema). Vanna's question
  files (``training_data/*/questions.json``: question, answer) are question-SQL pairs;
- ``wrenai``: WrenAI's knowledge as its UI, its REST API and its AI service hold it
  (``{"sql_pairs": [...], "instructions": [...]}``, GraphQL's ``{"data": {...}}``, an
  array of both shapes, the service's pairs file keyed by project): SQL pairs become
  solved questions, instructions SQL rules; other sections (an MDL's models...) are
  counted as ignored;
- ``bird``: BIRD's dev.json rows (question_id, db_id, question, evidence, SQL,
  difficulty): each piece of evidence becomes a domain clarification (one card per
  distinct piece in a database), each question a solved question linked to it.

The key of a record is what makes a rerun idempotent: the exported card id, the
source system's own id, or a hash of the content when the record has none. The SQL of
a peer's record must parse (``sql_check``); a card document's is the workspace's own,
accepted when the card was made, and is not parsed again (a round trip stays lossless).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tht.errors import InvalidInput
from tht.memory.model import (
    CARD_FIELDS,
    MAX_DOCUMENT_BYTES,
    MAX_TITLE,
    CardInput,
    LinkInput,
    Origin,
    card_id_to_uuid,
    uuid_to_card_id,
)
from tht.memory.transfer.sql_check import sql_problem
from tht.memory.transfer.streams import (
    RawRecord,
    iter_csv_rows,
    iter_json_lines,
    iter_json_records,
)
from tht.validation import describe_validation_error, validation_details

Format = Literal["jsonl", "csv", "vanna", "wrenai", "bird"]
FORMATS: tuple[str, ...] = ("jsonl", "csv", "vanna", "wrenai", "bird")
# The per-line (per-record) limit: one card document is at most this big anywhere.
LINE_LIMIT = MAX_DOCUMENT_BYTES

# Keys of a card document besides the card's own fields (CardInput): what export
# writes and import keeps (meta) or ignores (derived: the workspace, incoming links,
# the index state `show` adds).
META_KEYS = ("id", "origin", "source", "revision", "created_at", "updated_at")
IGNORED_KEYS = ("workspace", "incoming_links", "index", "imported")
CARD_KEYS = tuple(CardInput.model_fields)
CSV_COLUMNS = ("id", *CARD_FIELDS, *META_KEYS[1:])  # id, the card, then the other meta keys
CSV_JSON_COLUMNS = ("concepts", "dependencies", "links", "source")
VANNA_COLUMNS = ("id", "question", "content", "training_data_type")
VANNA_KEYS = set(VANNA_COLUMNS)
# vanna-ai/vanna training_data/*/questions.json: [{"question": ..., "answer": SQL}]
VANNA_QUESTION_KEYS = {"question", "answer"}
# The UI's records (GraphQL adds __typename), the REST API's, the AI service's
# (snake case: project_id, is_default).
WRENAI_COMMON_KEYS = {"id", "projectId", "project_id", "createdAt", "updatedAt", "__typename"}
WRENAI_SQL_PAIR_KEYS = WRENAI_COMMON_KEYS | {"question", "sql"}
WRENAI_INSTRUCTION_KEYS = WRENAI_COMMON_KEYS | {
    "instruction",
    "questions",
    "isDefault",
    "isGlobal",
    "is_default",
}
WRENAI_PAIR_SECTIONS = ("sql_pairs", "sqlPairs")
WRENAI_INSTRUCTION_SECTIONS = ("instructions",)
BIRD_KEYS = {"question_id", "db_id", "question", "evidence", "SQL", "difficulty"}
# the namespace of the ids derived from import keys (uuid5 of workspace and key)
_ANY_CARD = "mem-00000000-0000-0000-0000-000000000000"
KEY_NAMESPACE = uuid.UUID("5f0b8a54-3c1e-4d57-9a43-2f8c1b6e7d90")


class RecordError(Exception):
    """A record that cannot be imported, with the line it starts on."""

    def __init__(self, line: int, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.message = message
        self.details = details or {}

    def as_json(self) -> dict[str, Any]:
        return {"line": self.line, "message": self.message, **self.details}


class _SourceRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session: str | None = None
    decisions: list[str] = []


class _Meta(BaseModel):
    """What an exported card carries beyond its content, kept on import."""

    model_config = ConfigDict(extra="forbid")

    origin: Origin = "manual"
    source: _SourceRef | None = None
    revision: int | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @field_validator("revision")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError("must be at least 1")
        return value

    @field_validator("created_at", "updated_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("needs a time zone (as export writes it)")
        return value


class _Link(BaseModel):
    """A link by reference: ``target`` is a card id or the key of a record of the file."""

    model_config = ConfigDict(extra="forbid")

    target: str = Field(min_length=1, max_length=200)
    meaning: str

    @field_validator("meaning")
    @classmethod
    def _meaning(cls, value: str) -> str:
        # the rules of a link's meaning everywhere (LinkInput), whatever the target
        return LinkInput.model_validate({"target": _ANY_CARD, "meaning": value}).meaning

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return value.strip()


@dataclass
class ImportCard:
    """A validated record: the card, its outgoing links by reference (the key of a
    record in the file, or a card id of the workspace), and what it keeps of its
    origin. ``digest`` identifies the record's content: a later record with the same
    key and digest repeats it (folded), with another digest contradicts it."""

    line: int
    key: str
    data: CardInput
    links: list[tuple[str, str]]
    digest: bytes = b""
    origin: str = "manual"
    source_session: str | None = None
    source_decisions: list[str] | None = None
    revision: int | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass
class Skipped:
    """A record counted and left out on purpose: Vanna's DDL, or an element of a
    section of a WrenAI file that holds no knowledge (``section``: an MDL's models...)."""

    line: int
    kind: str
    section: str | None = None


@dataclass
class ParsedFile:
    """What reading a file yields, record by record."""

    items: Iterator[ImportCard | RecordError | Skipped]
    notes: dict[str, int] = field(default_factory=dict)


def derived_uuid(workspace: str, key: str) -> uuid.UUID:
    return uuid.uuid5(KEY_NAMESPACE, f"{workspace}\n{key}")


def card_id_key(key: str) -> uuid.UUID | None:
    """The card id a key names, when the key is one (a record exported with its id)."""
    if not key.startswith("mem-"):
        return None
    try:
        return card_id_to_uuid(key)
    except InvalidInput:
        return None


def record_digest(document: Any) -> bytes:
    """The content of a raw record, whatever the white space or key order around it."""
    text = json.dumps(document, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def content_key(prefix: str, *parts: Any) -> str:
    digest = hashlib.sha256(
        json.dumps(parts, ensure_ascii=False, sort_keys=True, default=str).encode()
    ).hexdigest()
    return f"{prefix}:sha256:{digest[:32]}"


def title_from(text: str) -> str:
    """A title from a longer text: its first line, white space collapsed, cut to fit."""
    first = next((line for line in text.splitlines() if line.strip()), text)
    title = re.sub(r"\s+", " ", first).strip()
    return title if len(title) <= MAX_TITLE else title[: MAX_TITLE - 1].rstrip() + "…"


# --- detecting the format ---------------------------------------------------------------


def detect_format(name: str, head: bytes, requested: str | None) -> str:
    """The format to read: ``requested``, or the one the extension names when the
    file's beginning does not suggest another (then --format is required)."""
    if requested is not None:
        if requested not in FORMATS:
            raise InvalidInput(
                f"unknown format '{requested}' (expected {', '.join(FORMATS)})",
                details={"line": None, "format": requested},
            )
        return requested
    lowered = name.lower()
    text = head.decode("utf-8", "replace")

    def key(name: str) -> bool:  # a JSON key, not the same word inside a value
        return re.search(rf'"{name}"\s*:', text) is not None

    looks = (
        "vanna"
        if key("training_data_type")
        or re.match(r"[^\n{]*\btraining_data_type\b", text)
        or (key("question") and key("answer"))
        else "bird"
        if key("db_id") and key("SQL")
        else "wrenai"
        if any(key(k) for k in ("sql_pairs", "sqlPairs", "instructions", "isDefault", "isGlobal"))
        else None
    )
    by_extension = (
        "jsonl"
        if lowered.endswith((".jsonl", ".ndjson"))
        else "csv"
        if lowered.endswith(".csv")
        else None
    )
    if by_extension is not None and looks is None:
        return by_extension
    hint = f"; it looks like a {looks} file" if looks else ""
    raise InvalidInput(
        f"cannot tell the format of {name} from its name{hint}: pass --format"
        f" ({', '.join(FORMATS)})",
        details={"line": None, "looks_like": looks, "formats": list(FORMATS)},
    )


# --- card documents (jsonl, csv) ---------------------------------------------------------


def parse_card_document(document: dict[str, Any], line: int) -> ImportCard:
    """A card document as export writes it (and show prints it), or a new card."""
    known = set(CARD_KEYS) | set(META_KEYS) | set(IGNORED_KEYS)
    unknown = sorted(k for k in document if k not in known)
    if unknown:
        raise RecordError(line, f"unknown field(s) {', '.join(unknown)}", {"fields": unknown})
    fields = {k: v for k, v in document.items() if k not in META_KEYS and k not in IGNORED_KEYS}
    fields.pop("revision", None)
    links = fields.pop("links", None) or []
    if not isinstance(links, list):
        raise RecordError(line, "links must be a list of {target, meaning}")
    meta_fields = {k: document[k] for k in META_KEYS if k in document and k != "id"}
    try:
        data = CardInput.model_validate(fields)
        meta = _Meta.model_validate(meta_fields)
        parsed_links = [
            _Link.model_validate(
                {k: v for k, v in link.items() if k != "target_title"}
                if isinstance(link, dict)
                else link
            )
            for link in links
        ]
    except ValidationError as exc:
        raise RecordError(
            line, describe_validation_error(exc), {"errors": validation_details(exc)}
        ) from None
    if meta.origin == "manual" and meta.source is not None:
        raise RecordError(line, "a manual card has no workflow source")
    key = document.get("id")
    if key is not None:
        try:
            key = uuid_to_card_id(card_id_to_uuid(key))
        except InvalidInput as exc:
            raise RecordError(line, exc.message, {"field": "id"}) from None
    else:
        key = content_key(
            "card", data.model_dump(mode="json"), [ln.model_dump() for ln in parsed_links]
        )
    targets = [link.target for link in parsed_links]
    duplicated = sorted({t for t in targets if targets.count(t) > 1})
    if duplicated:
        raise RecordError(line, f"more than one link to {', '.join(duplicated)}")
    return ImportCard(
        line,
        key,
        data,
        [(_normalized_target(link.target), link.meaning) for link in parsed_links],
        origin=meta.origin,
        source_session=meta.source.session if meta.source else None,
        source_decisions=meta.source.decisions if meta.source else None,
        revision=meta.revision,
        created_at=meta.created_at,
        updated_at=meta.updated_at,
    )


def _normalized_target(target: str) -> str:
    uuid_ = card_id_key(target.strip().lower())
    return uuid_to_card_id(uuid_) if uuid_ is not None else target


# OWASP's CSV injection rule: a cell a spreadsheet would read as a formula starts with
# one of these. Export writes such a cell with a quote before it; import removes it.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralized_cell(cell: str) -> str:
    """The cell as export writes it: a quote before a formula's first character, and
    before a quote that the import would otherwise read as that protection, so that
    ``restored_cell`` gives back exactly ``cell``."""
    if cell.startswith(FORMULA_STARTS) or (
        cell.startswith("'") and cell[1:].startswith((*FORMULA_STARTS, "'"))
    ):
        return "'" + cell
    return cell


def restored_cell(cell: str) -> str:
    """The cell a CSV file means: one protecting quote removed (see ``neutralized_cell``)."""
    if cell.startswith("'") and cell[1:].startswith((*FORMULA_STARTS, "'")):
        return cell[1:]
    return cell


def _csv_document(row: dict[str, str], line: int) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for name, raw in row.items():
        cell = restored_cell(raw)
        if name in CSV_JSON_COLUMNS:
            try:
                document[name] = json.loads(cell)
            except json.JSONDecodeError as exc:
                raise RecordError(
                    line, f"column {name} on line {line} is not JSON: {exc.msg}", {"column": name}
                ) from None
            except RecursionError:
                raise RecordError(
                    line, f"column {name} on line {line} is JSON nested too deeply to read"
                ) from None
        elif name == "revision":
            if not cell.strip().isdigit():
                raise RecordError(line, f"revision on line {line} is not a number")
            document[name] = int(cell)
        else:
            document[name] = cell
    return document


# --- the peers' formats --------------------------------------------------------------------


def _checked_keys(record: RawRecord, allowed: set[str], what: str) -> dict[str, Any]:
    document = record.document or {}
    unknown = sorted(k for k in document if k not in allowed and k != "")
    if unknown:
        raise RecordError(
            record.line,
            f"unknown field(s) {', '.join(unknown)} for a {what} (expected {', '.join(sorted(allowed))})",
            {"fields": unknown},
        )
    return document


def _text(value: Any, line: int, name: str, *, required: bool = True) -> str | None:
    if value is None or (isinstance(value, float) and value != value):  # pandas writes NaN
        if required:
            raise RecordError(line, f"{name} is missing", {"field": name})
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise RecordError(line, f"{name} must be text", {"field": name})
    if required and not value.strip():
        raise RecordError(line, f"{name} is empty", {"field": name})
    return value


def _card(
    line: int, key: str, fields: dict[str, Any], links: list[tuple[str, str]] | None = None
) -> ImportCard:
    try:
        data = CardInput.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise RecordError(
            line, describe_validation_error(exc), {"errors": validation_details(exc)}
        ) from None
    return ImportCard(line, key, data, links or [])


class SqlCheck:
    """The SQL check of one import: the check pass parses each record's SQL and keeps
    the lines it refused; the write pass reads the file again and gets the same verdicts
    without parsing again (``parsing`` False). The two passes must agree: a BIRD row
    refused in one and not in the other would move the line its shared evidence cards
    are first read on, and the write pass would never write them."""

    def __init__(self) -> None:
        self.parsing = True
        self.refused: set[int] = set()

    def problem(self, text: str, line: int) -> str | None:
        if not self.parsing:
            return "was refused by the check pass" if line in self.refused else None
        problem = sql_problem(text)
        if problem is not None:
            self.refused.add(line)
        return problem


def _checked_sql(text: str, line: int, name: str, check: SqlCheck | None) -> str:
    """The record's SQL, refused on its line when it does not parse (``check`` None:
    parsed here)."""
    problem = sql_problem(text) if check is None else check.problem(text, line)
    if problem is not None:
        raise RecordError(
            line, f"{name} on line {line} {problem}", {"field": name, "sql": _excerpt(text)}
        )
    return text


def _excerpt(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def vanna_card(
    record: RawRecord, scope: str, *, sql_check: SqlCheck | None = None
) -> ImportCard | Skipped:
    document = record.document or {}
    line = record.line
    if "answer" in document and "training_data_type" not in document:
        # a question file of Vanna's training data: every record is a question-SQL pair
        document = _checked_keys(record, VANNA_QUESTION_KEYS, "Vanna question-SQL pair")
        question = _text(document.get("question"), line, "question")
        answer = _text(document.get("answer"), line, "answer")
        assert question is not None and answer is not None
        key = content_key("vanna", "sql", question, answer)
        return _solved(line, key, question, _checked_sql(answer, line, "answer", sql_check), scope)
    document = _checked_keys(record, VANNA_KEYS | {"index"}, "Vanna training data row")
    kind = _text(document.get("training_data_type"), line, "training_data_type")
    content = _text(document.get("content"), line, "content")
    source_id = _text(document.get("id"), line, "id", required=False)
    assert content is not None
    if kind == "ddl":
        return Skipped(line, "ddl")
    key = (
        f"vanna:{source_id}"
        if source_id and source_id.strip()
        else content_key("vanna", kind, document.get("question"), content)
    )
    if kind == "sql":
        question = _text(document.get("question"), line, "question")
        assert question is not None
        return _solved(
            line, key, question, _checked_sql(content, line, "content", sql_check), scope
        )
    if kind == "documentation":
        return _card(
            line,
            key,
            {
                "family": "domain_clarification",
                "title": title_from(content),
                "content": content,
                "scope": scope,
            },
        )
    raise RecordError(
        line,
        f"unknown training_data_type '{kind}' (expected sql, documentation or ddl)",
        {"field": "training_data_type"},
    )


def _solved(line: int, key: str, question: str, sql: str, scope: str) -> ImportCard:
    return _card(
        line,
        key,
        {
            "family": "solved_question",
            "title": title_from(question),
            "question": question,
            "sql": sql,
            "context": f"A question-SQL pair of Vanna's training data ({key}).",
            "scope": scope,
        },
    )


def wrenai_kind(record: RawRecord) -> str | None:
    """ "pair", "instruction", or None (an element of a section that holds neither)."""
    document = record.document or {}
    label = record.label
    if label in WRENAI_PAIR_SECTIONS:
        return "pair"
    if label in WRENAI_INSTRUCTION_SECTIONS:
        return "instruction"
    if "instruction" in document:
        return "instruction"
    if "sql" in document and "question" in document:
        # the AI service's pairs file is keyed by project ("boilerplate"), not by kind
        return "pair"
    return None if label is not None else "unknown"


def wrenai_card(
    record: RawRecord, scope: str, *, sql_check: SqlCheck | None = None
) -> ImportCard | Skipped:
    document = record.document or {}
    line = record.line
    kind = wrenai_kind(record)
    if kind is None:
        return Skipped(line, "section", record.label)
    if kind == "pair":
        document = _checked_keys(record, WRENAI_SQL_PAIR_KEYS, "WrenAI SQL pair")
        question = _text(document.get("question"), line, "question")
        sql = _text(document.get("sql"), line, "sql")
        assert question is not None and sql is not None
        source_id = document.get("id")
        key = (
            f"wrenai:sql_pair:{source_id}"
            if source_id is not None
            else content_key("wrenai:sql_pair", question, sql)
        )
        return _card(
            line,
            key,
            {
                "family": "solved_question",
                "title": title_from(question),
                "question": question,
                "sql": _checked_sql(sql, line, "sql", sql_check),
                "context": f"A question-SQL pair of WrenAI's knowledge ({key}).",
                "scope": scope,
            },
        )
    if kind == "instruction":
        document = _checked_keys(record, WRENAI_INSTRUCTION_KEYS, "WrenAI instruction")
        text = _text(document.get("instruction"), line, "instruction")
        assert text is not None
        questions = document.get("questions") or []
        if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
            raise RecordError(line, "questions must be a list of texts", {"field": "questions"})
        source_id = document.get("id")
        key = (
            f"wrenai:instruction:{source_id}"
            if source_id is not None
            else content_key("wrenai:instruction", text, questions)
        )
        # the UI's isDefault, the REST API's isGlobal, the AI service's is_default
        default = any(bool(document.get(k)) for k in ("isDefault", "isGlobal", "is_default"))
        return _card(
            line,
            key,
            {
                "family": "sql_rule",
                "title": title_from(text),
                "content": text,
                "scope": scope,
                "rationale": "A WrenAI instruction, applied to "
                + ("every question." if default else "the questions it names."),
                "context": None
                if default or not questions
                else "Applies to questions like: " + "; ".join(q.strip() for q in questions),
            },
        )
    raise RecordError(line, "neither a WrenAI SQL pair (question, sql) nor an instruction")


def evidence_parts(evidence: str) -> list[str]:
    """BIRD evidence holds several definitions separated by ';': one card each."""
    return [part.strip() for part in evidence.split(";") if part.strip()]


def bird_cards(record: RawRecord, *, sql_check: SqlCheck | None = None) -> list[ImportCard]:
    """A BIRD row: its evidence cards first, then the solved question linking to them."""
    document = _checked_keys(record, BIRD_KEYS, "BIRD dev.json row")
    line = record.line
    db_id = _text(document.get("db_id"), line, "db_id")
    question = _text(document.get("question"), line, "question")
    sql = _text(document.get("SQL"), line, "SQL")
    evidence = _text(document.get("evidence"), line, "evidence", required=False) or ""
    assert db_id is not None and question is not None and sql is not None
    _checked_sql(sql, line, "SQL", sql_check)
    question_id = document.get("question_id")
    difficulty = document.get("difficulty")
    dependency = [{"database": db_id}]
    cards = []
    for part in evidence_parts(evidence):
        cards.append(
            _card(
                line,
                content_key(f"bird:evidence:{db_id}", part),
                {
                    "family": "domain_clarification",
                    "title": title_from(part),
                    "content": part,
                    "scope": db_id,
                    "dependencies": dependency,
                },
            )
        )
    key = (
        f"bird:question:{db_id}:{question_id}"
        if question_id is not None
        else content_key(f"bird:question:{db_id}", question, sql)
    )
    described = ", ".join(
        str(x)
        for x in (
            f"question {question_id}" if question_id is not None else None,
            difficulty,
        )
        if x
    )
    cards.append(
        _card(
            line,
            key,
            {
                "family": "solved_question",
                "title": title_from(question),
                "question": question,
                "sql": sql,
                "context": f"BIRD database {db_id}" + (f" ({described})" if described else ""),
                "scope": db_id,
                "dependencies": dependency,
            },
            [(card.key, "evidence") for card in cards],
        )
    )
    return cards


# --- reading a file ----------------------------------------------------------------------


def read_records(
    stream: IO[bytes], fmt: str, *, scope: str | None, sql_check: SqlCheck | None = None
) -> Iterator[ImportCard | RecordError | Skipped]:
    """The file's records, validated, in file order. A BIRD evidence card shared by
    several questions comes once (with the first question's line). ``sql_check``: the
    import's verdicts on peers' SQL (None: parse each)."""
    if fmt == "jsonl":
        for record in iter_json_lines(stream, LINE_LIMIT):
            yield _one(record, lambda r: parse_card_document(r.document or {}, r.line))
    elif fmt == "csv":
        yield from _card_csv(stream)
    elif fmt == "vanna":
        for record in _vanna_records(stream):
            yield _one(record, lambda r: vanna_card(r, _scope(scope, r.line), sql_check=sql_check))
    elif fmt == "wrenai":
        yield from _wrenai_records(stream, scope, sql_check)
    elif fmt == "bird":
        yield from _bird_records(stream, sql_check)
    else:  # detect_format refused it already
        raise InvalidInput(f"unknown format '{fmt}'")


def _wrenai_records(
    stream: IO[bytes], scope: str | None, sql_check: SqlCheck | None
) -> Iterator[ImportCard | RecordError | Skipped]:
    for record in _json_or_lines(stream):
        if record.error is not None and record.details.get("not_an_object"):
            if record.label is not None and wrenai_kind(record) is None:
                yield Skipped(record.line, "section", record.label)  # e.g. a list of names
                continue
        yield _one(record, lambda r: wrenai_card(r, _scope(scope, r.line), sql_check=sql_check))


def _bird_records(
    stream: IO[bytes], sql_check: SqlCheck | None
) -> Iterator[ImportCard | RecordError | Skipped]:
    """A BIRD evidence card shared by several questions comes once."""
    seen: set[str] = set()
    for record in _json_or_lines(stream):
        if record.error is not None:
            yield RecordError(record.line, record.error, record.details)
            continue
        try:
            cards = bird_cards(record, sql_check=sql_check)
        except RecordError as exc:
            yield exc
            continue
        digest = record_digest(record.document)
        for card in cards:
            if card.key.startswith("bird:evidence:"):
                if card.key in seen:
                    continue
                seen.add(card.key)
            card.digest = digest
            yield card


def _scope(scope: str | None, line: int) -> str:
    if scope is None:
        raise RecordError(
            line,
            "this record needs a business scope and the format has none: pass --scope"
            " (or set database in the runtime file)",
        )
    return scope


def _one(record: RawRecord, convert: Any) -> ImportCard | RecordError | Skipped:
    if record.error is not None:
        return RecordError(record.line, record.error, record.details)
    try:
        result: ImportCard | Skipped = convert(record)
    except RecordError as exc:
        return exc
    if isinstance(result, ImportCard):
        result.digest = record_digest(record.document)
    return result


def _first_byte(stream: IO[bytes]) -> bytes:
    peek = getattr(stream, "peek", None)
    if peek is None:
        return b""
    head: bytes = peek(64).lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    return head


def _holds_records(document: dict[str, Any], depth: int = 2) -> bool:
    """Whether an object holds arrays of objects (records), at most ``depth`` deep."""
    return any(
        (isinstance(value, list) and any(isinstance(item, dict) for item in value))
        or (depth > 1 and isinstance(value, dict) and _holds_records(value, depth - 1))
        for value in document.values()
    )


def _json_or_lines(stream: IO[bytes]) -> Iterator[RawRecord]:
    """A JSON array or object of records, or JSON Lines (one object a line: a first
    line that is a whole object holding no arrays of objects)."""
    if _first_byte(stream) == b"{":
        peek = getattr(stream, "peek", None)
        first_line = (peek(LINE_LIMIT) if peek else b"").lstrip().split(b"\n", 1)[0]
        try:
            document = json.loads(first_line)
        except (ValueError, RecursionError):
            document = None
        if isinstance(document, dict) and not _holds_records(document):
            return iter_json_lines(stream, LINE_LIMIT)
    return iter_json_records(stream, LINE_LIMIT)


def _vanna_records(stream: IO[bytes]) -> Iterator[RawRecord]:
    if _first_byte(stream) in (b"[", b"{"):
        return _json_or_lines(stream)
    return _rows(
        iter_csv_rows(stream, LINE_LIMIT, allow_index_column=True),
        VANNA_COLUMNS,
        ("content", "training_data_type"),
    )


def _rows(
    rows: Iterator[RawRecord], allowed: tuple[str, ...], required: tuple[str, ...]
) -> Iterator[RawRecord]:
    """The rows of a CSV file once its header names only ``allowed`` columns and all
    the ``required`` ones; a header that does not fit stops the import (line 1)."""
    for record in rows:
        if record.details.get("header"):
            raise InvalidInput(record.error or "bad header", details={"line": record.line})
        if record.document is None or "__header__" not in record.document:
            yield record
            continue
        header = [h for h in record.document["__header__"] if h]
        unknown = sorted(h for h in header if h not in allowed)
        missing = sorted(h for h in required if h not in header)
        if unknown or missing:
            problems = [f"unknown column(s) {', '.join(unknown)}"] if unknown else []
            problems += [f"missing column(s) {', '.join(missing)}"] if missing else []
            raise InvalidInput(
                f"the CSV header on line {record.line} does not fit: {'; '.join(problems)}"
                f" (columns: {', '.join(allowed)})",
                details={"line": record.line, "unknown": unknown, "missing": missing},
            )


def _card_csv(stream: IO[bytes]) -> Iterator[ImportCard | RecordError | Skipped]:
    for record in _rows(iter_csv_rows(stream, LINE_LIMIT), CSV_COLUMNS, ("family", "title")):
        yield _one(
            record, lambda r: parse_card_document(_csv_document(r.document or {}, r.line), r.line)
        )
