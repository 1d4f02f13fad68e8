"""The session directories: reading the ledger, appending to it, recording proposals.

A session belongs to a workspace: its directory is ``<sessions_root>/<workspace>/<session>/``.

The ledger belongs to the workflow and is append-only: Memory appends one line with
O_APPEND under an exclusive ``flock`` (checking, under the same lock, that the event
is not already there), then fsyncs. A final line without its newline (a writer that
died mid-line) is ignored by readers, and the next append starts on a new line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import stat
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from tht.errors import InvalidInput, NotFound, ThothError
from tht.memory.model import MAX_DOCUMENT_BYTES, card_id_to_uuid
from tht.validation import describe_validation_error, validation_details
from tht.workflow.contract import (
    DecisionEvent,
    LedgerEvent,
    MemoryDecidedEvent,
    MemorySummaryReviewedEvent,
    ProposalsFile,
    check_session_id,
    check_workspace_id,
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
    """The workflow's session directories: ``<root>/<workspace>/<session>/``. Every
    access names its workspace and stays inside that workspace's directory, so one
    workspace never reads or writes another's session, whatever session id it sends."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    def session(self, workspace: str, session: str) -> SessionFiles:
        """The files of one session of ``workspace`` (nothing is read yet)."""
        check_workspace_id(workspace)
        check_session_id(session)
        if self.root is None:
            raise NotFound(
                f"session {session} does not exist: this installation has no sessions_root"
                " (`sessions_root:` in its configuration)",
                details={"session": session, "reason": "no_sessions_root"},
            )
        return SessionFiles(Path(self.root).expanduser(), workspace, session)

    def sessions(self, workspace: str) -> list[str]:
        """Session ids of ``workspace`` that hold proposals (for the reviewer's page)."""
        check_workspace_id(workspace)
        if self.root is None:
            return []
        try:
            root = os.open(Path(self.root).expanduser(), os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return []
        try:
            directory = _open_directory(workspace, root)
        except OSError:
            return []  # no session yet, or not a directory of its own (a symbolic link)
        finally:
            os.close(root)
        found = []
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if not _is_session_id(entry.name) or not entry.is_dir(follow_symlinks=False):
                        continue
                    try:
                        proposals = os.stat(
                            f"{entry.name}/{PROPOSALS}", dir_fd=directory, follow_symlinks=False
                        )
                    except OSError:
                        continue
                    if stat.S_ISREG(proposals.st_mode):
                        found.append(entry.name)
        finally:
            os.close(directory)
        return sorted(found)


@dataclass(frozen=True)
class SessionFiles:
    """One session's directory ``<root>/<workspace>/<id>/`` and its files. The
    directory is opened anew for each access, following no symbolic link below the
    root: a workspace or session directory that is a link (out of the root, or to
    another workspace's session) is refused, and so are a linked ledger or proposals
    file. Messages name the session, never the service's paths."""

    root: Path
    workspace: str
    id: str

    @property
    def name(self) -> str:
        """The directory relative to the sessions root."""
        return f"{self.workspace}/{self.id}"

    def require(self) -> None:
        """Refuse a session without a directory of its own in its workspace."""
        with self._directory():
            pass

    # --- the ledger ---------------------------------------------------------------

    def ledger(self) -> Ledger:
        with self._directory() as directory:
            try:
                fd = os.open(LEDGER, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
            except FileNotFoundError:
                return Ledger([])
            except OSError as exc:
                raise self._unreadable("the ledger", exc) from exc
            try:
                with os.fdopen(fd, "rb") as handle:
                    raw = handle.read(MAX_LEDGER_BYTES + 1)
            except OSError as exc:
                raise self._unreadable("the ledger", exc) from exc
        if len(raw) > MAX_LEDGER_BYTES:
            raise InvalidInput(
                f"the ledger of session {self.id} is larger than {MAX_LEDGER_BYTES} bytes"
            )
        return Ledger(_parse_ledger(raw, self.id))

    def append_once(self, event: dict[str, Any], present: Callable[[Ledger], bool]) -> bool:
        """Append ``event`` unless ``present(ledger)`` says it is there already (both
        under one exclusive lock). Returns whether it appended."""
        _EVENT.validate_python(event)
        line = (
            json.dumps(event, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
            + b"\n"
        )
        with self._directory() as directory:
            try:
                fd = os.open(
                    LEDGER,
                    os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                    0o644,
                    dir_fd=directory,
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._unreadable("the ledger", exc) from exc
                raise ThothError(
                    f"cannot open the ledger of session {self.id} for appending: {exc.strerror}"
                ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            raw = os.pread(fd, min(size, MAX_LEDGER_BYTES), 0) if size else b""
            if present(Ledger(_parse_ledger(raw, self.id))):
                return False
            if raw and not raw.endswith(b"\n"):
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
            return True
        except OSError as exc:
            raise ThothError(
                f"cannot append to the ledger of session {self.id}: {exc.strerror}"
            ) from exc
        finally:
            os.close(fd)  # releases the lock

    def decided_cards(self) -> frozenset[uuid.UUID]:
        """Memory already decided in the session (excluded from its recall)."""
        return frozenset(card_id_to_uuid(c) for c in self.ledger().decided_cards())

    # --- proposals ----------------------------------------------------------------

    def proposals(self) -> ProposalsFile | None:
        where = f"{self.name}/{PROPOSALS}"
        with self._directory() as directory:
            try:
                fd = os.open(PROPOSALS, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise self._unreadable(PROPOSALS, exc) from exc
            try:
                with os.fdopen(fd, "rb") as handle:
                    raw = handle.read(MAX_DOCUMENT_BYTES + 1)
            except OSError as exc:
                raise self._unreadable(PROPOSALS, exc) from exc
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise InvalidInput(f"{where} is larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            return ProposalsFile.model_validate_json(raw)
        except ValidationError as exc:
            raise InvalidInput(
                f"{where} is invalid: {describe_validation_error(exc)}",
                details=validation_details(exc),
            ) from exc

    def write_proposals(self, proposals: ProposalsFile) -> str:
        """Replace the session's proposals atomically (write, fsync, rename); the file
        written, relative to the sessions root."""
        text = (proposals.model_dump_json(indent=2, exclude_none=True) + "\n").encode()
        temporary = f".memory_proposals.{secrets.token_hex(8)}"
        with self._directory() as directory:
            try:
                fd = os.open(
                    temporary,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                    0o600,
                    dir_fd=directory,
                )
            except OSError as exc:
                raise ThothError(
                    f"cannot write the proposals of session {self.id}: {exc.strerror}"
                ) from exc
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(text)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temporary, PROPOSALS, src_dir_fd=directory, dst_dir_fd=directory)
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=directory)
                if isinstance(exc, OSError):
                    raise ThothError(
                        f"cannot write the proposals of session {self.id}: {exc.strerror}"
                    ) from exc
                raise
        return f"{self.name}/{PROPOSALS}"

    # --- the directory ------------------------------------------------------------

    @contextmanager
    def _directory(self) -> Iterator[int]:
        """The session directory, opened: the root as the operator named it (it may
        be a link), then the workspace's and the session's directories without
        following a link."""
        try:
            root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise self._missing() from exc
        try:
            workspace = self._open(self.workspace, root)
        finally:
            os.close(root)
        try:
            directory = self._open(self.id, workspace)
        finally:
            os.close(workspace)
        try:
            yield directory
        finally:
            os.close(directory)

    def _open(self, name: str, parent: int) -> int:
        try:
            return _open_directory(name, parent)
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and _is_link(name, parent):
                raise InvalidInput(
                    f"the directory of session {self.id} in workspace '{self.workspace}' is a"
                    " symbolic link: a session is a directory of its workspace's own directory"
                    " under the sessions root",
                    details={
                        "workspace": self.workspace,
                        "session": self.id,
                        "reason": "symbolic_link",
                    },
                ) from exc
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                raise self._missing() from exc
            raise ThothError(
                f"cannot open the directory of session {self.id}: {exc.strerror}"
            ) from exc

    def _missing(self) -> NotFound:
        return NotFound(
            f"session {self.id} has no directory in the sessions of workspace '{self.workspace}'",
            details={"workspace": self.workspace, "session": self.id},
        )

    def _unreadable(self, what: str, exc: OSError) -> InvalidInput:
        if exc.errno == errno.ELOOP:
            return InvalidInput(
                f"{what} of session {self.id} is a symbolic link: refused",
                details={"session": self.id, "reason": "symbolic_link"},
            )
        return InvalidInput(f"cannot read {what} of session {self.id}: {exc.strerror}")


def _open_directory(name: str, parent: int) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)


def _is_link(name: str, parent: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _is_session_id(name: str) -> bool:
    try:
        check_session_id(name)
    except InvalidInput:
        return False
    return True


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
