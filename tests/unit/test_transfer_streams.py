"""The import readers stream: a huge line or record is skipped to its end and
reported with its line number, with memory bounded by the per-line limit, not by the
file; JSON arrays are cut into records wherever the chunks fall."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest

from tht.errors import InvalidInput
from tht.memory.transfer import streams
from tht.memory.transfer.formats import detect_format


class _Generated(io.RawIOBase):
    """A file that exists only as it is read: ``head``, ``size`` bytes of ``fill``, ``tail``."""

    def __init__(self, head: bytes, size: int, fill: bytes, tail: bytes) -> None:
        self.parts = [head, None, tail]
        self.left = size
        self.fill = fill

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self.parts:
            part = self.parts[0]
            if part is None:
                if self.left == 0:
                    self.parts.pop(0)
                    continue
                n = min(len(buffer), self.left)
                buffer[:n] = self.fill * n
                self.left -= n
                return n
            if not part:
                self.parts.pop(0)
                continue
            n = min(len(buffer), len(part))
            buffer[:n] = part[:n]
            self.parts[0] = part[n:]
            return n
        return 0


SIZE = 64 * 1024 * 1024  # far past the limit; the readers must never hold it
LIMIT = 1024 * 1024


def _peak(records_of) -> tuple[list, int]:
    tracemalloc.start()
    try:
        records = list(records_of())
        return records, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_json_line_is_reported_without_being_held():
    stream = io.BufferedReader(
        _Generated(b'{"a": 1}\n{"title": "', SIZE, b"x", b'"}\n{"b": 2}\n'), LIMIT + 1
    )
    records, peak = _peak(lambda: streams.iter_json_lines(stream, LIMIT))
    assert [(r.line, r.document) for r in records] == [(1, {"a": 1}), (2, None), (3, {"b": 2})]
    assert "longer than" in records[1].error and "line 2" in records[1].error
    assert peak < 8 * LIMIT


def test_a_huge_record_of_a_json_array_is_reported_without_being_held():
    stream = io.BufferedReader(
        _Generated(b'[\n{"a": 1},\n{"title": "', SIZE, b"y", b'"},\n{"b": 2}\n]\n'), LIMIT + 1
    )
    records, peak = _peak(lambda: streams.iter_json_records(stream, LIMIT))
    assert [(r.line, r.document) for r in records] == [(2, {"a": 1}), (3, None), (4, {"b": 2})]
    assert "longer than" in records[1].error
    assert peak < 8 * LIMIT


@pytest.mark.parametrize("chunk", [1, 2, 5, 64, 1 << 20])
def test_json_arrays_and_objects_of_arrays_are_cut_wherever_the_chunks_fall(monkeypatch, chunk):
    monkeypatch.setattr(streams, "CHUNK", chunk)
    rows = [{"q": 'a "quoted" [bracket] {brace} \\ é', "n": [1, {"x": "}"}]}, {"q": "b"}]
    text = json.dumps(rows, indent=2)
    second = 1 + text[: text.index('{\n    "q": "b"')].count("\n")
    found = list(streams.iter_json_records(io.BytesIO(text.encode()), LIMIT))
    assert [(r.line, r.document) for r in found] == [(2, rows[0]), (second, rows[1])]
    sections = {"sql_pairs": [{"id": 1}], "instructions": [{"id": 2}, {"id": 3}]}
    found = list(streams.iter_json_records(io.BytesIO(json.dumps(sections).encode()), LIMIT))
    assert [(r.label, r.document) for r in found] == [
        ("sql_pairs", {"id": 1}),
        ("instructions", {"id": 2}),
        ("instructions", {"id": 3}),
    ]


def test_broken_json_documents_name_where():
    truncated = list(streams.iter_json_records(io.BytesIO(b'[{"a": 1},\n{"b": '), LIMIT))
    assert truncated[-1].error.startswith("the file ends inside") and truncated[-1].line == 2
    two = list(streams.iter_json_records(io.BytesIO(b'{"a": 1}\n{"b": 2}\n'), LIMIT))
    assert "second JSON document" in two[-1].error and two[-1].line == 2
    bad = list(streams.iter_json_records(io.BytesIO(b'[\n{"a": "\xff"}]'), LIMIT))
    assert bad[0].line == 2 and "UTF-8" in bad[0].error


def test_an_unterminated_json_line_is_reported_on_its_own_line():
    for ending in (b"\n", b"\r\n"):
        for last in (b"", b'{"c": 3}' + ending):  # the bad record last, or not
            text = b'{"a": 1}' + ending + b'{"b": "x' + ending + last
            found = list(streams.iter_json_lines(io.BytesIO(text), LIMIT))
            assert found[0].document == {"a": 1} and found[1].line == 2, found
            assert (
                found[1].error == "line 2 is not JSON: Unterminated string starting at (column 7)"
            )
            assert [r.document for r in found[2:]] == ([{"c": 3}] if last else [])


def test_the_format_comes_from_the_extension_unless_the_content_disagrees():
    assert detect_format("cards.jsonl", b'{"family": "sql_rule"}', None) == "jsonl"
    assert detect_format("cards.csv", b"family,title\n", None) == "csv"
    assert detect_format("dev.json", b"[]", "bird") == "bird"
    for name, head, looks in (
        ("dev.json", b'[{"db_id": "x", "SQL": "s"}]', "bird"),
        ("export.csv", b",id,question,content,training_data_type\n", "vanna"),
        ("k.jsonl", b'{"sql_pairs": []}', "wrenai"),
        ("cards.txt", b"{}", None),
    ):
        with pytest.raises(InvalidInput) as refused:
            detect_format(name, head, None)
        assert "--format" in refused.value.message
        assert refused.value.details["looks_like"] == looks


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
def test_an_array_element_that_is_not_an_object_is_an_error_on_its_line(monkeypatch, chunk):
    monkeypatch.setattr(streams, "CHUNK", chunk)
    text = b'[\n{"a": 1},\n42,\n"a card?",\n[{"b": 2}],\ntrue, null,\n{"c": 3}\n]\n'
    found = list(streams.iter_json_records(io.BytesIO(text), LIMIT))
    assert [(r.line, r.document) for r in found] == [
        (2, {"a": 1}),
        (3, None),
        (4, None),
        (5, None),
        (6, None),
        (7, {"c": 3}),
    ]
    assert all("not a JSON object" in r.error for r in found if r.document is None)
    sections = b'{"sql_pairs": [{"id": 1}, 7], "version": 2}'
    found = list(streams.iter_json_records(io.BytesIO(sections), LIMIT))
    # the element names its section: a WrenAI file ignores the sections it does not read
    assert [(r.label, r.document) for r in found] == [
        ("sql_pairs", {"id": 1}),
        ("sql_pairs", None),
    ]
