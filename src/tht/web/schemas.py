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
    TEXT_PATTERN,
    Card,
    CardSummary,
    PendingOperation,
    Revision,
)

# Text as tht.memory.model accepts it: printable, with at least one visible character.
PRINTABLE_WORD = TEXT_PATTERN
CARD_ID = r"^mem-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def _text(max_length: int) -> Any:
    return Annotated[str, Field(max_length=max_length, pattern=TEXT_PATTERN)]


Name = _text(MAX_IDENTIFIER)


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


class DatabaseDependency(_Input):
    database: Name
    schema_name: None = Field(default=None, alias="schema")
    table: None = None
    column: None = None


class SchemaDependency(_Input):
    database: Name
    schema_name: Name = Field(alias="schema")
    table: None = None
    column: None = None


class TableDependency(_Input):
    database: Name
    schema_name: Name = Field(alias="schema")
    table: Name
    column: None = None


class ColumnDependency(_Input):
    database: Name
    schema_name: Name = Field(alias="schema")
    table: Name
    column: Name


# database → schema → table → column: each level requires the one above
DependencyIn = Union[DatabaseDependency, SchemaDependency, TableDependency, ColumnDependency]


class LinkIn(_Input):
    target: Annotated[str, Field(pattern=CARD_ID)]
    meaning: _text(MAX_MEANING)


class _CardBase(_Input):
    title: _text(MAX_TITLE)
    concepts: list[_text(MAX_CONCEPT)] = Field(default_factory=list, max_length=MAX_CONCEPTS)
    dependencies: list[DependencyIn] = Field(default_factory=list, max_length=MAX_DEPENDENCIES)
    links: list[LinkIn] = Field(default_factory=list, max_length=MAX_LINKS,
                                description="One link per target card of the same workspace (else 404/409)")


class _DomainClarification(_CardBase):
    family: Literal["domain_clarification"]
    content: _text(MAX_TEXT)
    scope: _text(MAX_SCOPE)
    rationale: _text(MAX_TEXT) | None = None
    context: _text(MAX_TEXT) | None = None


class _SqlRule(_CardBase):
    family: Literal["sql_rule"]
    content: _text(MAX_TEXT)
    scope: _text(MAX_SCOPE)
    rationale: _text(MAX_TEXT)
    sql: _text(MAX_SQL) | None = None
    context: _text(MAX_TEXT) | None = None


class _SolvedQuestion(_CardBase):
    family: Literal["solved_question"]
    question: _text(MAX_TEXT)
    sql: _text(MAX_SQL)
    context: _text(MAX_TEXT)
    scope: _text(MAX_SCOPE) | None = None
    content: _text(MAX_TEXT) | None = None


class _ExplainedError(_CardBase):
    family: Literal["explained_error"]
    context: _text(MAX_TEXT) = Field(description="The error observed")
    content: _text(MAX_TEXT) = Field(description="The correction")
    rationale: _text(MAX_TEXT)
    scope: _text(MAX_SCOPE) | None = None
    sql: _text(MAX_SQL) | None = None
    error_signature: _text(MAX_TEXT) | None = Field(
        default=None, description="The database error text; stored normalized. Omitted on an edit: kept")


class _Revision(BaseModel):
    revision: Revision | None = Field(
        default=None, description="The revision edited: a newer stored revision is a conflict (409)")


class DomainClarificationUpdate(_DomainClarification, _Revision): ...
class SqlRuleUpdate(_SqlRule, _Revision): ...
class SolvedQuestionUpdate(_SolvedQuestion, _Revision): ...
class ExplainedErrorUpdate(_ExplainedError, _Revision): ...


class DomainClarificationIn(_DomainClarification): ...
class SqlRuleIn(_SqlRule): ...
class SolvedQuestionIn(_SolvedQuestion): ...
class ExplainedErrorIn(_ExplainedError): ...


CardIn = Annotated[
    Union[DomainClarificationIn, SqlRuleIn, SolvedQuestionIn, ExplainedErrorIn], Field(discriminator="family")]
CardUpdate = Annotated[
    Union[DomainClarificationUpdate, SqlRuleUpdate, SolvedQuestionUpdate, ExplainedErrorUpdate],
    Field(discriminator="family")]


# Responses reuse the domain's models: one definition of a card and its parts.
CardOut = Card


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


class CardPage(BaseModel):
    items: list[CardSummary]
    total: int
    page: int
    page_size: int


class PendingList(BaseModel):
    items: list[PendingOperation]


class WorkspaceOut(BaseModel):
    id: str
    name: str
    language: Literal["en", "it"]
    created_at: datetime
    manage: bool


class WorkspaceList(BaseModel):
    items: list[WorkspaceOut]


class PasswordLogin(_Input):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9._@-]{1,64}$")]
    password: Annotated[str, Field(min_length=1, max_length=1024)]


class TokenLogin(_Input):
    token: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,200}$")]


Login = Union[PasswordLogin, TokenLogin]


class PrincipalOut(BaseModel):
    user: str
    role: str
    workspaces: list[str]
    permissions: list[str]


class SessionOut(BaseModel):
    principal: PrincipalOut
    csrf_token: str | None = None
