"""Reading an import file as a stream of raw records, each with the line it starts on.

Nothing here holds more than one record in memory: lines are read with a bound
(``limit`` bytes, the per-line limit), a longer line is skipped to its end and
reported, and a JSON array or object of records (BIRD's dev.json, a Vanna or WrenAI
export) is cut into its elements by a scanner that never parses the whole document.
Every problem becomes a record with an ``error`` and its line number: the caller
decides whether one bad line stops the import. Pure functions over a binary stream.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

CHUNK = 1 << 20


@dataclass
class RawRecord:
    """One record of the file: a JSON object (``document``) or why it is not one.
    ``label`` names the array a record came from in a JSON object of arrays (WrenAI's
    ``sql_pairs`` / ``instructions``)."""

    line: int
    document: dict[str, Any] | None = None
    error: str | None = None
    label: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def iter_text_lines(stream: IO[bytes], limit: int) -> Iterator[tuple[int, str | None, str | None]]:
    """(line number, text, error) for each physical line; the text keeps its newline.
    A line over ``limit`` bytes or not UTF-8 gives (number, None, error)."""
    number = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        number += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            while True:  # skip the rest of the line without holding it
                rest = stream.readline(CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
            yield number, None, f"line {number} is longer than {limit} bytes (the per-line limit)"
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield (
                number,
                None,
                f"line {number} is not UTF-8 text (byte {exc.start + 1} of the line)",
            )
            continue
        if number == 1:
            text = text.removeprefix("\ufeff")
        yield number, text, None


def iter_json_lines(stream: IO[bytes], limit: int) -> Iterator[RawRecord]:
    """JSON Lines: one object a line; blank lines are ignored."""
    for number, text, error in iter_text_lines(stream, limit):
        if error is not None:
            yield RawRecord(number, error=error)
        elif text is not None and text.strip():
            # without its line break: an unterminated record is this line's error
            yield _object(number, text.rstrip("\r\n"))


def _object(line: int, text: str | bytes, label: str | None = None) -> RawRecord:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        at = line + exc.lineno - 1
        return RawRecord(at, error=f"line {at} is not JSON: {exc.msg} (column {exc.colno})")
    except UnicodeDecodeError as exc:
        return RawRecord(line, error=f"the record on line {line} is not UTF-8 text ({exc.reason})")
    except RecursionError:
        return RawRecord(line, error=nested_too_deeply(line))
    if not isinstance(document, dict):
        return RawRecord(line, error=f"line {line} is not a JSON object")
    return RawRecord(line, document, label=label)


def iter_csv_rows(
    stream: IO[bytes], limit: int, *, allow_index_column: bool = False
) -> Iterator[RawRecord]:
    """A CSV file with a header: each row as {column: cell} (empty cells omitted).
    The first record is the header; a row whose cells do not match it is an error."""
    csv.field_size_limit(max(limit, csv.field_size_limit()))
    bad: dict[int, str] = {}
    position = [0]

    def lines() -> Iterator[str]:
        for number, text, error in iter_text_lines(stream, limit):
            position[0] = number
            if error is not None:
                bad[number] = error
                yield "\n"
            else:
                yield text or "\n"

    reader = csv.reader(lines(), strict=True)
    header: list[str] | None = None
    end = 0
    while True:
        start = end + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            end = position[0]
            yield RawRecord(start, error=f"line {start} is not CSV: {exc}")
            continue
        end = position[0]
        errors = [bad[n] for n in range(start, end + 1) if n in bad]
        if header is None:
            if errors:
                yield RawRecord(start, error=errors[0], details={"header": True})
                return
            header = [cell.strip() for cell in row]
            if allow_index_column and header and header[0] in ("", "index"):
                header[0] = ""  # pandas' to_csv writes the row index first, unnamed
            duplicated = sorted({h for h in header if header.count(h) > 1 and h})
            if duplicated:
                yield RawRecord(
                    start,
                    error=f"the header names {', '.join(duplicated)} more than once",
                    details={"header": True},
                )
                return
            yield RawRecord(start, {"__header__": header})
            continue
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if errors:
            yield RawRecord(start, error=errors[0])
        elif len(row) != len(header):
            missing = header[len(row) :]
            yield RawRecord(
                start,
                error=(
                    f"line {start} has {len(row)} cells, the header names {len(header)}"
                    + (f": missing {', '.join(missing)}" if missing else "")
                ),
                details={"missing_columns": missing} if missing else {},
            )
        else:
            yield RawRecord(
                start,
                {name: cell for name, cell in zip(header, row, strict=True) if name and cell != ""},
            )


def nested_too_deeply(line: int) -> str:
    """Python's JSON parser recurses once per nesting level: past about a thousand
    levels it raises RecursionError, which no card needs."""
    return f"the record on line {line} is JSON nested too deeply to read"


_LEADING_BLANKS = b" \t\r\n\xef\xbb\xbf"  # and a UTF-8 byte order mark
_STRUCTURE = re.compile(rb'["\\\[\]{}\n]')
_IN_STRING = re.compile(rb'["\\\n]')


_OBJECT, _ARRAY = 0x7B, 0x5B
# Where records are: the elements of a top-level array, of an array that is a value of
# the top-level object (a WrenAI export: {"sql_pairs": [...], "instructions": [...]}),
# or of an array one object deeper (a GraphQL answer: {"data": {"sqlPairs": [...]}}).
_RECORD_LEVELS = ([_ARRAY], [_OBJECT, _ARRAY], [_OBJECT, _OBJECT, _ARRAY])
# The objects whose keys label the arrays of records they hold.
_SECTION_LEVELS = ([_OBJECT], [_OBJECT, _OBJECT])


class _Scanner:
    """Cuts a JSON array of objects, or an object whose values are arrays of objects,
    into the objects' bytes, tracking nesting, strings and escapes byte by byte (JSON's
    structural characters are ASCII and never occur inside a UTF-8 sequence)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stack: list[int] = []
        self.in_string = False
        self.skip_next = False
        self.line = 1
        self.string_start: int | None = None  # a key being read at the top of an object
        self.key_parts: list[bytes] = []
        self.label: str | None = None
        self.element: list[bytes] | None = None
        self.element_size = 0
        self.element_line = 0
        self.element_label: str | None = None
        self.element_start = 0
        self.started = False
        self.closed = False  # the top-level value ended
        self.fatal = False  # the structure is broken: nothing after it can be read
        self.foreign_line = 0  # the last line a non-object element was reported on

    def _record_level(self) -> bool:
        return self.stack in _RECORD_LEVELS

    def feed(self, chunk: bytes) -> Iterator[RawRecord]:
        if self.element is not None:
            self.element_start = 0
        if not self.started:
            if not chunk.lstrip(_LEADING_BLANKS):
                return
            if (refused := self._start(chunk)) is not None:
                yield refused
                return
        yield from self._scan(chunk)
        if self.element is not None and not self.fatal:
            self._keep(chunk[self.element_start :])

    def _scan(self, chunk: bytes) -> Iterator[RawRecord]:
        """The records that end in ``chunk``; stops at an error that breaks the
        structure (``fatal``)."""
        pos = 0
        while pos < len(chunk):
            if self.skip_next:
                self.skip_next = False
                pos += 1
                continue
            match = (_IN_STRING if self.in_string else _STRUCTURE).search(chunk, pos)
            if self._between_records():
                yield from self._between(chunk, pos, match)
            if match is None:
                break
            char = chunk[match.start()]
            pos = match.end()
            if char == 0x0A:
                self.line += 1
            elif char == 0x5C:  # a backslash: the next byte is escaped
                self.skip_next = True
            elif char == 0x22:
                self._quote(chunk, match.start())
            elif char in (0x5B, 0x7B):  # [ {
                if (refused := self._open(char, match.start())) is not None:
                    yield refused
                    return
            elif char in (0x5D, 0x7D):  # ] }
                if (found := self._close(chunk, char, match.end())) is not None:
                    yield found
                    if self.fatal:
                        return

    def _start(self, chunk: bytes) -> RawRecord | None:
        """The first bytes that are not blank: a JSON array or object, else the error
        that refuses the file."""
        self.started = True
        if chunk.lstrip(_LEADING_BLANKS)[:1] not in (b"[", b"{"):
            self.fatal = True
            return RawRecord(self.line, error="the file is not a JSON array or object")
        return None

    def _open(self, char: int, at: int) -> RawRecord | None:
        """A ``[`` or ``{`` at ``at``: a record starts, or a section's array; the error
        when it starts a second document (the structure is then broken)."""
        if not self.stack and self.closed:
            self.fatal = True
            return RawRecord(
                self.line,
                error=f"line {self.line} starts a second JSON document: one array or"
                " object is expected (JSON Lines? then pass the jsonl layout)",
            )
        if char == 0x7B and self.element is None and self._record_level():
            self.element = []
            self.element_size = 0
            self.element_line = self.line
            self.element_label = self.label if self.stack[0] == _OBJECT else None
            self.element_start = at
        if char == _ARRAY and self.element is None and self.stack in _SECTION_LEVELS:
            self.label = b"".join(self.key_parts).decode("utf-8", "replace")
        self.stack.append(char)
        return None

    def _close(self, chunk: bytes, char: int, end: int) -> RawRecord | None:
        """A ``]`` or ``}`` ending at ``end``: the record it closes, or the error when
        it closes nothing open (the structure is then broken)."""
        if not self.stack or self.stack[-1] != (0x5B if char == 0x5D else 0x7B):
            self.fatal = True
            return RawRecord(self.line, error=f"line {self.line}: unbalanced JSON brackets")
        self.stack.pop()
        self.closed = not self.stack
        if char == 0x7D and self.element is not None and self._record_level():
            return self._finish(chunk, end)
        return None

    def _between_records(self) -> bool:
        return not self.in_string and self.element is None and self._record_level()

    def _between(
        self, chunk: bytes, pos: int, match: re.Match[bytes] | None
    ) -> Iterator[RawRecord]:
        """What is between records, from ``pos`` to the next structural character
        (``match``): commas and blanks, else an element that is not a record."""
        end = len(chunk) if match is None else match.start()
        opens_other = match is not None and chunk[match.start()] in (0x22, 0x5B)
        if opens_other or chunk[pos:end].strip(b" \t\r\n,"):
            yield from self._foreign()

    def _foreign(self) -> Iterator[RawRecord]:
        """A string, number, literal or array where a record (an object) belongs: an
        error on its line, never a silent skip (once a line, however it is chunked)."""
        if self.foreign_line != self.line:
            self.foreign_line = self.line
            yield RawRecord(
                self.line,
                error=f"line {self.line}: an element is not a JSON object (a card)",
                label=self.label if self.stack[0] == _OBJECT else None,
                details={"not_an_object": True},
            )

    def _quote(self, chunk: bytes, at: int) -> None:
        if not self.in_string:
            self.in_string = True
            if self.element is None and self.stack in _SECTION_LEVELS:
                self.string_start = at + 1
                self.key_parts = []
            return
        self.in_string = False
        if self.string_start is not None:
            self.key_parts.append(chunk[self.string_start : at])
            self.string_start = None

    def _keep(self, part: bytes) -> None:
        assert self.element is not None
        self.element_size += len(part)
        if self.element_size <= self.limit:
            self.element.append(part)

    def _finish(self, chunk: bytes, end: int) -> RawRecord:
        self._keep(chunk[self.element_start : end])
        parts, self.element = self.element, None
        line = self.element_line
        if self.element_size > self.limit:
            return RawRecord(
                line, error=f"the record on line {line} is longer than {self.limit} bytes"
            )
        return _object(line, b"".join(parts or []), self.element_label)

    def end_of_chunk(self, chunk: bytes) -> None:
        if self.in_string and self.string_start is not None:
            self.key_parts.append(chunk[self.string_start :])
            self.string_start = 0

    def finish(self) -> Iterator[RawRecord]:
        if self.fatal:
            return
        if not self.started:
            yield RawRecord(1, error="the file is empty")
        elif self.stack or self.in_string:
            yield RawRecord(self.line, error="the file ends inside a JSON value (is it truncated?)")


def iter_json_records(stream: IO[bytes], limit: int) -> Iterator[RawRecord]:
    """The objects of a JSON array, or of the arrays an object holds (labelled with
    their key), each with the line it starts on."""
    scanner = _Scanner(limit)
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        yield from scanner.feed(chunk)
        if scanner.fatal:
            return
        scanner.end_of_chunk(chunk)
    yield from scanner.finish()
