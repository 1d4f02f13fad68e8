"""A card's fields have one definition (tht.memory.model: TEXT_FIELDS, FAMILY_FIELDS,
CONTENT_FIELDS, CARD_FIELDS). Where a copy cannot derive from it (a typed model, a
protocol, a row type, a page's script), these tests hold the copy equal to it: a field
added to the model and missed in one copy fails here, naming the copy."""

from __future__ import annotations

import dataclasses
import re
import typing
import uuid
from pathlib import Path

import pytest
from pydantic import BaseModel

from tht import memory_client
from tht.memory import projection
from tht.memory.archive.port import IndexedFields
from tht.memory.model import (
    CARD_FIELDS,
    CONTENT_FIELDS,
    FAMILIES,
    FAMILY_FIELDS,
    TEXT_FIELDS,
    Card,
    CardInput,
    Dependency,
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


HTTP_MODELS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "domain_clarification": (schemas.DomainClarificationIn, schemas.DomainClarificationUpdate),
    "sql_rule": (schemas.SqlRuleIn, schemas.SqlRuleUpdate),
    "solved_question": (schemas.SolvedQuestionIn, schemas.SolvedQuestionUpdate),
    "explained_error": (schemas.ExplainedErrorIn, schemas.ExplainedErrorUpdate),
}


def test_every_family_has_its_http_schemas() -> None:
    assert set(HTTP_MODELS) == set(FAMILIES)


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


def _members(protocol: type) -> set[str]:
    return {
        name
        for klass in protocol.__mro__
        if klass is not object and klass is not typing.Protocol and klass is not typing.Generic
        for name, value in vars(klass).items()
        if isinstance(value, property)
    }


def test_the_indexed_card_reads_every_text_field() -> None:
    assert _members(projection.IndexedCard) == {
        "title",
        *TEXT_FIELDS,
        "concepts",
        "dependencies",
    }


def _indexed_row(values: dict[str, str]) -> IndexedFields:
    row = {
        "id": uuid.uuid4(),
        "revision": 1,
        "family": "sql_rule",
        **values,
        "concepts": ["orders"],
    }
    return typing.cast(IndexedFields, row)


def test_the_archives_indexed_row_holds_every_indexed_field() -> None:
    assert set(IndexedFields.__annotations__) == {
        "id",
        "revision",
        "family",
        "title",
        *TEXT_FIELDS,
        "concepts",
    }


def test_the_indexed_text_holds_every_text_field_from_a_card_and_from_a_row() -> None:
    values = _values()
    document = {"family": "sql_rule", **values, "concepts": ["orders"]}
    from_card = projection.indexed_text(CardInput.model_construct(**document))
    dependency = Dependency(database="dwh", schema="sales", table="orders")
    from_row = projection.indexed_text(_indexed_card(_indexed_row(values), (dependency,)))
    for name, value in values.items():
        assert value in from_card, name
        assert value in from_row, name


def _script(name: str) -> str:
    return (STATIC / "static" / name).read_text()


def test_the_administration_page_knows_every_family_field() -> None:
    script = _script("app.js")
    families = script[script.index("var FAMILIES = {") : script.index("var TEXT_FIELDS")]
    found: dict[str, dict[str, bool]] = {}
    for block in re.finditer(r"(\w+): \{(.*?)\]\s*\]", families, re.S):
        entries = re.findall(r'\["(\w+)", "[^"]*", (true|false)', block.group(2))
        found[block.group(1)] = {name: required == "true" for name, required in entries}
    assert found == FAMILY_FIELDS
    listed = re.search(r"var TEXT_FIELDS = \[([^\]]*)\]", script)
    assert listed is not None
    assert set(re.findall(r'"(\w+)"', listed.group(1))) == set(TEXT_FIELDS)
    template = (STATIC / "templates" / "memory.html").read_text()
    loop = re.search(r"\{% for name in \[([^\]]*)\] %\}", template)
    assert loop is not None
    assert set(re.findall(r'"(\w+)"', loop.group(1))) == set(TEXT_FIELDS)


def test_the_review_page_knows_every_family_field() -> None:
    script = _script("review.js")
    block = script[script.index("var FIELDS = {") : script.index("var LABELS")]
    found = {
        family: set(re.findall(r'\["(\w+)", "', fields))
        for family, fields in re.findall(r"(\w+): \[(.*?)\]\],?", block, re.S)
    }
    expected = {family: set(fields) for family, fields in FAMILY_FIELDS.items()}
    expected["solved_question"].discard("sql")  # the approved SQL shows read-only, apart
    expected["explained_error"].add("error_signature")
    assert found == expected
