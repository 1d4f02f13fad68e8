"""The demo workspace's cards (src/tht/demo_data/bird_demo.json, built from BIRD Mini-Dev by
scripts/build_demo_data.py) teach what a real workspace holds: dependencies that match
each card's SQL, whole titles, one card per evidence text, and where each card comes from."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from tht.demo import demo_cards
from tht.memory.model import parse_card_input

ROOT = Path(__file__).resolve().parents[2]
CARDS = demo_cards()
SOLVED = [c for c in CARDS if c["family"] == "solved_question"]
EVIDENCE = [c for c in CARDS if "evidence given with" in c.get("context", "")]


def _build_script():
    spec = importlib.util.spec_from_file_location(
        "build_demo_data", ROOT / "scripts" / "build_demo_data.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_card_is_a_valid_card_with_its_origin_and_the_licence():
    data = json.loads((ROOT / "src" / "tht" / "demo_data" / "bird_demo.json").read_text())
    assert "CC BY-SA 4.0" in data["attribution"]
    assert {c["family"] for c in CARDS} == {"domain_clarification", "sql_rule", "solved_question"}
    for card in CARDS:
        parse_card_input(card)
        assert card["context"].startswith("BIRD Mini-Dev (CC BY-SA 4.0), database "), card


def test_a_solved_question_depends_on_the_tables_its_sql_reads():
    assert len(SOLVED) == 15
    for card in SOLVED:
        read = {
            t.name.lower()
            for t in sqlglot.parse_one(card["sql"], read="postgres").find_all(exp.Table)
        }
        assert {d["table"].lower() for d in card["dependencies"]} == read, card["title"]
        sql = card["sql"].lower()
        assert all(d["column"].lower() in sql for d in card["dependencies"] if "column" in d)
    lam = next(c for c in SOLVED if c["title"] == "In 2012, who had the least consumption in LAM?")
    assert {(d["table"], d.get("column")) for d in lam["dependencies"]} == {
        ("customers", "CustomerID"),
        ("customers", "Segment"),
        ("yearmonth", "CustomerID"),
        ("yearmonth", "Date"),
        ("yearmonth", "Consumption"),
    }


def test_evidence_depends_on_the_columns_it_names_else_its_question_s_tables():
    assert len(EVIDENCE) > 100
    for card in EVIDENCE:
        assert card["dependencies"], card["title"]
        for dep in card["dependencies"]:
            if "column" in dep:
                # financial.district's columns A2…A16 are named by BIRD's names for them
                # too ("average salary" is A11): that side is the build's own test below
                named = dep["column"].lower() in card["content"].lower()
                assert named or dep["table"] == "district", (card["title"], dep)
    year = next(c for c in EVIDENCE if c["title"] == "Year 2012")
    assert {d["table"] for d in year["dependencies"]} == {"customers", "yearmonth"}


def test_titles_are_whole_phrases_never_cut():
    for card in CARDS:
        title = card["title"]
        assert len(title) <= 120, title
        assert title.count("`") % 2 == 0 and title.count("(") == title.count(")"), title
        for text in (card.get("content"), card.get("question")):
            if text and text.lower().startswith(title.lower()) and len(text) > len(title):
                assert not text[len(title)].isalnum(), (title, text)
    titles = {c["title"] for c in CARDS}
    assert {"Excellence rate", "Total enrollment", "Year 2012"} <= titles


def test_evidence_that_differs_by_a_final_period_or_spacing_is_one_card():
    keys = [re.sub(r"[\s.%]+$", "", " ".join(c["content"].split())).casefold() for c in EVIDENCE]
    assert len(keys) == len(set(keys))
    # BIRD gives it twice, once ending "* 100%." and once "* 100."
    assert [c["title"] for c in EVIDENCE].count("Percentage of accounts by condition") == 1


SCHEMA = [
    {"name": "customers", "columns": [{"name": "CustomerID"}, {"name": "Segment"}]},
    {
        "name": "yearmonth",
        "columns": [{"name": "CustomerID"}, {"name": "Date"}, {"name": "Consumption"}],
    },
    {"name": "transactions_1k", "columns": [{"name": "CustomerID"}, {"name": "Date"}]},
]


def test_the_build_resolves_aliases_and_unqualified_columns():
    script = _build_script()
    read, columns = script.sql_columns(
        "SELECT T1.CustomerID FROM customers AS T1 JOIN yearmonth AS T2"
        " ON T1.CustomerID = T2.CustomerID WHERE Segment = 'LAM'"
        " AND SUBSTR(T2.Date, 1, 4) = '2012' ORDER BY SUM(Consumption)",
        SCHEMA,
    )
    assert read == ["customers", "yearmonth"]
    assert set(columns) == {
        ("customers", "CustomerID"),
        ("yearmonth", "CustomerID"),
        ("customers", "Segment"),  # unqualified: only customers has it
        ("yearmonth", "Date"),
        ("yearmonth", "Consumption"),
    }
    # unqualified and in two tables of the scope: no guess
    _, ambiguous = script.sql_columns(
        "SELECT Date FROM yearmonth JOIN transactions_1k USING (CustomerID)", SCHEMA
    )
    assert ("yearmonth", "Date") not in ambiguous and ("transactions_1k", "Date") not in ambiguous


def test_the_build_finds_a_column_by_its_bird_name():
    district = {"name": "district", "columns": [{"name": "A11", "original_name": "average salary"}]}
    script = _build_script()
    assert script.named_in("Gap = highest average salary - lowest average salary", district, "A11")
    assert script.named_in("A11 refers to average salary", district, "A11")
    assert not script.named_in("A111 is another column", district, "A11")


@pytest.mark.parametrize(
    ("sentence", "title"),
    [
        ("Excellence rate = NumGE1500 / NumTstTakr", "Excellence rate"),
        (
            "Total enrollment can be represented by `Enrollment (K-12)` + `Enrollment (Ages 5-17)`",
            "Total enrollment",
        ),
        (
            "the credit card is high-level refers to card.type = 'gold'",
            "The credit card is high-level",
        ),
        ("Fresno Unified is a name of district", "Fresno Unified"),
        (
            "A11 refers to average salary",
            "A11 refers to average salary",
        ),  # "A11" alone says nothing
        (
            "k_symbol refers to the purpose of payments",
            "k_symbol refers to the purpose of payments",
        ),
        (
            "A15 stands for no. of commited crimes 1995",
            "A15 stands for no. of commited crimes 1995",
        ),
        (
            "status = 'D' stands for running contract, client in debt. 'POPLATEK PO OBRATU' stands for issuance after transaction",
            "Status = 'D' stands for running contract, client in debt",
        ),
        (
            "If the person A's birthdate < B's birthdate, it means that person B is younger than person A",
            "If the person A's birthdate < B's birthdate, it means that person B is younger than person A",
        ),
    ],
)
def test_a_title_is_what_the_sentence_defines_or_the_sentence(sentence, title):
    assert _build_script().title_of(sentence) == title
