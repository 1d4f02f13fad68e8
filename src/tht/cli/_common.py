"""The options the Typer parsers of ``tht`` share; what they parse goes to
``tht.cli.submit``.

The parsers only parse: what a command does is its application function in
``tht.commands``, whichever face calls it. Nothing here imports more than the standard
library and Typer, so the client stays light when the service runs the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigOption = Annotated[
    Path,
    typer.Option("-c", "--config", help="Runtime file (YAML): workspace, database, schema, ..."),
]

IdempotencyKeyOption = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="A key of yours (e.g. a UUID): run again with the same key and the same input, the"
        " command prints the first answer instead of doing it twice (kept 24 h); with other input"
        " it fails with idempotency_key_reused",
    ),
]

JsonFlag = Annotated[
    bool, typer.Option("--json", help="Accepted for compatibility: output is always JSON")
]
