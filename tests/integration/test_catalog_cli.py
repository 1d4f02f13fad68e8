"""`tht catalog ...`: help text, one JSON document on stdout for success and failure,
documented exit codes (a SQLite DWH)."""

from __future__ import annotations

import pytest

from tests.integration.catalog_support import DWH_ENV, create_sqlite_dwh
from tht.cli.main import main
from tht.errors import EXIT_CODES

COMMANDS = [
    ["catalog", name] for name in ("bind", "sync", "retry", "runs", "show", "status", "forget")
]
RUN = "run-00000000-0000-4000-8000-000000000000"


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_catalog_command_has_help(command, capsys):
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage" in out and len(out.splitlines()) > 3


@pytest.fixture
def bound(cli, runtime_file, tmp_path, monkeypatch):
    monkeypatch.setenv(DWH_ENV, create_sqlite_dwh(tmp_path / "dwh.sqlite"))
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    return runtime_file("acme", dwh={"acme-dwh": {"url_env": DWH_ENV}}, schema="main")


def test_every_catalog_command_succeeds_with_one_json_document(cli, bound):
    runs = {
        "bind": cli("catalog", "bind", "-c", bound, "--connection", "acme-dwh"),
        "sync": cli("catalog", "sync", "-c", bound),
    }
    run_id = runs["sync"].document["run_id"]
    runs |= {
        "retry": cli("catalog", "retry", run_id, "-c", bound),
        "runs": cli("catalog", "runs", "-c", bound, "--limit", "5"),
        "show": cli("catalog", "show", run_id, "-c", bound),
        "status": cli("catalog", "status", "-c", bound),
        "forget": cli(
            "catalog", "forget", "-c", bound, "--table", "orders", "--column", "status", "--yes"
        ),
    }
    for name, run in runs.items():
        assert run.code == 0 and "error" not in run.document, (name, run.document)
    assert runs["bind"].document == {
        **runs["bind"].document,
        "database": "dwh",
        "schema": "main",
        "connection": "acme-dwh",
    }
    assert runs["retry"].document == runs["show"].document == runs["sync"].document
    assert [r["run_id"] for r in runs["runs"].document["items"]] == [run_id]
    assert runs["status"].document["snapshot"]["tables"] == 2
    assert runs["forget"].document["forgotten"] == {"table": "orders", "column": "status"}


def test_every_catalog_command_fails_with_a_json_error(cli, bound, tmp_path, monkeypatch):
    unbound = tmp_path / "unbound.yaml"
    unbound.write_text("workspace: acme\ndatabase: dwh\n")  # no schema
    failures = {
        "bind": cli("catalog", "bind", "-c", str(unbound), "--connection", "acme-dwh"),
        "bind to an unknown connection": cli("catalog", "bind", "-c", bound, "--connection", "x"),
        "sync without a binding": cli("catalog", "sync", "-c", bound),
        "sync": cli("catalog", "sync", "-c", "/nonexistent.yaml"),
        "retry": cli("catalog", "retry", RUN, "-c", bound),
        "runs": cli("catalog", "runs", "-c", bound, "--limit", "0"),
        "show": cli("catalog", "show", "run-42", "-c", bound),
        "status": cli("catalog", "status", "-c", "/nonexistent.yaml"),
        "forget": cli(
            "catalog", "forget", "-c", bound, "--table", "orders", "--yes"
        ),  # no snapshot yet
        "forget without --yes": cli("catalog", "forget", "-c", bound, "--all"),
        "usage": cli("catalog", "retry", "-c", bound),
    }
    monkeypatch.setenv(DWH_ENV, "sqlite:////nonexistent/dwh.sqlite")
    failures["sync, DWH unavailable"] = cli(
        "catalog", "sync", "-c", bound, "--connection", "acme-dwh"
    )
    expected = {"retry": 3, "forget": 3, "sync without a binding": 3, "sync, DWH unavailable": 9}
    for name, run in failures.items():
        error = run.document.get("error")
        assert error and set(error) == {"code", "message", "details"}, (name, run.document)
        assert run.code == expected.get(name, 2), (name, run.code, error)
        assert run.code in EXIT_CODES


def test_missing_catalog_schema_is_reported_and_memory_migrate_applies_it(cli, bound, database):
    import psycopg

    with psycopg.connect(database.superuser, autocommit=True) as conn:
        conn.execute("DROP SCHEMA thoth_catalog CASCADE")
    missing = cli("catalog", "runs", "-c", bound)
    assert missing.code == 6 and missing.document["error"]["code"] == "schema_not_ready"
    assert "tht memory migrate" in missing.document["error"]["message"]
    assert cli("memory", "list", "-c", bound).code == 0  # Memory does not depend on the Catalog
    migrated = cli("memory", "migrate")
    assert migrated.code == 0 and migrated.document["catalog"]["applied"] == [
        "001_catalog",
        "002_binding_connection",
        "003_binding_without_connection",
    ], migrated.document
    assert cli("catalog", "runs", "-c", bound).document == {"items": []}
