"""What an agent may send, whatever the face: the arguments of recall (search, rules,
solved-search) and of the workflow's side of Memory (propose, summary), as the HTTP
agent routes take them (tht.web.agent_api, tht.web.schemas) and the MCP tools validate them
(tht.mcp.tools).

The same fields as the CLI commands `tht memory search|rules|solved-search|propose|
summary|solved-index`: `filters` is the object of `--filters`. The DWH binding is the
workspace's configuration: a request naming database or schema is refused (422).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from tht.memory.model import CARD_ID_PATTERN, MAX_CONCEPT, TEXT_PATTERN
from tht.memory.recall_answer import View


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


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
    explain_card_id: Annotated[str, Field(pattern=CARD_ID_PATTERN)] | None = Field(
        default=None,
        validation_alias=AliasChoices("explain_card_id", "explain"),
        description=(
            "A card id (mem-<uuid>): the answer's `explain` says why that card is or is not"
            " among the results (`--explain` of the CLI command; `explain` is accepted too)"
        ),
    )
    view: View | None = Field(
        default=None,
        description=(
            "compact: what an agent needs of each card, no null or empty field, with its"
            " similarity; full: each card whole, with its ranking score. Default: full"
            " (compact for the MCP tools)"
        ),
    )

    @field_validator("explain_card_id", mode="before")
    @classmethod
    def _a_card_id(cls, value: Any) -> Any:
        # a model reading "explain" passes true: say what it takes instead of a pattern
        if value is not None and not (isinstance(value, str) and re.match(CARD_ID_PATTERN, value)):
            raise ValueError(
                f"takes the id of a card to explain (mem-<uuid>, from a result's id), not"
                f" {json.dumps(value)[:60]}; leave it out to recall only"
            )
        return value

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
                        "required": ["error", "explain_card_id"],
                        "properties": {
                            "error": {"type": "string"},
                            "explain_card_id": {"type": "string"},
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
