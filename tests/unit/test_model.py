"""Card validation rules: pure, no I/O."""

from __future__ import annotations

import pytest

from tests.factories import BASE, card_document
from tht.errors import Conflict, InvalidInput
from tht.memory.archive.postgres import id_prefix, text_search_terms
from tht.memory.model import (
    FAMILY_FIELDS,
    card_id_to_uuid,
    parse_card_input,
    parse_list_query,
)


@pytest.mark.parametrize("family", sorted(BASE))
def test_each_required_field_is_required(family):
    for field, required in FAMILY_FIELDS[family].items():
        if required:
            with pytest.raises(InvalidInput, match=f"requires {field}"):
                parse_card_input(card_document(family, **{field: None}))


def test_text_is_trimmed_and_concepts_deduplicated():
    data = parse_card_input(
        card_document(title="  Title  ", concepts=["a", "b", "a"], rationale=None)
    )
    assert data.title == "Title" and data.concepts == ["a", "b"] and data.rationale is None
    for blank in ("", "   ", "\u3000\n"):
        with pytest.raises(InvalidInput, match="only white space"):
            parse_card_input(card_document(rationale=blank))


def test_control_characters_are_refused():
    with pytest.raises(InvalidInput, match="control characters"):
        parse_card_input(card_document(content="bad\x00byte"))


def test_duplicate_link_targets_are_refused():
    target = "mem-00000000-0000-4000-8000-000000000001"
    with pytest.raises(Conflict, match="more than one link"):
        parse_card_input(
            card_document(
                links=[{"target": target, "meaning": "a"}, {"target": target, "meaning": "b"}]
            )
        )


def test_card_ids():
    assert (
        str(card_id_to_uuid("MEM-00000000-0000-4000-8000-000000000001"))
        == "00000000-0000-4000-8000-000000000001"
    )
    for bad in (
        "mem-1",
        "00000000-0000-4000-8000-000000000001",
        "",
        "mem-zzzzzzzz-0000-4000-8000-000000000001",
    ):
        with pytest.raises(InvalidInput):
            card_id_to_uuid(bad)


def test_update_accepts_what_show_prints_but_checks_identity():
    shown = {
        **card_document(),
        "id": "mem-00000000-0000-4000-8000-000000000001",
        "workspace": "acme",
        "origin": "manual",
        "source": None,
        "revision": 3,
        "created_at": "x",
        "updated_at": "y",
        "incoming_links": [],
        "links": [
            {
                "target": "mem-00000000-0000-4000-8000-000000000002",
                "meaning": "m",
                "target_title": "T",
            }
        ],
    }
    data = parse_card_input(
        shown, card_id="mem-00000000-0000-4000-8000-000000000001", workspace="acme"
    )
    assert data.revision == 3 and data.links[0].meaning == "m"
    with pytest.raises(InvalidInput, match="not mem-"):
        parse_card_input(
            shown, card_id="mem-00000000-0000-4000-8000-000000000009", workspace="acme"
        )
    with pytest.raises(InvalidInput, match="workspace"):
        parse_card_input(
            shown, card_id="mem-00000000-0000-4000-8000-000000000001", workspace="other"
        )


def test_list_query_validation():
    assert parse_list_query({"family": "sql_rule"}).family == ["sql_rule"]
    assert parse_list_query(None).page_size == 20
    for bad, message in (
        ({"page_size": 101}, "page_size"),
        ({"page": 0}, "page"),
        ({"family": "x"}, "family"),
        ({"updated_from": "yesterday"}, "updated_from"),
        ({"colour": 1}, "unknown field"),
    ):
        with pytest.raises(InvalidInput, match=message):
            parse_list_query(bad)


def test_text_search_terms_are_safe_prefix_queries():
    assert text_search_terms("order's total!") == "'order':* & 's':* & 'total':*"
    assert text_search_terms("  ...  ") is None
    assert text_search_terms("'); DROP TABLE x; --") == "'DROP':* & 'TABLE':* & 'x':*"


def test_id_prefix_detection():
    assert id_prefix("mem-0a1b") == "0a1b"
    assert id_prefix("0a1b2c3d-11") == "0a1b2c3d-11"
    assert id_prefix("bad") is None and id_prefix("face") is None  # short hex words are words


@pytest.mark.parametrize("title", ["\u200b", "\ufeff", "\u0301", " \u200b\u200d\u2060 ", "\u00ad"])
def test_a_title_needs_a_visible_character(title):
    with pytest.raises(InvalidInput, match="only white space"):
        parse_card_input(card_document(title=title))


@pytest.mark.parametrize(
    "title",
    [
        "Invoice \u202eexe.pdf",
        "Control \u009b sequence",
        "Isolate \u2066x\u2069",
        "Half \ud800 pair",
        "Bell \x07",
    ],
)
def test_text_holds_no_control_characters(title):
    with pytest.raises(InvalidInput, match="control characters"):
        parse_card_input(card_document(title=title))
    with pytest.raises(InvalidInput, match="control characters"):
        parse_card_input(card_document(content=f"content: {title}"))


@pytest.mark.parametrize(
    "title", ["Café", "e\u0301", "日本語", "صحيح\u200f", "👩\u200d💻 emoji", "x\ty"]
)
def test_visible_text_in_any_script_is_accepted(title):
    assert parse_card_input(card_document(title=title)).title == title.strip()


@pytest.mark.parametrize("revision", [True, False])
def test_a_boolean_is_not_a_revision(revision):
    with pytest.raises(InvalidInput, match="revision"):
        parse_card_input(card_document(revision=revision))
    assert parse_card_input(card_document(revision=2)).revision == 2


def test_the_api_pattern_agrees_with_the_model():
    import re

    from tht.memory.model import TEXT_PATTERN

    for text in ["\u200b", "\ufeff", "\u0301", "a\u202eb", "a\u009bb", "\u00a0", "\u3000"]:
        assert not re.match(TEXT_PATTERN, text), repr(text)
    for text in ["Café", "e\u0301", "日本語", "x\ty"]:
        assert re.match(TEXT_PATTERN, text), repr(text)
