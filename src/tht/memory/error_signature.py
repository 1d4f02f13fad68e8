"""The normalized signature of a database error, for exact matching of explained errors.

The signature keeps what identifies the error (its message and the names it mentions)
and drops what changes between occurrences: the client's prefixes (``psql:file:3:``,
``ERROR:``), the SQLSTATE, positions (``at character 15``, ``LINE 1: ...`` and the
caret line), quoted literal values and numbers. Case and white space are folded.
The same function normalizes a card's signature when it is saved and the text given
to ``tht memory rules --error``, so equal errors meet in one indexed equality.
"""

from __future__ import annotations

import re

MAX_SIGNATURE = 2_000

_PREFIX = re.compile(
    r"^\s*(?:psql:[^:]*:\d+:\s*|(?:error|fatal|panic|warning)\s*:\s*|\[?sqlstate\s*[0-9a-z]{5}\]?\s*:?\s*"
    r"|(?:[0-9][0-9a-z]{4}|xx[0-9]{3})\s*:\s*(?=\D))",
    re.IGNORECASE,
)
_DETAIL_LINE = re.compile(
    r"^\s*(line \d+:|hint:|detail:|context:|where:|query:|position:|\^)", re.IGNORECASE
)
_POSITION = re.compile(
    r"\s*(?:at|near)\s+character\s+\d+|\s*\(sqlstate\s*[0-9a-z]{5}\)|\s*at position\s+\d+",
    re.IGNORECASE,
)
_LITERAL = re.compile(r"'(?:[^']|'')*'")
_NUMBER = re.compile(r"(?<![\w\"])[-+]?\d+(?:\.\d+)?(?![\w\"])")
_SPACE = re.compile(r"\s+")


def normalize_error(text: str | None) -> str | None:
    """The signature of an error text, or None when nothing identifying is left."""
    if not text:
        return None
    lines = [
        line for line in text.strip().splitlines() if line.strip() and not _DETAIL_LINE.match(line)
    ]
    if not lines:
        return None
    message = lines[0]
    while True:
        stripped = _PREFIX.sub("", message, count=1)
        if stripped == message:
            break
        message = stripped
    message = _POSITION.sub("", message)
    message = _LITERAL.sub("?", message)
    message = _NUMBER.sub("?", message)
    message = _SPACE.sub(" ", message).strip().rstrip(".;").strip().lower()
    if not message:
        return None
    return message[:MAX_SIGNATURE]
