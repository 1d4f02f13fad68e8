"""Cards in and out in bulk, and the imports' records (``tht memory import|export``,
``tht memory imports list|undo``).

Import answers one JSON summary, progress (count, rate, ETA) on stderr. Export writes
the card documents on stdout (one a line, or CSV rows) and its summary on stderr. The
import file is streamed (read twice, never held) in its own process and through the
service's Unix socket, where the client passes it open; over HTTP the client sends it
whole, so it is bounded there (``MAX_SENT_FILE_BYTES``, the client's limit for every
file sent as bytes).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput
from tht.errors import InvalidInput

# What the client sends of a named file as bytes (tht.service.client.MAX_FILE_BYTES):
# over HTTP, the import's file too.
MAX_SENT_FILE_BYTES = 16 * 1024 * 1024
PROGRESS_SECONDS = 1.0  # at most one progress line a second (and the last one)


def progress_meter(write: Callable[[str], None]) -> Callable[[str, int, int | None], None]:
    """Progress lines with the count, the rate and (when the total is known) the ETA."""
    started = time.perf_counter()
    last = [0.0]

    def report(phase: str, done: int, total: int | None) -> None:
        if phase == "compacting":  # one step, no rate (see docs/rebuilds.md)
            write(
                f"compacting the search index: indexing {done} new points, about 30 s per 100 000"
            )
            return
        now = time.perf_counter()
        final = total is not None and done >= total
        if not final and now - last[0] < PROGRESS_SECONDS:
            return
        last[0] = now
        elapsed = max(now - started, 1e-9)
        rate = done / elapsed
        text = f"{phase} {done}" + (f"/{total}" if total is not None else "") + " records"
        text += f", {rate:.0f}/s"
        if total is not None and not final and rate > 0:
            text += f", ETA {(total - done) / rate:.0f}s"
        write(text)

    return report


@contextmanager
def _local_copy_of_stdin() -> Iterator[str]:
    """Standard input, kept in a temporary file: the import reads its input twice."""
    with tempfile.NamedTemporaryFile(prefix="tht-import-", suffix=".in", delete=False) as copy:
        shutil.copyfileobj(sys.stdin.buffer, copy, 1 << 20)
    try:
        yield copy.name
    finally:
        os.unlink(copy.name)


@contextmanager
def _source(ctx: CommandContext, path: str) -> Iterator[Callable[[], IO[bytes]]]:
    """A way to open the import file from its beginning, once per pass."""
    from tht.memory.transfer.formats import LINE_LIMIT

    if ctx.files is None:  # in its own process: the file itself, streamed
        if path == "-":
            if ctx.stdin is not None:
                data = ctx.stdin
                yield lambda: io.BufferedReader(io.BytesIO(data), buffer_size=LINE_LIMIT + 1)
                return
            with _local_copy_of_stdin() as name:
                yield lambda: open(name, "rb", buffering=LINE_LIMIT + 1)
            return
        if not os.path.isfile(path):
            raise InvalidInput(f"cannot read {path}: no such file", details={"line": None})
        yield lambda: open(path, "rb", buffering=LINE_LIMIT + 1)
        return
    try:
        # on the Unix socket: the client's open file, streamed
        passed = ctx.passed_file(path, LINE_LIMIT + 1)
        data = b"" if passed is not None else ctx.read_bytes(path, MAX_SENT_FILE_BYTES)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}", details={"line": None}) from exc
    if passed is not None:
        yield passed
        return
    if len(data) > MAX_SENT_FILE_BYTES:
        raise InvalidInput(
            f"{path} is larger than {MAX_SENT_FILE_BYTES} bytes ({MAX_SENT_FILE_BYTES >> 20}"
            " MiB), the most a client sends over HTTP (THT_SERVICE_URL): import it on the"
            " service's machine, through its Unix socket (THT_SERVICE_URL unset) or in its own"
            " process (THT_SERVICE=off), which stream files of any size, or split it",
            details={"line": None, "limit": MAX_SENT_FILE_BYTES},
        )
    yield lambda: io.BufferedReader(io.BytesIO(data), buffer_size=LINE_LIMIT + 1)


class MemoryImportIn(CommandInput):
    file: str  # '-': standard input
    config: str
    fmt: str | None = None
    dry_run: bool = False
    on_conflict: str = "skip"
    keep_going: bool = False
    family: str | None = None
    scope: str | None = None


def memory_import(ctx: CommandContext, args: MemoryImportIn) -> dict[str, Any]:
    from tht.memory.model import FAMILIES
    from tht.memory.transfer.formats import detect_format
    from tht.memory.transfer.service import CONFLICT_POLICIES, CardTransfer, ImportOptions

    runtime = ctx.runtime
    assert runtime is not None
    if args.on_conflict not in CONFLICT_POLICIES:
        raise InvalidInput(
            f"--on-conflict must be one of {', '.join(CONFLICT_POLICIES)},"
            f" not '{args.on_conflict}'",
            details={"line": None},
        )
    if args.family is not None and args.family not in FAMILIES:
        raise InvalidInput(
            f"--family must be one of {', '.join(FAMILIES)}, not '{args.family}'",
            details={"line": None},
        )
    with _source(ctx, args.file) as open_source:
        with open_source() as head_stream:
            head = head_stream.read(65536)
        chosen = detect_format(args.file, head, args.fmt)
        options = ImportOptions(
            fmt=chosen,
            file_name=args.file,
            dry_run=args.dry_run,
            on_conflict=args.on_conflict,
            keep_going=args.keep_going,
            family=args.family,
            scope=args.scope or runtime.database,
        )
        services = ctx.services
        transfer = CardTransfer(services.archive, services.projector.of(runtime.workspace))
        result: dict[str, Any] = transfer.import_file(
            runtime.workspace, open_source, options, progress=progress_meter(ctx.progress)
        )
        return result


class MemoryImportsListIn(CommandInput):
    config: str
    import_id: str | None = None


def memory_imports_list(ctx: CommandContext, args: MemoryImportsListIn) -> dict[str, Any]:
    from tht.memory.transfer.service import CardTransfer

    services = ctx.services
    result: dict[str, Any] = CardTransfer(services.archive).imports(ctx.workspace, args.import_id)
    return result


class MemoryImportsUndoIn(CommandInput):
    import_id: str
    config: str
    force: bool = False


def memory_imports_undo(ctx: CommandContext, args: MemoryImportsUndoIn) -> dict[str, Any]:
    from tht.memory.transfer.service import CardTransfer

    services = ctx.services
    projector = services.projector.of(ctx.workspace)
    result: dict[str, Any] = CardTransfer(services.archive, projector).undo_import(
        ctx.workspace, args.import_id, force=args.force, progress=progress_meter(ctx.progress)
    )
    return result


class MemoryExportIn(CommandInput):
    config: str
    fmt: str = "jsonl"


def memory_export(ctx: CommandContext, args: MemoryExportIn) -> None:
    from tht.memory.transfer.service import CardTransfer

    if args.fmt not in ("jsonl", "csv"):
        raise InvalidInput(f"--format must be jsonl or csv, not '{args.fmt}'")
    summary = CardTransfer(ctx.services.archive).export(
        ctx.workspace, args.fmt, ctx.stdout, progress=progress_meter(ctx.progress)
    )
    ctx.progress(json.dumps(summary))
