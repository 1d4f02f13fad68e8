"""The API's documented shapes (OpenAPI). Validation of cards stays in
tht.memory.model; these models describe the same rules to API clients."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

from tht.memory.model import (
    CARD_ID_PATTERN,
    FAMILIES,
    FAMILY_FIELDS,
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
    TEXT_FIELDS,
    Card,
    CardSummary,
    PendingOperation,
    Revision,
    text_limit,
    texts_in_order,
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


# Where a family's text field means something its name does not say.
_FIELD_DESCRIPTIONS: dict[tuple[str, str], str] = {
    ("explained_error", "context"): "The error observed",
    ("explained_error", "content"): "The correction",
}


def _text(name: str) -> Any:
    """A text field's schema: printable, bounded as the model bounds it."""
    return Annotated[str, Field(max_length=text_limit(name), pattern=TEXT_PATTERN)]


def _family_fields(family: str) -> dict[str, Any]:
    """The fields of a family's documents, from the model: its text fields in the
    model's order (the required ones without a default), and an explained error's
    signature."""
    fields: dict[str, Any] = {"family": (Literal[family], ...)}
    for name, required in FAMILY_FIELDS[family].items():
        description = _FIELD_DESCRIPTIONS.get((family, name))
        if required:
            fields[name] = (_text(name), Field(description=description))
        else:
            fields[name] = (_text(name) | None, Field(default=None, description=description))
    if family == "explained_error":
        fields["error_signature"] = (
            _text("error_signature") | None,
            Field(
                default=None,
                description="The database error text; stored normalized. Omitted on an edit: kept",
            ),
        )
    return fields


class _Revision(BaseModel):
    revision: Revision | None = Field(
        default=None, description="The revision edited: a newer stored revision is a conflict (409)"
    )


def _family_models(family: str) -> tuple[type[_CardBase], type[_CardBase]]:
    """A family's document on create (``<Family>In``) and on update
    (``<Family>Update``, with the revision edited)."""
    name = "".join(part.capitalize() for part in family.split("_"))
    base = create_model(f"_{name}", __base__=_CardBase, **_family_fields(family))
    # the revision first, as a class (base, _Revision) lists it; create_model's stub
    # wants every base to be the first one's kind
    bases = cast("tuple[type[_CardBase], ...]", (base, _Revision))
    return (
        create_model(f"{name}In", __base__=base),
        create_model(f"{name}Update", __base__=bases),
    )


# One pair per family of the model, named as the API documents them: SqlRuleIn and
# SqlRuleUpdate, ...
FAMILY_MODELS: dict[str, tuple[type[_CardBase], type[_CardBase]]] = {
    family: _family_models(family) for family in FAMILIES
}

if TYPE_CHECKING:
    # what a route reads of a card's body: any family's document
    CardIn = _CardBase
    CardUpdate = _CardBase
else:
    CardIn = Annotated[
        Union[tuple(created for created, _ in FAMILY_MODELS.values())],  # noqa: UP007
        Field(discriminator="family"),
    ]
    CardUpdate = Annotated[
        Union[tuple(updated for _, updated in FAMILY_MODELS.values())],  # noqa: UP007
        Field(discriminator="family"),
    ]


# What the pages know of a card's fields (base.html puts it in every page as JSON, for
# the scripts and the editor's template): each family (in order) with its text fields in
# the model's order and whether they are required, every text field in the editor's order, and their
# bounds. The words shown for them (labels, hints) are the pages' own.
PAGE_CARD_FIELDS: dict[str, Any] = {
    "families": [
        [family, [[name, required] for name, required in FAMILY_FIELDS[family].items()]]
        for family in FAMILIES
    ],
    "texts": list(texts_in_order("question", "content", "scope", "rationale", "sql", "context")),
    "limits": {name: text_limit(name) for name in TEXT_FIELDS},
}


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


# --- an agent's recall and proposals (tht.web.agent_api) -----------------------------------
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
