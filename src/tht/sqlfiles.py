"""SQL kept in ``.sql`` files: a file holds named blocks, each starting at a
``-- name: <name>`` line and running to the next one."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources


@cache
def named_queries(package: str, path: str) -> dict[str, str]:
    text = resources.files(package).joinpath(path).read_text()
    found: dict[str, str] = {}
    for block in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, _, body = block.partition("\n")
        found[name.strip()] = body.strip()
    return found
