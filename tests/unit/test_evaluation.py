"""Recall evaluation: cases parsing and the metrics, without I/O."""

from __future__ import annotations

import json

import pytest

from tht.errors import InvalidInput
from tht.memory.evaluation import (
    parse_case,
    parse_cases,
    recall_at,
    reciprocal_rank,
    report,
    summarize,
)

A = "mem-00000000-0000-4000-8000-00000000000a"
B = "mem-00000000-0000-4000-8000-00000000000b"
C = "mem-00000000-0000-4000-8000-00000000000c"


def line(**document):
    return json.dumps(document)


def test_a_case_with_defaults_and_normalized_ids():
    case = parse_case(
        line(question="  orders shipped? ", expected=[A.upper().replace("MEM", "mem"), A]), 4
    )
    assert case.line == 4 and case.question == "orders shipped?"
    assert case.expected == (A,)  # normalized, duplicates dropped
    assert case.command == "search" and case.filters == {} and case.name is None


def test_command_family_filters_and_id_are_kept():
    case = parse_case(
        line(question="q", expected=[A], family="rules", filters={"table": "t"}, id=7), 1
    )
    assert (case.command, case.filters, case.name) == ("rules", {"table": "t"}, "7")


@pytest.mark.parametrize(
    "text, message",
    [
        ("{nope", "not valid JSON"),
        ("[1]", "JSON object"),
        (line(expected=[A]), "question"),
        (line(question=" ", expected=[A]), "question"),
        (line(question="q"), "expected"),
        (line(question="q", expected=[]), "expected"),
        (line(question="q", expected=[3]), "card ids"),
        (line(question="q", expected=["mem-42"]), "not a card id"),
        (line(question="q", expected=[A], command="list"), "command must be one of"),
        (line(question="q", expected=[A], command="rules", family="solved"), "disagree"),
        (line(question="q", expected=[A], filters=[1]), "filters must be a JSON object"),
        (line(question="q", expected=[A], colour="red"), "unknown keys colour"),
    ],
)
def test_bad_lines_name_their_line(text, message):
    with pytest.raises(InvalidInput) as raised:
        parse_cases("\n".join([line(question="fine", expected=[A]), "", text]))
    assert raised.value.message.startswith("cases line 3: ") and message in raised.value.message
    assert raised.value.details == {"line": 3}


def test_blank_lines_are_skipped_and_an_empty_file_is_refused():
    assert [
        c.line
        for c in parse_cases(
            "\n"
            + line(question="a", expected=[A])
            + "\n\n"
            + line(question="b", expected=[B])
            + "\n"
        )
    ] == [2, 4]
    with pytest.raises(InvalidInput, match="no case"):
        parse_cases(" \n\n")


def test_recall_at_k_counts_the_expected_cards_in_the_first_k():
    assert recall_at([A, B], [C, A, B], 1) == 0
    assert recall_at([A, B], [C, A, B], 2) == 0.5
    assert recall_at([A, B], [C, A, B], 3) == 1
    assert recall_at([A], [], 10) == 0


def test_reciprocal_rank_is_the_first_expected_card():
    assert reciprocal_rank([B, A], [C, A, B]) == 0.5
    assert reciprocal_rank([A], [C, B]) == 0
    assert reciprocal_rank([A], [C] * 10 + [A]) == 0  # MRR@10
    assert reciprocal_rank([A], [C] * 10 + [A], cutoff=11) == 1 / 11


def test_summarize_averages_over_cases():
    metrics = summarize([([A], [A, B]), ([B], [A, C, B]), ([C], [A])])
    assert metrics == {
        "recall@1": round(1 / 3, 4),
        "recall@5": round(2 / 3, 4),
        "recall@10": round(2 / 3, 4),
        "mrr": round((1 + 1 / 3) / 3, 4),
    }


def test_report_lists_misses_and_per_command_figures():
    cases = parse_cases(
        "\n".join(
            [
                line(question="a", expected=[A]),
                line(question="b", expected=[A, B], command="rules", id="two"),
            ]
        )
    )
    eleven = [f"mem-00000000-0000-4000-8000-0000000001{i:02d}" for i in range(10)] + [B]
    document = report(cases, [[A, C], eleven])
    assert document["cases"] == 2
    assert document["metrics"]["mrr"] == 0.5 and document["metrics"]["recall@1"] == 0.5
    assert (
        document["by_command"]["search"]["recall@1"] == 1
        and document["by_command"]["rules"]["cases"] == 1
    )
    [miss] = document["misses"]
    assert miss["line"] == 2 and miss["id"] == "two" and miss["command"] == "rules"
    assert miss["missing"] == [A, B]  # B is 11th: outside the first 10
    assert miss["ranks"] == {A: None, B: 11} and len(miss["returned"]) == 10
