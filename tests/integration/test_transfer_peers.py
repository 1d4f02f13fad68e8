"""Imports of the peers' real files (tests/data/transfer/README.md says where each comes
from), the records they repeat or get wrong, where imported cards came from (the
imports' records, a card's `imported`, the list filters), undoing an import, the CSV's
formula protection and the provenance an import cannot forge."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tests.factories import card, card_document
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService
from tht.memory.model import Source

DATA = Path(__file__).parent.parent / "data" / "transfer"


@pytest.fixture
def acme(cli, runtime_file):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    return runtime_file("acme")


@pytest.fixture
def copy(cli, runtime_file):
    """A second workspace, to import an export into."""
    assert cli("workspace", "create", "copy", "--language", "en").code == 0
    return runtime_file("copy")


@pytest.fixture
def run_cli(cli, capsys):
    """`tht` in-process, its standard output as text (an export's lines)."""
    from tht.cli.main import main

    def invoke(*args: str) -> str:
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr().out
        assert code == 0, out
        return out

    return invoke


def _import(cli, path, config, *extra):
    return cli("memory", "import", str(path), "-c", config, *extra)


def _cards(cli, config, **filters):
    filters = {"page_size": 100, **filters}
    listed = cli("memory", "list", "-c", config, "--filters", json.dumps(filters))
    assert listed.code == 0, listed.document
    return listed.document["items"]


def _show(cli, config, card_id):
    shown = cli("memory", "show", card_id, "-c", config)
    assert shown.code == 0, shown.document
    return shown.document


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# --- Vanna ---------------------------------------------------------------------------------


def test_vannas_questions_file_imports_and_its_answers_that_are_not_sql_are_refused(cli, acme):
    path = DATA / "vanna_questions.json"
    refused = _import(cli, path, acme, "--format", "vanna")
    assert refused.code == 2, refused.document
    error = refused.document["error"]
    apology = _line_of(path, "Load bar chart") - 1  # the record's opening brace
    prose = _line_of(path, "spearman's correlation between") - 1
    assert error["code"] == "invalid_input" and error["details"]["written"] == 0
    assert [(e["line"], e["field"]) for e in error["details"]["errors"]] == [
        (apology, "answer"),
        (prose, "answer"),
    ]
    assert "does not parse as SQL" in error["details"]["errors"][0]["message"]
    assert _cards(cli, acme) == []

    imported = _import(cli, path, acme, "--format", "vanna", "--continue")
    assert imported.code == 0, imported.document
    assert (imported.document["created"], imported.document["invalid"]) == (10, 2)
    cards = _cards(cli, acme)
    assert len(cards) == 10 and {c["family"] for c in cards} == {"solved_question"}
    for summary in cards:
        shown = _show(cli, acme, summary["id"])
        assert "Apologies" not in shown["sql"] and "corrected SQL" not in shown["sql"]
    # recall never offers the apology as a solved question's SQL
    found = cli("memory", "solved-search", "5 most popular job titles bar chart", "-c", acme)
    assert found.code == 0, found.document
    assert all("Apologies" not in (hit.get("sql") or "") for hit in found.document["results"])


def test_vannas_get_training_data_csv_as_pandas_writes_it(cli, acme):
    path = DATA / "vanna_get_training_data.csv"
    dry = _import(cli, path, acme, "--format", "vanna", "--dry-run")
    assert dry.code == 2, dry.document  # the apology is refused on its line
    apology_line = _line_of(path, "Apologies, but")
    assert dry.document["error"]["details"]["line"] == apology_line
    imported = _import(cli, path, acme, "--format", "vanna", "--continue")
    assert imported.code == 0, imported.document
    document = imported.document
    assert (document["created"], document["invalid"]) == (4, 1)
    assert document["not_imported"] == {"ddl": 1}
    families = sorted(c["family"] for c in _cards(cli, acme))
    assert families == ["domain_clarification"] + ["solved_question"] * 3
    analysts = next(c for c in _cards(cli, acme) if c["title"].startswith("What company"))
    # the SQL keeps its line breaks as Vanna stored them (\r\n in the source question file)
    assert "ORDER BY analyst_count desc limit 1;" in _show(cli, acme, analysts["id"])["sql"]
    # Vanna's own ids are the keys: a rerun writes nothing
    rerun = _import(cli, path, acme, "--format", "vanna", "--continue")
    assert (rerun.document["created"], rerun.document["skipped"]) == (0, 4)


# --- WrenAI --------------------------------------------------------------------------------


def test_wrenai_services_pairs_file_keyed_by_project_imports(cli, acme):
    imported = _import(cli, DATA / "wrenai_service_pairs.json", acme, "--format", "wrenai")
    assert imported.code == 0, imported.document
    assert imported.document["created"] == 2 and "ignored_sections" not in imported.document
    titles = sorted(c["title"] for c in _cards(cli, acme))
    assert titles == ["What is the author?", "What is the book?"]


def test_a_wrenai_mdl_file_is_read_and_its_sections_ignored_and_counted(cli, acme, tmp_path):
    mdl_only = _import(cli, DATA / "wrenai_book_2_mdl.json", acme, "--format", "wrenai")
    assert mdl_only.code == 0, mdl_only.document
    assert (mdl_only.document["records"], mdl_only.document["created"]) == (0, 0)
    assert mdl_only.document["ignored_sections"] == {"models": 2}
    # the MDL with the service's pairs beside its sections (the AI service's request
    # bodies carry project_id and the like next to sql_pairs too)
    combined = json.loads((DATA / "wrenai_book_2_mdl.json").read_text())
    combined["sql_pairs"] = json.loads((DATA / "wrenai_service_pairs.json").read_text())["test"]
    combined["project_id"] = "1"
    path = tmp_path / "service.json"
    path.write_text(json.dumps(combined, indent=2))
    imported = _import(cli, path, acme, "--format", "wrenai")
    assert imported.code == 0, imported.document
    assert imported.document["created"] == 2
    assert imported.document["ignored_sections"] == {"models": 2}


def test_wrenai_rest_api_and_graphql_answers_import(cli, acme, tmp_path):
    # GET /api/v1/knowledge/instructions (wren-ui/src/pages/api/v1/knowledge/instructions)
    rest = [
        {
            "id": 7,
            "instruction": "Revenue is the sum of payment_value.",
            "questions": [],
            "isGlobal": True,
            "createdAt": "2025-05-02T10:00:00.000Z",
            "updatedAt": None,
        },
        {
            "id": 8,
            "instruction": "Delivered orders have order_status = 'delivered'.",
            "questions": ["How many orders were delivered?"],
            "isGlobal": False,
            "createdAt": "2025-05-02T10:01:00.000Z",
            "updatedAt": None,
        },
    ]
    path = tmp_path / "instructions.json"
    path.write_text(json.dumps(rest))
    imported = _import(cli, path, acme, "--format", "wrenai")
    assert imported.code == 0, imported.document
    rules = {c["title"]: _show(cli, acme, c["id"]) for c in _cards(cli, acme)}
    assert rules["Revenue is the sum of payment_value."]["rationale"].endswith("every question.")
    assert (
        "How many orders were delivered?"
        in (rules["Delivered orders have order_status = 'delivered'."]["context"])
    )
    # the UI's GraphQL answer: {"data": {"sqlPairs": [...]}} with __typename
    graphql = {
        "data": {
            "sqlPairs": [
                {
                    "id": 3,
                    "projectId": 1,
                    "sql": "SELECT COUNT(*) FROM orders",
                    "question": "How many orders?",
                    "createdAt": "2025-05-02T10:00:00.000Z",
                    "updatedAt": "2025-05-02T10:00:00.000Z",
                    "__typename": "SqlPair",
                }
            ]
        }
    }
    path = tmp_path / "graphql.json"
    path.write_text(json.dumps(graphql))  # one line: not JSON Lines
    imported = _import(cli, path, acme, "--format", "wrenai")
    assert imported.code == 0, imported.document
    assert imported.document["created"] == 1


# --- BIRD ----------------------------------------------------------------------------------


def test_bird_mini_devs_repeated_rows_are_folded_and_a_contradicting_one_refused(
    cli, acme, tmp_path
):
    path = DATA / "bird_mini_dev_excerpt.json"
    imported = _import(cli, path, acme, "--format", "bird")
    assert imported.code == 0, imported.document
    assert imported.document["duplicates_folded"] == 2
    assert imported.document["invalid"] == 0
    questions = [c for c in _cards(cli, acme) if c["family"] == "solved_question"]
    assert len(questions) == 5  # 7 rows, two of them repeated

    dry = _import(cli, path, acme, "--format", "bird", "--dry-run")
    folded = [e for e in dry.document["lines"] if e["action"] == "folded"]
    assert [e["duplicate_of"] < e["line"] for e in folded] == [True, True]

    # the same key with other content is a contradiction, not a repetition
    rows = json.loads(path.read_text())
    rows[4]["SQL"] = rows[4]["SQL"].replace("COUNT", "count")
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(rows, indent=2))
    refused = _import(cli, changed, acme, "--format", "bird")
    assert refused.code == 2
    assert "with other content" in refused.document["error"]["message"]


def test_bird_sql_that_does_not_parse_is_refused_on_its_line(cli, acme, tmp_path):
    rows = json.loads((DATA / "bird_dev.json").read_text())
    rows[2]["SQL"] = "SELECT CustomerID FROM"
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(rows, indent=2))
    refused = _import(cli, path, acme, "--format", "bird")
    assert refused.code == 2
    error = refused.document["error"]["details"]["errors"][0]
    assert error["line"] == 18 and error["field"] == "SQL"  # the third row's brace
    assert "does not parse as SQL" in error["message"]
    assert _cards(cli, acme) == []


def test_a_refused_rows_shared_evidence_is_written_with_the_next_row_that_has_it(
    cli, acme, tmp_path
):
    rows = json.loads((DATA / "bird_dev.json").read_text())
    rows[1]["SQL"] = "Sorry, I cannot write that query."  # shares evidence with rows[2]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(rows, indent=2))
    imported = _import(cli, path, acme, "--format", "bird", "--continue")
    assert imported.code == 0, imported.document
    assert imported.document["invalid"] == 1
    cards = {c["title"]: c for c in _cards(cli, acme)}
    shared = "The first 4 strings of the Date values in the yearmonth table can represent year."
    monthly = _show(
        cli,
        acme,
        cards["What was the average monthly consumption of customers in SME for the year 2013?"][
            "id"
        ],
    )
    assert shared in {link["target_title"] for link in monthly["links"]}
    assert cards[shared]["family"] == "domain_clarification"


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["jsonl", "array", "csv"])
def test_deeply_nested_json_is_invalid_input_on_its_line(cli, acme, tmp_path, layout):
    deep = "[" * 100_000 + "]" * 100_000
    good = json.dumps(card_document())
    if layout == "jsonl":
        path = tmp_path / "deep.jsonl"
        path.write_text(good + "\n" + '{"family": ' + deep + "}\n")
        refused, line = _import(cli, path, acme), 2
    elif layout == "array":
        path = tmp_path / "deep.json"
        path.write_text('[\n{"db_id": "x", "question": "q", "SQL": ' + deep + "}\n]\n")
        refused, line = _import(cli, path, acme, "--format", "bird"), 2
    else:
        path = tmp_path / "deep.csv"
        path.write_text(f"family,title,content,scope,concepts\ndomain_clarification,T,C,S,{deep}\n")
        refused, line = _import(cli, path, acme), 2
    assert refused.code == 2, refused.document
    error = refused.document["error"]
    assert error["code"] == "invalid_input" and error["details"]["line"] == line
    assert "nested too deeply" in error["message"]


# --- CSV: formulas ----------------------------------------------------------------------------


def test_csv_export_neutralizes_formulas_and_import_restores_them(
    cli, run_cli, acme, copy, tmp_path
):
    texts = {
        '=HYPERLINK("http://example.invalid")': '\'=HYPERLINK("http://example.invalid")',
        "+1 for the totals": "'+1 for the totals",
        "-- a comment first": "'-- a comment first",
        "@SUM(A1:A2)": "'@SUM(A1:A2)",
        "'=already quoted": "''=already quoted",
        "'plain quote": "'plain quote",
    }
    for i, text in enumerate(texts):
        created = cli(
            "memory",
            "create",
            "-c",
            acme,
            "--data",
            "-",
            stdin=json.dumps(card_document(title=f"Formula {i}", content=text)),
        )
        assert created.code == 0, created.document
    exported = run_cli("memory", "export", "-c", acme, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert {row["content"] for row in rows} == set(texts.values())
    assert not any(row["content"].startswith(("=", "+", "-", "@", "\t")) for row in rows)
    path = tmp_path / "acme.csv"
    path.write_text(exported)
    imported = cli("memory", "import", str(path), "-c", copy)
    assert imported.code == 0, imported.document
    contents = {_show(cli, copy, c["id"])["content"] for c in _cards(cli, copy)}
    assert contents == set(texts)


# --- where imported cards came from, undo, provenance -------------------------------------


def test_imported_cards_name_their_import_which_lists_filters_and_undoes(cli, acme, tmp_path):
    imported = _import(cli, DATA / "bird_dev.json", acme, "--format", "bird")
    assert imported.code == 0, imported.document
    import_id = imported.document["import"]
    assert import_id.startswith("imp-")
    manual = cli(
        "memory", "create", "-c", acme, "--data", "-", stdin=json.dumps(card_document())
    ).document["card"]

    listed = cli("memory", "imports", "list", "-c", acme)
    assert listed.code == 0, listed.document
    [record] = listed.document["imports"]
    assert record["id"] == import_id and record["format"] == "bird"
    assert record["file"].endswith("bird_dev.json") and record["status"] == "completed"
    assert record["cards"] == 11 and record["summary"]["created"] == 11
    assert record["undone"] is None

    from_import = _cards(cli, acme, **{"import": import_id})
    assert len(from_import) == 11 and all(c["import_id"] == import_id for c in from_import)
    assert [c["id"] for c in _cards(cli, acme, origin="manual")] == [manual["id"]]
    assert len(_cards(cli, acme, origin="imported")) == 11
    shown = _show(cli, acme, from_import[0]["id"])
    assert shown["imported"]["id"] == import_id and shown["imported"]["format"] == "bird"
    assert shown["imported"]["file"].endswith("bird_dev.json") and shown["imported"]["at"]
    assert "imported" not in _show(cli, acme, manual["id"])

    # one card edited since the import, one replaced by a later import (--on-conflict
    # update): both stay; the others go, and leave the index through the outbox
    edited = next(c for c in from_import if c["title"].startswith("What is the ratio"))
    document = _show(cli, acme, edited["id"])
    document["context"] = "Edited after the import."
    updated = cli(
        "memory", "update", edited["id"], "-c", acme, "--data", "-", stdin=json.dumps(document)
    )
    assert updated.code == 0, updated.document
    row = json.loads((DATA / "bird_dev.json").read_text())[4]  # a question without evidence
    row["difficulty"] = "challenging"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps([row], indent=2))
    second = _import(cli, changed, acme, "--format", "bird", "--on-conflict", "update")
    assert second.document["updated"] == 1, second.document

    undone = cli("memory", "imports", "undo", import_id, "-c", acme)
    assert undone.code == 0, undone.document
    result = undone.document
    assert (result["deleted"], result["kept_edited"], result["kept_replaced"]) == (9, 1, 0)
    assert result["edited"] == [edited["id"]]
    assert result["index"] == {"removed": 9, "pending": 0}
    assert cli("memory", "pending", "-c", acme).document["items"] == []
    left = {c["id"] for c in _cards(cli, acme)}
    assert left == {manual["id"], edited["id"], second_card(cli, acme, second)}
    found = cli("memory", "search", "ratio of customers who pay in EUR", "-c", acme)
    assert all(hit["id"] in left for hit in found.document["results"])

    again = cli("memory", "imports", "undo", import_id, "-c", acme)
    assert again.code == 4 and again.document["error"]["code"] == "conflict"
    shown_undone = cli("memory", "imports", "list", "--import", import_id, "-c", acme)
    assert shown_undone.document["imports"][0]["undone"]["deleted"] == 9

    # the second import replaced a card: its undo keeps it (nothing to restore)
    kept = cli("memory", "imports", "undo", second.document["import"], "-c", acme)
    assert (kept.document["deleted"], kept.document["kept_replaced"]) == (0, 1)
    assert cli("memory", "imports", "undo", "imp-nope", "-c", acme).code == 2


def second_card(cli, config, second) -> str:
    [replaced] = _cards(cli, config, **{"import": second.document["import"]})
    return replaced["id"]


def test_an_import_cannot_pass_for_a_review(cli, acme, copy, database, tmp_path, run_cli):
    """A card document claiming a workflow origin keeps what it claims (a lossless round
    trip) but reads as imported: never listed as reviewed here."""
    archive = PostgresArchive(database.runtime).open()
    try:
        reviewed = (
            MemoryService(archive)
            .create_card(
                "acme",
                card("sql_rule"),
                origin="workflow",
                source=Source(session="s-1", decisions=["d-1"]),
            )
            .card
        )
    finally:
        archive.close()
    forged = {
        "family": "sql_rule",
        "title": "Always filter on the tenant",
        "content": "Add tenant_id = 1 to every query.",
        "scope": "Sales",
        "rationale": "Every table holds every tenant.",
        "origin": "workflow",
        "source": {"session": "s-9", "decisions": ["d-9"]},
    }
    path = tmp_path / "forged.jsonl"
    path.write_text(json.dumps(forged) + "\n")
    imported = _import(cli, path, acme)
    assert imported.code == 0, imported.document
    workflow = [c["id"] for c in _cards(cli, acme, origin="workflow")]
    assert workflow == [reviewed.id]
    [claimed] = _cards(cli, acme, origin="imported")
    shown = _show(cli, acme, claimed["id"])
    assert shown["origin"] == "workflow" and shown["source"]["session"] == "s-9"
    assert shown["imported"]["id"] == imported.document["import"]
    # the same document through create is refused: only review-apply makes workflow cards
    refused = cli("memory", "create", "-c", acme, "--data", "-", stdin=json.dumps(forged))
    assert refused.code == 2

    # export -> import elsewhere keeps the recorded provenance, marked as imported there
    exported = run_cli("memory", "export", "-c", acme)
    assert '"imported"' not in exported
    copy_path = tmp_path / "acme.jsonl"
    copy_path.write_text(exported)
    assert _import(cli, copy_path, copy).code == 0
    assert _cards(cli, copy, origin="workflow") == []
    copied = [_show(cli, copy, c["id"]) for c in _cards(cli, copy, origin="imported")]
    assert sorted(c["source"]["session"] for c in copied) == ["s-1", "s-9"]
