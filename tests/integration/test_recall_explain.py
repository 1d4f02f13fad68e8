"""`tht memory search --explain <card-id>`: why a card is or is not among the results,
through the real engines (embedded PostgreSQL, Qdrant Edge, hashing embedder); and
the default family of `memory search` (domain clarifications, spec F2)."""

from __future__ import annotations

import json

import pytest

from tests.factories import card_document


def _dep(schema: str, table: str = "orders") -> dict[str, str]:
    return {"database": "dwh", "schema": schema, "table": table}


@pytest.fixture
def acme(cli, runtime_file, tmp_path):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme")  # bound to dwh.sales
    documents = {
        "shipped": card_document(
            title="Shipped order",
            content="An order is shipped when all its lines are shipped.",
            scope="Sales",
            dependencies=[_dep("sales")],
        ),
        "late": card_document(
            title="Late order",
            content="An order is late when it is shipped after the promised date.",
            scope="Sales",
            dependencies=[_dep("sales")],
        ),
        "accounting": card_document(
            title="Shipped order in accounting",
            content="Accounting books an order as shipped when it is invoiced.",
            scope="Sales",
            dependencies=[_dep("acc")],
        ),
        "rule": card_document(
            "sql_rule",
            title="Shipped order filter",
            content="Filter shipped orders with status = 'S'.",
            dependencies=[_dep("sales")],
        ),
    }
    ids = {}
    for name, document in documents.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        created = cli("memory", "create", "-c", config, "--data", str(path))
        assert created.code == 0 and created.document["status"] == "saved", created.document
        ids[name] = created.document["card"]["id"]

    def explain(card_id: str, *extra: str, question: str = "when is an order shipped"):
        return cli("memory", "search", question, "-c", config, "--explain", card_id, *extra)

    return config, ids, explain


def test_search_recalls_domain_clarifications_unless_widened_explicitly(cli, acme):
    config, ids, _ = acme
    plain = cli("memory", "search", "shipped order filter status", "-c", config).document
    assert {r["family"] for r in plain["results"]} == {"domain_clarification"}
    assert ids["rule"] not in [r["id"] for r in plain["results"]]
    widened = cli(
        "memory",
        "search",
        "shipped order filter status",
        "-c",
        config,
        "--filters",
        '{"families": ["domain_clarification", "sql_rule"]}',
    ).document
    assert widened["results"][0]["id"] == ids["rule"]
    # widening is search's only: rules never serves clarifications, solved-search only exemplars
    for command, families in [("rules", ["domain_clarification"]), ("solved-search", ["sql_rule"])]:
        refused = cli(
            "memory", command, "x", "-c", config, "--filters", json.dumps({"families": families})
        )
        assert refused.code == 2, refused.document
        assert refused.document["error"]["code"] == "invalid_input"
        assert refused.document["error"]["details"]["families"] == families
    unknown = cli("memory", "search", "x", "-c", config, "--filters", '{"families": ["note"]}')
    assert unknown.code == 2 and "unknown families" in unknown.document["error"]["message"]


def test_explain_names_the_reason_of_each_card(acme):
    _, ids, explain = acme
    returned = explain(ids["shipped"]).document
    assert returned["explain"]["reason"] == "returned"
    assert returned["explain"]["details"]["rank"] == 1 + [
        r["id"] for r in returned["results"]
    ].index(ids["shipped"])
    # the newcomer's case: the runtime file binds schema sales, the card depends on acc
    binding = explain(ids["accounting"]).document["explain"]
    assert binding == {
        "card": ids["accounting"],
        "returned": False,
        "reason": "binding",
        "details": {
            "dependencies": [
                {"database": "dwh", "schema": "acc", "table": "orders", "column": None}
            ],
            "bound": {"database": "dwh", "schema": "sales"},
        },
    }
    family = explain(ids["rule"]).document["explain"]
    assert family["reason"] == "family"
    assert family["details"] == {
        "family": "sql_rule",
        "recalled_families": ["domain_clarification"],
    }
    scope = explain(ids["shipped"], "--filters", '{"scope": "Finance"}').document["explain"]
    assert scope["reason"] == "scope"
    assert scope["details"] == {"scope": "Sales", "filter": "Finance"}
    table = explain(ids["shipped"], "--filters", '{"table": "lines"}').document["explain"]
    assert table["reason"] == "filters"
    # top 1: one of the two Sales clarifications is ranked below the cut, with its ranks
    answer = explain(ids["late"], "--filters", '{"top": 1}').document
    first = answer["results"][0]["id"]
    other = ids["late"] if first == ids["shipped"] else ids["shipped"]
    below = explain(other, "--filters", '{"top": 1}').document["explain"]
    assert below["reason"] == "ranked_below_cut" and below["returned"] is False
    assert below["details"]["top"] == 1
    assert below["details"]["dense_rank"] is not None and below["details"]["bm25_rank"] is not None


def test_explain_refuses_what_show_refuses(cli, acme, runtime_file, tmp_path):
    config, ids, explain = acme
    assert cli("workspace", "create", "other", "--language", "en").code == 0
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(card_document(title="Shipped order elsewhere")))
    foreign = cli("memory", "create", "-c", runtime_file("other"), "--data", str(path))
    foreign_id = foreign.document["card"]["id"]
    assert cli("memory", "delete", ids["late"], "--yes", "-c", config).code == 0
    for card_id in ("mem-42", "not-an-id", foreign_id, ids["late"]):
        shown = cli("memory", "show", card_id, "-c", config)
        explained = explain(card_id)
        assert shown.code in (2, 3), shown.document
        assert (explained.code, explained.document) == (shown.code, shown.document), card_id
        assert "Shipped order elsewhere" not in explained.stdout
