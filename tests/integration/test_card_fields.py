"""Every field of every family (tht.memory.model.FAMILY_FIELDS) survives each way a
card travels: written and read back through the archive, exported and imported as
JSON lines and as CSV. The cards are built from the model's definition, so a field
added to a family and dropped by one of these ways fails here."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest

from tht.memory.model import FAMILIES, FAMILY_FIELDS


def _full_card(family: str) -> dict[str, Any]:
    document: dict[str, Any] = {
        "family": family,
        "title": f"The {family} with every field",
        "concepts": [f"{family} concept"],
        "dependencies": [{"database": "dwh", "schema": "sales", "table": "orders"}],
    }
    for name in FAMILY_FIELDS[family]:
        document[name] = (
            f"SELECT '{family}' AS {name}" if name == "sql" else f"The {name} of a {family}."
        )
    if family == "explained_error":
        document["error_signature"] = 'column "totl" does not exist'
    return document


def _fields(document: dict[str, Any]) -> dict[str, Any]:
    return {
        key: document.get(key)
        for key in (
            "family",
            "title",
            *(name for fields in FAMILY_FIELDS.values() for name in fields),
            "error_signature",
            "concepts",
            "dependencies",
        )
    }


@pytest.fixture
def export(monkeypatch, capsys):
    from tht.cli.main import main

    def run(config: str, fmt: str) -> list[str]:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
        code = main(["memory", "export", "-c", config, "--format", fmt])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        return [line for line in captured.out.splitlines() if line.strip()]

    return run


def test_every_field_of_every_family_survives_the_archive_and_the_transfer(
    cli, runtime_file, export, tmp_path
):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme")
    written = {}
    for family in FAMILIES:
        document = _full_card(family)
        path = tmp_path / f"{family}.json"
        path.write_text(json.dumps(document))
        created = cli("memory", "create", "-c", config, "--data", str(path))
        assert created.code == 0, created.document
        shown = cli("memory", "show", created.document["card"]["id"], "-c", config)
        expected = _fields({**document, "dependencies": [{**document["dependencies"][0]}]})
        expected["dependencies"][0]["column"] = None
        assert _fields(shown.document) == expected, family
        written[document["title"]] = expected

    for fmt, suffix in (("jsonl", "jsonl"), ("csv", "csv")):
        path = tmp_path / f"acme.{suffix}"
        path.write_text("\n".join(export(config, fmt)) + "\n")
        workspace = f"copy-{fmt}"
        assert cli("workspace", "create", workspace, "--language", "en").code == 0
        copy = runtime_file(workspace)
        imported = cli("memory", "import", str(path), "-c", copy)
        assert imported.code == 0 and imported.document["created"] == len(FAMILIES), (
            imported.document
        )
        copied = {d["title"]: _fields(d) for d in map(json.loads, export(copy, "jsonl"))}
        assert copied == written, fmt
