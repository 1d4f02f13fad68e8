"""`tht memory import`, `tht memory export` and `tht memory imports`: cards in and out
in bulk, and the imports' records (list one or all, undo one).

Import prints one JSON summary on stdout, progress (count, rate, ETA) on stderr.
Export prints the card documents on stdout (one a line, or CSV rows) and its summary
on stderr. The import file is streamed (read twice, never held) in its own process
and through the service's Unix socket, where the client passes it open; over HTTP the
client sends it whole, so it is bounded there (``MAX_SENT_FILE_BYTES``, the client's
limit for every file sent as bytes).
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
from typing import IO, Annotated

import typer

from tht.cli.invocation import current, passed_file, progress, read_bytes, write_stdout
from tht.cli.main import ConfigOption, _services, emit, load_runtime, memory_app
from tht.errors import InvalidInput
from tht.memory.model import FAMILIES
from tht.memory.transfer.formats import FORMATS, LINE_LIMIT, detect_format
from tht.memory.transfer.service import CONFLICT_POLICIES, CardTransfer, ImportOptions

# What the client sends of a named file as bytes (tht.service.client.MAX_FILE_BYTES):
# over HTTP, the import's file too.
MAX_SENT_FILE_BYTES = 16 * 1024 * 1024
PROGRESS_SECONDS = 1.0  # at most one progress line a second (and the last one)


def progress_meter(
    write: Callable[[str], None] = progress,
) -> Callable[[str, int, int | None], None]:
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
def _source(path: str) -> Iterator[Callable[[], IO[bytes]]]:
    """A way to open the import file from its beginning, once per pass."""
    if current().files is None:  # in its own process: the file itself, streamed
        if path == "-":
            with _local_copy_of_stdin() as name:
                yield lambda: open(name, "rb", buffering=LINE_LIMIT + 1)
            return
        if not os.path.isfile(path):
            raise InvalidInput(f"cannot read {path}: no such file", details={"line": None})
        yield lambda: open(path, "rb", buffering=LINE_LIMIT + 1)
        return
    try:
        passed = passed_file(
            path, LINE_LIMIT + 1
        )  # on the Unix socket: the client's open file, streamed
        data = b"" if passed is not None else read_bytes(path, MAX_SENT_FILE_BYTES)
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


@memory_app.command("import")
def memory_import(
    file: Annotated[str, typer.Argument(help="The file to import ('-' for standard input)")],
    config: ConfigOption,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help=f"{' | '.join(FORMATS)} (default: from the extension, .jsonl or .csv; required"
            " for .json and whenever the content suggests another format)",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check everything, write nothing; report each line")
    ] = False,
    on_conflict: Annotated[
        str,
        typer.Option(
            "--on-conflict",
            help="A record whose card exists with other content: skip (default), update, or fail",
        ),
    ] = "skip",
    keep_going: Annotated[
        bool,
        typer.Option(
            "--continue",
            help="Import the valid records and report the invalid ones (default: one invalid"
            " record and nothing is written)",
        ),
    ] = False,
    family: Annotated[
        str | None,
        typer.Option(help="Refuse records of any other family (a file of one family only)"),
    ] = None,
    scope: Annotated[
        str | None,
        typer.Option(
            help="Business scope of records whose format has none (vanna, wrenai); default: the"
            " runtime file's database"
        ),
    ] = None,
) -> None:
    """Import cards in bulk: card documents (jsonl, csv) or a peer's knowledge (vanna,
    wrenai, bird). Idempotent: a rerun creates nothing twice."""
    runtime = load_runtime(config)
    if on_conflict not in CONFLICT_POLICIES:
        raise InvalidInput(
            f"--on-conflict must be one of {', '.join(CONFLICT_POLICIES)}, not '{on_conflict}'",
            details={"line": None},
        )
    if family is not None and family not in FAMILIES:
        raise InvalidInput(
            f"--family must be one of {', '.join(FAMILIES)}, not '{family}'", details={"line": None}
        )
    with _source(file) as open_source:
        with open_source() as head_stream:
            head = head_stream.read(65536)
        chosen = detect_format(file, head, fmt)
        options = ImportOptions(
            fmt=chosen,
            file_name=file,
            dry_run=dry_run,
            on_conflict=on_conflict,
            keep_going=keep_going,
            family=family,
            scope=scope or runtime.database,
        )
        with _services(runtime) as services:
            transfer = CardTransfer(services.archive, services.projector.of(runtime.workspace))
            emit(
                transfer.import_file(
                    runtime.workspace, open_source, options, progress=progress_meter()
                )
            )


imports_app = typer.Typer(
    help="The imports' records: where imported cards came from; undo an import.",
    no_args_is_help=True,
)
memory_app.add_typer(imports_app, name="imports")


@imports_app.command("list")
def imports_list(
    config: ConfigOption,
    import_id: Annotated[
        str | None, typer.Option("--import", help="One import (imp-<uuid>) instead of all")
    ] = None,
) -> None:
    """List the workspace's imports, newest first (at most 100): file, format, who, when,
    how it ended, its summary, the cards that still name it, and its undo if undone.
    `tht memory list --filters '{"import": "imp-..."}'` lists an import's cards."""
    runtime = load_runtime(config)
    with _services(runtime) as services:
        emit(CardTransfer(services.archive).imports(runtime.workspace, import_id))


@imports_app.command("undo")
def imports_undo(
    import_id: Annotated[str, typer.Argument(help="The import to undo (imp-<uuid>)")],
    config: ConfigOption,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Undo an import recorded as still running (its process died before it ended)",
        ),
    ] = False,
) -> None:
    """Delete the cards an import created that nobody changed since; keep and report the
    cards edited since and those it replaced (--on-conflict update: nothing to restore).
    The deletions leave the search index as `memory delete`'s do. Rerun to finish an
    interrupted undo."""
    runtime = load_runtime(config)
    with _services(runtime) as services:
        emit(
            CardTransfer(services.archive, services.projector.of(runtime.workspace)).undo_import(
                runtime.workspace, import_id, force=force, progress=progress_meter()
            )
        )


@memory_app.command("export")
def memory_export(
    config: ConfigOption,
    fmt: Annotated[str, typer.Option("--format", help="jsonl (default) or csv")] = "jsonl",
) -> None:
    """Write every card of the workspace to stdout, losslessly (ids, all fields,
    dependencies, links with meanings, origin, source, revision, timestamps); the
    summary goes to stderr."""
    runtime = load_runtime(config)
    if fmt not in ("jsonl", "csv"):
        raise InvalidInput(f"--format must be jsonl or csv, not '{fmt}'")
    with _services(runtime) as services:
        summary = CardTransfer(services.archive).export(
            runtime.workspace, fmt, write_stdout, progress=progress_meter()
        )
    progress(json.dumps(summary))
