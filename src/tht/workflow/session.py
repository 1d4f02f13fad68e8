"""The session directory: reading the ledger, appending to it, recording proposals.

The ledger belongs to the workflow and is append-only: Memory appends one line with
O_APPEND under an exclusive ``flock`` (checking, under the same lock, that the event
is not already there), then fsyncs. A final line without its newline (a writer that
died mid-line) is ignored by readers, and the next append starts on a new line.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from tht.errors import ConfigurationError, InvalidInput, NotFound, ThothError
from tht.memory.model import MAX_DOCUMENT_BYTES, card_id_to_uuid
from tht.validation import describe_validation_error, validation_details
from tht.workflow.contract import (
    DecisionEvent,
    LedgerEvent,
    MemoryDecidedEvent,
    MemorySummaryReviewedEvent,
    ProposalsFile,
    check_session_id,
)

LEDGER = "ledger.jsonl"
PROPOSALS = "memory_proposals.json"
MAX_LEDGER_BYTES = 64 * 1024 * 1024
_EVENT = TypeAdapter(LedgerEvent)


@dataclass(frozen=True)
class Ledger:
    events: list[Any]

    def decisions(self) -> dict[str, DecisionEvent]:
        """Each decision's effective state: its last event, superseded when a later
        approved decision says so."""
        latest: dict[str, DecisionEvent] = {}
        for event in self.events:
            if isinstance(event, DecisionEvent):
                latest[event.id] = event
        superseded = {
            old for d in latest.values() if d.status == "approved" for old in d.supersedes
        }
        return {
            i: (d.model_copy(update={"status": "superseded"}) if i in superseded else d)
            for i, d in latest.items()
        }

    def decided_cards(self) -> set[str]:
        """Cards this session already decided on: used or dismissed at a gate, or saved
        by its reviewed summary."""
        cards = {e.card for e in self.events if isinstance(e, MemoryDecidedEvent)}
        for event in self.events:
            if isinstance(event, MemorySummaryReviewedEvent):
                cards.update(c.card for c in event.cards)
        return cards

    def reviewed(self) -> MemorySummaryReviewedEvent | None:
        return next((e for e in self.events if isinstance(e, MemorySummaryReviewedEvent)), None)


class SessionStore:
    def __init__(self, root: Path | None) -> None:
        self.root = root

    def directory(self, session: str, *, must_exist: bool = True) -> Path:
        if self.root is None:
            raise ConfigurationError(
                "the runtime file has no sessions_root: the session directory is unknown"
            )
        check_session_id(session)
        root = Path(self.root).expanduser()
        path = root / session
        # the id is one plain segment; still, never leave the root (a symlinked session)
        if must_exist and path.exists() and root.resolve() not in path.resolve().parents:
            raise InvalidInput(f"session {session} resolves outside the sessions root")
        if must_exist and not path.is_dir():
            raise NotFound(
                f"session {session} has no directory in {root}", details={"session": session}
            )
        return path

    # --- the ledger ---------------------------------------------------------------

    def ledger(self, session: str) -> Ledger:
        path = self.directory(session) / LEDGER
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_LEDGER_BYTES + 1)
        except FileNotFoundError:
            return Ledger([])
        except OSError as exc:
            raise InvalidInput(
                f"cannot read the ledger of session {session}: {exc.strerror}"
            ) from exc
        if len(raw) > MAX_LEDGER_BYTES:
            raise InvalidInput(
                f"the ledger of session {session} is larger than {MAX_LEDGER_BYTES} bytes"
            )
        return Ledger(_parse_ledger(raw, session))

    def append_once(
        self, session: str, event: dict[str, Any], present: Callable[[Ledger], bool]
    ) -> bool:
        """Append ``event`` unless ``present(ledger)`` says it is there already (both
        under one exclusive lock). Returns whether it appended."""
        _EVENT.validate_python(event)
        path = self.directory(session) / LEDGER
        line = (
            json.dumps(event, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
            + b"\n"
        )
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ThothError(
                f"cannot open the ledger of session {session} for appending: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            raw = os.pread(fd, min(size, MAX_LEDGER_BYTES), 0) if size else b""
            if present(Ledger(_parse_ledger(raw, session))):
                return False
            if raw and not raw.endswith(b"\n"):
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
            return True
        except OSError as exc:
            raise ThothError(
                f"cannot append to the ledger of session {session}: {exc.strerror}"
            ) from exc
        finally:
            os.close(fd)  # releases the lock

    def decided_cards(self, session: str) -> frozenset[uuid.UUID]:
        """Memory already decided in the session (excluded from its recall)."""
        check_session_id(session)
        self.directory(session)
        return frozenset(card_id_to_uuid(c) for c in self.ledger(session).decided_cards())

    # --- proposals ----------------------------------------------------------------

    def proposals(self, session: str) -> ProposalsFile | None:
        path = self.directory(session) / PROPOSALS
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror}") from exc
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise InvalidInput(f"{path} is larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            return ProposalsFile.model_validate_json(raw)
        except ValidationError as exc:
            raise InvalidInput(
                f"{path} is invalid: {describe_validation_error(exc)}",
                details=validation_details(exc),
            ) from exc

    def write_proposals(self, session: str, proposals: ProposalsFile) -> Path:
        """Replace the session's proposals atomically (write, fsync, rename)."""
        directory = self.directory(session)
        target = directory / PROPOSALS
        text = proposals.model_dump_json(indent=2, exclude_none=True) + "\n"
        try:
            fd, temporary = tempfile.mkstemp(prefix=".memory_proposals.", dir=directory)
        except OSError as exc:
            raise ThothError(
                f"cannot write the proposals of session {session}: {exc.strerror}"
            ) from exc
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
        except BaseException as exc:
            Path(temporary).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise ThothError(
                    f"cannot write the proposals of session {session}: {exc.strerror}"
                ) from exc
            raise
        return target

    def sessions(self) -> list[str]:
        """Session ids under the root that hold proposals (for the reviewer's page)."""
        if self.root is None:
            return []
        root = Path(self.root).expanduser()
        if not root.is_dir():
            return []
        found = []
        for entry in sorted(root.iterdir()):
            try:
                check_session_id(entry.name)
            except InvalidInput:
                continue
            if entry.is_dir() and (entry / PROPOSALS).is_file():
                found.append(entry.name)
        return found


def _parse_ledger(raw: bytes, session: str) -> list[Any]:
    lines = raw.split(b"\n")
    if lines and lines[-1] != b"":
        lines = lines[:-1]  # a line without its newline: a writer died mid-line
    events = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(_EVENT.validate_json(line))
        except ValidationError as exc:
            raise InvalidInput(
                f"line {number} of the ledger of session {session} is not a valid event:"
                f" {describe_validation_error(exc)}",
                details={"line": number},
            ) from exc
    return events
