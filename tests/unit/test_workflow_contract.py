"""The session contract: committed JSON Schemas, session ids, ledger semantics, error
signatures (pure: no I/O beyond reading the repository's schema files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tht.errors import InvalidInput
from tht.memory.error_signature import normalize_error
from tht.workflow.contract import Review, check_session_id, check_workspace_id, json_schemas
from tht.workflow.session import Ledger, _parse_ledger

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_committed_json_schemas_are_the_contract_models():
    # regenerate with: .venv/bin/python scripts/write_contract_schemas.py
    for name, schema in json_schemas().items():
        assert json.loads((SCHEMAS / name).read_text()) == schema, name


@pytest.mark.parametrize(
    "session",
    [
        "..",
        "../x",
        "a/b",
        "/abs",
        ".hidden",
        "",
        "x" * 129,
        "a\\b",
        "a..b",
        "s 1",
        "s-1\n",  # a line break after the id: Python's `$` matches before it
        "s-1\x00",
        "\x00",
        "s\n1",
    ],
)
def test_session_ids_are_one_plain_path_segment(session):
    with pytest.raises(InvalidInput):
        check_session_id(session)


@pytest.mark.parametrize("workspace", ["..", "../acme", "a/b", "Acme", "", "acme\n", "a\x00", "_a"])
def test_workspace_ids_name_one_directory_of_the_sessions_root(workspace):
    with pytest.raises(InvalidInput):
        check_workspace_id(workspace)
    assert check_workspace_id("acme-2_b") == "acme-2_b"


def test_valid_session_ids():
    for session in ("s-001", "2026-11-30T09.15_ab", "A"):
        assert check_session_id(session) == session


def test_the_last_event_of_a_decision_and_supersedes_give_its_effective_status():
    raw = (
        b"\n".join(
            json.dumps(e).encode()
            for e in [
                {"event": "decision", "id": "d1", "type": "sql_corrected", "status": "approved"},
                {"event": "decision", "id": "d2", "type": "sql_corrected", "status": "approved"},
                {"event": "decision", "id": "d1", "type": "sql_corrected", "status": "rejected"},
                {
                    "event": "decision",
                    "id": "d3",
                    "type": "sql_corrected",
                    "status": "approved",
                    "supersedes": ["d2"],
                },
                {"event": "gate_closed", "gate": "F4"},
                {
                    "event": "memory_decided",
                    "card": "MEM-00000000-0000-4000-8000-000000000001",
                    "status": "approved",
                },
            ]
        )
        + b"\n"
        + b'{"event": "decision", "id": "d4", "typ'
    )
    ledger = Ledger(_parse_ledger(raw, "s"))
    statuses = {i: d.status for i, d in ledger.decisions().items()}
    assert statuses == {
        "d1": "rejected",
        "d2": "superseded",
        "d3": "approved",
    }  # the torn line is ignored
    assert ledger.decided_cards() == {"mem-00000000-0000-4000-8000-000000000001"}


def test_a_malformed_known_event_is_refused_with_its_line():
    with pytest.raises(InvalidInput, match="line 2"):
        _parse_ledger(b'{"event": "x"}\n{"event": "decision", "id": "d1"}\n', "s")


def test_a_review_that_declines_everything_selects_nothing():
    with pytest.raises(ValueError):
        Review.model_validate(
            {
                "decision": "decline_all",
                "proposals_digest": "0" * 64,
                "selected": [{"proposal": "p1"}],
            }
        )
    with pytest.raises(ValueError):
        Review.model_validate(
            {
                "decision": "apply",
                "proposals_digest": "0" * 64,
                "selected": [{"proposal": "p1"}, {"proposal": "p1"}],
            }
        )


@pytest.mark.parametrize(
    "text, signature",
    [
        (
            'ERROR:  column "amount" does not exist\nLINE 1: SELECT amount FROM orders\n               ^',
            'column "amount" does not exist',
        ),
        (
            'psql:q.sql:3: ERROR:  column "amount" does not exist at character 8',
            'column "amount" does not exist',
        ),
        ('ERROR: 42703: column "Amount" does not exist', 'column "amount" does not exist'),
        (
            "ERROR: value too long for type character varying(20)",
            "value too long for type character varying(?)",
        ),
        (
            "ERROR: invalid input syntax for type integer: 'abc'",
            "invalid input syntax for type integer: ?",
        ),
        (
            'ERROR: duplicate key value violates unique constraint "orders_pkey"\nDETAIL: Key (id)=(5) already exists.',
            'duplicate key value violates unique constraint "orders_pkey"',
        ),
        ("division by zero.", "division by zero"),
    ],
)
def test_error_signatures_keep_the_message_and_names_and_drop_what_varies(text, signature):
    assert normalize_error(text) == signature


def test_an_error_text_with_nothing_identifying_has_no_signature():
    assert normalize_error("   ") is None
    assert normalize_error("LINE 1: SELECT\n   ^") is None
