"""``tht memory eval``: measure a workspace's recall on the user's own cases (the
command of ``tht.commands.recall``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tht.cli.apps import memory_app
from tht.cli.submit import path, submit


@memory_app.command("eval")
def memory_eval(
    cases: Annotated[
        Path,
        typer.Option(
            "--cases",
            help=(
                'JSON Lines file, one case a line: {"question": ..., "expected": [card ids], '
                '"filters": {...} (optional), "command": search|rules|solved (optional, default search)}'
            ),
        ),
    ],
    config: Annotated[
        Path,
        typer.Option(
            "-c", "--config", help="Runtime file (YAML): workspace, database, schema, ..."
        ),
    ],
) -> int:
    """Measure recall on a cases file: recall@1/5/10, MRR and the misses, as one JSON
    document. Nothing is stored: the workspace's own benchmark, kept and followed over
    time, is `tht memory benchmark` (its `import` reads this file's format)."""
    return submit("memory.eval", {"cases": path(cases), "config": path(config)})
