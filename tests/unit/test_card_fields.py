"""A card's fields have one definition (tht.memory.model: TEXT_FIELDS, FAMILY_FIELDS,
CONTENT_FIELDS, CARD_FIELDS). The archive's statements, the API's family schemas, the
indexed text, the compact recall answer and the pages' field lists derive from it;
where a copy cannot (a typed model, the Python client), these tests hold it equal to
the definition: a field added to the model and missed in one copy fails here, naming
the copy."""

from __future__ import annotations

import dataclasses
import re
import typing
import uuid
from pathlib import Path

import pytest

from tht import memory_client
from tht.memory import projection_format, recall_answer
from tht.memory.archive.port import IndexedFields
from tht.memory.archive.postgres import queries
from tht.memory.archive.transfer_records import _queries as transfer_queries
from tht.memory.model import (
    CARD_FIELDS,
    CONTENT_FIELDS,
    FAMILIES,
    FAMILY_FIELDS,
    TEXT_FIELDS,
    Card,
    CardInput,
    Dependency,
    text_limit,
)
from tht.memory.recall_service import _indexed_card
from tht.memory.transfer.formats import CSV_COLUMNS, META_KEYS
from tht.web import schemas

STATIC = Path(__file__).resolve().parents[2] / "src" / "tht" / "web"

# What a stored card carries besides its own fields.
CARD_META = (
    "id",
    "workspace",
    "incoming_links",
    "origin",
    "source",
    "revision",
    "created_at",
    "updated_at",
    "index",
    "imported",
)


def _values() -> dict[str, str]:
    # one recognisable text per field, so that a field dropped on the way shows
    return {name: f"the {name} of the card" for name in ("title", *TEXT_FIELDS)}


def test_the_definition_is_consistent() -> None:
    assert set(FAMILY_FIELDS) == set(FAMILIES)
    used = {name for fields in FAMILY_FIELDS.values() for name in fields}
    assert used == set(TEXT_FIELDS)  # each text field is some family's, and only those
    assert CONTENT_FIELDS == ("title", *TEXT_FIELDS, "error_signature", "concepts")
    assert CARD_FIELDS == ("family", *CONTENT_FIELDS, "dependencies", "links")


def test_the_input_model_has_exactly_the_card_fields() -> None:
    assert tuple(CardInput.model_fields) == (*CARD_FIELDS, "revision")


def test_the_stored_card_has_the_card_fields_in_order_and_only_known_meta() -> None:
    fields = tuple(Card.model_fields)
    assert tuple(name for name in fields if name in CARD_FIELDS) == CARD_FIELDS
    assert set(fields) - set(CARD_FIELDS) == set(CARD_META)


def test_the_csv_columns_are_the_card_fields_between_the_meta_keys() -> None:
    assert CSV_COLUMNS == ("id", *CARD_FIELDS, *META_KEYS[1:])


HTTP_MODELS = schemas.FAMILY_MODELS


def test_every_family_has_its_http_schemas() -> None:
    assert set(HTTP_MODELS) == set(FAMILIES)
    for family, (created, updated) in HTTP_MODELS.items():
        name = "".join(part.capitalize() for part in family.split("_"))
        assert (created.__name__, updated.__name__) == (f"{name}In", f"{name}Update")


@pytest.mark.parametrize("family", FAMILIES)
def test_the_http_schemas_of_a_family_are_its_fields(family: str) -> None:
    created, updated = HTTP_MODELS[family]
    expected = {"family", "title", "concepts", "dependencies", "links", *FAMILY_FIELDS[family]}
    if family == "explained_error":
        expected.add("error_signature")
    assert set(created.model_fields) == expected
    assert set(updated.model_fields) == expected | {"revision"}
    for model in (created, updated):
        required = {
            name: field.is_required()
            for name, field in model.model_fields.items()
            if name in TEXT_FIELDS
        }
        assert required == FAMILY_FIELDS[family], model.__name__
        limits = {
            name: model.model_json_schema()["properties"][name] for name in FAMILY_FIELDS[family]
        }
        for name, schema in limits.items():
            text = schema if "anyOf" not in schema else schema["anyOf"][0]
            assert text["maxLength"] == text_limit(name), (model.__name__, name)


def test_the_python_clients_card_reads_every_field() -> None:
    names = {f.name for f in dataclasses.fields(memory_client.Card)}
    assert set(CARD_FIELDS) <= names
    assert names - {"raw"} <= set(CARD_FIELDS) | set(CARD_META)
    document = {
        "id": "mem-00000000-0000-4000-8000-000000000001",
        "workspace": "acme",
        "family": "sql_rule",
        **_values(),
        "error_signature": "the error signature of the card",
        "concepts": ["orders"],
        "origin": "manual",
        "revision": 1,
    }
    card = memory_client.Card.from_json(document)
    for name in ("title", *TEXT_FIELDS, "error_signature"):
        assert getattr(card, name) == document[name], name
    assert card.concepts == ("orders",)


def test_the_indexed_text_and_the_compact_answer_list_every_text_field() -> None:
    assert set(projection_format.INDEXED_TEXTS) == set(TEXT_FIELDS) - {"scope"}  # scope: labelled
    assert sorted(recall_answer.TEXTS) == sorted(TEXT_FIELDS)


def _indexed_row(values: dict[str, str]) -> IndexedFields:
    row = {
        "id": uuid.uuid4(),
        "revision": 1,
        "family": "sql_rule",
        **values,
        "concepts": ["orders"],
    }
    return typing.cast(IndexedFields, row)


@pytest.mark.parametrize(
    ("loaded", "statements"),
    [
        (queries, ("card_get", "cards_rows", "card_insert", "card_update", "indexed_fields")),
        (transfer_queries, ("import_cards_insert",)),
    ],
)
def test_the_archives_statements_name_every_text_column(
    loaded: typing.Callable[[], dict[str, str]], statements: tuple[str, ...]
) -> None:
    for name in statements:
        statement = loaded()[name]
        assert "{texts" not in statement, name
        for field in TEXT_FIELDS:
            assert re.search(rf"\b{field}\b", statement), (name, field)


def test_the_indexed_text_holds_every_text_field_from_a_card_and_from_a_row() -> None:
    values = _values()
    document = {"family": "sql_rule", **values, "concepts": ["orders"]}
    from_card = projection_format.indexed_text(CardInput.model_construct(**document))
    dependency = Dependency(database="dwh", schema="sales", table="orders")
    from_row = projection_format.indexed_text(_indexed_card(_indexed_row(values), (dependency,)))
    for name, value in values.items():
        assert value in from_card, name
        assert value in from_row, name


def _script(name: str) -> str:
    return (STATIC / "static" / name).read_text()


def test_the_pages_are_given_every_family_field() -> None:
    fields = schemas.PAGE_CARD_FIELDS
    families = {
        family: {name: required for name, required in entries}
        for family, entries in fields["families"]
    }
    assert families == FAMILY_FIELDS
    assert [family for family, _ in fields["families"]] == list(FAMILIES)
    assert sorted(fields["texts"]) == sorted(TEXT_FIELDS)
    assert fields["limits"] == {name: text_limit(name) for name in TEXT_FIELDS}
    base = (STATIC / "templates" / "base.html").read_text()
    assert '<script type="application/json" id="card-fields">{{ card_fields | tojson }}' in base
    template = (STATIC / "templates" / "memory.html").read_text()
    assert "{% for name in card_fields.texts %}" in template


@pytest.mark.parametrize("name", ["app.js", "review.js"])
def test_the_pages_scripts_read_the_fields_from_the_page(name: str) -> None:
    script = _script(name)
    assert 'JSON.parse(document.getElementById("card-fields").textContent)' in script
    # the words they keep for fields name only fields of the model
    words = script[script.index("var CARD_FIELDS") : script.index("\n  function ")]
    named = set(re.findall(r"\b(\w+): \[?\"", words))
    assert named, name
    assert named - {"label", "hint", *FAMILIES} <= set(TEXT_FIELDS), name


def test_the_admin_lists_text_search_covers_every_text_field() -> None:
    """The admin list's text search reads the archive's generated ``search_vector``,
    which SQL cannot derive from the model: a new text field needs a migration that
    defines the column again. The schema snapshot (held equal to the migrations by
    test_migrations) is where the column's expression is read."""
    snapshot = (
        Path(__file__).resolve().parents[1] / "integration" / "schema_snapshot.txt"
    ).read_text()
    start = snapshot.index("cards | search_vector |")
    expression = snapshot[start : snapshot.index("\ncards | ", start + 1)]
    searched = set(re.findall(r"COALESCE\((\w+), ''::text\)", expression))
    assert searched == {"title", *TEXT_FIELDS}
