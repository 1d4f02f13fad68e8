"""The contract between the agent workflow and Memory: files in the session directory.

``<sessions_root>/<workspace>/<session-id>/ledger.jsonl`` is the workflow's append-only ledger, one
JSON event a line. Memory reads three kinds of event and writes one:

- ``decision``: a decision of a gate (id, type, status approved / rejected /
  superseded, payload). The last event of an id is its status; an approved decision
  listed in another approved decision's ``supersedes`` is superseded.
- ``memory_decided``: a Memory card the session already decided on (used or
  dismissed at a gate); recall with ``--session`` leaves it out.
- ``memory_summary_reviewed``: written by ``review-apply`` once per session.

Other event kinds belong to the workflow and are carried through untouched.

``<sessions_root>/<workspace>/<session-id>/memory_proposals.json`` holds the proposals Pi prepares
and ``tht memory propose`` validates and records. The JSON Schemas in ``schemas/`` are
generated from these models (a test keeps them equal).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tht.errors import InvalidInput
from tht.memory.model import MAX_MEANING, MAX_TEXT, WORKSPACE_ID_PATTERN, CardId

SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
DECISION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
PROPOSAL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
MAX_PROPOSALS = 100
_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_WORKSPACE_ID = re.compile(WORKSPACE_ID_PATTERN)

# Which decision types may found knowledge of each family. Everything else never does:
# simple table selections (tables_selected), failures without an explanation
# (query_failed: a timeout, an error nobody explained), one-off choices for the current
# question (question_restricted, e.g. "only 2024 this time": it may only stay in the
# solved question's context), Memory the session used or dismissed (memory_decided).
ADMISSIBLE_TYPES: dict[str, frozenset[str]] = {
    "domain_clarification": frozenset({"concept_clarified"}),
    "sql_rule": frozenset({"sql_corrected", "rule_stated"}),
    "explained_error": frozenset({"sql_corrected", "error_explained"}),
    "solved_question": frozenset({"sql_approved", "question_restricted"}),
}
# Corrections and errors are knowledge only with the explanation the reviewer approved.
EXPLAINED_TYPES = frozenset({"sql_corrected", "error_explained"})
KNOWN_DECISION_TYPES = frozenset().union(*ADMISSIBLE_TYPES.values()) | {
    "tables_selected",
    "query_failed",
}
GATE: Final = "reviewer_memory_promote"


def check_session_id(session: str) -> str:
    """A session id is one path segment: never '..', a separator, a NUL, a leading dot
    or a line break (the whole id must match, up to its last character)."""
    if not isinstance(session, str) or not _SESSION_ID.fullmatch(session) or ".." in session:
        raise InvalidInput(
            f"{session!r} is not a session id (letters, digits, '.', '_' and '-', starting with a"
            " letter or digit, at most 128 characters, no '..')",
            details={"session": session},
        )
    return session


def check_workspace_id(workspace: str) -> str:
    """A workspace id names the workspace's directory under the sessions root."""
    if not isinstance(workspace, str) or not _WORKSPACE_ID.fullmatch(workspace):
        raise InvalidInput(
            f"{workspace!r} is not a workspace id (lower case letters, digits, '_' and '-',"
            " starting with a letter or digit, at most 63 characters)",
            details={"workspace": workspace},
        )
    return workspace


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --- ledger.jsonl ---------------------------------------------------------------------


class DecisionEvent(_Strict):
    """A gate's decision. Its payload is the workflow's; Memory reads `explanation`
    (corrections, errors), `question` and `sql` (the approved SQL)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    event: Literal["decision"]
    id: Annotated[str, Field(pattern=DECISION_ID_PATTERN)]
    type: Annotated[str, Field(min_length=1, max_length=64)]
    status: Literal["approved", "rejected", "superseded"]
    payload: dict[str, Any] = Field(default_factory=dict)
    supersedes: list[Annotated[str, Field(pattern=DECISION_ID_PATTERN)]] = Field(
        default_factory=list
    )
    at: str | None = None


class MemoryDecidedEvent(_Strict):
    """A Memory card this session already decided on: used (approved) or dismissed."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    event: Literal["memory_decided"]
    card: CardId
    status: Literal["approved", "rejected"]
    gate: str | None = None
    at: str | None = None


class ReviewedCard(_Strict):
    proposal: str
    card: str
    action: Literal["add", "update", "reuse"]


class MemorySummaryReviewedEvent(_Strict):
    """Written once per session by `review-apply`, after the review's Memory commit."""

    event: Literal["memory_summary_reviewed"]
    session: Annotated[str, Field(pattern=SESSION_ID_PATTERN)]
    gate: Literal["reviewer_memory_promote"] = GATE
    outcome: Literal["applied", "declined"]
    reviewer: str
    request_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    proposals_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    cards: list[ReviewedCard] = Field(default_factory=list)
    at: str


class OtherEvent(BaseModel):
    """An event of the workflow's own that Memory does not interpret."""

    model_config = ConfigDict(extra="allow")

    event: Annotated[str, Field(min_length=1, max_length=64)]

    @model_validator(mode="after")
    def _not_a_known_kind(self) -> OtherEvent:
        if self.event in ("decision", "memory_decided", "memory_summary_reviewed"):
            raise ValueError(f"malformed {self.event} event")
        return self


LedgerEvent = DecisionEvent | MemoryDecidedEvent | MemorySummaryReviewedEvent | OtherEvent


# --- memory_proposals.json --------------------------------------------------------------


class ProposalLink(_Strict):
    """A link to an existing card (`target`) or to another proposal of the same summary
    (`proposal`), with its meaning."""

    target: CardId | None = None
    proposal: Annotated[str, Field(pattern=PROPOSAL_ID_PATTERN)] | None = None
    meaning: Annotated[str, Field(min_length=1, max_length=MAX_MEANING)]

    @model_validator(mode="after")
    def _one_target(self) -> ProposalLink:
        if (self.target is None) == (self.proposal is None):
            raise ValueError("a link names either a target card or a proposal")
        return self


class Proposal(_Strict):
    id: Annotated[str, Field(pattern=PROPOSAL_ID_PATTERN)]
    action: Literal["add", "update"]
    sources: list[Annotated[str, Field(pattern=DECISION_ID_PATTERN)]] = Field(
        min_length=1, max_length=50
    )
    card: dict[str, Any] = Field(
        description="The card (as `tht memory create` takes it, without links)"
    )
    links: list[ProposalLink] = Field(default_factory=list, max_length=100)
    card_id: CardId | None = Field(default=None, description="update: the existing card")
    revision: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="update: its current revision"
    )
    change: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)] | None = Field(
        default=None, description="update: what changes and why"
    )
    # Set by `propose`: an exact existing card that makes the addition unnecessary.
    reuse: CardId | None = None

    @model_validator(mode="after")
    def _action_fields(self) -> Proposal:
        if self.action == "update" and (self.card_id is None or self.revision is None):
            raise ValueError("an update names the existing card (card_id) and its current revision")
        if self.action == "add" and (self.card_id is not None or self.revision is not None):
            raise ValueError(
                "an addition has no card_id or revision (use action update to change a card)"
            )
        return self


class ProposalsFile(_Strict):
    version: Literal[1] = 1
    session: Annotated[str, Field(pattern=SESSION_ID_PATTERN)] | None = None
    workspace: str | None = None
    proposals: list[Proposal] = Field(default_factory=list, max_length=MAX_PROPOSALS)
    # Set by `propose`: the digest the reviewer's request must name, and when.
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    recorded_at: str | None = None


# --- the reviewer's choice (the signed gate request's `review`) --------------------------


class ReviewSelection(_Strict):
    proposal: Annotated[str, Field(pattern=PROPOSAL_ID_PATTERN)]
    # The reviewer's edit of the card (content, scope, dependencies, ...); absent: as proposed.
    card: dict[str, Any] | None = None
    # The reviewer's links; absent: as proposed.
    links: list[ProposalLink] | None = Field(default=None, max_length=100)


class Review(_Strict):
    decision: Literal["apply", "decline_all"]
    proposals_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    selected: list[ReviewSelection] = Field(default_factory=list, max_length=MAX_PROPOSALS)

    @model_validator(mode="after")
    def _consistent(self) -> Review:
        if self.decision == "decline_all" and self.selected:
            raise ValueError("declining everything selects nothing")
        ids = [s.proposal for s in self.selected]
        if len(set(ids)) != len(ids):
            raise ValueError("a proposal is selected twice")
        return self


SCHEMAS: dict[str, tuple[str, Any]] = {  # file name -> (title, model or union type)
    "ledger-event.schema.json": (
        "Thoth Memory: one event of <workspace>/<session>/ledger.jsonl",
        LedgerEvent,
    ),
    "memory-proposals.schema.json": (
        "Thoth Memory: <workspace>/<session>/memory_proposals.json",
        ProposalsFile,
    ),
    "memory-review.schema.json": (
        "Thoth Memory: the reviewer's choice in a review-apply gate request",
        Review,
    ),
}


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schemas of the contract, as committed in `schemas/`."""
    from pydantic import TypeAdapter

    found = {}
    for name, (title, model) in SCHEMAS.items():
        schema = TypeAdapter(model).json_schema()
        found[name] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://thoth-memory.invalid/schemas/{name}",
            **schema,
            "title": title,
        }
    return found
