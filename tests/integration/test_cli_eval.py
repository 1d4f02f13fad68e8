"""`tht memory eval`: recall measured through the real engines (embedded PostgreSQL,
Qdrant Edge, hashing embedder) on a user's cases file."""

from __future__ import annotations

import json

import pytest

from tests.factories import card_document
from tht.cli.main import main


@pytest.fixture
def workspace(cli, runtime_file, tmp_path):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme")
    documents = {
        "shipped": card_document(
            title="Shipped order", content="An order is shipped when all its lines are shipped."
        ),
        "carrier": card_document(
            title="Carrier codes", content="Carriers are identified by three letter codes."
        ),
        "fiscal": card_document(
            "sql_rule",
            title="Fiscal year join",
            content="Join movements and jobs on job_code and fiscal_year.",
        ),
        "solved": card_document(
            "solved_question", title="Orders per customer", question="How many orders per customer?"
        ),
    }
    ids = {}
    for name, document in documents.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        created = cli("memory", "create", "-c", config, "--data", str(path))
        assert created.code == 0 and created.document["status"] == "saved", created.document
        ids[name] = created.document["card"]["id"]

    def cases(*lines):
        path = tmp_path / "cases.jsonl"
        path.write_text(
            "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
        )
        return str(path)

    return config, ids, cases


def test_eval_reports_recall_mrr_and_misses(cli, workspace):
    config, ids, cases = workspace
    path = cases(
        {"question": "when is an order shipped", "expected": [ids["shipped"]]},
        "",
        {
            "question": "fiscal year join of movements and jobs",
            "expected": [ids["fiscal"]],
            "command": "rules",
            "id": "join",
        },
        # a solved question is never a `search` result: a miss, whatever the ranking
        {"question": "orders per customer", "expected": [ids["solved"]], "filters": {"top": 3}},
        {"question": "orders per customer", "expected": [ids["solved"]], "family": "solved"},
    )
    run = cli("memory", "eval", "--cases", path, "-c", config)
    assert run.code == 0, run.document
    document = run.document
    assert document["workspace"] == "acme" and document["cases"] == 4
    # each case's ranking is the one the recall commands give
    for question, command, expected in [
        ("when is an order shipped", "search", "shipped"),
        ("fiscal year join of movements and jobs", "rules", "fiscal"),
        ("orders per customer", "solved-search", "solved"),
    ]:
        results = cli("memory", command, question, "-c", config).document["results"]
        assert results[0]["id"] == ids[expected], (command, results)
    assert document["metrics"] == {
        "recall@1": 0.75,
        "recall@5": 0.75,
        "recall@10": 0.75,
        "mrr": 0.75,
    }
    assert document["by_command"]["rules"] == {
        "cases": 1,
        "recall@1": 1,
        "recall@5": 1,
        "recall@10": 1,
        "mrr": 1,
    }
    assert (
        document["by_command"]["search"]["cases"] == 2
        and document["by_command"]["search"]["mrr"] == 0.5
    )
    [miss] = document["misses"]
    assert (
        miss["line"] == 4
        and miss["missing"] == [ids["solved"]]
        and miss["ranks"] == {ids["solved"]: None}
    )
    # search recalls domain clarifications only (F2): the two of them
    assert sorted(miss["returned"]) == sorted([ids["shipped"], ids["carrier"]])
    # and the miss says why, as `memory search --explain` would
    assert miss["reasons"] == {
        ids["solved"]: {
            "card": ids["solved"],
            "returned": False,
            "reason": "family",
            "details": {
                "family": "solved_question",
                "recalled_families": ["domain_clarification"],
            },
        }
    }


def test_eval_misses_name_a_deleted_card_and_a_rank_below_the_cut(cli, workspace):
    config, ids, cases = workspace
    assert cli("memory", "delete", ids["carrier"], "--yes", "-c", config).code == 0
    path = cases(
        {"question": "carrier codes", "expected": [ids["carrier"]]},
        # a rule through search widened explicitly: found; through plain search: family
        {
            "question": "fiscal year join",
            "expected": [ids["fiscal"]],
            "filters": {"families": ["domain_clarification", "sql_rule"]},
        },
        {"question": "fiscal year join", "expected": [ids["fiscal"]]},
    )
    document = cli("memory", "eval", "--cases", path, "-c", config).document
    reasons = {m["line"]: m["reasons"] for m in document["misses"]}
    assert reasons == {
        1: {
            ids["carrier"]: {
                "card": ids["carrier"],
                "returned": False,
                "reason": "not_found",
                "details": {},
            }
        },
        3: {
            ids["fiscal"]: {
                "card": ids["fiscal"],
                "returned": False,
                "reason": "family",
                "details": {"family": "sql_rule", "recalled_families": ["domain_clarification"]},
            }
        },
    }


@pytest.mark.parametrize(
    "lines, line, message",
    [
        (['{"question": "a", "expected": ["%(shipped)s"]}', "{not json"], 2, "not valid JSON"),
        (['{"question": "a", "expected": ["mem-42"]}'], 1, "not a card id"),
        (
            [
                '{"question": "a", "expected": ["%(shipped)s"]}',
                "",
                '{"question": "a", "expected": ["%(shipped)s"], "filters": {"database": "other"}}',
            ],
            3,
            "cannot be overridden",
        ),
        (['{"question": "a", "expected": ["%(shipped)s"], "filters": {"top": 0}}'], 1, "top"),
        (
            ['{"question": "a", "expected": ["%(shipped)s"], "command": "list"}'],
            1,
            "command must be one of",
        ),
    ],
)
def test_bad_lines_are_a_json_error_naming_the_line(cli, workspace, lines, line, message):
    config, ids, cases = workspace
    run = cli("memory", "eval", "--cases", cases(*(text % ids for text in lines)), "-c", config)
    assert run.code == 2, run.document
    error = run.document["error"]
    assert error["code"] == "invalid_input" and error["message"].startswith(f"cases line {line}: ")
    assert message in error["message"] and error["details"]["line"] == line


def test_missing_or_empty_cases_file_is_a_json_error(cli, workspace, tmp_path):
    config, _, cases = workspace
    for path, message in [(str(tmp_path / "absent.jsonl"), "cannot read"), (cases(""), "no case")]:
        run = cli("memory", "eval", "--cases", path, "-c", config)
        assert run.code == 2 and message in run.document["error"]["message"], run.document


def test_eval_has_help(capsys):
    assert main(["memory", "eval", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--cases" in out and "recall@1/5/10" in out
