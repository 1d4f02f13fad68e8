"""The MCP tools: an agent's side of Memory (the ``agent`` capability, docs/accounts.md),
the same five operations as ``tht memory search|rules|solved-search|propose|summary``
and the HTTP agent routes, with the same answers.

Arguments are validated by the HTTP API's request models (tht.memory.agent_requests):
one definition of what an agent may send, whatever the face. The input schemas shown
to a model are written for it (short, with the descriptions it needs) and a test keeps
them to the same fields as those models.

Nothing here imports the engines: the stdio server forwards each call to the service
as its command and arguments (``command_arguments``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from tht.errors import InvalidInput
from tht.memory import agent_requests as requests
from tht.memory.model import CARD_ID_PATTERN
from tht.memory.recall_answer import VIEWS
from tht.validation import validation_details

_FILTERS = {
    "type": "object",
    "description": (
        "Narrow the recall (optional): scope (exact business scope), concepts (every one"
        " must be present), table and column (a column needs its table), top (1-100,"
        " default 10), families (memory_search: domain_clarification by default, widened"
        " with sql_rule, explained_error; memory_rules: sql_rule, explained_error). The"
        " database and schema come from the workspace's configuration."
    ),
    "properties": {
        "families": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "scope": {"type": "string", "maxLength": 300},
        "concepts": {"type": "array", "items": {"type": "string"}, "maxItems": 50},
        "table": {"type": "string", "maxLength": 128},
        "column": {"type": "string", "maxLength": 128},
        "top": {"type": "integer", "minimum": 1, "maximum": 100},
    },
    "additionalProperties": False,
}
_TOP = {
    "type": "integer",
    "minimum": 1,
    "maximum": 100,
    "description": "How many results (default 10); the same as filters.top, give one of them",
}
_QUESTION = {
    "type": "string",
    "maxLength": requests.MAX_QUESTION,
    "description": "The user's question",
}
_SESSION = {
    "type": "string",
    "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
    "description": "The workflow session id (a directory of the sessions root)",
}
_LEDGER_SESSION = {
    **_SESSION,
    "description": "Workflow session (optional): leave out Memory already decided in it (its ledger)",
}
_EXPLAIN = {
    "type": "string",
    "pattern": CARD_ID_PATTERN,
    "description": "A card id (mem-<uuid>, optional; not a flag): the answer's explain says"
    " why that card is or is not among the results",
}
_VIEW = {
    "type": "string",
    "enum": list(VIEWS),
    "description": "compact (default): each card's non-empty texts, its similarity and its"
    " dependencies; full: each card as `tht memory show` prints it, with its ranking score",
}
# What every recall tool answers, in its description.
_RECALL_ANSWER = (
    ' Returns {"results": [card, ...]}, best first: each card its id, family, revision,'
    " non-empty texts (title only when the content does not already say it) and depends_on"
    " (tables and columns), and similarity: the cosine similarity of the question and the"
    " card, 0-1, higher is closer (with the bundled embedder a card under 0.80 is rarely the"
    " one needed, and an answer whose best card is under 0.82 most likely holds nothing for"
    " the question; a card reached through a link has linked_from and link instead)."
    " imported: true marks a card an import wrote."
)


RECALL_COMMANDS = ("memory.search", "memory.rules", "memory.solved-search")


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class Tool:
    name: str
    command: str  # the command it is (tht.commands.table)
    title: str
    description: str
    input_schema: dict[str, Any]
    arguments: type[BaseModel]  # the API's request model: the validation
    read_only: bool = True

    def parse(self, arguments: dict[str, Any] | None) -> BaseModel:
        """The arguments validated, or InvalidInput naming each bad one."""
        try:
            return self.arguments.model_validate(arguments or {})
        except ValidationError as exc:
            details = _argument_errors(exc)
            message = "; ".join(dict.fromkeys(_describe(error) for error in details))
            raise InvalidInput(
                f"invalid arguments for {self.name}: {message}", details=details
            ) from exc


def _argument_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors, located by argument: without the model names it adds when a
    value may take one of several shapes (filters with or without a column)."""
    details = []
    for error in validation_details(exc):
        path = [part for part in error["field"].split(".") if not part[:1].isupper()]
        details.append({**error, "field": ".".join(path)})
    return list({json.dumps(d, sort_keys=True): d for d in details}.values())


def _describe(error: dict[str, Any]) -> str:
    if error["type"] == "missing":
        return f"missing argument '{error['field']}'"
    if error["type"] == "extra_forbidden":
        return f"unknown argument '{error['field']}'"
    return f"{error['field']}: {error['message']}" if error["field"] else error["message"]


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="memory_search",
            command="memory.search",
            title="Recall domain memory",
            description=(
                "Recall the workspace's domain clarifications (what the business means by"
                " its words) for a user's question, before writing SQL. Clarifications only:"
                " the SQL rules and explained errors are memory_rules' (or widen with"
                " filters.families)." + _RECALL_ANSWER
            ),
            input_schema=_object(
                {
                    "question": _QUESTION,
                    "filters": _FILTERS,
                    "top": _TOP,
                    "session": _LEDGER_SESSION,
                    "explain_card_id": _EXPLAIN,
                    "view": _VIEW,
                },
                ["question"],
            ),
            arguments=requests.SearchIn,
        ),
        Tool(
            name="memory_rules",
            command="memory.rules",
            title="Recall SQL rules",
            description=(
                "Recall the SQL rules (how to write the SQL: joins, formulas, filters) and"
                " explained errors that apply to a question, or to a database error text"
                " (error: exact error-signature matches come first, marked"
                " exact_error_match, then recall). Give a question, an error, or both."
                + _RECALL_ANSWER
            ),
            input_schema=_object(
                {
                    "question": {
                        **_QUESTION,
                        "description": "The user's question (optional with error)",
                    },
                    "error": {
                        "type": "string",
                        "maxLength": requests.MAX_QUESTION,
                        "description": "A database error message the SQL produced",
                    },
                    "filters": _FILTERS,
                    "top": _TOP,
                    "session": _LEDGER_SESSION,
                    "explain_card_id": {
                        **_EXPLAIN,
                        "description": _EXPLAIN["description"] + " (not with error)",
                    },
                    "view": _VIEW,
                },
                [],
            ),
            arguments=requests.RulesIn,
        ),
        Tool(
            name="memory_solved_search",
            command="memory.solved-search",
            title="Recall solved questions",
            description=(
                "Recall solved questions similar to the user's: earlier questions with the SQL a"
                " reviewer approved (question, sql). They are consultative exemplars, never an"
                " approval of new SQL." + _RECALL_ANSWER
            ),
            input_schema=_object(
                {
                    "question": _QUESTION,
                    "filters": _FILTERS,
                    "top": _TOP,
                    "explain_card_id": _EXPLAIN,
                    "view": _VIEW,
                },
                ["question"],
            ),
            arguments=requests.SolvedSearchIn,
        ),
        Tool(
            name="memory_propose",
            command="memory.propose",
            title="Propose Memory from a session",
            description=(
                "Validate a workflow session's Memory proposals against its ledger and the archive,"
                " and record them for a reviewer (nothing reaches the archive before the review)."
                ' data is memory_proposals.json: {"version": 1, "proposals": [{"id", "action":'
                ' "add"|"update", "sources": [ledger decision ids], "card": {...}, "links": [...],'
                ' for update "card_id", "revision", "change"}]}. Returns the recorded proposals'
                " and their digest."
            ),
            input_schema=_object(
                {
                    "session": _SESSION,
                    "data": {
                        "type": "object",
                        "description": "The memory_proposals.json document (schemas/memory-proposals.schema.json)",
                    },
                },
                ["session", "data"],
            ),
            arguments=requests.ProposeIn,
            read_only=False,
        ),
        Tool(
            name="memory_summary",
            command="memory.summary",
            title="Summarize a session's proposals",
            description=(
                "The reviewer's editable summary of a session's recorded proposals: additions,"
                " updates with their change, the solved question, links, reused cards, and the"
                " proposals_digest a review must name."
            ),
            input_schema=_object({"session": _SESSION}, ["session"]),
            arguments=requests.SessionIn,
        ),
    )
}


def command_arguments(
    tool: Tool, arguments: Any, config: str
) -> tuple[str, dict[str, Any], bytes | None]:
    """The command a validated tool call is (``tht.commands.table``), its arguments and
    the bytes of its standard input (a proposal's document)."""
    args: dict[str, Any] = {"config": config}
    if tool.command in RECALL_COMMANDS:
        args["question"] = arguments.question
        args["filters"] = arguments.filters_document() or None
        args["explain"] = arguments.explain_card_id
        args["view"] = arguments.view or "compact"  # what a model reads: no null, no copy
    for name in ("session", "error"):
        args[name] = getattr(arguments, name, None)
    stdin = None
    data = getattr(arguments, "data", None)
    if data is not None:
        args["data"] = "-"
        stdin = json.dumps(data, ensure_ascii=False).encode()
    return tool.command, {k: v for k, v in args.items() if v is not None}, stdin
