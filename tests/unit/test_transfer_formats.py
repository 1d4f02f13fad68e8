"""The import formats' pure parts: the CSV's formula protection, the SQL check, where a
JSON file's records are, and who may undo an import."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tht.commands.table import COMMANDS
from tht.memory.transfer import streams
from tht.memory.transfer.formats import (
    FORMULA_STARTS,
    detect_format,
    neutralized_cell,
    read_records,
    restored_cell,
)
from tht.memory.transfer.sql_check import sql_problem

LIMIT = 1 << 20


@given(st.text(alphabet=st.sampled_from(["=", "+", "-", "@", "\t", "\r", "'", "a", " "])))
def test_a_neutralized_cell_is_restored_exactly_and_never_starts_a_formula(cell):
    written = neutralized_cell(cell)
    assert restored_cell(written) == cell
    assert not written.startswith(FORMULA_STARTS)


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ("=1+1", "'=1+1"),
        ("-- note", "'-- note"),
        ("'=quoted already", "''=quoted already"),
        ("''", "'''"),
        ("'plain", "'plain"),
        ("plain", "plain"),
        ("", ""),
    ],
)
def test_what_export_writes(cell, written):
    assert neutralized_cell(cell) == written


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1",
        "select a from t where x = 1;",
        "SELECT `a` FROM `t`",  # MySQL's quotes
        "SELECT [a] FROM [t]",  # T-SQL's
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "SELECT CAST(SUM(IIF(c = 'EUR', 1, 0)) AS FLOAT) FROM customers",
        "UPDATE t SET a = 1",
    ],
)
def test_sql_that_parses(text):
    assert sql_problem(text) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Apologies, but I'm unable to assist.", "does not parse as SQL"),
        ("hello world", "is not a query or a data change"),
        ("SHOW TABLES", "is not a query or a data change"),
        ("SELECT a FROM", "line 1, column 13"),
        ("The corrected SQL query is:\n\n```\nSELECT 1\n```", "does not parse as SQL"),
        ("   ", "is empty"),
        (";", "no SQL statement"),
    ],
)
def test_text_that_is_not_sql(text, says):
    problem = sql_problem(text)
    assert problem is not None and says in problem
    assert "\x1b" not in problem  # no terminal colours in a JSON error


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_records_one_object_deeper_carry_their_section(monkeypatch, chunk):
    monkeypatch.setattr(streams, "CHUNK", chunk)
    text = b'{"data": {"sqlPairs": [{"id": 1}], "instructions": [{"id": 2}]}, "x": "[{"}'
    found = list(streams.iter_json_records(io.BytesIO(text), LIMIT))
    assert [(r.label, r.document) for r in found] == [
        ("sqlPairs", {"id": 1}),
        ("instructions", {"id": 2}),
    ]


def test_deep_nesting_is_an_error_of_its_record():
    deep = b"[" * 50_000 + b"]" * 50_000
    text = b'[\n{"a": 1},\n{"b": ' + deep + b"}\n]"
    found = list(streams.iter_json_records(io.BytesIO(text), LIMIT))
    assert found[0].document == {"a": 1}
    assert found[1].line == 3 and "nested too deeply" in (found[1].error or "")
    lines = list(streams.iter_json_lines(io.BytesIO(b'{"b": ' + deep + b"}\n"), LIMIT))
    assert "nested too deeply" in (lines[0].error or "")


def test_a_wrenai_file_ignores_the_sections_that_hold_no_knowledge():
    text = (
        b'{"catalog": "c", "models": [{"name": "orders", "columns": [{"name": "id"}]}],'
        b' "tags": ["a", "b"], "sql_pairs": [{"id": 1, "question": "How many?",'
        b' "sql": "SELECT 1"}]}'
    )
    items = list(read_records(io.BufferedReader(io.BytesIO(text)), "wrenai", scope="dwh"))
    sections = [(type(i).__name__, getattr(i, "section", None)) for i in items]
    assert sections == [("Skipped", "models"), ("Skipped", "tags"), ("ImportCard", None)]


def test_vannas_question_files_look_like_vanna():
    head = b'[\n    {\n      "question":"How many?",\n      "answer":"SELECT 1"\n    }\n]'
    with pytest.raises(Exception) as refused:
        detect_format("questions.json", head, None)
    assert refused.value.details["looks_like"] == "vanna"  # type: ignore[attr-defined]


def test_listing_imports_needs_read_access_and_undoing_one_management():
    assert COMMANDS["memory.imports.list"].capability == "memory.read"
    assert COMMANDS["memory.imports.undo"].capability == "memory.manage"
