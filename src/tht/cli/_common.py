"""What the commands of ``tht`` share: one JSON document on stdout, the runtime file,
input files, and the engines of a command (the service's, or its own) once its principal
may run it. The command modules (``main``, ``catalog``, ``eval``, ``workflow``) import
from here, never from each other.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from tht import audit
from tht.cli.capabilities import SIGNED
from tht.cli.invocation import current, read_bytes, write_stdout
from tht.errors import InvalidInput
from tht.memory.model import MAX_DOCUMENT_BYTES
from tht.settings import RuntimeConfig, load_runtime_config

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


def idempotency_key_of(key: str | None) -> Any:
    """The command's idempotency key, scoped to its principal (inside ``_services``:
    the token's user, or the operator)."""
    from tht.memory.idempotency import IdempotencyKey

    principal = current().principal
    return IdempotencyKey.given(key, principal.user if principal is not None else None)


def emit(document: Any) -> None:
    write_stdout(json.dumps(document, ensure_ascii=False, default=str) + "\n")


def load_runtime(config: Path) -> RuntimeConfig:
    """The runtime file (the client's copy in the service)."""
    return load_runtime_config(config, read=read_bytes)


def read_text(path: str, limit: int) -> str:
    """A UTF-8 text file of at most ``limit`` bytes, or standard input with '-'."""
    try:
        raw = read_bytes(path, limit)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from exc
    if len(raw) > limit:
        raise InvalidInput(f"{path} is larger than {limit} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path} is not UTF-8 text") from exc


def _read_document(path: str) -> Any:
    """A JSON document from a file, or from standard input with '-'."""
    from tht.validation import parse_json

    return parse_json(
        read_text(path, MAX_DOCUMENT_BYTES), "standard input" if path == "-" else path
    )


@contextmanager
def _services(runtime: Any = None, *, workspace: str | None = None) -> Iterator[Any]:
    """The engines for this command (the service's warm ones, or built for this process
    and closed after it), once the principal may run the command in ``workspace``
    (default: the runtime file's)."""
    invocation = current()
    context = (invocation.services or _built_services)()
    with context as services:
        authorize(
            services, workspace if workspace is not None else getattr(runtime, "workspace", None)
        )
        yield services


@contextmanager
def _built_services() -> Iterator[Any]:
    from tht.bootstrap import build_services

    services = build_services()
    try:
        yield services
    finally:
        services.close()


def authorize(services: Any, workspace: str | None) -> None:
    """Check the command's capability for its principal: a token's user, or the
    operator (no token: this process holds THT_HOME or the database credentials)."""
    invocation = current()
    if invocation.token is None:
        audit.act_as(audit.OPERATOR)
        return
    principal = invocation.principal = services.accounts.by_token(invocation.token)
    audit.act_as(principal.user)
    if invocation.capability != SIGNED:  # OPERATOR_ONLY never gets here with a token (see main)
        principal.require(invocation.capability, workspace)


JsonFlag = Annotated[
    bool, typer.Option("--json", help="Accepted for compatibility: output is always JSON")
]
