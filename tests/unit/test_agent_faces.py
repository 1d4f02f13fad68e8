"""What the thin faces (the MCP tools, the Python client) make of a call before it
reaches the service, and how they read an error back: no I/O."""

from __future__ import annotations

import base64
import json

import pytest

from tht.errors import Forbidden, InvalidInput, NotFound, ThothError
from tht.mcp.tools import TOOLS, command_arguments
from tht.service.client import build_request


def test_a_recall_call_is_its_command_with_typed_arguments_that_stay_what_they_are():
    tool = TOOLS["memory_rules"]
    arguments = tool.parse(
        {"question": "-c /etc/passwd", "error": "--help", "top": 4, "session": "s-1"}
    )
    name, args, stdin = command_arguments(tool, arguments, "/abs/runtime.yaml")
    assert name == "memory.rules"
    assert args == {
        "config": "/abs/runtime.yaml",
        "question": "-c /etc/passwd",  # a question, never an option
        "filters": {"top": 4},
        "session": "s-1",
        "error": "--help",
        "view": "compact",  # what a model reads, unless it asks for the full cards
    }
    assert stdin is None
    request = build_request(name, args, None)
    assert (request["command"], request["args"]) == (name, args) and "argv" not in request
    assert set(request["files"]) == {"/abs/runtime.yaml"}  # only the runtime file is read


def test_a_proposal_travels_as_standard_input_never_this_process_s():
    tool = TOOLS["memory_propose"]
    arguments = tool.parse({"session": "s-1", "data": {"version": 1}})
    name, args, stdin = command_arguments(tool, arguments, "/abs/runtime.yaml")
    assert (name, args["data"]) == ("memory.propose", "-") and json.loads(stdin) == {"version": 1}
    request = build_request(name, {**args, "session": "--data=/etc/hostname"}, None, stdin=stdin)
    # the bytes given, and nothing read from an argument that is not a file
    assert set(request["files"]) == {"/abs/runtime.yaml", "-"}
    assert json.loads(base64.b64decode(request["files"]["-"]["data"])) == {"version": 1}


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("memory_search", {}, "missing argument 'question'"),
        ("memory_search", {"question": "q", "colour": 1}, "unknown argument 'colour'"),
        ("memory_search", {"question": "q", "filters": {"schema": "s"}}, "filters: schema comes"),
        ("memory_solved_search", {"question": "q", "filters": {"column": "c"}}, "'filters.table'"),
        ("memory_summary", {"session": "a/b"}, "session: String should match pattern"),
        # a model took `explain` for a flag: told what it takes
        ("memory_search", {"question": "q", "explain": True}, "explain: takes the id of a card"),
        ("memory_rules", {"question": "q", "explain_card_id": "yes"}, 'not "yes"'),
    ],
)
def test_bad_arguments_are_named_without_the_models_names(tool, arguments, message):
    with pytest.raises(InvalidInput) as raised:
        TOOLS[tool].parse(arguments)
    assert message in raised.value.message
    assert "FiltersIn" not in raised.value.message
    fields = [d["field"] for d in raised.value.details]
    assert len(fields) == len({json.dumps(d, sort_keys=True) for d in raised.value.details})


def test_an_error_document_comes_back_as_the_class_of_its_code():
    forbidden = ThothError.from_dict(
        {"error": {"code": "forbidden", "message": "no", "details": {"permission": "p"}}}, 5
    )
    assert isinstance(forbidden, Forbidden) and forbidden.details == {"permission": "p"}
    assert (forbidden.code, forbidden.message, forbidden.exit_code) == ("forbidden", "no", 5)
    assert isinstance(ThothError.from_dict({"error": {"code": "not_found"}}, 3), NotFound)
    # a code this process has no class for (a newer service's) keeps its code
    unknown = ThothError.from_dict({"error": {"code": "from_the_future", "message": "m"}}, 8)
    assert type(unknown) is ThothError and (unknown.code, unknown.exit_code) == (
        "from_the_future",
        8,
    )


def test_the_instructions_send_a_model_to_the_tool_that_returns_what_it_needs():
    from tht.mcp.server import INSTRUCTIONS

    # memory_search returns clarifications only: a model that trusts the instructions
    # must learn that the rules are memory_rules'
    assert "memory_search (domain clarifications only" in INSTRUCTIONS
    assert "memory_rules (SQL rules" in INSTRUCTIONS
    assert all(name in INSTRUCTIONS for name in TOOLS)
    assert "Clarifications only" in TOOLS["memory_search"].description
    assert all(
        "similarity" in TOOLS[name].description
        for name in ("memory_search", "memory_rules", "memory_solved_search")
    )
