"""SQL kept in ``.sql`` files: a file holds named blocks, each starting at a
``-- name: <name>`` line and running to the next one.

A column list that a model defines is written once in the model: ``{texts: c.$}`` in a
query stands for the list ``texts`` given to ``named_queries``, the pattern ``c.$``
once per item (``$`` the item), joined by ", ". The expansion happens once, when the
file is loaded: the server sees the same statement as if the list were spelled out."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

# {name: pattern}; a name without a colon ({filters}) is a query's own format field
_LIST = re.compile(r"\{(\w+): ([^{}]+)\}")


@cache
def named_queries(package: str, path: str, **lists: tuple[str, ...]) -> dict[str, str]:
    text = resources.files(package).joinpath(path).read_text()
    if lists:
        text = _LIST.sub(lambda m: _expanded(m.group(2), lists[m.group(1)]), text)
    found: dict[str, str] = {}
    for block in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, _, body = block.partition("\n")
        found[name.strip()] = body.strip()
    return found


def _expanded(pattern: str, items: tuple[str, ...]) -> str:
    return ", ".join(pattern.replace("$", item) for item in items)
