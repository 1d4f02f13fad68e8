"""Whether an imported record's SQL is SQL: parsed by sqlglot, a real SQL parser.

Peers' files hold text that is not SQL where SQL belongs: a Vanna training set answers
a question with "Apologies, but I'm unable to assist.", or with prose around a fenced
query; saved as a solved question, that text would become approved SQL. A statement
passes when one of the dialects below parses it into queries or data changes (a bare
expression such as ``hello world`` parses as a column alias: not a statement, refused).
The workspace's warehouse dialect is not known here, so a statement that parses in any
of them passes; a refusal quotes the generic dialect's error, its line and column.

sqlglot is imported on the first check (about 0.1 s): only an import of a peer's file
pays for it, no other command.
"""

from __future__ import annotations

import logging
import re
from functools import cache
from typing import Any

# The generic dialect first, then the warehouses' own syntaxes (MySQL's backticks,
# T-SQL's brackets, ...): the first that parses the text decides.
DIALECTS: tuple[str | None, ...] = (
    None,
    "mysql",
    "postgres",
    "sqlite",
    "bigquery",
    "snowflake",
    "tsql",
    "duckdb",
    "spark",
    "oracle",
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TOKEN = re.compile(r"<Token token_type: [^,]*, text: (.*?), line: .*?>")


@cache
def _sqlglot() -> Any:
    import sqlglot

    # the parser logs a warning for each statement it keeps as an opaque command:
    # the refusal below says what matters, on the record's line
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    return sqlglot


def sql_problem(text: str) -> str | None:
    """None when ``text`` is one or more SQL statements (queries or data changes),
    else why not, in a sentence."""
    if not text.strip():
        return "is empty"
    sqlglot = _sqlglot()
    first_error: str | None = None
    for dialect in DIALECTS:
        try:
            statements = [s for s in sqlglot.parse(text, read=dialect) if s is not None]
        except sqlglot.errors.SqlglotError as exc:
            if first_error is None:
                first_error = _described(exc)
            continue
        if not statements:
            return "holds no SQL statement"
        kinds = [s for s in statements if not isinstance(s, sqlglot.exp.Query | sqlglot.exp.DML)]
        if not kinds:
            return None
        if first_error is None:
            first_error = (
                f"'{_excerpt(kinds[0].sql())}' is not a query or a data change"
                f" ({type(kinds[0]).__name__.lower()})"
            )
    return f"does not parse as SQL: {first_error}"


def _described(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if errors:
        error = errors[0]
        where = f" (line {error.get('line')}, column {error.get('col')})"
        description = _TOKEN.sub(_token, str(error.get("description", "")))
        return _ANSI.sub("", description) + where
    return _ANSI.sub("", str(exc)).splitlines()[0]


def _token(match: re.Match[str]) -> str:
    text = match.group(1)
    return "the end" if text == "SENTINEL" else f"'{text}'"


def _excerpt(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
