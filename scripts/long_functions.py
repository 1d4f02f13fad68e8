"""Functions longer than a limit (default 100 lines), longest first: what to split next.

    .venv/bin/python scripts/long_functions.py [--limit N] [PATH ...]   (default: src)

A nested function counts in its own right and in the function around it, as ruff's
complexity rule counts it.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def long_functions(paths: list[Path], limit: int) -> list[tuple[int, str]]:
    found = []
    for root in paths:
        for path in sorted([root] if root.is_file() else root.rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    length = (node.end_lineno or node.lineno) - first + 1
                    if length > limit:
                        found.append((length, f"{path}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("src")])
    parser.add_argument("--limit", type=int, default=100)
    args = parser.parse_args()
    for length, where in long_functions(args.paths, args.limit):
        print(f"{length:5d}  {where}")


if __name__ == "__main__":
    main()
