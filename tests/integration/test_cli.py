"""The `tht` command: help text, one JSON document on stdout, documented exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.factories import card_document
from tht.cli.main import main
from tht.errors import EXIT_CODES

ID = "mem-00000000-0000-4000-8000-000000000000"


@pytest.fixture
def setup(cli, runtime_file, tmp_path):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    assert cli("workspace", "create", "other", "--language", "it").code == 0
    config = runtime_file("acme")

    def write(document, name="card.json"):
        path = tmp_path / name
        path.write_text(document if isinstance(document, str) else json.dumps(document))
        return str(path)

    created = cli("memory", "create", "-c", config, "--data", write(card_document()))
    assert created.code == 0, created.document
    return config, write, created.document["card"]


def count_cards(cli, config):
    return cli("memory", "list", "-c", config).document["total"]


def test_every_command_succeeds_with_one_json_document(cli, setup, runtime_file):
    config, write, first = setup
    other = runtime_file("other")
    second = cli(
        "memory",
        "create",
        "-c",
        config,
        "--data",
        write(
            card_document("sql_rule", links=[{"target": first["id"], "meaning": "uses"}]), "b.json"
        ),
    )
    assert second.code == 0 and second.document["status"] == "saved"
    card_b = second.document["card"]
    runs = {
        "memory list": cli(
            "memory", "list", "-c", config, "--filters", '{"family": "sql_rule", "page": 1}'
        ),
        "memory show": cli("memory", "show", first["id"], "-c", config),
        "memory update": cli(
            "memory",
            "update",
            card_b["id"],
            "-c",
            config,
            "--data",
            write({**card_b, "title": "Edited"}, "edit.json"),
        ),
        "memory pending": cli("memory", "pending", "-c", config),
        "memory delete": cli("memory", "delete", first["id"], "--yes", "-c", config),
        "memory migrate": cli("memory", "migrate"),
        "workspace list": cli("workspace", "list"),
        "workspace show": cli("workspace", "show", "acme"),
        "memory list (other)": cli("memory", "list", "-c", other),
        "memory retry": cli("memory", "retry", card_b["id"], "-c", config),
        "memory index": cli("memory", "index", "-c", config),
        "memory check": cli("memory", "check", "-c", config),
        "memory search": cli("memory", "search", "edited", "-c", config, "--json"),
        "memory rules": cli(
            "memory", "rules", "join jobs", "-c", config, "--filters", '{"top": 3}'
        ),
        "memory solved-search": cli("memory", "solved-search", "orders", "-c", config),
    }
    for name, run in runs.items():
        assert run.code == 0 and "error" not in run.document, (name, run.document)
    assert runs["memory list"].document["total"] == 1
    assert set(runs["memory list"].document) == {"items", "total", "page", "page_size"}
    assert runs["memory show"].document["incoming_links"][0]["source"] == card_b["id"]
    shown_index = runs["memory show"].document["index"]  # what the search index holds of it
    assert (
        shown_index["revision"] == 1
        and shown_index["embedded_chars"] is None
        and shown_index["indexed_chars"] > 0
    )
    assert runs["memory update"].document["card"]["revision"] == 2  # show output fed back to update
    assert runs["memory delete"].document["links_removed"] == 1
    assert set(runs["memory pending"].document) == {"items"}
    assert runs["memory migrate"].document["applied"] == []
    assert runs["memory list (other)"].document["total"] == 0
    assert runs["memory retry"].document["index"]["status"] == "current"
    assert (
        runs["memory index"].document["indexed"] == 1
        and runs["memory check"].document["missing"] == []
    )
    assert [r["id"] for r in runs["memory rules"].document["results"]] == [card_b["id"]]
    assert runs["memory solved-search"].document == {"results": []}


COMMANDS = [
    ["memory", "list"],
    ["memory", "show"],
    ["memory", "create"],
    ["memory", "update"],
    ["memory", "delete"],
    ["memory", "pending"],
    ["memory", "migrate"],
    ["memory", "retry"],
    ["memory", "index"],
    ["memory", "check"],
    ["memory", "search"],
    ["memory", "solved-search"],
    ["memory", "rules"],
    ["workspace", "create"],
    ["workspace", "list"],
    ["workspace", "show"],
    ["db", "status"],
    ["db", "stop"],
    ["demo"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command, capsys):
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage" in out and len(out.splitlines()) > 3


def test_every_command_fails_with_a_json_error(cli, setup):
    config, write, first = setup
    failures = {
        "memory list": cli("memory", "list", "-c", config, "--filters", "{nope"),
        "memory show": cli("memory", "show", ID, "-c", config),
        "memory create": cli("memory", "create", "-c", config, "--data", write("{", "bad.json")),
        "memory update": cli(
            "memory", "update", ID, "-c", config, "--data", write(card_document())
        ),
        "memory delete": cli("memory", "delete", first["id"], "-c", config),
        "memory pending": cli("memory", "pending", "-c", "/nonexistent.yaml"),
        "workspace create": cli("workspace", "create", "acme", "--language", "en"),
        "workspace show": cli("workspace", "show", "missing"),
        "db status": cli("db", "status"),  # only for the embedded database
        "memory retry": cli("memory", "retry", ID, "-c", config),
        "memory search": cli("memory", "search", "", "-c", config),
        "memory rules": cli(
            "memory", "rules", "x", "-c", config, "--filters", '{"database": "other"}'
        ),
        "memory solved-search": cli("memory", "solved-search", "x" * 2001, "-c", config),
        "memory check": cli("memory", "check", "-c", "/nonexistent.yaml"),
        "usage": cli("memory", "show"),
        "unknown command": cli("memory", "frobnicate"),
    }
    expected = {
        "memory show": 3,
        "memory update": 3,
        "workspace create": 4,
        "workspace show": 3,
        "memory retry": 3,
    }
    for name, run in failures.items():
        error = run.document.get("error")
        assert error and set(error) == {"code", "message", "details"}, (name, run.document)
        assert run.code == expected.get(name, 2), (name, run.code, error)
        assert run.code in EXIT_CODES
    assert count_cards(cli, config) == 1


@pytest.mark.parametrize(
    "document, message",
    [
        ({"family": "recipe", "title": "x"}, "family"),
        (card_document(colour="red"), "unknown field 'colour'"),
        (card_document(scope=None), "requires scope"),
        (card_document("sql_rule", rationale=None), "requires rationale"),
        (card_document("sql_rule", rationale="  "), "only white space"),
        (card_document(title="\u200b"), "only white space"),
        (card_document(title="\u0301"), "only white space"),
        (card_document(title="Invoice \u202eexe.pdf"), "control characters"),
        (card_document(title="C1 \u009b control"), "control characters"),
        (card_document(revision=True), "revision"),
        (card_document(question="why?"), "does not use question"),
        (
            card_document(dependencies=[{"database": "dwh", "schema": "s", "column": "id"}]),
            "column dependency needs its table",
        ),
        (
            card_document(dependencies=[{"database": "dwh", "table": "t"}]),
            "table dependency needs its schema",
        ),
        (card_document(links=[{"target": "mem-42", "meaning": "x"}]), "not a card id"),
        (card_document(links=[{"target": ID}]), "missing field 'links[0].meaning'"),
        (card_document(content="x" * 20_001), "at most 20000 are allowed"),
        (card_document(title=""), "title"),
        (card_document(concepts=["a"] * 0 + [f"c{i}" for i in range(51)]), "concepts"),
        (card_document(id=ID), "cannot be set on a new card"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_card_input_is_refused_and_nothing_is_written(cli, setup, document, message):
    config, write, _ = setup
    run = cli("memory", "create", "-c", config, "--data", write(document, "bad.json"))
    assert run.code == 2 and run.document["error"]["code"] == "invalid_input"
    assert message in run.document["error"]["message"], run.document
    assert count_cards(cli, config) == 1


def test_links_to_another_workspace_or_itself_are_refused(cli, setup, runtime_file):
    config, write, first = setup
    other = runtime_file("other")
    foreign = cli(
        "memory", "create", "-c", other, "--data", write(card_document(), "f.json")
    ).document["card"]
    run = cli(
        "memory",
        "create",
        "-c",
        config,
        "--data",
        write(card_document(links=[{"target": foreign["id"], "meaning": "x"}])),
    )
    assert (
        run.code == 3 and "does not exist in workspace 'acme'" in run.document["error"]["message"]
    )
    run = cli(
        "memory",
        "update",
        first["id"],
        "-c",
        config,
        "--data",
        write(card_document(links=[{"target": first["id"], "meaning": "x"}])),
    )
    assert run.code == 4 and "itself" in run.document["error"]["message"]
    run = cli(
        "memory",
        "create",
        "-c",
        config,
        "--data",
        write(card_document(links=[{"target": ID, "meaning": "x"}])),
    )
    assert run.code == 3 and "does not exist in workspace" in run.document["error"]["message"]
    run = cli(
        "memory",
        "create",
        "-c",
        config,
        "--data",
        write(
            card_document(
                links=[
                    {"target": first["id"], "meaning": "a"},
                    {"target": first["id"], "meaning": "b"},
                ]
            )
        ),
    )
    assert run.code == 4 and "more than one link" in run.document["error"]["message"]
    assert cli("memory", "show", first["id"], "-c", config).document["revision"] == 1


def test_stale_update_is_a_conflict(cli, setup):
    config, write, first = setup
    assert (
        cli(
            "memory", "update", first["id"], "-c", config, "--data", write({**first, "title": "v2"})
        ).code
        == 0
    )
    run = cli(
        "memory", "update", first["id"], "-c", config, "--data", write({**first, "title": "v3"})
    )
    assert run.code == 4 and run.document["error"]["code"] == "stale_revision"


def test_unknown_workspace_in_runtime_file(cli, setup, runtime_file):
    _, write, _ = setup
    run = cli("memory", "create", "-c", runtime_file("ghost"), "--data", write(card_document()))
    assert run.code == 3 and "workspace 'ghost' does not exist" in run.document["error"]["message"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("workspace: acme\npassword: hunter2\n", "credential"),
        ("workspace: acme\nindex:\n  url: http://user:secret@qdrant:6333\n", "credential"),
        ("workspace: acme\napi_key: x\n", "credential"),
        ("workspace: acme\nflavour: vanilla\n", "`flavour` is not a runtime setting"),
        ("workspace: Not Valid\n", "workspace"),
        ("- a list\n", "mapping"),
        ("workspace: [unclosed\n", "not valid YAML"),
    ],
)
def test_runtime_file_is_validated(cli, setup, tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    run = cli("memory", "list", "-c", str(path))
    assert run.code == 2
    assert run.document["error"]["code"] in ("invalid_configuration", "setting_not_allowed")
    assert message in run.document["error"]["message"]


def test_archive_down_is_an_operational_error_not_an_empty_list(cli, setup, monkeypatch):
    config, _, _ = setup
    monkeypatch.setenv(
        "THT_CATALOG_RUNTIME_DATABASE_URL",
        "postgresql://thoth_runtime@127.0.0.1:1/thoth?connect_timeout=2",
    )
    run = cli("memory", "list", "-c", config)
    assert run.code == 6 and run.document["error"]["code"] == "archive_unavailable"
    assert "items" not in run.document


def test_subprocess_keeps_stdout_pure_json(database, setup, tmp_path):
    """The real console entry point: JSON on stdout, nothing else; logs would go to stderr."""
    config, _write, first = setup
    env = {"PATH": "/usr/bin:/bin", **database.env(), "THT_LOG_LEVEL": "DEBUG"}
    for args, code in (
        (["memory", "show", first["id"], "-c", config], 0),
        (["memory", "show", "nonsense", "-c", config], 2),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "tht", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert proc.returncode == code
        document = json.loads(proc.stdout)
        assert ("error" in document) == (code != 0)
        assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("group", [[], ["memory"], ["workspace"], ["db"], ["user"], ["catalog"]])
def test_a_group_without_its_command_prints_the_json_error_and_the_help_on_stderr(group, capsys):
    from tht.cli.main import main

    code = main(group)
    captured = capsys.readouterr()
    assert code == 2
    assert (
        json.loads(captured.out)["error"]["message"]
        == "a command is required: see the help on stderr"
    )
    assert "Usage: tht" in captured.err and "Usage" not in captured.out


DEEP = "[" * 5000 + "]" * 5000


def test_malformed_json_input_is_invalid_input_naming_it(cli, setup, tmp_path):
    config, write, _ = setup
    surrogate = json.dumps(card_document())[:-1] + ', "content": "\\ud800"}'
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"question": "q", "expected": ' + DEEP + "}\n")
    runs = {
        "--data": cli(
            "memory", "create", "-c", config, "--data", write(surrogate, "surrogate.json")
        ),
        "standard input": cli(
            "memory", "create", "-c", config, "--data", "-", stdin='{"title": ' + DEEP + "}"
        ),
        "--filters": cli(
            "memory", "search", "orders", "-c", config, "--filters", '{"scope": ' + DEEP + "}"
        ),
        "--filters ": cli("memory", "list", "-c", config, "--filters", '{"q": "\\udfff"}'),
        "cases line 1": cli("memory", "eval", "--cases", str(cases), "-c", config),
    }
    for named, run in runs.items():
        assert run.code == 2 and run.document["error"]["code"] == "invalid_input", (
            named,
            run.document,
        )
        assert (
            named.strip() in run.document["error"]["message"]
            or "surrogate.json" in run.document["error"]["message"]
        )
    assert "surrogate" in runs["--data"].document["error"]["message"]
    assert runs["--data"].document["error"]["details"] == {"field": "content"}
    assert "nested deeper" in runs["--filters"].document["error"]["message"]


def test_a_search_before_anything_was_indexed_finds_nothing_unless_cards_await_it(
    cli, runtime_file, tmp_path, monkeypatch
):
    """A new installation: no collection exists until the first card is projected."""
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme")
    empty = cli("memory", "search", "when is an order shipped", "-c", config)
    assert (empty.code, empty.document["results"]) == (0, [])
    # a card saved while the index was down: it waits for the index, and the search says so
    outage = tmp_path / "outage"
    outage.write_text("index")
    monkeypatch.setenv("THT_OUTAGE_FILE", str(outage))
    saved = cli("memory", "create", "-c", config, "--data", "-", stdin=json.dumps(card_document()))
    assert saved.code == 0, saved.document
    outage.write_text("")
    waiting = cli("memory", "search", "when is an order shipped", "-c", config)
    assert (waiting.code, waiting.document["error"]["code"]) == (8, "index_unavailable")
    assert "tht memory index" in waiting.document["error"]["message"]
