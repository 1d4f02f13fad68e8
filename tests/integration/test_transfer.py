"""`tht memory import` and `tht memory export` against the real archive and index:
lossless round trips, the peers' formats, idempotent reruns, per-line errors that
write nothing, resuming an interrupted import, and the service's face."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.factories import card, card_document
from tests.full_disk import copies_run_out_of_space
from tests.integration.service_support import installation
from tht.faults import CRASH_EXIT_CODE
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService
from tht.memory.indexing import IndexProjector, pipeline
from tht.memory.model import Source, uuid_to_card_id
from tht.memory.transfer import service as transfer_service
from tht.memory.transfer.formats import derived_uuid

DATA = Path(__file__).parent.parent / "data" / "transfer"
MISSING = "mem-00000000-0000-4000-8000-000000000000"


@pytest.fixture
def run(cli, runtime_file, monkeypatch, capsys):
    """`tht` in-process: (exit code, stdout lines, stderr)."""
    from tht.cli.main import main

    cli("workspace", "create", "acme", "--language", "en")

    def invoke(*args: str, stdin: bytes | None = None):
        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main(list(args))
        captured = capsys.readouterr()
        return code, [line for line in captured.out.splitlines() if line.strip()], captured.err

    return invoke


def _import(cli, path, config, *extra):
    return cli("memory", "import", str(path), "-c", config, *extra)


def _export(run, config, fmt="jsonl"):
    code, lines, err = run("memory", "export", "-c", config, "--format", fmt)
    assert code == 0, (lines, err)
    return lines, json.loads(err.strip().splitlines()[-1])


def _count(cli, workspace="acme"):
    shown = cli("workspace", "show", workspace)
    assert shown.code == 0, shown.document
    return sum(shown.document["cards"].values())


def _seed(database):
    """Cards of every family, with dependencies, links (a cycle among them), an
    edited card and a workflow card with its source references."""
    archive = PostgresArchive(database.runtime).open()
    try:
        memory = MemoryService(archive)
        shipped = memory.create_card(
            "acme",
            card(
                dependencies=[
                    {"database": "dwh", "schema": "sales", "table": "orders", "column": "status"}
                ],
                concepts=["shipping", "orders"],
            ),
        ).card
        rule = memory.create_card("acme", card("sql_rule")).card
        solved = memory.create_card(
            "acme",
            card(
                "solved_question",
                links=[
                    {"target": shipped.id, "meaning": "uses definition"},
                    {"target": rule.id, "meaning": "follows rule"},
                ],
            ),
            origin="workflow",
            source=Source(session="s-1", decisions=["d-1", "d-2"]),
        ).card
        error = memory.create_card(
            "acme",
            card("explained_error", error_signature='column "totl" does not exist'),
        ).card
        # a cycle: the rule links back to the solved question; edited twice
        memory.update_card(
            "acme",
            rule.id,
            card(
                "sql_rule",
                links=[{"target": solved.id, "meaning": "example"}],
                content="Join movements and jobs on job_code and fiscal_year, always.",
            ),
        )
        return [shipped.id, rule.id, solved.id, error.id]
    finally:
        archive.close()


def _remapped(documents, mapping, workspace):
    text = json.dumps(documents, sort_keys=True)
    for old, new in mapping.items():
        text = text.replace(old, new)
    return _ordered(json.loads(text), workspace)


def _ordered(documents, workspace):
    """Documents by id, links by target (both orders follow the ids, which differ)."""
    for document in documents:
        document["workspace"] = workspace
        document["links"].sort(key=lambda link: link["target"])
    return sorted(documents, key=lambda d: d["id"])


def test_export_import_export_is_lossless_and_a_rerun_creates_nothing(
    cli, run, database, runtime_file, tmp_path
):
    ids = _seed(database)
    source = runtime_file("acme")
    lines, summary = _export(run, source)
    assert summary["cards"] == 4 and len(lines) == 4
    exported = [json.loads(line) for line in lines]
    by_id = {d["id"]: d for d in exported}
    assert by_id[ids[2]]["origin"] == "workflow"
    assert by_id[ids[2]]["source"] == {"session": "s-1", "decisions": ["d-1", "d-2"]}
    assert by_id[ids[1]]["revision"] == 2
    assert by_id[ids[3]]["error_signature"]
    path = tmp_path / "acme.jsonl"
    path.write_text("\n".join(lines) + "\n")

    assert cli("workspace", "create", "copy", "--language", "en").code == 0
    target = runtime_file("copy")
    imported = _import(cli, path, target)
    assert imported.code == 0, imported.document
    assert (imported.document["created"], imported.document["invalid"]) == (4, 0)
    assert imported.document["index"] == {"indexed": 4, "pending": 0}
    again, _ = _export(run, target)
    mapping = {old: uuid_to_card_id(derived_uuid("copy", old)) for old in ids}
    assert _ordered([json.loads(line) for line in again], "copy") == _remapped(
        exported, mapping, "copy"
    )

    rerun = _import(cli, path, target)
    assert rerun.code == 0
    assert (rerun.document["created"], rerun.document["updated"], rerun.document["skipped"]) == (
        0,
        0,
        4,
    )
    # the copy's own export, imported into the copy, is the same cards
    copy_path = tmp_path / "copy.jsonl"
    copy_path.write_text("\n".join(again) + "\n")
    same = _import(cli, copy_path, target)
    assert (same.document["created"], same.document["skipped"]) == (0, 4)
    assert _count(cli, "copy") == 4
    # imported cards are searchable: projected, nothing pending
    assert cli("memory", "pending", "-c", target).document["items"] == []
    found = cli("memory", "search", "when is an order shipped", "-c", target)
    assert found.code == 0 and found.document["results"][0]["id"] == mapping[ids[0]]


def test_csv_import_and_round_trip(cli, run, runtime_file, tmp_path):
    config = runtime_file("acme")
    imported = _import(cli, DATA / "cards.csv", config)
    assert imported.code == 0, imported.document
    assert imported.document["created"] == 3
    lines, _ = _export(run, config)
    documents = {d["title"]: d for d in map(json.loads, lines)}
    solved = documents["Active customers by month"]
    assert solved["links"] == [
        {
            "target": documents["Active customer"]["id"],
            "meaning": "uses definition",
            "target_title": "Active customer",
        }
    ]
    assert "GROUP BY 1" in solved["sql"] and "\n" in solved["sql"]
    assert documents["Active customer"]["dependencies"] == [
        {"database": "dwh", "schema": "sales", "table": "orders", "column": None}
    ]

    csv_lines, summary = _export(run, config, "csv")
    assert summary["cards"] == 3
    path = tmp_path / "acme.csv"
    path.write_text("\n".join(csv_lines) + "\n")
    assert cli("workspace", "create", "copy", "--language", "en").code == 0
    copy = runtime_file("copy")
    assert _import(cli, path, copy).document["created"] == 3
    copied = {d["title"]: d for d in map(json.loads, _export(run, copy)[0])}
    for title, document in documents.items():
        other = copied[title]
        assert other["id"] == uuid_to_card_id(derived_uuid("copy", document["id"]))
        for field in ("family", "content", "sql", "concepts", "dependencies", "revision"):
            assert other[field] == document[field]
        assert other["created_at"] == document["created_at"]
        assert [link["target_title"] for link in other["links"]] == [
            link["target_title"] for link in document["links"]
        ]


def test_bird_rows_become_evidence_cards_and_linked_solved_questions(cli, run, runtime_file):
    config = runtime_file("acme")
    refused = _import(cli, DATA / "bird_dev.json", config)
    assert refused.code == 2
    assert "--format" in refused.document["error"]["message"]
    assert refused.document["error"]["details"]["looks_like"] == "bird"

    imported = _import(cli, DATA / "bird_dev.json", config, "--format", "bird")
    assert imported.code == 0, imported.document
    # 5 questions; evidence: 1 + 2 + 3 (one shared with the row before) + 1 + 0 pieces
    assert imported.document["created"] == 5 + 6
    documents = {d["title"]: d for d in map(json.loads, _export(run, config)[0])}
    monthly = documents[
        "What was the average monthly consumption of customers in SME for the year 2013?"
    ]
    assert monthly["family"] == "solved_question" and monthly["scope"] == "debit_card_specializing"
    linked = sorted(link["target_title"] for link in monthly["links"])
    assert linked == [
        "Average Monthly consumption = AVG(Consumption) / 12",
        "The first 4 strings of the Date values in the yearmonth table can represent year.",
        "Year 2013 can be presented as Between 201301 And 201312",
    ]
    shared = documents[linked[1]]
    least = documents["In 2012, who had the least consumption in LAM?"]
    assert shared["id"] in {link["target"] for link in least["links"]}
    assert shared["dependencies"] == [
        {"database": "debit_card_specializing", "schema": None, "table": None, "column": None}
    ]
    rerun = _import(cli, DATA / "bird_dev.json", config, "--format", "bird")
    assert (rerun.document["created"], rerun.document["skipped"]) == (0, 11)


def test_vanna_training_data_csv_and_json_agree(cli, run, runtime_file):
    config = runtime_file("acme")
    refused = _import(cli, DATA / "vanna_training_data.csv", config)
    assert refused.code == 2 and refused.document["error"]["details"]["looks_like"] == "vanna"
    imported = _import(cli, DATA / "vanna_training_data.csv", config, "--format", "vanna")
    assert imported.code == 0, imported.document
    assert imported.document["created"] == 3
    assert imported.document["not_imported"] == {"ddl": 1}
    families = sorted(d["family"] for d in map(json.loads, _export(run, config)[0]))
    assert families == ["domain_clarification", "solved_question", "solved_question"]
    # the same records exported as JSON: the same keys (Vanna's ids), nothing new
    again = _import(cli, DATA / "vanna_training_data.json", config, "--format", "vanna")
    assert again.code == 0, again.document
    assert (again.document["created"], again.document["skipped"]) == (0, 2)
    assert again.document["not_imported"] == {"ddl": 1}


def test_wrenai_sql_pairs_and_instructions(cli, run, runtime_file):
    config = runtime_file("acme", database="olist")
    imported = _import(cli, DATA / "wrenai_knowledge.json", config, "--format", "wrenai")
    assert imported.code == 0, imported.document
    assert imported.document["created"] == 4
    documents = {
        d["family"] + ":" + d["title"][:20]: d for d in map(json.loads, _export(run, config)[0])
    }
    rules = [d for d in documents.values() if d["family"] == "sql_rule"]
    assert len(rules) == 2 and all(d["scope"] == "olist" for d in rules)
    scoped = next(d for d in rules if d["context"])
    assert "How many orders were delivered last month?" in scoped["context"]
    assert sum(d["family"] == "solved_question" for d in documents.values()) == 2


def test_dry_run_reports_every_line_and_writes_nothing(cli, run, runtime_file):
    config = runtime_file("acme")
    dry = _import(cli, DATA / "vanna_training_data.csv", config, "--format", "vanna", "--dry-run")
    assert dry.code == 0, dry.document
    assert [(e["line"], e["action"]) for e in dry.document["lines"]] == [
        (2, "create"),
        (3, "create"),
        (6, "not_imported (ddl)"),
        (7, "create"),
    ]
    assert _count(cli) == 0
    _import(cli, DATA / "vanna_training_data.csv", config, "--format", "vanna")
    again = _import(cli, DATA / "vanna_training_data.csv", config, "--format", "vanna", "--dry-run")
    assert {e["action"] for e in again.document["lines"] if "key" in e} == {"unchanged"}


def _own_process_with_acme(database, tmp_path) -> dict[str, str]:
    """The environment of commands run in their own process (no service), once
    workspace "acme" was created by one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env.update(database.env(), THT_HOME=str(tmp_path / "home"), THT_SERVICE="off")
    created = subprocess.run(
        [sys.executable, "-m", "tht", "workspace", "create", "acme", "--language", "en"],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert created.returncode == 0, created.stdout
    return env


def _paused_import(
    path, config, env, tmp_path, point: str, launcher=("-m", "tht")
) -> subprocess.Popen:
    """``memory import`` in a process of its own, once it holds at the pause ``point``."""
    marker = tmp_path / "paused"
    running = subprocess.Popen(
        [sys.executable, *launcher, "memory", "import", str(path), "-c", config],
        env={**env, "THT_PAUSE_AT": point, "THT_PAUSE_FILE": str(marker)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert running.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    return running


def _jsonl(*documents) -> bytes:
    return b"".join(
        (d if isinstance(d, bytes) else json.dumps(d).encode()) + b"\n" for d in documents
    )


GOOD = card_document(title="A good card")
BAD_INPUTS = {
    "unknown field": (_jsonl(GOOD, card_document(colour="red")), "jsonl", 2),
    "duplicate in the file": (
        _jsonl(
            {**GOOD, "id": MISSING},
            card_document(title="Other"),
            {**GOOD, "id": MISSING, "title": "Again"},
        ),
        "jsonl",
        3,
    ),
    "link to nowhere": (
        _jsonl(GOOD, card_document(title="Linked", links=[{"target": MISSING, "meaning": "x"}])),
        "jsonl",
        2,
    ),
    "invalid UTF-8": (
        _jsonl(GOOD, b'{"family": "domain_clarification", "title": "\xff"}'),
        "jsonl",
        2,
    ),
    "a line over the limit": (
        _jsonl(GOOD, card_document(content="x" * 1_100_000)),
        "jsonl",
        2,
    ),
    "a family rule broken": (
        _jsonl(GOOD, {"family": "sql_rule", "title": "No content"}),
        "jsonl",
        2,
    ),
    "wrong format": (_jsonl(GOOD), "bird", 1),
    "an array element that is not a card": (
        b'[\n{"db_id": "shop", "question": "How many orders?", "evidence": "",'
        b' "SQL": "SELECT count(*) FROM orders"},\n42\n]\n',
        "bird",
        3,
    ),
    "csv row with a missing column": (
        b"family,title,content,scope\n"
        b"domain_clarification,Good,Some content,Sales\n"
        b"domain_clarification,Short row\n",
        "csv",
        3,
    ),
    "csv header without a required column": (
        b"title,content,scope\nGood,Some content,Sales\n",
        "csv",
        1,
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_names_its_line_and_writes_nothing(cli, run, runtime_file, tmp_path, case):
    data, fmt, line = BAD_INPUTS[case]
    path = tmp_path / f"input.{'csv' if fmt == 'csv' else 'jsonl'}"
    path.write_bytes(data)
    result = _import(cli, path, runtime_file("acme"), "--format", fmt)
    assert result.code == 2, result.document
    error = result.document["error"]
    assert error["details"]["line"] == line, error
    assert str(line) in error["message"]
    assert _count(cli) == 0


def test_mixed_families_are_refused_with_family(cli, run, runtime_file, tmp_path):
    path = tmp_path / "rules.jsonl"
    path.write_bytes(_jsonl(card_document("sql_rule"), card_document(title="A clarification")))
    result = _import(cli, path, runtime_file("acme"), "--family", "sql_rule")
    assert result.code == 2 and result.document["error"]["details"]["line"] == 2
    assert _count(cli) == 0


def test_continue_writes_the_valid_records_and_reports_the_others(cli, run, runtime_file, tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        _jsonl(
            GOOD,
            card_document(colour="red"),
            b"not json",
            card_document(title="Linked", links=[{"target": MISSING, "meaning": "x"}]),
            card_document(title="Second good"),
        )
    )
    result = _import(cli, path, runtime_file("acme"), "--continue")
    assert result.code == 0, result.document
    assert (result.document["created"], result.document["invalid"]) == (2, 3)
    assert [e["line"] for e in result.document["errors"]] == [2, 3, 4]
    assert _count(cli) == 2


def test_on_conflict_skip_update_fail(cli, run, runtime_file, tmp_path):
    config = runtime_file("acme")
    key = "mem-11111111-1111-4111-8111-111111111111"
    path = tmp_path / "one.jsonl"
    path.write_bytes(_jsonl({**GOOD, "id": key}))
    assert _import(cli, path, config).document["created"] == 1
    path.write_bytes(_jsonl({**GOOD, "id": key, "content": "Changed content."}))
    skipped = _import(cli, path, config)
    assert (skipped.document["skipped"], skipped.document["updated"]) == (1, 0)
    failed = _import(cli, path, config, "--on-conflict", "fail")
    assert failed.code == 4 and failed.document["error"]["details"]["line"] == 1
    updated = _import(cli, path, config, "--on-conflict", "update")
    assert updated.document["updated"] == 1
    (document,) = map(json.loads, _export(run, config)[0])
    assert (document["content"], document["revision"]) == ("Changed content.", 2)


def test_an_interrupted_import_says_how_to_resume_and_a_rerun_finishes_it(
    cli, run, runtime_file, tmp_path, monkeypatch
):
    # five cards, the first linking to the last (a link to a later batch)
    titles = [f"Card {i}" for i in range(5)]
    ids = [f"mem-{i}1111111-1111-4111-8111-111111111111" for i in range(5)]
    documents = [
        card_document(title=title, id=card_id, content=f"Content {title}.")
        for title, card_id in zip(titles, ids, strict=True)
    ]
    documents[0]["links"] = [{"target": ids[4], "meaning": "see also"}]
    path = tmp_path / "five.jsonl"
    path.write_bytes(_jsonl(*documents))
    config = runtime_file("acme")
    monkeypatch.setattr(transfer_service, "BATCH", 2)
    original = transfer_service.CardTransfer._write_batch
    calls = []

    def interrupted_on_the_second_batch(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(
        transfer_service.CardTransfer, "_write_batch", interrupted_on_the_second_batch
    )
    stopped = _import(cli, path, config)
    assert stopped.code == 130, stopped.document
    assert stopped.document["error"]["details"]["resume"] == "rerun the same command"
    assert stopped.document["error"]["details"]["written"] == 2
    assert _count(cli) == 2
    [record] = cli("memory", "imports", "list", "-c", config).document["imports"]
    assert (record["status"], record["cards"], record["finished_at"] is not None) == (
        "interrupted",
        2,
        True,
    )
    monkeypatch.setattr(transfer_service.CardTransfer, "_write_batch", original)
    finished = _import(cli, path, config)
    assert finished.code == 0, finished.document
    assert (finished.document["created"], finished.document["skipped"]) == (3, 2)
    # the rerun is an import of its own: the cards the first run wrote keep naming it
    records = cli("memory", "imports", "list", "-c", config).document["imports"]
    assert [(r["status"], r["cards"]) for r in records] == [("completed", 3), ("interrupted", 2)]
    exported = {d["title"]: d for d in map(json.loads, _export(run, config)[0])}
    assert len(exported) == 5
    assert [link["target_title"] for link in exported["Card 0"]["links"]] == ["Card 4"]
    assert cli("memory", "pending", "-c", config).document["items"] == []


def test_embedding_starts_with_the_check_and_batches_are_indexed_while_the_archive_is_written(
    cli, run, runtime_file, tmp_path, monkeypatch
):
    path = tmp_path / "forty.jsonl"
    path.write_bytes(
        _jsonl(*(card_document(title=f"Card {i}", content=f"Content {i}.") for i in range(40)))
    )
    config = runtime_file("acme")
    monkeypatch.setattr(transfer_service, "BATCH", 4)
    monkeypatch.setattr(pipeline, "CHUNK", 4)  # the index writer's chunk
    classify, write_batch = (
        transfer_service.CardTransfer._classify,
        transfer_service.CardTransfer._write_batch,
    )
    embed_inputs, write_embedded = (
        IndexProjector.embed_inputs,
        IndexProjector.write_embedded,
    )
    events: list[str] = []
    texts: list[str] = []

    def wait_for(event: str) -> None:
        deadline = time.monotonic() + 30
        while event not in events:
            assert time.monotonic() < deadline, events
            time.sleep(0.01)

    def classified(self, *args):
        if events.count("classify") == 1:  # the check pass goes on once a batch is embedded
            wait_for("embed")
        events.append("classify")
        return classify(self, *args)

    def written(self, *args):
        if events.count("archive") == 2:  # the archive waits for the first points written
            wait_for("index")
        events.append("archive")
        return write_batch(self, *args)

    def embedded(self, inputs):
        found = embed_inputs(self, inputs)
        events.append("embed")
        texts.extend(inputs.texts)
        return found

    def indexed(self, *args):
        found = write_embedded(self, *args)
        # marked as imported meanwhile: the service's upkeep does not compact it
        importing = self.compactions.claims._importing
        events.append("index" if importing.get(args[0]) == 1 else "index unmarked")
        return found

    monkeypatch.setattr(transfer_service.CardTransfer, "_classify", classified)
    monkeypatch.setattr(transfer_service.CardTransfer, "_write_batch", written)
    monkeypatch.setattr(IndexProjector, "embed_inputs", embedded)
    monkeypatch.setattr(IndexProjector, "write_embedded", indexed)
    done = _import(cli, path, config)
    assert done.code == 0, done.document
    assert done.document["created"] == 40
    assert done.document["index"] == {"indexed": 40, "pending": 0}
    # embedded before the check pass ended, each record once
    assert events.index("embed") < max(i for i, e in enumerate(events) if e == "classify")
    assert sorted(texts) == sorted(set(texts)) and len(texts) == 40
    # points written before the last archive batch
    assert events.index("index") < max(i for i, e in enumerate(events) if e == "archive")
    assert "index unmarked" not in events
    assert cli("memory", "pending", "-c", config).document["items"] == []
    checked = cli("memory", "check", "-c", config)
    assert checked.code == 0, checked.document
    assert (checked.document["points"], checked.document["vectors_checked"]) == (40, 40)
    found = cli("memory", "search", "Card 27 Content 27", "-c", config)
    assert found.code == 0, found.document
    assert "Card 27" in [result["title"] for result in found.document["results"]], found.document


def test_records_refused_after_they_were_embedded_leave_no_point(cli, run, runtime_file, tmp_path):
    """The embedder runs ahead of the check's verdict: a record refused at its end (a
    link to a card that does not exist) or a later duplicate is embedded for nothing,
    and its vectors go nowhere."""
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        _jsonl(
            *(card_document(title=f"Card {i}", content=f"Content {i}.") for i in range(6)),
            card_document(
                title="Linked to nothing",
                content="Xylophone orchestra.",
                links=[{"target": "mem-33333333-3333-4333-8333-333333333333", "meaning": "x"}],
            ),
            {**card_document(title="Card 6", content="Content 6."), "id": MISSING},
            {**card_document(title="Card 6 again", content="Zither."), "id": MISSING},
        )
    )
    config = runtime_file("acme")
    result = _import(cli, path, config, "--continue")
    assert result.code == 0, result.document
    assert (result.document["created"], result.document["invalid"]) == (7, 2)
    assert result.document["index"] == {"indexed": 7, "pending": 0}
    checked = cli("memory", "check", "-c", config)
    assert checked.code == 0, checked.document
    assert (checked.document["cards"], checked.document["points"]) == (7, 7)
    assert checked.document["vectors_checked"] == 7


@pytest.mark.parametrize("on_conflict", ["skip", "update"])
def test_a_card_written_between_the_check_and_the_write_gets_the_vectors_of_its_text(
    cli, run, database, runtime_file, tmp_path, monkeypatch, on_conflict
):
    """The check plans to create the record and embeds it; before its batch is written,
    another import (without an index: its card stays pending) creates the same card
    with other content. Skipped, the card keeps the other content and gets the vectors
    of that content (the ones embedded ahead are not its text's: dropped); updated, it
    gets the record's content and the vectors embedded ahead."""
    key = "mem-22222222-2222-4222-8222-222222222222"
    mine = {**card_document(title="Mine", content="Accordion."), "id": key}
    theirs = {
        **card_document(title="Theirs", content="Bagpipes, drums and a long march."),
        "id": key,
    }
    config = runtime_file("acme")
    ours, other = tmp_path / "mine.jsonl", tmp_path / "theirs.jsonl"
    ours.write_bytes(_jsonl(mine, *(card_document(title=f"Card {i}") for i in range(3))))
    other.write_bytes(_jsonl(theirs))
    check = transfer_service.CardTransfer._check

    def then_another_import(self, *args):
        found = check(self, *args)
        if not done_once:
            done_once.append(1)
            archive = PostgresArchive(database.runtime).open()
            try:
                summary = transfer_service.CardTransfer(archive).import_file(
                    "acme", lambda: open(other, "rb"), transfer_service.ImportOptions("jsonl")
                )
            finally:
                archive.close()
            assert (summary["created"], summary["index"]["pending"]) == (1, 1)
        return found

    done_once: list[int] = []
    monkeypatch.setattr(transfer_service.CardTransfer, "_check", then_another_import)
    result = _import(cli, ours, config, "--on-conflict", on_conflict)
    assert result.code == 0, result.document
    assert result.document["created"] == 3
    assert result.document[{"skip": "skipped", "update": "updated"}[on_conflict]] == 1
    exported = list(map(json.loads, _export(run, config)[0]))
    (document,) = [d for d in exported if d["title"] in ("Mine", "Theirs")]
    assert document["id"] == uuid_to_card_id(derived_uuid("acme", key))
    assert document["title"] == {"skip": "Theirs", "update": "Mine"}[on_conflict]
    checked = cli("memory", "check", "-c", config)
    assert checked.code == 0, checked.document  # no damaged vector: each point is its text's
    assert (checked.document["points"], checked.document["vectors_checked"]) == (4, 4)
    assert cli("memory", "pending", "-c", config).document["items"] == []


def test_ctrl_c_during_the_check_pass_writes_nothing(database, runtime_file, tmp_path):
    """The main thread embeds while the check pass runs in another: Ctrl-C reaches the
    check through the import's flag, and nothing is written."""
    env = _own_process_with_acme(database, tmp_path)
    config = runtime_file("acme")
    path = tmp_path / "many.jsonl"
    path.write_bytes(
        _jsonl(*(card_document(title=f"Card {i}", content=f"Content {i}.") for i in range(600)))
    )
    # the first batch is checked (and fed to the embedder)
    running = _paused_import(path, config, env, tmp_path, "import.checked_batch")
    running.send_signal(signal.SIGINT)
    time.sleep(0.5)  # the main thread takes the signal; then the check goes on, and stops
    (tmp_path / "paused").unlink()  # the pause ends
    out, _ = running.communicate(timeout=120)
    assert running.returncode == 130, out
    error = json.loads(out)["error"]
    assert (error["code"], error["details"]["written"]) == ("interrupted", 0), error
    archive = PostgresArchive(database.runtime).open()
    try:
        with archive.transaction("acme") as tx:
            assert tx.transfer.card_count() == 0
            assert tx.operation_ids(limit=10) == []
    finally:
        archive.close()


def test_ctrl_c_while_the_import_compacts_says_how_to_resume(database, runtime_file, tmp_path):
    """Ctrl-C while the import waits for its compaction (in the engine's child, held
    here): the import ends at once as interrupted (exit 130, how to resume), every card
    written; the child dies with it, and the rerun, which writes nothing, discards the
    copy left behind and does the compaction over. Before, the rerun left the copy on
    disk and the cards unindexed; the import waited for the compaction to end; earlier
    still, the interrupted wait made
    Python 3.11 take the import's thread for ended (python/cpython#90882) and the
    command failed with an IndexError."""
    env = _own_process_with_acme(database, tmp_path)
    config = runtime_file("acme")
    path = tmp_path / "many.jsonl"
    path.write_bytes(_jsonl(*(card_document(title=f"Card {i}") for i in range(150))))
    # the command with the compaction's thresholds lowered (150 cards are enough)
    lowered = (
        "import runpy, tht.memory.index.edge as edge;"
        " edge.COMPACT_UNINDEXED = 100; edge.IN_PROCESS_OPTIMIZE_BYTES = 0;"
        " edge.ENGINE_INDEXES_FROM_BYTES = 0;"
        " runpy.run_module('tht', run_name='__main__')"
    )
    # held while the compaction's child indexes
    running = _paused_import(path, config, env, tmp_path, "edge.optimizing", ("-c", lowered))
    running.send_signal(signal.SIGINT)
    out, _ = running.communicate(timeout=60)  # the compaction is still held
    assert (tmp_path / "paused").exists()
    assert running.returncode == 130, out
    error = json.loads(out)["error"]
    assert (error["code"], error["details"]["written"]) == ("interrupted", 150), error
    assert error["details"]["resume"] == "rerun the same command"
    left = list((tmp_path / "home").rglob("acme.compacting"))
    assert len(left) == 1  # the interrupted compaction's copy
    rerun = subprocess.run(
        [sys.executable, "-c", lowered, "memory", "import", str(path), "-c", config],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stdout
    summary = json.loads(rerun.stdout)
    assert (summary["skipped"], summary["index"]["pending"]) == (150, 0), summary
    assert summary["index"]["compacted"]["points"] == 150, summary
    assert not left[0].exists()
    checked = subprocess.run(
        [sys.executable, "-m", "tht", "memory", "check", "-c", config],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 0 and json.loads(checked.stdout)["points"] == 150, checked.stdout


def test_killed_while_indexing_a_rerun_indexes_what_was_written(database, runtime_file, tmp_path):
    """kill -9 after the first batch's points reached the index, before their
    projections were recorded: the cards are in the archive with their operations
    pending; the rerun skips them as unchanged and indexes them (they were not embedded
    ahead: their vectors are computed by ``sync``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env.update(database.env(), THT_HOME=str(tmp_path / "home"), THT_SERVICE="off")
    config = runtime_file("acme")

    def tht(*args, **extra_env):
        done = subprocess.run(
            [sys.executable, "-m", "tht", *args],
            env={**env, **extra_env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None

    assert tht("workspace", "create", "acme", "--language", "en")[0] == 0
    path = tmp_path / "many.jsonl"
    path.write_bytes(
        _jsonl(*(card_document(title=f"Card {i}", content=f"Content {i}.") for i in range(700)))
    )
    code, _ = tht(
        "memory", "import", str(path), "-c", config, THT_CRASH_AT="projector.after_index_write"
    )
    assert code == CRASH_EXIT_CODE
    written = sum(tht("workspace", "show", "acme")[1]["cards"].values())
    assert written >= transfer_service.BATCH
    pending = tht("memory", "pending", "-c", config)[1]["items"]
    assert len(pending) >= transfer_service.BATCH  # the batches committed, not indexed
    code, summary = tht("memory", "import", str(path), "-c", config)
    assert code == 0, summary
    assert (summary["created"], summary["skipped"]) == (700 - written, written)
    assert summary["index"] == {"indexed": 700, "pending": 0}
    assert tht("memory", "pending", "-c", config)[1]["items"] == []
    code, checked = tht("memory", "check", "-c", config)
    assert code == 0, checked
    assert (checked["cards"], checked["points"]) == (700, 700)


def test_import_and_export_through_the_service_respect_capabilities(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    tht = installation(database, home)
    try:
        assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
        config = tht.runtime("acme", database="dwh")
        shutil.copy(DATA / "bird_dev.json", home / "dev.json")
        # a relative path, read by the client and sent with the command
        imported = tht.run("memory", "import", "dev.json", "-c", config, "--format", "bird")
        assert imported.code == 0, (imported.document, imported.stderr)
        assert imported.document["created"] == 11
        assert tht.service_pid() is not None
        assert "records" in imported.stderr  # progress reached the client's stderr
        dry = tht.run("memory", "import", "--format", "bird", "--dry-run", "-c", config, "dev.json")
        assert dry.code == 0 and dry.document["skipped"] == 11

        tokens = {}
        for role in ("user", "agent"):
            made = tht.run("user", "create", f"the-{role}", "--role", role, "--workspace", "acme")
            tokens[role] = made.document["token"]
        refused = tht.run(
            "memory", "import", "dev.json", "-c", config, "--format", "bird", token=tokens["user"]
        )
        assert refused.code == 5, refused.document
        exported = subprocess.run(
            [sys.executable, "-m", "tht", "memory", "export", "-c", config],
            env={**tht.env, "THT_TOKEN": tokens["user"]},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=home,
        )
        assert exported.returncode == 0, exported.stdout + exported.stderr
        assert len(exported.stdout.splitlines()) == 11
        denied = tht.run("memory", "export", "-c", config, token=tokens["agent"])
        assert denied.code == 5, denied.document
        # the imports' records: read access lists them, only management undoes one
        listed = tht.run("memory", "imports", "list", "-c", config, token=tokens["user"])
        assert listed.code == 0, listed.document
        [record] = listed.document["imports"]
        assert record["id"] == imported.document["import"] and record["by"] == "operator"
        undo = ("memory", "imports", "undo", record["id"], "-c", config)
        assert tht.run(*undo, token=tokens["user"]).code == 5
        assert tht.run(*undo).document["deleted"] == 11
        # files of any size: tests/integration/test_service_streaming.py
    finally:
        tht.stop()


def test_many_bad_lines_are_counted_and_the_first_hundred_reported(
    cli, run, runtime_file, tmp_path
):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"not json\n" * 250 + _jsonl(GOOD))
    result = _import(cli, path, runtime_file("acme"))
    assert result.code == 2
    details = result.document["error"]["details"]
    assert (details["line"], details["invalid"], len(details["errors"])) == (1, 250, 100)
    assert [e["line"] for e in details["errors"]] == list(range(1, 101))
    assert _count(cli) == 0


def test_ctrl_c_in_its_own_process_prints_how_to_resume(database, runtime_file, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env.update(database.env(), THT_HOME=str(tmp_path / "home"), THT_SERVICE="off")
    config = runtime_file("acme")

    def tht(*args):
        done = subprocess.run(
            [sys.executable, "-m", "tht", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return done.returncode, json.loads(done.stdout)

    assert tht("workspace", "create", "acme", "--language", "en")[0] == 0
    path = tmp_path / "many.jsonl"
    path.write_bytes(
        _jsonl(
            *(card_document(title=f"Card {i}", content=f"Content number {i}.") for i in range(1500))
        )
    )
    # the first batch is committed, the import holds there
    running = _paused_import(path, config, env, tmp_path, "import.after_batch")
    running.send_signal(signal.SIGINT)
    out, _ = running.communicate(timeout=120)
    assert running.returncode == 130, out
    error = json.loads(out)["error"]
    assert error["code"] == "interrupted" and error["details"]["resume"] == "rerun the same command"
    written = error["details"]["written"]
    assert 0 < written < 1500
    code, summary = tht("memory", "import", str(path), "-c", config)
    assert code == 0, summary
    assert (summary["created"], summary["skipped"]) == (1500 - written, written)
    assert tht("workspace", "show", "acme")[1]["cards"] == {"domain_clarification": 1500}
    assert tht("memory", "pending", "-c", config)[1]["items"] == []


def test_a_large_import_refreshes_the_planners_statistics_as_it_grows_the_tables(
    cli, run, runtime_file, database, tmp_path, monkeypatch
):
    """Plans cached for small tables (sequential scans) stay in use on every pooled
    connection until the tables are analyzed: an import analyzes the tables it grows
    (through the owner's function, 014) each time it has written as many cards as they
    held at the last analysis: a few times as they double, not once a batch."""
    import psycopg

    def analyses() -> int:  # ANALYZE commands run on the cards' table (not autovacuum's)
        with psycopg.connect(database.superuser) as conn:
            return conn.execute(
                "SELECT analyze_count FROM pg_stat_user_tables"
                " WHERE schemaname = 'thoth_memory' AND relname = 'cards'"
            ).fetchone()[0]

    monkeypatch.setattr(transfer_service, "STATISTICS_AFTER", 3)
    monkeypatch.setattr(transfer_service, "BATCH", 4)
    config = runtime_file("acme")

    def imported(name: str, count: int) -> None:
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(_jsonl(*(card_document(title=f"{name} {n}") for n in range(count))))
        assert _import(cli, path, config).code == 0

    imported("few", 2)
    assert analyses() == 0  # 2 cards: under STATISTICS_AFTER
    imported("many", 40)  # 10 batches: the table doubles from 2 to 42 cards
    doubled = analyses()
    assert 2 <= doubled <= 5, doubled  # at 6, 14 and 30 cards, give or take: not 10 times
    imported("more", 3)  # 3 cards into 42: the statistics still hold
    assert analyses() == doubled


def test_a_refused_file_is_not_embedded_past_its_first_bad_record(
    cli, run, runtime_file, tmp_path, monkeypatch
):
    """The embedder runs ahead of the check pass; once a bad record means the file will
    be refused (no --continue), nothing more of it is embedded (a remote embedder is
    paid per text)."""
    good = [card_document(title=f"Card {i}", content=f"Content {i}.") for i in range(48)]
    path = tmp_path / "refused.jsonl"
    path.write_bytes(_jsonl(*good[:8]) + b"{not json\n" + _jsonl(*good[8:]))
    monkeypatch.setattr(transfer_service, "BATCH", 4)
    embed_inputs = IndexProjector.embed_inputs
    texts: list[str] = []

    def embedded(self, inputs):
        texts.extend(inputs.texts)
        return embed_inputs(self, inputs)

    monkeypatch.setattr(IndexProjector, "embed_inputs", embedded)
    refused = _import(cli, path, runtime_file("acme"))
    assert refused.code == 2, refused.document
    assert refused.document["error"]["details"]["line"] == 9
    # the two batches classified before line 9, none after it
    assert len(texts) == 8 and all(any(f"Card {i}" in t for t in texts) for i in range(8))


def test_what_is_embedded_ahead_is_bounded_by_characters_too(
    cli, run, runtime_file, tmp_path, monkeypatch
):
    """Large cards: the embedding stage keeps at most AHEAD_CHARS characters of indexed
    text ahead of the index (a first batch alone whatever its size), not AHEAD cards'."""
    from tht.memory.transfer import embedding_ahead

    path = tmp_path / "large.jsonl"
    path.write_bytes(
        _jsonl(*(card_document(title=f"Card {i}", content="word " * 2000) for i in range(24)))
    )
    monkeypatch.setattr(transfer_service, "BATCH", 4)
    # a batch of 4 cards is ~40 000 characters of indexed text: 2 fit, 3 do not
    monkeypatch.setattr(embedding_ahead, "AHEAD_CHARS", 100_000)
    taken: list[tuple[int, int]] = []
    take = embedding_ahead._Room.take

    def recorded(self, cards, chars, timeout):
        took = take(self, cards, chars, timeout)
        taken.append(self._taken)
        return took

    monkeypatch.setattr(embedding_ahead._Room, "take", recorded)
    done = _import(cli, path, runtime_file("acme"))
    assert done.code == 0, done.document
    assert done.document["index"] == {"indexed": 24, "pending": 0}
    assert max(cards for cards, _ in taken) <= 8  # two batches of 4, never more
    assert max(chars for _, chars in taken) <= 100_000


def test_the_last_progress_line_is_the_final_count(run, runtime_file, tmp_path):
    """Progress is printed at most once a second: the last count must still be shown."""
    path = tmp_path / "three.jsonl"
    path.write_bytes(_jsonl(*(card_document(title=f"Card {n}") for n in range(3))))
    code, lines, err = run("memory", "import", str(path), "-c", runtime_file("acme"))
    assert code == 0, lines
    assert err.splitlines()[-1].startswith("indexed 3/3 records"), err


def _import_cards_to_compact(
    run, runtime_file, tmp_path, monkeypatch, cards: int = 150, threshold: int = 100
):
    """``cards`` cards imported into "acme" with the compaction's threshold lowered from
    20 000 plain vectors to ``threshold``: the runtime file, the summary's ``index``,
    stderr."""
    monkeypatch.setattr("tht.memory.index.edge.COMPACT_UNINDEXED", threshold)
    config = runtime_file("acme")
    path = tmp_path / "many.jsonl"
    path.write_bytes(_jsonl(*(card_document(title=f"Card {n}") for n in range(cards))))
    code, lines, err = run("memory", "import", str(path), "-c", config)
    assert code == 0, (lines, err)
    return config, json.loads(lines[-1])["index"], err


def test_an_import_that_leaves_many_vectors_unindexed_ends_on_an_indexed_copy(
    run, cli, runtime_file, tmp_path, monkeypatch
):
    """Qdrant Edge indexes nothing on its own: the import replaces the serving shard
    by an indexed copy (threshold lowered here from 20 000 plain vectors)."""
    config, index, err = _import_cards_to_compact(run, runtime_file, tmp_path, monkeypatch)
    assert (index["indexed"], index["pending"], index["compacted"]["points"]) == (150, 0, 150)
    *_, indexed, compacting = err.splitlines()
    assert indexed.startswith("indexed 150/150 records"), err
    assert compacting == (
        "compacting the search index: indexing 150 new points, about 30 s per 100 000"
    )
    _served_by_one_copy(cli, config, tmp_path, cards=150, title="Card 42")


def _served_by_one_copy(cli, config, tmp_path, *, cards: int, title: str) -> None:
    """Workspace acme's last compacted copy serves alone (the shards it replaced are
    gone), holds a point per card, and recall finds the card titled ``title`` first."""
    (current,) = tmp_path.rglob("acme.current")
    assert sorted(p.name for p in current.parent.iterdir()) == sorted(
        ["acme.current", current.read_text().strip()]
    )
    checked = cli("memory", "check", "-c", config)
    assert checked.code == 0, checked.document
    assert (checked.document["cards"], checked.document["points"]) == (cards, cards)
    found = cli("memory", "search", title, "-c", config, "--json")
    assert found.code == 0, found.document
    assert found.document["results"][0]["title"] == title, found.document


def test_a_large_import_compacts_while_it_writes_then_what_is_left(
    run, cli, runtime_file, tmp_path, monkeypatch
):
    """An import compacts each time it has indexed another ``OPTIMIZE_EVERY`` points
    (lowered here from 20 000 to 300), in a thread while it goes on writing, and what
    is left when it ends: it no longer waits for the index build of all it wrote. The
    cards written during a compaction reach its copy (else the copy would hold fewer
    points and never be switched to)."""
    monkeypatch.setattr(pipeline, "OPTIMIZE_EVERY", 300)
    monkeypatch.setattr("tht.memory.index.edge.ENGINE_INDEXES_FROM_BYTES", 1)
    config, index, _ = _import_cards_to_compact(
        run, runtime_file, tmp_path, monkeypatch, cards=1100, threshold=300
    )
    assert (index["indexed"], index["pending"]) == (1100, 0), index
    compacted = index["compacted"]
    # at least one after the first 512 indexed cards; the last covers every point
    assert compacted["while_importing"] >= 1 and compacted["points"] == 1100, index
    _served_by_one_copy(cli, config, tmp_path, cards=1100, title="Card 1099")


def test_an_import_whose_compaction_fails_says_so_and_keeps_its_cards(
    run, cli, runtime_file, tmp_path, monkeypatch
):
    """A full disk while copying the shard: the import succeeds (its points are
    searched by brute force) and its summary says why the compaction failed and when
    the service tries again, instead of leaving the user with the progress line."""
    copies_run_out_of_space(monkeypatch)
    config, index, err = _import_cards_to_compact(run, runtime_file, tmp_path, monkeypatch)
    assert err.splitlines()[-1].startswith("compacting the search index"), err
    assert "compacted" not in index, index
    failed = index["compaction_failed"]
    assert failed["retry_in_seconds"] == 300, failed
    assert failed["failed"].startswith("copying the embedded index of workspace acme failed:")
    assert "No space left on device" in failed["failed"] and len(failed["failed"]) < 1_000
    assert not list(tmp_path.rglob("acme.g*"))  # the partial copy is removed
    found = cli("memory", "search", "Card 42", "-c", config, "--json")
    assert found.code == 0 and found.document["results"][0]["title"] == "Card 42", found.document
