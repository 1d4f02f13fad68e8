"""The API's documented shapes (OpenAPI). Validation of cards stays in
tht.memory.model; these models describe the same rules to API clients."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tht.memory.model import (
    CARD_ID_PATTERN,
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
    Card,
    CardSummary,
    PendingOperation,
    Revision,
)
from tht.memory.model import (
    TEXT_PATTERN as TEXT_PATTERN,  # the pages and the API read it from here
)

# Text as tht.memory.model accepts it: printable, with at least one visible character.
PRINTABLE_WORD = TEXT_PATTERN


# Text fields as the model bounds them (tht.memory.model), in the API's JSON Schema.
Name = Annotated[str, Field(max_length=MAX_IDENTIFIER, pattern=TEXT_PATTERN)]
Title = Annotated[str, Field(max_length=MAX_TITLE, pattern=TEXT_PATTERN)]
Concept = Annotated[str, Field(max_length=MAX_CONCEPT, pattern=TEXT_PATTERN)]
Meaning = Annotated[str, Field(max_length=MAX_MEANING, pattern=TEXT_PATTERN)]
Scope = Annotated[str, Field(max_length=MAX_SCOPE, pattern=TEXT_PATTERN)]
Text = Annotated[str, Field(max_length=MAX_TEXT, pattern=TEXT_PATTERN)]
SqlText = Annotated[str, Field(max_length=MAX_SQL, pattern=TEXT_PATTERN)]


class ErrorBody(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorOut(BaseModel):
    error: ErrorBody


_DESCRIPTIONS = {
    401: "Not authenticated",
    403: "Not allowed (permission, workspace, CSRF)",
    404: "Not found",
    409: "Conflict (stale revision, family_immutable, idempotency_key_reused)",
    413: "Body too large",
    415: "Body is not JSON",
    422: "Invalid input",
    429: "Too many attempts: retry after the Retry-After header's seconds",
    503: "Archive or index unavailable",
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
DependencyIn = DatabaseDependency | SchemaDependency | TableDependency | ColumnDependency


class LinkIn(_Input):
    target: Annotated[str, Field(pattern=CARD_ID_PATTERN)]
    meaning: Meaning


class _CardBase(_Input):
    title: Title
    concepts: list[Concept] = Field(default_factory=list, max_length=MAX_CONCEPTS)
    dependencies: list[DependencyIn] = Field(default_factory=list, max_length=MAX_DEPENDENCIES)
    links: list[LinkIn] = Field(
        default_factory=list,
        max_length=MAX_LINKS,
        description="One link per target card of the same workspace (else 404/409)",
    )


class _DomainClarification(_CardBase):
    family: Literal["domain_clarification"]
    content: Text
    scope: Scope
    rationale: Text | None = None
    context: Text | None = None


class _SqlRule(_CardBase):
    family: Literal["sql_rule"]
    content: Text
    scope: Scope
    rationale: Text
    sql: SqlText | None = None
    context: Text | None = None


class _SolvedQuestion(_CardBase):
    family: Literal["solved_question"]
    question: Text
    sql: SqlText
    context: Text
    scope: Scope | None = None
    content: Text | None = None


class _ExplainedError(_CardBase):
    family: Literal["explained_error"]
    context: Text = Field(description="The error observed")
    content: Text = Field(description="The correction")
    rationale: Text
    scope: Scope | None = None
    sql: SqlText | None = None
    error_signature: Text | None = Field(
        default=None,
        description="The database error text; stored normalized. Omitted on an edit: kept",
    )


class _Revision(BaseModel):
    revision: Revision | None = Field(
        default=None, description="The revision edited: a newer stored revision is a conflict (409)"
    )


class DomainClarificationUpdate(_DomainClarification, _Revision): ...


class SqlRuleUpdate(_SqlRule, _Revision): ...


class SolvedQuestionUpdate(_SolvedQuestion, _Revision): ...


class ExplainedErrorUpdate(_ExplainedError, _Revision): ...


class DomainClarificationIn(_DomainClarification): ...


class SqlRuleIn(_SqlRule): ...


class SolvedQuestionIn(_SolvedQuestion): ...


class ExplainedErrorIn(_ExplainedError): ...


CardIn = Annotated[
    DomainClarificationIn | SqlRuleIn | SolvedQuestionIn | ExplainedErrorIn,
    Field(discriminator="family"),
]
CardUpdate = Annotated[
    DomainClarificationUpdate | SqlRuleUpdate | SolvedQuestionUpdate | ExplainedErrorUpdate,
    Field(discriminator="family"),
]


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
    embedder: str
    created_at: datetime
    manage: bool


class WorkspaceList(BaseModel):
    items: list[WorkspaceOut]


class PasswordLogin(_Input):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9._@-]{1,64}$")]
    password: Annotated[str, Field(min_length=1, max_length=1024)]


class TokenLogin(_Input):
    token: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,200}$")]


Login = PasswordLogin | TokenLogin


class PrincipalOut(BaseModel):
    user: str
    role: str
    workspaces: list[str]
    permissions: list[str]


class SessionOut(BaseModel):
    principal: PrincipalOut
    csrf_token: str | None = None


# --- an agent's recall and proposals (tht.web.agent) -----------------------------------
#
# The requests are tht.memory.agent_requests (the MCP tools validate the same); the
# answers follow.


class Retrieval(BaseModel):
    path: list[str]
    via: Literal["direct", "link", "direct+link", "error_signature"]
    seed_rank: int | None
    dense_rank: int | None
    bm25_rank: int | None
    matched_kind: str | None
    hops: int
    meanings: list[str]


class RecallHit(BaseModel):
    """A card rebuilt from PostgreSQL (without its incoming links), its ranking score
    (not a similarity; null for an exact error-signature match) and how it was found."""

    id: str
    workspace: str
    family: str
    title: str
    score: float | None
    retrieval: Retrieval


class Explain(BaseModel):
    """Why a card is or is not among the results: `reason` is returned, family, scope,
    concepts, binding, filters, decided, pending, not_indexed or ranked_below_cut."""

    card: str
    returned: bool
    reason: str
    details: dict[str, Any]


class CompactHit(BaseModel):
    """A hit of the compact view (`view: compact`): the card's id, family, revision and
    the fields that say something (no nulls, no title repeating the content), its
    `similarity` or how a link found it; the order of `results` is the ranking."""

    model_config = ConfigDict(extra="allow")
    id: str
    family: str
    revision: int


class RecallOut(BaseModel):
    results: list[RecallHit | CompactHit]


class SearchOut(RecallOut):
    explain: Explain | None = None


class RulesOut(RecallOut):
    error_signature: str | None = Field(
        default=None, description="With error: its normalized signature"
    )
    exact: int | None = Field(
        default=None, description="With error: how many results matched it exactly"
    )
    recall_error: ErrorBody | None = Field(
        default=None, description="With error: why recall failed after exact matches were found"
    )


class ProposedOut(BaseModel):
    id: str
    action: str
    family: str
    card_id: str | None = None


class ProposeOut(BaseModel):
    session: str
    workspace: str
    recorded: str
    digest: str
    proposals: list[ProposedOut]


class SummaryOut(BaseModel):
    session: str
    workspace: str
    gate: str
    proposals_digest: str
    additions: list[dict[str, Any]]
    updates: list[dict[str, Any]]
    solved_question: dict[str, Any] | None
    links: list[dict[str, Any]]
    reused: list[dict[str, Any]]
    reviewed: dict[str, Any] | None


class SolvedIndexOut(BaseModel):
    session: str
    results: list[dict[str, Any]]
