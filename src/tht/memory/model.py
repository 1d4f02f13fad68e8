"""Cards, their dependencies and links, and the admin list query: one schema for the
API, the CLI and the service.

Limits (documented in docs/configuration.md, Cards) keep a single card small enough to embed and to
render; they are enforced here so every entry point rejects the same input.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tht.errors import Conflict, InvalidInput
from tht.memory.error_signature import normalize_error
from tht.validation import describe_validation_error, validation_details

Family = Literal["domain_clarification", "sql_rule", "solved_question", "explained_error"]
FAMILIES: tuple[str, ...] = (
    "domain_clarification",
    "sql_rule",
    "solved_question",
    "explained_error",
)
Origin = Literal["manual", "workflow"]
IMPORT_PREFIX = "imp-"
IMPORT_ID_PATTERN = (
    r"^imp-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)

MAX_TITLE = 300
MAX_SCOPE = 300
MAX_TEXT = 20_000
MAX_SQL = 50_000
MAX_CONCEPTS = 50
MAX_CONCEPT = 100
MAX_DEPENDENCIES = 100
MAX_IDENTIFIER = 128
MAX_LINKS = 100
MAX_MEANING = 200
MAX_DOCUMENT_BYTES = 1_048_576
MAX_SEARCH_TEXT = 500  # the list query's q

# Which text fields each family uses; the starred ones are required.
FAMILY_FIELDS: dict[str, dict[str, bool]] = {
    "domain_clarification": {"content": True, "scope": True, "rationale": False, "context": False},
    "sql_rule": {"content": True, "scope": True, "rationale": True, "sql": False, "context": False},
    "solved_question": {
        "question": True,
        "sql": True,
        "context": True,
        "scope": False,
        "content": False,
    },
    # context = the error observed (message or wrong pattern); content = the correction.
    "explained_error": {
        "context": True,
        "content": True,
        "rationale": True,
        "scope": False,
        "sql": False,
    },
}
TEXT_FIELDS = ("content", "scope", "rationale", "question", "sql", "context")
# A card's own fields, in the order documents, files and summaries list them. The one
# definition: the CSV columns, the review summary's changes, the import's comparison,
# the archive's statements and rows, the indexed text, the compact recall answer, the
# API's family schemas and the pages' field lists derive from it;
# tests/unit/test_card_fields.py holds the copies that cannot (the models below, the
# Python client) equal to it. What an edit of a card changes besides its dependencies
# and links:
CONTENT_FIELDS = ("title", *TEXT_FIELDS, "error_signature", "concepts")
CARD_FIELDS = ("family", *CONTENT_FIELDS, "dependencies", "links")
# The longest text each field holds, where it is not MAX_TEXT (the input model's types
# below say the same; the API's schemas and the pages read it from here).
TEXT_LIMITS: dict[str, int] = {"scope": MAX_SCOPE, "sql": MAX_SQL}


def text_limit(name: str) -> int:
    return TEXT_LIMITS.get(name, MAX_TEXT)


def texts_in_order(*first: str) -> tuple[str, ...]:
    """The text fields, ``first`` leading and the others after them in TEXT_FIELDS'
    order: a reader that puts some texts first (the indexed text, the compact recall
    answer) still reads a text field added to the model."""
    return (*first, *(name for name in TEXT_FIELDS if name not in first))


# The identifiers, one definition each: every entry point (the runtime file, the CLI, the
# API's paths and JSON Schema, the index's shard names) accepts exactly these.
WORKSPACE_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
CARD_ID_PATTERN = r"^mem-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_CARD_ID = re.compile(CARD_ID_PATTERN)
# What text may not hold: C0 and C1 controls but tab, newline and carriage return; the
# bidirectional embeddings, overrides and isolates (they make a reader see text in
# another order than it is stored: "Trojan Source").
_PATTERN_CONTROL = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
# Unpaired surrogates are not text either; no JSON Schema pattern can name them.
_CONTROL = re.compile(f"[{_PATTERN_CONTROL}\ud800-\udfff]")
# What shows nothing on its own: white space, zero-width and format characters (BOM,
# joiners, word joiner, soft hyphen), combining marks without a base, variation
# selectors, tags and blank fillers. A visible character is any other.
_INVISIBLE = (
    "\x00-\x20\x7f-\xa0\xad\u0300-\u036f\u115f\u1160\u1680\u180b-\u180f\u1ab0-\u1aff"
    "\u1dc0-\u1dff\u2000-\u200f\u2028-\u202f\u205f-\u206f\u20d0-\u20ff\u2800\u3000\u3164"
    "\ufe00-\ufe0f\ufe20-\ufe2f\ufeff\uffa0\U000e0000-\U000e007f\U000e0100-\U000e01ef"
)
_VISIBLE = re.compile(f"[^{_INVISIBLE}]")


def card_id_to_uuid(card_id: str) -> uuid.UUID:
    normalized = card_id.strip().lower() if isinstance(card_id, str) else None
    if normalized is None or not _CARD_ID.match(normalized):
        raise InvalidInput(
            f"'{card_id}' is not a card id (expected mem-<uuid>)", details={"id": card_id}
        )
    return uuid.UUID(normalized.removeprefix("mem-"))


def uuid_to_card_id(value: uuid.UUID) -> str:
    return f"mem-{value}"


# What text may hold, exactly as the API's JSON Schema says it (tht.web.schemas): no
# control character, and at least one visible character. Character classes, not
# Unicode categories, so that every JSON Schema dialect (and the API's own validation)
# agrees with the model. Lengths count the text as sent; it is stored trimmed.
TEXT_PATTERN = f"^[^{_PATTERN_CONTROL}]*[^{_INVISIBLE}][^{_PATTERN_CONTROL}]*$"


def _bounded(max_length: int) -> Callable[[Any], Any]:
    """The check of a text of at most ``max_length`` characters (before pydantic's own)."""

    def check(value: Any) -> Any:
        if isinstance(value, str):
            if len(value) > max_length:
                raise ValueError(f"has {len(value)} characters, at most {max_length} are allowed")
            if _CONTROL.search(value):
                raise ValueError("contains control characters")
            if not _VISIBLE.search(value):
                raise ValueError("is empty or only white space: omit the field instead")
        return value

    return check


# Text fields: bounded, printable, at least one visible character; stored trimmed.
_STRIP = AfterValidator(str.strip)
Title = Annotated[str, BeforeValidator(_bounded(MAX_TITLE)), _STRIP]
Concept = Annotated[str, BeforeValidator(_bounded(MAX_CONCEPT)), _STRIP]
Meaning = Annotated[str, BeforeValidator(_bounded(MAX_MEANING)), _STRIP]
Name = Annotated[str, BeforeValidator(_bounded(MAX_IDENTIFIER)), _STRIP]
Scope = Annotated[str, BeforeValidator(_bounded(MAX_SCOPE)), _STRIP]
Text = Annotated[str, BeforeValidator(_bounded(MAX_TEXT)), _STRIP]
SqlText = Annotated[str, BeforeValidator(_bounded(MAX_SQL)), _STRIP]
SearchText = Annotated[str, BeforeValidator(_bounded(MAX_SEARCH_TEXT)), _STRIP]


def _not_a_boolean(value: Any) -> Any:
    # JSON's true is not revision 1 (pydantic would take it as 1); 626.0 stays an
    # integer, as JSON Schema's "integer" says
    if isinstance(value, bool):
        raise ValueError("must be an integer, not true or false")
    return value


Revision = Annotated[int, Field(ge=1), BeforeValidator(_not_a_boolean)]


def _card_id(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return uuid_to_card_id(card_id_to_uuid(value))
        except InvalidInput as exc:
            raise ValueError(exc.message) from None
    return value


CardId = Annotated[str, BeforeValidator(_card_id)]


class _Model(BaseModel):
    """Validation built at first use, not at import: a command uses few of the models
    it imports (a recall in its own process two of these fourteen)."""

    model_config = ConfigDict(defer_build=True)


class _Strict(_Model):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Dependency(_Strict):
    """A physical object the card depends on: database, then schema, table, column."""

    database: Name
    schema_name: Name | None = Field(default=None, alias="schema")
    table: Name | None = None
    column: Name | None = None

    @model_validator(mode="after")
    def _levels(self) -> Dependency:
        if self.column and not self.table:
            raise ValueError("a column dependency needs its table")
        if self.table and not self.schema_name:
            raise ValueError("a table dependency needs its schema")
        return self

    def as_json(self) -> dict[str, str | None]:
        return {
            "database": self.database,
            "schema": self.schema_name,
            "table": self.table,
            "column": self.column,
        }

    def key(self) -> tuple[str | None, ...]:
        return (self.database, self.schema_name, self.table, self.column)


class LinkInput(_Strict):
    target: CardId
    meaning: Meaning


class CardInput(_Strict):
    """What a caller writes: the card, its dependencies and its outgoing links together."""

    family: Family
    title: Title
    content: Text | None = None
    scope: Scope | None = None
    rationale: Text | None = None
    question: Text | None = None
    sql: SqlText | None = None
    context: Text | None = None
    # explained errors only: normalized on input (tht.memory.error_signature)
    error_signature: Text | None = None
    concepts: list[Concept] = Field(default_factory=list, max_length=MAX_CONCEPTS)
    dependencies: list[Dependency] = Field(default_factory=list, max_length=MAX_DEPENDENCIES)
    links: list[LinkInput] = Field(default_factory=list, max_length=MAX_LINKS)
    # The revision the caller edited: when given, a newer stored revision is a conflict.
    revision: Revision | None = None

    @field_validator("concepts")
    @classmethod
    def _unique_concepts(cls, concepts: list[str]) -> list[str]:
        return list(dict.fromkeys(concepts))

    @field_validator("error_signature")
    @classmethod
    def _normalized_signature(cls, value: str | None) -> str | None:
        if value is None:
            return None
        signature = normalize_error(value)
        if signature is None:
            raise ValueError("has nothing that identifies an error")
        return signature

    @field_validator("dependencies")
    @classmethod
    def _unique_dependencies(cls, deps: list[Dependency]) -> list[Dependency]:
        unique = {d.key(): d for d in deps}
        return list(unique.values())

    @model_validator(mode="after")
    def _family_fields(self) -> CardInput:
        fields = FAMILY_FIELDS[self.family]
        missing = [
            name for name, required in fields.items() if required and not getattr(self, name)
        ]
        unused = [name for name in TEXT_FIELDS if name not in fields and getattr(self, name)]
        problems = []
        if missing:
            problems.append(f"family {self.family} requires {', '.join(missing)}")
        if unused:
            problems.append(f"family {self.family} does not use {', '.join(unused)}")
        if self.error_signature is not None and self.family != "explained_error":
            problems.append("only an explained_error has an error_signature")
        if problems:
            raise ValueError("; ".join(problems))
        return self


# Keys a card document read from `show` carries; accepted back on update so a caller
# can edit what it read. `id` and `workspace` must still name the card being updated.
READ_ONLY_KEYS = (
    "id",
    "workspace",
    "origin",
    "source",
    "created_at",
    "updated_at",
    "incoming_links",
    "index",
    "imported",
)


def parse_card_input(
    document: Any, *, card_id: str | None = None, workspace: str | None = None
) -> CardInput:
    if not isinstance(document, dict):
        raise InvalidInput("a card must be a JSON object")
    document = dict(document)
    if card_id is None:
        present = [k for k in READ_ONLY_KEYS if k in document]
        if present:
            raise InvalidInput(
                f"{', '.join(present)} cannot be set on a new card", details={"fields": present}
            )
    else:
        if "id" in document and _normalized_id(document["id"]) != card_id:
            raise InvalidInput(f"the document is card {document['id']}, not {card_id}")
        if "workspace" in document and document["workspace"] != workspace:
            raise InvalidInput(
                f"the document belongs to workspace {document['workspace']}, not {workspace}"
            )
        for key in READ_ONLY_KEYS:
            document.pop(key, None)
        # outgoing links as `show` prints them carry the target's title: not input.
        if isinstance(document.get("links"), list):
            document["links"] = [
                {k: v for k, v in link.items() if k != "target_title"}
                if isinstance(link, dict)
                else link
                for link in document["links"]
            ]
    try:
        data = CardInput.model_validate(document)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(exc), details=validation_details(exc)) from exc
    targets = [link.target for link in data.links]
    duplicated = sorted({t for t in targets if targets.count(t) > 1})
    if duplicated:
        # well-formed, but two instructions for one link contradict each other
        raise Conflict(
            f"more than one link to {', '.join(duplicated)}", details={"targets": duplicated}
        )
    return data


def _normalized_id(value: Any) -> Any:
    try:
        return uuid_to_card_id(card_id_to_uuid(value))
    except InvalidInput:
        return value


class Source(_Model):
    session: str | None = None
    decisions: list[str] = Field(default_factory=list)


class ImportRef(_Model):
    """The import that wrote a card (``tht memory imports``): its file, format, time
    and who ran it. ``action``: it created the card, or replaced one that was there. A
    card an import wrote was not reviewed in this installation, whatever ``origin`` and
    ``source`` its file recorded (they are kept, so that export -> import is lossless)."""

    id: str
    file: str | None
    format: str | None
    at: datetime | None
    by: str | None
    action: Literal["create", "update"]


class Link(_Model):
    target: str
    meaning: str
    target_title: str


class IncomingLink(_Model):
    source: str
    meaning: str
    source_title: str


class CardIndex(_Model):
    """What the search index holds for a card, as `show` reports it: the revision last
    projected (None: never), whether that projection is the one recall uses, and how
    much of the indexed text went into it. BM25 indexes all ``indexed_chars``; the
    dense vector covers the first ``embedded_chars`` (None: all of them), the
    embedder's input bound. Both None for projections recorded before migration 008."""

    revision: int | None
    current: bool
    indexed_chars: int | None
    embedded_chars: int | None


class Card(_Model):
    """A card as stored in PostgreSQL: the only version ever returned to a caller."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    workspace: str
    family: Family
    title: str
    content: str | None = None
    scope: str | None = None
    rationale: str | None = None
    question: str | None = None
    sql: str | None = None
    context: str | None = None
    error_signature: str | None = None
    concepts: list[str] = Field(default_factory=list)
    dependencies: list[Dependency] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)
    incoming_links: list[IncomingLink] = Field(default_factory=list)
    origin: Origin
    source: Source | None = None
    revision: int
    created_at: datetime
    updated_at: datetime
    index: CardIndex | None = None  # read with the card by `show` only
    imported: ImportRef | None = None  # the import that wrote the card, if one did

    def as_json(self) -> dict[str, Any]:
        absent = {name for name in ("index", "imported") if getattr(self, name) is None}
        data = self.model_dump(mode="json", by_alias=True, exclude=absent or None)
        return data


class CardSummary(_Model):
    """A list row: enough to choose a card, without its long texts."""

    id: str
    family: Family
    title: str
    scope: str | None
    concepts: list[str]
    origin: Origin
    revision: int
    created_at: datetime
    updated_at: datetime
    pending: str | None = None  # the outstanding projection operation, if any
    import_id: str | None = None  # the import that wrote the card (ImportRef), if one did


SortKey = Literal["updated_at", "created_at", "title", "family", "relevance"]

_CALENDAR_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _calendar_day(value: Any) -> Any:
    # "2026-12-01" names a whole day (UTC): left to the union, pydantic would read it as
    # the datetime of its midnight, and `updated_to` would then drop the day it names
    if isinstance(value, str) and _CALENDAR_DAY.match(value.strip()):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            return value  # not a real day: the field's own validation says so
    return value


# A day (inclusive, UTC) or an instant (a datetime without an offset is UTC).
DayOrInstant = Annotated[datetime | date, BeforeValidator(_calendar_day)]


class ListQuery(_Strict):
    """Admin list filters: all applied to the whole archive before pagination."""

    q: SearchText | None = None
    family: list[Family] | None = None
    concepts: list[Concept] | None = None
    database: Name | None = None
    schema_name: Name | None = Field(default=None, alias="schema")
    table: Name | None = None
    column: Name | None = None
    # manual, workflow: made here; imported: written by an import (ImportRef)
    origin: Literal["manual", "workflow", "imported"] | None = None
    import_id: str | None = Field(default=None, alias="import", pattern=IMPORT_ID_PATTERN)
    updated_from: DayOrInstant | None = None
    updated_to: DayOrInstant | None = None
    sort: SortKey | None = None
    order: Literal["asc", "desc"] | None = None
    page: int = Field(default=1, ge=1, le=1_000_000)
    page_size: int = Field(default=20, ge=1, le=100)

    @field_validator("family", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _range_in_order(self) -> ListQuery:
        # an inverted range would silently match nothing: say so instead
        first, last = self.updated_from, self.updated_to
        if first is not None and last is not None and _day(first) > _day(last):
            raise ValueError(
                f"updated_from ({_day(first)}) is after updated_to ({_day(last)}): nothing could match"
            )
        return self


def _day(moment: datetime | date) -> date:
    return moment.date() if isinstance(moment, datetime) else moment


def parse_list_query(document: Any) -> ListQuery:
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise InvalidInput("filters must be a JSON object")
    try:
        return ListQuery.model_validate(document)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(exc), details=validation_details(exc)) from exc


class PendingOperation(_Model):
    card_id: str
    operation: Literal["upsert", "delete"]
    revision: int
    attempts: int
    last_error: str | None
    title: str | None  # None when the card was deleted
    # "operation": work recorded by a mutation; "projection_outdated": the card's
    # projection is missing or of another format (no operation row yet)
    reason: Literal["operation", "projection_outdated"] = "operation"
    created_at: datetime | None = None
    updated_at: datetime | None = None


# The embedder profile a workspace uses unless it names another of the installation's.
DEFAULT_PROFILE = "default"


class Workspace(_Model):
    id: str
    name: str
    language: Literal["en", "it"]
    embedder: str = DEFAULT_PROFILE  # the installation's embedder profile its vectors come from
    created_at: datetime


def import_to_id(value: uuid.UUID) -> str:
    return f"{IMPORT_PREFIX}{value}"


def import_uuid(import_id: str) -> uuid.UUID:
    """The uuid an import id (imp-<uuid>) names; InvalidInput when it names none."""
    text = import_id.strip().lower()
    try:
        if not text.startswith(IMPORT_PREFIX):
            raise ValueError
        return uuid.UUID(text[len(IMPORT_PREFIX) :])
    except ValueError:
        raise InvalidInput(
            f"'{import_id}' is not an import id (imp-<uuid>, as tht memory imports list prints)",
            details={"import": import_id},
        ) from None
