"""The API's documented shapes (OpenAPI). Validation of cards stays in
tht.memory.model; these models describe the same rules to API clients."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    TEXT_PATTERN,
    Card,
    CardSummary,
    PendingOperation,
    Revision,
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
# The same fields as the CLI commands `tht memory search|rules|solved-search|propose|
# summary|solved-index`: `filters` is the object of `--filters`. The DWH binding is the
# workspace's configuration: a request naming database or schema is refused (422).

MAX_QUESTION = 2_000  # tht.memory.recall_service.MAX_QUESTION
SESSION_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"  # tht.workflow.contract.SESSION_ID_PATTERN
# The error text must name something: a text of punctuation alone leaves no signature.
ERROR_TEXT = r"[A-Za-z0-9]"
_BINDING_KEYS = ("database", "schema")


def _refuse_binding(data: Any, where: str) -> Any:
    if isinstance(data, dict):
        named = sorted(set(_BINDING_KEYS) & set(data))
        if named:
            raise ValueError(
                f"{' and '.join(named)} {'come' if len(named) > 1 else 'comes'} from the workspace's"
                f" configuration and cannot be set in {where}"
            )
    return data


class _Filters(_Input):
    scope: Annotated[str, Field(min_length=1, max_length=300, pattern=TEXT_PATTERN)] | None = Field(
        default=None, description="Business scope, exact"
    )
    concepts: list[
        Annotated[str, Field(min_length=1, max_length=MAX_CONCEPT, pattern=TEXT_PATTERN)]
    ] = Field(default_factory=list, max_length=50, description="Every concept must be present")
    top: Annotated[int, Field(ge=1, le=100)] | None = Field(
        default=None, description="Results (default 10)"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_binding(cls, data: Any) -> Any:
        return _refuse_binding(data, "filters")


class RecallFiltersIn(_Filters):
    """`--filters` without a column."""

    table: Annotated[str, Field(min_length=1, max_length=128, pattern=TEXT_PATTERN)] | None = None
    column: None = None


class RecallColumnFiltersIn(_Filters):
    """`--filters` with a column: a column filter needs its table."""

    table: Annotated[str, Field(min_length=1, max_length=128, pattern=TEXT_PATTERN)]
    column: Annotated[str, Field(min_length=1, max_length=128, pattern=TEXT_PATTERN)]


FiltersIn = RecallFiltersIn | RecallColumnFiltersIn

# `filters.families`: what each command may be asked for. search recalls domain
# clarifications by default (F2) and may be widened explicitly to every reusable family;
# rules and solved-search may only narrow their own.
SearchFamily = Literal["domain_clarification", "sql_rule", "explained_error"]
RuleFamily = Literal["sql_rule", "explained_error"]
SolvedFamily = Literal["solved_question"]
_FAMILIES = "Families to recall (default: the command's own)"
SearchFamilies = Annotated[
    Sequence[SearchFamily] | None,
    Field(
        min_length=1,
        max_length=3,
        description=_FAMILIES + "; domain_clarification only unless widened here",
    ),
]
RuleFamilies = Annotated[
    Sequence[RuleFamily] | None, Field(min_length=1, max_length=2, description=_FAMILIES)
]
SolvedFamilies = Annotated[
    Sequence[SolvedFamily] | None, Field(min_length=1, max_length=1, description=_FAMILIES)
]


class SearchFiltersIn(RecallFiltersIn):
    families: SearchFamilies = None


class SearchColumnFiltersIn(RecallColumnFiltersIn):
    families: SearchFamilies = None


class RulesFiltersIn(RecallFiltersIn):
    families: RuleFamilies = None


class RulesColumnFiltersIn(RecallColumnFiltersIn):
    families: RuleFamilies = None


class SolvedFiltersIn(RecallFiltersIn):
    families: SolvedFamilies = None


class SolvedColumnFiltersIn(RecallColumnFiltersIn):
    families: SolvedFamilies = None


# `top` is filters.top; a request gives one or the other
_ONE_TOP: dict[str, Any] = {
    "not": {"required": ["top"], "properties": {"filters": {"required": ["top"]}}}
}


class RecallRequest(_Input):
    filters: FiltersIn | None = Field(default=None, description="The object of --filters")
    top: Annotated[int, Field(ge=1, le=100)] | None = Field(
        default=None, description="Results: the same as filters.top (give one of them)"
    )
    explain: Annotated[str, Field(pattern=CARD_ID_PATTERN)] | None = Field(
        default=None,
        description=(
            "A card id: the answer's `explain` says why it is or is not among the results"
            " (`--explain` of the CLI command)"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _no_binding(cls, data: Any) -> Any:
        return _refuse_binding(data, "the request")

    @model_validator(mode="after")
    def _one_top(self) -> Any:
        if self.top is not None and self.filters is not None and self.filters.top is not None:
            raise ValueError("give top or filters.top, not both")
        return self

    def filters_document(self) -> dict[str, Any]:
        """The `--filters` object the CLI would have been given."""
        document = self.filters.model_dump(exclude_none=True) if self.filters is not None else {}
        if not document.get("concepts"):
            document.pop("concepts", None)
        if self.top is not None:
            document["top"] = self.top
        return document


Question = Annotated[str, Field(max_length=MAX_QUESTION, pattern=TEXT_PATTERN)]
SessionId = Annotated[str, Field(pattern=SESSION_ID)]


class _QuestionRequest(RecallRequest):
    model_config = ConfigDict(json_schema_extra=_ONE_TOP)

    question: Question = Field(description="The user's question")


class SolvedSearchIn(_QuestionRequest):
    filters: SolvedFiltersIn | SolvedColumnFiltersIn | None = Field(
        default=None, description="The object of --filters"
    )


class SearchIn(_QuestionRequest):
    filters: SearchFiltersIn | SearchColumnFiltersIn | None = Field(
        default=None, description="The object of --filters"
    )
    session: SessionId | None = Field(
        default=None,
        description="Workflow session: leave out Memory already decided in it (its ledger)",
    )


class RulesIn(RecallRequest):
    # a question, an error text, or both
    model_config = ConfigDict(
        json_schema_extra={
            **_ONE_TOP,
            "anyOf": [
                {"required": ["question"], "properties": {"question": {"type": "string"}}},
                {"required": ["error"], "properties": {"error": {"type": "string"}}},
            ],
            # explain says why a question's recall left a card out: not with an error,
            # whose exact error-signature matches have no recall rank
            "allOf": [
                {
                    "not": {
                        "required": ["error", "explain"],
                        "properties": {
                            "error": {"type": "string"},
                            "explain": {"type": "string"},
                        },
                    }
                }
            ],
        }
    )

    filters: RulesFiltersIn | RulesColumnFiltersIn | None = Field(
        default=None, description="The object of --filters"
    )
    question: Question | None = Field(
        default=None, description="The user's question (optional with error)"
    )
    session: SessionId | None = Field(
        default=None,
        description="Workflow session: leave out Memory already decided in it (its ledger)",
    )
    error: Annotated[str, Field(max_length=MAX_QUESTION, pattern=ERROR_TEXT)] | None = Field(
        default=None,
        description="A database error text: exact error-signature matches first, then recall",
    )

    @model_validator(mode="after")
    def _something_to_recall(self) -> Any:
        if self.question is None and self.error is None:
            raise ValueError("a question or an error is required")
        return self


class ProposeIn(_Input):
    session: SessionId = Field(
        description="The workflow session id (a directory of the workspace's sessions)"
    )
    data: dict[str, Any] = Field(
        description="memory_proposals.json: schemas/memory-proposals.schema.json"
    )


class SessionIn(_Input):
    session: SessionId = Field(description="The workflow session id")


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


class RecallOut(BaseModel):
    results: list[RecallHit]


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
