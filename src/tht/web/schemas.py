"""The API's documented shapes (OpenAPI). Validation of cards stays in
tht.memory.model; these models describe the same rules to API clients."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from tht.memory.model import (
    MAX_CONCEPT,
    MAX_CONCEPTS,
    MAX_DEPENDENCIES,
    MAX_IDENTIFIER,
    MAX_LINKS,
    MAX_MEANING,
    MAX_SCOPE,
    MAX_SQL,
    MAX_TEXT,
    MAX_TITLE,
)

CARD_ID = r"^mem-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
# Printable text with at least one non-space character (text is trimmed on input).
TEXT_PATTERN = r"^\s*[^\s\x00-\x1f\x7f]([^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*)$"


def _text(max_length: int, *, required: bool = True) -> Any:
    return Annotated[str, Field(min_length=1, max_length=max_length, pattern=TEXT_PATTERN)]


Name = Annotated[str, Field(min_length=1, max_length=MAX_IDENTIFIER, pattern=r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$")]


class ErrorBody(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorOut(BaseModel):
    error: ErrorBody


_DESCRIPTIONS = {
    401: "Not authenticated", 403: "Not allowed (permission, workspace, CSRF)", 404: "Not found",
    409: "Conflict (stale revision)", 413: "Body too large", 415: "Body is not JSON",
    422: "Invalid input", 503: "Archive or index unavailable",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorOut, "description": _DESCRIPTIONS[code]} for code in codes}


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class DependencyIn(_Input):
    """database → schema → table → column; each level requires the one above."""

    database: Name
    schema_name: Name | None = Field(default=None, alias="schema")
    table: Name | None = None
    column: Name | None = None


class LinkIn(_Input):
    target: Annotated[str, Field(pattern=CARD_ID)]
    meaning: _text(MAX_MEANING)


class _CardBase(_Input):
    title: _text(MAX_TITLE)
    concepts: list[_text(MAX_CONCEPT)] = Field(default_factory=list, max_length=MAX_CONCEPTS)
    dependencies: list[DependencyIn] = Field(default_factory=list, max_length=MAX_DEPENDENCIES)
    links: list[LinkIn] = Field(default_factory=list, max_length=MAX_LINKS)
    revision: Annotated[int, Field(ge=1)] | None = Field(default=None, description="The revision edited; a newer one is a conflict")


class DomainClarificationIn(_CardBase):
    family: Literal["domain_clarification"]
    content: _text(MAX_TEXT)
    scope: _text(MAX_SCOPE)
    rationale: _text(MAX_TEXT) | None = None
    context: _text(MAX_TEXT) | None = None


class SqlRuleIn(_CardBase):
    family: Literal["sql_rule"]
    content: _text(MAX_TEXT)
    scope: _text(MAX_SCOPE)
    rationale: _text(MAX_TEXT)
    sql: _text(MAX_SQL) | None = None
    context: _text(MAX_TEXT) | None = None


class SolvedQuestionIn(_CardBase):
    family: Literal["solved_question"]
    question: _text(MAX_TEXT)
    sql: _text(MAX_SQL)
    context: _text(MAX_TEXT)
    scope: _text(MAX_SCOPE) | None = None
    content: _text(MAX_TEXT) | None = None


class ExplainedErrorIn(_CardBase):
    family: Literal["explained_error"]
    context: _text(MAX_TEXT) = Field(description="The error observed")
    content: _text(MAX_TEXT) = Field(description="The correction")
    rationale: _text(MAX_TEXT)
    scope: _text(MAX_SCOPE) | None = None
    sql: _text(MAX_SQL) | None = None


CardIn = Annotated[
    Union[DomainClarificationIn, SqlRuleIn, SolvedQuestionIn, ExplainedErrorIn],
    Field(discriminator="family"),
]


class DependencyOut(BaseModel):
    database: str
    schema_name: str | None = Field(default=None, alias="schema")
    table: str | None = None
    column: str | None = None


class LinkOut(BaseModel):
    target: str
    meaning: str
    target_title: str


class IncomingLinkOut(BaseModel):
    source: str
    meaning: str
    source_title: str


class SourceOut(BaseModel):
    session: str | None = None
    decisions: list[str] = []


class CardOut(BaseModel):
    id: str
    workspace: str
    family: str
    title: str
    content: str | None = None
    scope: str | None = None
    rationale: str | None = None
    question: str | None = None
    sql: str | None = None
    context: str | None = None
    concepts: list[str]
    dependencies: list[DependencyOut]
    links: list[LinkOut]
    incoming_links: list[IncomingLinkOut]
    origin: Literal["manual", "workflow"]
    source: SourceOut | None = None
    revision: int
    created_at: datetime
    updated_at: datetime


class IndexOut(BaseModel):
    status: Literal["current", "pending"]
    operation: Literal["upsert", "delete"]
    error: str | None = None


class SaveResult(BaseModel):
    status: Literal["saved", "saved_index_incomplete"]
    index: IndexOut
    card: CardOut | None = None
    deleted: str | None = None
    links_removed: int | None = None


class RetryResult(BaseModel):
    id: str
    index: IndexOut


class CardSummaryOut(BaseModel):
    id: str
    family: str
    title: str
    scope: str | None = None
    concepts: list[str]
    origin: str
    revision: int
    created_at: datetime
    updated_at: datetime
    pending: str | None = None


class CardPage(BaseModel):
    items: list[CardSummaryOut]
    total: int
    page: int
    page_size: int


class PendingOut(BaseModel):
    card_id: str
    operation: Literal["upsert", "delete"]
    revision: int
    attempts: int
    last_error: str | None = None
    title: str | None = None
    reason: str
    created_at: datetime | None = None
    updated_at: datetime | None = None


class PendingList(BaseModel):
    items: list[PendingOut]


class WorkspaceOut(BaseModel):
    id: str
    name: str
    language: Literal["en", "it"]
    created_at: datetime
    manage: bool


class WorkspaceList(BaseModel):
    items: list[WorkspaceOut]


class Login(_Input):
    name: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    password: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    token: Annotated[str, Field(min_length=1, max_length=200)] | None = None


class PrincipalOut(BaseModel):
    user: str
    role: str
    workspaces: list[str]
    permissions: list[str]


class SessionOut(BaseModel):
    principal: PrincipalOut
    csrf_token: str | None = None
