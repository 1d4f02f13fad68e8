"""Bulk import and export of a workspace's cards.

An import reads its file twice, streaming both times:

1. **check**: every record is parsed and validated, its key mapped to the card it
   becomes, duplicates and links resolved (a link names a record of the file or a
   card of the workspace), and each record classified (create, update, skip) against
   the archive. Bad records are collected with their line numbers. Unless
   ``keep_going`` (``--continue``), one bad record stops the import here: nothing is
   written. A dry run stops here too and reports every line.
2. **write**: batches of ``BATCH`` records, one archive transaction each under the
   workspace's lock (cards, dependencies, links and their projection operations
   together, as a save does), then, in another thread, the batch's points, in one
   locked transaction per chunk, as a save's propagation. A link to a card of a later
   batch is written with that batch.

The embedder does not wait for either pass: a record's vectors depend on its content
only, so the records to create or update are embedded as soon as the check has
classified them, in a thread, ahead of their archive batches (``EmbeddingAhead``, at
most ``AHEAD`` cards ahead). Only a committed batch's created or updated cards get
points, and only if their text is the one embedded; the vectors of a record refused,
skipped or changed meanwhile are dropped (that card, if it needs a point, is projected
by ``IndexProjector.sync`` at the end, as the cards an interrupted run left pending).

A record's card is the card its key names: an exported card id that exists in the
workspace, else the id derived from workspace and key (``derived_uuid``). A rerun
therefore finds what an earlier run wrote, and an interrupted import is finished by
running it again: committed batches are skipped as unchanged (their projection is
completed if it was not), and the rest is written.
"""

from __future__ import annotations

import csv
import io
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import IO, Any

from tht import audit
from tht.errors import Conflict, Interrupted, InvalidInput, NotFound, ThothError
from tht.faults import pause_point
from tht.memory.archive.port import Archive, ArchiveTx
from tht.memory.indexing import ImportCompactions, IndexProjector, Prepared, pipeline
from tht.memory.model import (
    TEXT_FIELDS,
    Card,
    card_id_to_uuid,
    import_to_id,
    import_uuid,
    uuid_to_card_id,
)
from tht.memory.stages import Stage, hand_over, start_stage, take_over
from tht.memory.transfer.embedding_ahead import EmbeddingAhead
from tht.memory.transfer.formats import (
    CSV_COLUMNS,
    CSV_JSON_COLUMNS,
    ImportCard,
    RecordError,
    Skipped,
    SqlCheck,
    card_id_key,
    derived_uuid,
    neutralized_cell,
    read_records,
)

BATCH = 256  # records per archive transaction (and per embedding call)
INDEX_QUEUE = 16  # committed batches waiting for the import's index writer
# The planner's statistics are refreshed each time an import has written this many
# cards, and as many as the cards' table held when they were last taken (below).
STATISTICS_AFTER = 1000
MAX_REPORTED_ERRORS = 100
MAX_LISTED_IMPORTS = 100  # the newest imports `tht memory imports list` shows
CONFLICT_POLICIES = ("skip", "update", "fail")

Opener = Callable[[], AbstractContextManager[IO[bytes]]]
# (phase, records done, records in all or None while unknown)
Progress = Callable[[str, int, int | None], None]


@dataclass(frozen=True)
class ImportOptions:
    fmt: str
    file_name: str = "-"  # what the import record names (the file as the caller gave it)
    dry_run: bool = False
    on_conflict: str = "skip"
    keep_going: bool = False
    family: str | None = None  # when set, every record must be of this family
    scope: str | None = None  # the business scope of records whose format has none


@dataclass(slots=True)
class _Planned:
    line: int
    card_uuid: uuid.UUID
    action: str = "create"


@dataclass
class _Check:
    """What the check pass learnt of the file."""

    planned: dict[str, _Planned] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)  # key -> the line it was first read on
    links: dict[str, list[str]] = field(default_factory=dict)  # key -> link targets
    errors: list[RecordError] = field(default_factory=list)  # the first by line, bounded
    invalid: int = 0
    conflicts: int = 0  # of the invalid: conflicts with the archive (--on-conflict fail)
    invalid_keys: set[str] = field(default_factory=set)
    skipped_kinds: dict[str, int] = field(default_factory=dict)
    ignored_sections: dict[str, int] = field(default_factory=dict)  # WrenAI's MDL models...
    digests: dict[str, bytes] = field(default_factory=dict)  # key -> its first record's content
    folded: int = 0  # records repeating an earlier one of the file exactly
    sql: SqlCheck = field(default_factory=SqlCheck)  # its verdicts serve the write pass
    lines: list[dict[str, Any]] = field(default_factory=list)  # the dry run's report
    records: int = 0
    report_lines: bool = False  # a dry run: keep ``lines``

    def line(self, entry: dict[str, Any]) -> None:
        if self.report_lines:
            self.lines.append(entry)

    def error(self, error: RecordError) -> None:
        """Count every error, keep the ``MAX_REPORTED_ERRORS`` first by line (a file of
        bad lines costs no more memory than a few)."""
        self.invalid += 1
        self.conflicts += error.details.get("code") == "conflict"
        self.errors.append(error)
        if len(self.errors) > 2 * MAX_REPORTED_ERRORS:
            self.errors.sort(key=lambda e: e.line)
            del self.errors[MAX_REPORTED_ERRORS:]


@dataclass(frozen=True)
class _Committed:
    """A batch the archive writer committed: its last line, the cards to index."""

    last_line: int
    to_project: list[tuple[uuid.UUID, str]]


class _Statistics:
    """ANALYZE of the tables an import grows, each time it has written as many cards as
    the cards' table held when its statistics were taken (at least STATISTICS_AFTER): so
    ~log2(growth) times, each cheap (ANALYZE reads a sample; 0.13 s at 10 000 cards,
    about 0.4 s from 50 000). PostgreSQL keeps a plan made while a table was small:
    psycopg's prepared statements, on every pooled connection, went on scanning tables
    an import made 100 times larger (an import's links lookup grew from 18 to 295 ms a
    batch, recall's reads from 3 to 196 ms) until autovacuum analyzed them, a minute
    later at best. ANALYZE invalidates those plans; the runtime role may run it only
    through the owner's function (migration 014)."""

    def __init__(self, archive: Archive, workspace: str) -> None:
        self.archive = archive
        self.workspace = workspace
        with archive.transaction(workspace) as tx:
            self.counted = tx.transfer.analyzed_cards()
        self.since = 0

    def wrote(self, cards: int) -> None:
        self.since += cards
        if self.since >= max(STATISTICS_AFTER, self.counted):
            with self.archive.transaction(self.workspace) as tx:
                tx.transfer.refresh_statistics()
                self.counted = tx.transfer.analyzed_cards()
            self.since = 0


def _embeds(check: _Check, record: ImportCard | str) -> bool:
    """Whether the record (or key) is embedded ahead: one the check plans to create or
    update (one left unchanged or skipped needs no new vectors)."""
    planned = check.planned.get(record if isinstance(record, str) else record.key)
    return planned is not None and planned.action in ("create", "update")


class _Resolver:
    """Key -> card: an exported card id present in the workspace is that card; any
    other key gets the id derived from it. Existence is asked in batches and kept."""

    def __init__(self, workspace: str) -> None:
        self.workspace = workspace
        self.present: dict[uuid.UUID, bool] = {}

    def learn(self, tx: ArchiveTx, keys: set[str]) -> None:
        ids = {card_id_key(k) for k in keys} - {None} - set(self.present)
        asked = [i for i in ids if i is not None]
        if asked:
            found = tx.existing_cards(asked)
            self.present.update({i: i in found for i in asked})

    def card_uuid(self, key: str) -> uuid.UUID:
        named = card_id_key(key)
        if named is not None and self.present.get(named):
            return named
        return derived_uuid(self.workspace, key)

    def in_workspace(self, key: str) -> bool:
        named = card_id_key(key)
        return named is not None and bool(self.present.get(named))


# The fields an import compares one by one (dependencies and links are compared as sets).
_COMPARED = ("family", "title", *TEXT_FIELDS, "error_signature")


def _comparable_input(item: ImportCard, targets: dict[str, uuid.UUID]) -> tuple[Any, ...]:
    d = item.data
    return (
        *(getattr(d, name) for name in _COMPARED),
        tuple(d.concepts),
        tuple(dep.key() for dep in d.dependencies),
        frozenset((targets[ref], meaning) for ref, meaning in item.links),
    )


def _comparable_card(card: Card) -> tuple[Any, ...]:
    return (
        *(getattr(card, name) for name in _COMPARED),
        tuple(card.concepts),
        tuple(dep.key() for dep in card.dependencies),
        frozenset((card_id_to_uuid(link.target), link.meaning) for link in card.links),
    )


class CardTransfer:
    def __init__(self, archive: Archive, projector: IndexProjector | None = None) -> None:
        self.archive = archive
        self.projector = projector

    # --- import ---------------------------------------------------------------------

    def import_file(
        self,
        workspace: str,
        open_source: Opener,
        options: ImportOptions,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        if options.on_conflict not in CONFLICT_POLICIES:
            raise InvalidInput(
                f"--on-conflict must be one of {', '.join(CONFLICT_POLICIES)}, not"
                f" '{options.on_conflict}'",
                details={"line": None},
            )
        started = time.perf_counter()
        with self.archive.transaction(workspace) as tx:
            workspace_row = tx.workspace()
            if workspace_row is None:
                raise NotFound(
                    f"workspace '{workspace}' does not exist", details={"workspace": workspace}
                )
        stop = threading.Event()  # ends every stage of the import
        if self.projector is None or options.dry_run:  # nothing to embed
            try:
                return self._import(workspace, open_source, options, progress, started, stop)
            finally:
                stop.set()
        # Embedding starts with the check pass and runs in this thread (the main one:
        # an in-process model embeds fastest there); the import itself in another.
        ahead = EmbeddingAhead(self.projector, workspace_row.language, stop)
        outcome: list[dict[str, Any] | BaseException] = []

        def run_import() -> None:
            try:
                outcome.append(
                    self._import(workspace, open_source, options, progress, started, stop, ahead)
                )
            except BaseException as exc:
                outcome.append(exc)
            finally:
                stop.set()  # the embedding stage too, when the check refused the file
                ahead.end()

        with self.projector.importing(workspace):
            importer = start_stage(run_import, "import")
            try:
                ahead.run()
                while not importer.wait(0.1):  # a wait that Ctrl-C can interrupt
                    pass
            except KeyboardInterrupt:
                # the importer raises Interrupted, once the batch being written is committed
                ahead.interrupted.set()
                stop.set()
                ahead.abandon()
                while not importer.wait(0.1):
                    pass
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def _import(
        self,
        workspace: str,
        open_source: Opener,
        options: ImportOptions,
        progress: Progress | None,
        started: float,
        stop: threading.Event,
        ahead: EmbeddingAhead | None = None,
    ) -> dict[str, Any]:
        resolver = _Resolver(workspace)
        check = self._check(workspace, open_source, options, resolver, progress, ahead)
        summary: dict[str, Any] = {
            "workspace": workspace,
            "format": options.fmt,
            "dry_run": options.dry_run,
            "on_conflict": options.on_conflict,
            "records": check.records,
            "created": sum(1 for p in check.planned.values() if p.action == "create"),
            "updated": sum(1 for p in check.planned.values() if p.action == "update"),
            "skipped": sum(1 for p in check.planned.values() if p.action in ("skip", "unchanged")),
            "invalid": check.invalid,
        }
        if check.skipped_kinds:
            summary["not_imported"] = dict(check.skipped_kinds)
        if check.folded:
            summary["duplicates_folded"] = check.folded
        if check.ignored_sections:
            summary["ignored_sections"] = dict(check.ignored_sections)
        errors = sorted(check.errors, key=lambda e: e.line)[:MAX_REPORTED_ERRORS]
        reported = [e.as_json() for e in errors]
        if errors and not options.keep_going:
            # only conflicts with the archive (--on-conflict fail): a conflict, else bad input
            kind = Conflict if check.conflicts == check.invalid else InvalidInput
            raise kind(
                f"{check.invalid} record(s) cannot be imported, the first on line"
                f" {errors[0].line}: {errors[0].message}. Nothing was written (--continue"
                " imports the valid ones)",
                details={
                    "line": errors[0].line,
                    "errors": reported,
                    "invalid": check.invalid,
                    "written": 0,
                },
            )
        if errors:
            summary["errors"] = reported
        if options.dry_run:
            summary["lines"] = sorted(check.lines, key=lambda entry: entry["line"])
            summary["seconds"] = round(time.perf_counter() - started, 3)
            return summary
        # recorded before the first card that names it (a rerun that writes nothing,
        # finishing an interrupted one's index entries, leaves no record)
        recorded: list[uuid.UUID] = []

        def import_id() -> uuid.UUID:
            if not recorded:
                recorded.append(self._record_import(workspace, options))
            return recorded[0]

        if any(p.action in ("create", "update") for p in check.planned.values()):
            import_id()
        try:
            written = self._write(
                workspace, open_source, options, check, resolver, progress, stop, ahead, import_id
            )
        except BaseException as exc:
            if recorded:
                status = "interrupted" if isinstance(exc, Interrupted) else "failed"
                details = exc.details if isinstance(exc, ThothError) else {}
                summary["import"] = import_to_id(recorded[0])
                self._finish_import(workspace, recorded[0], status, {**summary, **details})
            raise
        seconds = time.perf_counter() - started
        summary.update(
            {
                "created": written["create"],
                "updated": written["update"],
                "skipped": written["skip"] + written["unchanged"],
                "index": written["index"],
                "seconds": round(seconds, 3),
                "records_per_second": round(check.records / seconds, 1) if seconds else None,
            }
        )
        summary["import"] = import_to_id(recorded[0]) if recorded else None
        if recorded:
            self._finish_import(workspace, recorded[0], "completed", summary)
        return summary

    def _record_import(self, workspace: str, options: ImportOptions) -> uuid.UUID:
        """The import's record, which every card it writes names (``tht memory imports``)."""
        import_id = uuid.uuid4()
        with self.archive.transaction(workspace) as tx:
            tx.transfer.record_import(
                import_id, options.file_name[:1000] or "-", options.fmt, _principal()
            )
        return import_id

    def _finish_import(
        self, workspace: str, import_id: uuid.UUID, status: str, summary: dict[str, Any]
    ) -> None:
        try:
            with self.archive.transaction(workspace) as tx:
                tx.transfer.finish_import(
                    import_id, status, json.loads(json.dumps(summary, default=str))
                )
        except ThothError:
            if status == "completed":
                raise
            # the archive failing is why the import stopped: its record stays 'running'

    def _records(
        self, open_source: Opener, options: ImportOptions, sql_check: SqlCheck
    ) -> Iterator[ImportCard | RecordError | Skipped]:
        with open_source() as stream:
            yield from read_records(stream, options.fmt, scope=options.scope, sql_check=sql_check)

    def _check(
        self,
        workspace: str,
        open_source: Opener,
        options: ImportOptions,
        resolver: _Resolver,
        progress: Progress | None,
        ahead: EmbeddingAhead | None,
    ) -> _Check:
        check = _Check(report_lines=options.dry_run)
        batch: list[ImportCard] = []
        prefetching = [ahead is not None]

        def classify() -> None:
            self._classify(workspace, batch, options, check, resolver)
            if check.invalid and not options.keep_going:
                prefetching[0] = False  # the file is refused: nothing more to embed for it
            if ahead is not None and prefetching[0]:
                # the embedder starts now, on the records to create or update, until
                # the bounds ahead are reached (the archive writer feeds the rest)
                prefetching[0] = ahead.feed([i for i in batch if _embeds(check, i)], wait=False)
            pause_point("import.checked_batch")

        for item in self._records(open_source, options, check.sql):
            if ahead is not None and ahead.interrupted.is_set():
                raise Interrupted(
                    "interrupted during the check pass: nothing was written. Rerun the same"
                    " command",
                    details={"written": 0, "resume": "rerun the same command"},
                )
            if isinstance(item, Skipped) and item.section is not None:
                # not a record: an element of a section that holds no knowledge
                count = check.ignored_sections.get(item.section, 0) + 1
                check.ignored_sections[item.section] = count
                continue
            check.records += 1
            if isinstance(item, Skipped):
                check.skipped_kinds[item.kind] = check.skipped_kinds.get(item.kind, 0) + 1
                check.line({"line": item.line, "action": f"not_imported ({item.kind})"})
                continue
            if isinstance(item, ImportCard):
                admitted = self._admissible(item, options, check)
                if admitted is None:
                    continue  # folded into an identical earlier record
                item = admitted
            if isinstance(item, RecordError):
                self._invalid(check, item)
                continue
            batch.append(item)
            if len(batch) >= BATCH:
                classify()
                batch = []
                if progress:
                    progress("checked", check.records, None)
        if batch:
            classify()
        self._resolve_links(workspace, check, resolver)
        if progress:
            progress("checked", check.records, check.records)
        return check

    @staticmethod
    def _admissible(
        item: ImportCard, options: ImportOptions, check: _Check
    ) -> ImportCard | RecordError | None:
        """The record, an error, or None: a record identical to an earlier one of the
        file with the same key (a published file may repeat a row) counts once."""
        if options.family is not None and item.data.family != options.family:
            return RecordError(
                item.line,
                f"a {item.data.family} card in a file imported as {options.family} only (--family)",
                {"key": item.key, "family": item.data.family},
            )
        first = check.seen.get(item.key)
        if first is not None:
            if item.digest and check.digests.get(item.key) == item.digest:
                check.folded += 1
                check.line(
                    {"line": item.line, "key": item.key, "action": "folded", "duplicate_of": first}
                )
                return None
            return RecordError(
                item.line,
                f"duplicate of the record on line {first} (key {item.key}) with other content",
                {"duplicate_of": first},
            )
        check.seen[item.key] = item.line
        if item.digest:
            check.digests[item.key] = item.digest
        return item

    @staticmethod
    def _invalid(check: _Check, error: RecordError) -> None:
        check.error(error)
        key = error.details.get("key")
        if key is not None and key not in check.planned:
            check.invalid_keys.add(key)
        check.line({"line": error.line, "action": "invalid", "message": error.message})

    def _classify(
        self,
        workspace: str,
        batch: list[ImportCard],
        options: ImportOptions,
        check: _Check,
        resolver: _Resolver,
    ) -> None:
        with self.archive.transaction(workspace) as tx:
            resolver.learn(tx, {i.key for i in batch} | {t for i in batch for t, _ in i.links})
            uuids = {i.key: resolver.card_uuid(i.key) for i in batch}
            existing = tx.cards(list(uuids.values()))
        for item in batch:
            card_uuid = uuids[item.key]
            targets = {ref: resolver.card_uuid(ref) for ref, _ in item.links}
            if card_uuid in targets.values():
                self._invalid(
                    check, RecordError(item.line, "a card cannot link to itself", {"key": item.key})
                )
                continue
            action = self._action(item, existing.get(card_uuid), targets, options)
            if isinstance(action, RecordError):
                self._invalid(check, action)
                continue
            check.planned[item.key] = _Planned(item.line, card_uuid, action)
            if item.links:
                check.links[item.key] = [ref for ref, _ in item.links]
            check.line(
                {
                    "line": item.line,
                    "key": item.key,
                    "id": uuid_to_card_id(card_uuid),
                    "family": item.data.family,
                    "action": action,
                }
            )

    @staticmethod
    def _action(
        item: ImportCard,
        card: Card | None,
        targets: dict[str, uuid.UUID],
        options: ImportOptions,
    ) -> str | RecordError:
        if card is None:
            return "create"
        if _comparable_card(card) == _comparable_input(item, targets):
            return "unchanged"
        if options.on_conflict == "update":
            return "update"
        if options.on_conflict == "fail":
            return RecordError(
                item.line,
                f"card {card.id} already exists with other content (--on-conflict fail)",
                {"key": item.key, "id": card.id, "code": "conflict"},
            )
        return "skip"

    def _resolve_links(self, workspace: str, check: _Check, resolver: _Resolver) -> None:
        """Every link names a record of the file or a card of the workspace; a record
        linking to an invalid one is invalid too (its link could not be written)."""
        unknown = {ref for refs in check.links.values() for ref in refs if ref not in check.planned}
        for start in range(0, len(unknown), 1000):
            with self.archive.transaction(workspace) as tx:
                resolver.learn(tx, set(sorted(unknown)[start : start + 1000]))
        changed = True
        while changed:
            changed = False
            for key, refs in list(check.links.items()):
                planned = check.planned.get(key)
                if planned is None:
                    continue
                bad = [
                    ref
                    for ref in refs
                    if (ref not in check.planned or ref in check.invalid_keys)
                    and not resolver.in_workspace(ref)
                ]
                if bad:
                    del check.planned[key]
                    check.invalid_keys.add(key)
                    message = (
                        f"links to {bad[0]}, which is neither a valid record of the file nor a"
                        f" card of workspace '{workspace}'"
                    )
                    check.error(
                        RecordError(planned.line, message, {"key": key, "missing_targets": bad})
                    )
                    check.lines = [
                        e if e.get("key") != key else {**e, "action": "invalid", "message": message}
                        for e in check.lines
                    ]
                    changed = True

    def _write(
        self,
        workspace: str,
        open_source: Opener,
        options: ImportOptions,
        check: _Check,
        resolver: _Resolver,
        progress: Progress | None,
        stop: threading.Event,
        ahead: EmbeddingAhead | None,
        import_id: Callable[[], uuid.UUID],
    ) -> dict[str, Any]:
        """Three stages: a thread reads the file again, hands each batch's records to
        the embedding stage (records to create or update, unless the check pass already
        did) and writes the batch to the archive; a thread indexes what each committed
        batch created or updated, with the vectors computed ahead; this thread waits,
        reports progress, and at the end projects what had no vectors (cards an earlier,
        interrupted run wrote and did not index; an edit meanwhile; a failed embedder)
        through ``sync``. A Ctrl-C (here) stops the writer after its current batch;
        every batch it committed keeps its cards, pending for the index if not
        indexed yet."""
        run = _WritePass(self, workspace, options, check, resolver, stop, ahead, import_id)
        threads = [
            start_stage(lambda: run.write_archive(open_source), "import-archive"),
            start_stage(run.write_index, "import-index"),
        ]
        try:
            run.wait(threads, progress)
            run.finish(progress)
        except KeyboardInterrupt:
            run.stop_writing()
            raise run.interrupted() from None
        finally:
            run.stop_writing()  # nothing is written after this returns
        return {**run.counts, "index": run.index}

    def _write_batch(
        self,
        workspace: str,
        batch: list[ImportCard],
        options: ImportOptions,
        resolver: _Resolver,
        pending_links: dict[uuid.UUID, list[tuple[uuid.UUID, str]]],
        import_id: Callable[[], uuid.UUID],
    ) -> tuple[list[str], list[tuple[uuid.UUID, str]]]:
        """Under the workspace's lock: the batch's cards, links and projection
        operations. Returns each record's action and the cards to index (card, key):
        those created or updated, and those an interrupted run wrote, not indexed."""
        actions: list[str] = []
        with self.archive.transaction(workspace, lock=True) as tx:
            workspace_row = tx.workspace()
            if workspace_row is None:
                raise NotFound(f"workspace '{workspace}' does not exist")
            resolver.learn(tx, {i.key for i in batch} | {t for i in batch for t, _ in i.links})
            uuids = [resolver.card_uuid(i.key) for i in batch]
            existing = tx.cards(uuids)
            targets_of = [{ref: resolver.card_uuid(ref) for ref, _ in i.links} for i in batch]
            # the batch's cards first, then their links: a link may name a later card of it
            created: list[tuple[uuid.UUID, ImportCard]] = []
            revisions: dict[uuid.UUID, int] = {}
            for item, card_uuid, targets in zip(batch, uuids, targets_of, strict=True):
                found = self._action(item, existing.get(card_uuid), targets, options)
                if isinstance(found, RecordError):  # changed since the check
                    raise Conflict(found.message, details={"line": item.line, **found.details})
                actions.append(found)
                if found == "create":
                    created.append((card_uuid, item))
                    revisions[card_uuid] = item.revision or 1
                elif found == "update":
                    revisions[card_uuid] = tx.update_card(card_uuid, item.data)
            if created:
                tx.transfer.insert_cards(workspace_row.language, created, import_id())
            new = {card_uuid for card_uuid, _ in created}
            if replaced := [card_uuid for card_uuid in revisions if card_uuid not in new]:
                tx.transfer.mark_replaced(import_id(), replaced)
            to_project = _write_links(
                tx, _BatchCards(batch, uuids, targets_of, new, revisions), pending_links
            )
            if revisions:
                tx.transfer.enqueue_upserts(revisions)
        return actions, to_project

    def _project(self, workspace: str, card_uuids: list[uuid.UUID]) -> tuple[int, int]:
        """(indexed, left pending): a failing index leaves the cards saved, their
        operations pending and visible (as a save does)."""
        if self.projector is None:
            return 0, len(card_uuids)
        try:
            report = self.projector.sync(workspace, card_uuids)
        except ThothError:
            return 0, len(card_uuids)
        return report.indexed, len(report.failed)

    # --- the imports' records: list and undo -------------------------------------------

    def imports(self, workspace: str, import_id: str | None = None) -> dict[str, Any]:
        """The workspace's imports, newest first (at most ``MAX_LISTED_IMPORTS``), or
        the one ``import_id`` names: file, format, who, when, how it ended, its summary,
        the cards that still name it, and its undo if it was undone."""
        wanted = import_uuid(import_id) if import_id is not None else None
        with self.archive.transaction(workspace) as tx:
            if tx.workspace() is None:
                raise NotFound(
                    f"workspace '{workspace}' does not exist", details={"workspace": workspace}
                )
            rows = tx.transfer.imports(wanted, limit=MAX_LISTED_IMPORTS)
        if wanted is not None and not rows:
            raise NotFound(
                f"import {import_id} does not exist in workspace '{workspace}'",
                details={"import": import_id},
            )
        listed = [_import_document(row) for row in rows]
        return {"workspace": workspace, "imports": listed}

    def undo_import(
        self,
        workspace: str,
        import_id: str,
        *,
        force: bool = False,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Delete the cards the import created that nobody changed since (still at the
        revision it wrote), in batches of ``BATCH`` under the workspace's lock, each
        with its deletion's projection operation (the outbox, as ``memory delete``),
        then project the deletions. Kept and reported: a card edited since (a newer
        revision) and a card the import replaced (--on-conflict update: its earlier
        content is not kept, so there is nothing to restore). An interrupted undo is
        finished by running it again; the import is marked undone at the end."""
        wanted = import_uuid(import_id)
        name = import_to_id(wanted)
        with self.archive.transaction(workspace) as tx:
            if tx.workspace() is None:
                raise NotFound(
                    f"workspace '{workspace}' does not exist", details={"workspace": workspace}
                )
            row = tx.transfer.lock_import(wanted)
        if row is None:
            raise NotFound(
                f"import {name} does not exist in workspace '{workspace}'", details={"import": name}
            )
        if row["undone_at"] is not None:
            raise Conflict(
                f"import {name} was undone at {row['undone_at'].isoformat()}",
                details={"import": name, "undone_at": row["undone_at"].isoformat()},
            )
        if row["status"] == "running" and not force:
            raise Conflict(
                f"import {name} is still running, or its process died before it ended: undo"
                " it once it has ended, or with --force if its process is gone",
                details={"import": name, "status": "running"},
            )
        deleted: list[uuid.UUID] = []
        edited: list[str] = []
        replaced: list[str] = []
        links_removed = 0
        after = uuid.UUID(int=0)
        while True:
            with self.archive.transaction(workspace, lock=True) as tx:
                batch = tx.transfer.cards_of_import(wanted, after, BATCH)
                if not batch:
                    break
                after = batch[-1]["id"]
                gone, links = tx.transfer.delete_imported(wanted, [r["id"] for r in batch])
            deleted += gone
            links_removed += links
            for r in batch:
                if r["id"] in gone:
                    continue
                (replaced if r["import_action"] == "update" else edited).append(
                    uuid_to_card_id(r["id"])
                )
            if progress:
                progress("undone", len(deleted), None)
        index = {"removed": 0, "pending": 0}
        if deleted:
            index["pending"] = len(deleted)
            if self.projector is not None:
                try:
                    report = self.projector.sync(workspace, deleted)
                    index = {"removed": report.deleted, "pending": len(report.failed)}
                except ThothError:  # the operations stay pending, as after `memory delete`
                    pass
        undo = {
            "deleted": len(deleted),
            "kept_edited": len(edited),
            "kept_replaced": len(replaced),
            "links_removed": links_removed,
        }
        with self.archive.transaction(workspace) as tx:
            tx.transfer.mark_undone(wanted, _principal(), undo)
        return {
            "workspace": workspace,
            "import": name,
            "file": row.get("file_name"),
            **undo,
            # cards kept: edited since the import, or replaced by it (nothing to restore)
            "edited": edited[:MAX_REPORTED_ERRORS],
            "replaced": replaced[:MAX_REPORTED_ERRORS],
            "index": index,
        }

    # --- export ---------------------------------------------------------------------

    def export(
        self,
        workspace: str,
        fmt: str,
        write: Callable[[str], None],
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Write every card of the workspace, ordered by id, one document a line
        (``jsonl``) or a CSV row, as the workspace was when the export started.

        The count and every batch of ``BATCH`` cards are read in one read-only snapshot
        transaction: cards created, edited or deleted while a long export runs are
        written as they were, so every link in the file names a card of the file and the
        file re-imports whole. Writers are not blocked meanwhile (a snapshot takes no
        lock), and memory stays bounded: one batch is read and written at a time."""
        if fmt not in ("jsonl", "csv"):
            raise InvalidInput(f"export writes jsonl or csv, not '{fmt}'", details={"format": fmt})
        started = time.perf_counter()
        done = 0
        with self.archive.transaction(workspace, snapshot=True) as tx:
            if tx.workspace() is None:
                raise NotFound(
                    f"workspace '{workspace}' does not exist", details={"workspace": workspace}
                )
            total = tx.transfer.card_count()
            if fmt == "csv":
                write(_csv_line(list(CSV_COLUMNS)))
            after = uuid.UUID(int=0)
            while ids := tx.card_ids_after(after, BATCH):
                cards = tx.cards(ids)  # the snapshot holds every id it listed
                lines = []
                for card_uuid in ids:
                    document = export_document(cards[card_uuid])
                    lines.append(
                        json.dumps(document, ensure_ascii=False) + "\n"
                        if fmt == "jsonl"
                        else _csv_row(document)
                    )
                write("".join(lines))
                done += len(lines)
                after = ids[-1]
                if progress:
                    progress("exported", done, total)
        seconds = time.perf_counter() - started
        return {
            "workspace": workspace,
            "format": fmt,
            "cards": done,
            "seconds": round(seconds, 3),
        }


@dataclass(frozen=True)
class _BatchCards:
    """An import batch as its transaction wrote it: each record's card and link
    targets, the cards it created, and the revisions of those it created or updated."""

    records: list[ImportCard]
    uuids: list[uuid.UUID]
    targets_of: list[dict[str, uuid.UUID]]
    created: set[uuid.UUID]
    revisions: dict[uuid.UUID, int]


def _write_links(
    tx: ArchiveTx,
    batch: _BatchCards,
    pending_links: dict[uuid.UUID, list[tuple[uuid.UUID, str]]],
) -> list[tuple[uuid.UUID, str]]:
    """The batch's links (a link to a card of a later batch waits in ``pending_links``
    for it); the dependencies and links of the cards it updated, replaced as `memory
    update` replaces them. Returns the cards to index (card, key): those created or
    updated, and those an interrupted run wrote, not indexed."""
    to_project: list[tuple[uuid.UUID, str]] = []
    operations = tx.operations_for(batch.uuids)
    all_targets = {t for targets in batch.targets_of for t in targets.values()}
    present = tx.existing_cards(list(all_targets)) | set(batch.uuids)
    links: list[tuple[uuid.UUID, uuid.UUID, str]] = []
    for item, card_uuid, targets in zip(batch.records, batch.uuids, batch.targets_of, strict=True):
        outgoing = [(targets[ref], meaning) for ref, meaning in item.links]
        for target, meaning in outgoing:
            if target not in present:  # written with the batch that creates it
                pending_links.setdefault(target, []).append((card_uuid, meaning))
        now = sorted((t, m) for t, m in outgoing if t in present)
        if card_uuid in batch.created:
            links += [(card_uuid, target, meaning) for target, meaning in now]
        elif card_uuid in batch.revisions:  # updated: as `memory update` replaces them
            tx.replace_dependencies(card_uuid, item.data.dependencies)
            tx.replace_outgoing_links(card_uuid, now)
        if card_uuid in batch.revisions or card_uuid in operations:
            # operations of cards an interrupted run wrote but did not index
            to_project.append((card_uuid, item.key))
    links += [
        (source, target, meaning)
        for target in batch.uuids
        for source, meaning in pending_links.pop(target, [])
    ]
    if links:
        tx.transfer.add_links(links)
    return to_project


class _WritePass:
    """The write pass of one import (`CardTransfer._write`): the archive writer's and
    the index writer's stages, and what they share with the thread that waits."""

    def __init__(
        self,
        transfer: CardTransfer,
        workspace: str,
        options: ImportOptions,
        check: _Check,
        resolver: _Resolver,
        stop: threading.Event,
        ahead: EmbeddingAhead | None,
        import_id: Callable[[], uuid.UUID],
    ) -> None:
        self.transfer = transfer
        self.workspace = workspace
        self.options = options
        self.check = check
        self.resolver = resolver
        self.stop = stop
        self.ahead = ahead
        self.import_id = import_id
        self.counts: dict[str, Any] = {"create": 0, "update": 0, "skip": 0, "unchanged": 0}
        self.index: dict[str, Any] = {"indexed": 0, "pending": 0}
        self.total = len(check.planned)
        self.written = 0  # records in committed batches (the writer's count)
        self.committed: queue.Queue[_Committed | None] = queue.Queue(maxsize=INDEX_QUEUE)
        self.failures: list[BaseException] = []
        self.writing = threading.Lock()  # held by the writer for each batch
        self.unembedded: list[uuid.UUID] = []  # committed cards to project through sync
        self.statistics = _Statistics(transfer.archive, workspace)
        self.compactions = (
            ImportCompactions(
                transfer.projector.compactions,
                workspace,
                sum(_embeds(check, k) for k in check.planned),
            )
            if transfer.projector
            else None
        )

    # --- the archive writer's stage ------------------------------------------------------

    def write_archive(self, open_source: Opener) -> None:
        check, ahead = self.check, self.ahead
        pending_links: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = {}
        batch: list[ImportCard] = []
        try:
            check.sql.parsing = False  # the check pass's verdicts, not parsed again
            for item in self.transfer._records(open_source, self.options, check.sql):
                if not isinstance(item, ImportCard):
                    continue
                planned = check.planned.get(item.key)
                if planned is None or planned.line != item.line:
                    continue  # invalid, or a later duplicate (--continue)
                batch.append(item)
                if len(batch) >= BATCH and not self._commit(batch, pending_links):
                    return
            if batch:
                self._commit(batch, pending_links)
        except BaseException as exc:
            self.failures.append(exc)
        finally:
            hand_over(self.committed, None, self.stop)
            if ahead is not None:
                ahead.end()

    def _commit(
        self, batch: list[ImportCard], pending_links: dict[uuid.UUID, list[tuple[uuid.UUID, str]]]
    ) -> bool:
        """Writes the batch and hands it to the index writer; False: stop writing."""
        check, ahead = self.check, self.ahead
        if ahead is not None and not ahead.feed(
            [i for i in batch if i.line > ahead.fed_through and _embeds(check, i)],
            wait=True,
        ):
            return False
        with self.writing:
            if self.stop.is_set():
                return False
            actions, to_project = self.transfer._write_batch(
                self.workspace, batch, self.options, self.resolver, pending_links, self.import_id
            )
            for action in actions:
                self.counts[action] += 1
            self.written += len(batch)
        self.statistics.wrote(sum(1 for a in actions if a in ("create", "update")))
        last_line = batch[-1].line
        batch.clear()
        pause_point("import.after_batch")
        return hand_over(self.committed, _Committed(last_line, to_project), self.stop)

    # --- the index writer's stage --------------------------------------------------------

    def write_index(self) -> None:
        """What each committed batch created or updated, with its vectors; up to a
        projector chunk at a time while the writer is ahead."""
        prepared: dict[uuid.UUID, Prepared] = {}
        last_line = 0
        try:
            while (done := take_over(self.committed, self.stop)) is not None:
                last_line = done.last_line
                self._prepare(done, prepared)
                if len(prepared) >= pipeline.CHUNK or self.committed.empty():
                    self._index(prepared, last_line)
            self._index(prepared, last_line)
        except BaseException as exc:
            self.failures.append(exc)
            self.stop.set()

    def _prepare(self, done: _Committed, prepared: dict[uuid.UUID, Prepared]) -> None:
        """The committed batch's cards with vectors go to ``prepared``, the others to
        ``unembedded``."""
        ahead = self.ahead
        keys = [key for _, key in done.to_project if _embeds(self.check, key)]
        vectors = ahead.vectors(keys) if ahead is not None else {}
        for card_uuid, key in done.to_project:
            if key in vectors:
                prepared[card_uuid] = vectors[key]
            else:
                self.unembedded.append(card_uuid)

    def _index(self, prepared: dict[uuid.UUID, Prepared], last_line: int) -> None:
        ahead = self.ahead
        if prepared:
            projector = self.transfer.projector
            assert projector is not None
            try:
                indexed, left = projector.write_embedded(
                    self.workspace, ahead.language if ahead else "", dict(prepared)
                )
            except ThothError:  # an index unavailable: sync records it
                indexed, left = 0, list(prepared)
            self.index["indexed"] += indexed
            self.unembedded.extend(left)
            prepared.clear()
            if self.compactions is not None:
                self.compactions.indexed(indexed)
        if ahead is not None:
            ahead.release_through(last_line)

    # --- the waiting thread --------------------------------------------------------------

    def wait(self, threads: list[Stage], progress: Progress | None) -> None:
        """Until both stages end, reporting progress."""
        reported = (0, 0)
        while any(thread.running() for thread in threads):
            threads[1].wait(0.25)  # Ctrl-C reaches the main thread (see the flag below)
            if self.ahead is not None and self.ahead.interrupted.is_set():
                raise KeyboardInterrupt  # reached the main thread, which embeds
            now = (self.written, self.index["indexed"])
            if progress and now != reported:
                if now[0] != reported[0]:
                    progress("imported", now[0], self.total)
                if now[1] != reported[1]:
                    progress("indexed", now[1], None)
                reported = now

    def finish(self, progress: Progress | None) -> None:
        """Projects what had no vectors, compacts the index, raises the first failure."""
        index, ahead, compactions = self.index, self.ahead, self.compactions
        # also when the writer failed: what it committed is indexed
        if self.unembedded:
            indexed, pending = self.transfer._project(self.workspace, self.unembedded)
            index["indexed"] += indexed
            index["pending"] += pending
        done = index["indexed"] + index["pending"]
        if progress and done:  # the last count, never left out by the meter's pace
            progress("indexed", done, done)
        if compactions is not None and (index["indexed"] or compactions.owed):
            # what it wrote is searched by brute force until the engine indexes it
            starting = (lambda points: progress("compacting", points, None)) if progress else None
            interrupted = ahead.interrupted if ahead is not None else None
            if (compacted := compactions.finish(starting, interrupted)) is not None:
                index["compaction_failed" if "failed" in compacted else "compacted"] = compacted
        failures = self.failures + (ahead.failures if ahead is not None else [])
        if ahead is not None and ahead.interrupted.is_set():
            raise KeyboardInterrupt
        if failures:  # a Ctrl-C that reached the writer is an interruption too
            raise failures[0]

    def stop_writing(self) -> None:
        self.stop.set()  # the writer stops before its next batch
        with self.writing:  # the batch being written is committed (or rolled back) first
            pass

    def interrupted(self) -> Interrupted:
        return Interrupted(
            f"interrupted after {self.written} of {self.total} records: every batch written so"
            " far is committed (one in progress when interrupted is finished). Rerun the same"
            " command to finish: it is idempotent (written records are skipped as unchanged,"
            " their index entries completed)",
            details={
                "written": self.written,
                "total": self.total,
                "resume": "rerun the same command",
                **{k: v for k, v in self.counts.items()},
            },
        )


def export_document(card: Card) -> dict[str, Any]:
    """The card as ``show`` prints it, without what is not the card's own: the links
    of other cards to it (each is exported with its source), the index state and the
    import that wrote it here (an import elsewhere records its own)."""
    document = card.as_json()
    document.pop("incoming_links", None)
    document.pop("index", None)
    document.pop("imported", None)
    return document


def _principal() -> str | None:
    principal = audit.actor()
    return principal[:100] if principal else None


def _import_document(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": import_to_id(row["id"]),
        "file": row["file_name"],
        "format": row["format"],
        "by": row["principal"],
        "status": row["status"],
        "started_at": row["started_at"].isoformat(),
        "finished_at": row["finished_at"].isoformat() if row["finished_at"] else None,
        "cards": row["cards"],  # cards that still name it
        "summary": row["summary"],
        "undone": None
        if row["undone_at"] is None
        else {"at": row["undone_at"].isoformat(), "by": row["undone_by"], **(row["undo"] or {})},
    }


def _csv_line(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


def _csv_row(document: dict[str, Any]) -> str:
    cells = []
    for column in CSV_COLUMNS:
        value = document.get(column)
        if column == "links" and value is not None:
            value = [{"target": x["target"], "meaning": x["meaning"]} for x in value]
        if value is None or (value == [] and column in ("concepts", "dependencies", "links")):
            cells.append("")
        elif column in CSV_JSON_COLUMNS:
            cells.append(json.dumps(value, ensure_ascii=False))
        else:
            # a spreadsheet must not run a card's text as a formula; import restores it
            cells.append(neutralized_cell(str(value)))
    return _csv_line(cells)
