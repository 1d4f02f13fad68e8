"""Turning pydantic validation errors into messages a person can act on."""

from __future__ import annotations

from pydantic import ValidationError


def _location(loc: tuple) -> str:
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


def validation_details(exc: ValidationError) -> list[dict]:
    return [
        {"field": _location(e["loc"]), "type": e["type"], "message": e["msg"].removeprefix("Value error, ")}
        for e in exc.errors(include_url=False, include_input=False)
    ]
