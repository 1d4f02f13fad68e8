"""Turning pydantic validation errors into messages a person can act on, and reading
JSON input so that every malformed document is the caller's error, never ours."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from tht.errors import InvalidInput

# No document of ours nests this deep; deeper ones only exhaust recursion downstream.
MAX_JSON_DEPTH = 64
# JSON may escape half of a surrogate pair ("\ud800"): valid JSON, but not text that
# UTF-8 (PostgreSQL, stdout) can carry.
_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_json(text: str, what: str) -> Any:
    """A JSON document from input named ``what`` (an option, a file): syntax errors,
    excessive nesting and lone surrogates are ``InvalidInput`` naming it."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except RecursionError:
        raise InvalidInput(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels") from None
    # iterative: a recursive walk is what deep documents break
    pending: list[tuple[Any, tuple[Any, ...]]] = [(document, ())]
    while pending:
        node, path = pending.pop()
        if len(path) >= MAX_JSON_DEPTH:
            raise InvalidInput(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(node, dict):
            for key, value in node.items():
                pending += [(key, path), (value, (*path, key))]
        elif isinstance(node, list):
            pending += [(value, (*path, index)) for index, value in enumerate(node)]
        elif isinstance(node, str) and _SURROGATE.search(node):
            field = f" in '{_location(path)}'" if path else ""
            raise InvalidInput(
                f"{what} holds a lone surrogate escape (\\ud800-\\udfff){field}, which is not text",
                details={"field": _location(path)},
            )
    return document


def _location(loc: tuple[Any, ...]) -> str:
    parts = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def describe_validation_error(exc: ValidationError) -> str:
    messages = []
    for error in exc.errors(include_url=False):
        where = _location(error["loc"])
        if error["type"] == "extra_forbidden":
            messages.append(f"unknown field '{where}'")
        elif error["type"] == "missing":
            messages.append(f"missing field '{where}'")
        else:
            message = error["msg"].removeprefix("Value error, ")
            messages.append(f"{where}: {message}" if where else message)
    return "; ".join(messages)


def validation_details(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {
            "field": _location(e["loc"]),
            "type": e["type"],
            "message": e["msg"].removeprefix("Value error, "),
        }
        for e in exc.errors(include_url=False, include_input=False)
    ]
