"""The recall log: every recall an agent makes (on every face), written off the
request's path, bounded per workspace, read by administrators only.

A recall hands its question, command, principal, session and the cards it returned
to ``RecallLog.record``, which only appends to a queue (microseconds: the recall's
whole cost). A writer thread of this process takes the queue every half second (or
at once when ``flush`` asks, or in a command's own process): per workspace, one
transaction with one multi-row insert, committed without waiting for the disk
(``synchronous_commit = off``: a crash may lose the last half second of the log, never
the archive's data). It also computes, off the request's path, the question's BM25
terms (the workspace's analyzer: what groups similar questions) and the share of them
the first result's indexed terms hold, each term weighted by its IDF among the
workspace's cards (``coverage``: what tells a weak recall, see ``tht.memory.gaps``).

Bounds: ``max_entries`` per workspace (past it the oldest are deleted, counted as
``dropped``), ``retention_days`` (older entries are deleted, counted as ``expired``),
and at most ``QUEUE_BOUND`` recalls waiting for the writer (past it, or when the
archive cannot take them, they are counted as ``lost``). The counts are the
workspace's ``recall_log_state``.

The log never fails a recall: a write that fails is logged and counted.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from tht.errors import NotFound, ThothError
from tht.memory.archive.port import Archive, LogRow
from tht.memory.embedding.sparse import SparseEncoder
from tht.memory.model import card_id_to_uuid, uuid_to_card_id
from tht.memory.projection_format import searchable

if TYPE_CHECKING:
    from tht.memory.recall_service import RecallResult

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.5  # how long a recall waits, at most, in the queue before it is written
BATCH = 2_000  # recalls per write at most
QUEUE_BOUND = 20_000  # recalls waiting for the writer at most; past it they are lost (counted)
EXPIRY_SECONDS = 60.0  # how often a workspace's expired entries are deleted
IDF_SECONDS = 300.0  # how long the writer keeps a workspace's term frequencies
MAX_TEXT = 2_000  # a question or an error is kept up to this many characters
MAX_SESSION = 200
MAX_LOG_ID = 2**63 - 1  # entries are numbered by a bigint identity


class RecallLogSettings(Protocol):
    """The installation's ``recall_log`` section (tht.installation.RecallLogConfig)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def retention_days(self) -> int: ...
    @property
    def max_entries(self) -> int: ...


@dataclass(frozen=True)
class LoggedRecall:
    workspace: str
    command: str  # search, rules, solved
    question: str | None
    error: str | None  # `rules --error`: the database error
    session: str | None
    principal: str | None
    returned: tuple[str, ...]  # card ids, best first
    scores: tuple[float | None, ...]  # None: an exact error-signature match (no rank score)
    exact: bool = False  # `rules --error` found explained errors of the same signature
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class ProposedAfter:
    """The session proposed a new card: its recalls so far ended in a proposal."""

    workspace: str
    session: str
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


def logged(
    workspace: str,
    command: str,
    question: str | None,
    results: Sequence[RecallResult] | Sequence[dict[str, Any]],
    *,
    error: str | None = None,
    session: str | None = None,
    principal: str | None = None,
    exact: bool = False,
) -> LoggedRecall:
    """What the log keeps of one recall: its results as recall returned them, or as
    the answer's JSON (``rules --error``)."""
    ids: list[str] = []
    scores: list[float | None] = []
    for result in results:
        if isinstance(result, dict):
            ids.append(result["id"])
            scores.append(None if result.get("score") is None else float(result["score"]))
        else:
            ids.append(result.card.id)
            scores.append(float(result.ranked.score))
    return LoggedRecall(
        workspace,
        command,
        _cut(question),
        _cut(error),
        session[:MAX_SESSION] if session else None,
        principal[:100] if principal else None,
        tuple(ids),
        tuple(scores),
        exact,
    )


def _cut(text: str | None) -> str | None:
    text = (text or "").strip()
    return text[:MAX_TEXT] if text else None


def coverage(
    question_terms: set[int],
    first_terms: Sequence[int] | None,
    frequencies: Mapping[int, int],
    cards: int,
) -> float | None:
    """The share of the question's terms the first result's indexed terms hold, each
    term weighted by its IDF among the workspace's cards, ln(1 + cards / cards holding
    it): a term no card holds weighs nothing (a value, a name the data holds), one only
    the first card holds weighs the most (a card newer than the frequencies counts as
    one). None: no result, or nothing to compare (a question of stop words only, a
    projection recorded without its terms)."""
    if not question_terms or first_terms is None:
        return None
    first = set(first_terms)
    total = max(cards, 1)

    def weight(term: int) -> float:
        held = frequencies.get(term, 0) or (1 if term in first else 0)
        return math.log(1 + total / held) if held else 0.0

    weights = {term: weight(term) for term in question_terms}
    whole = sum(weights.values())
    if whole == 0:
        return 0.0
    return sum(w for term, w in weights.items() if term in first) / whole


class RecallLog:
    """``whole_frequencies``: the writer reads the workspace's whole term table and keeps
    it ``IDF_SECONDS`` (a long-lived process: one read serves many batches); without
    it, each write reads the counts of its questions' terms only (a command in its own
    process writes one batch: the whole table would cost it more than the recall).
    ``gather`` False: the writer writes what it finds at once instead of waiting for a
    batch (a command in its own process records one recall, and its write then overlaps
    the answer's output and the closing of the index)."""

    def __init__(
        self,
        archive: Archive,
        settings: RecallLogSettings,
        *,
        whole_frequencies: bool = True,
        gather: bool = True,
    ) -> None:
        self.archive = archive
        self.settings = settings
        self.whole_frequencies = whole_frequencies
        self.gather = gather
        self._queue: deque[LoggedRecall | ProposedAfter] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._flushing = 0  # callers waiting in flush(): write at once
        self._queued = 0  # items ever queued
        self._done = 0  # items ever written (or given up)
        self._lost: Counter[str] = Counter()  # per workspace, not yet counted in the archive
        self._languages: dict[str, str] = {}
        self._encoders: dict[str, SparseEncoder] = {}
        self._entries: dict[str, int] = {}  # per workspace, entries as last counted + written
        # per workspace: (read at, term -> cards holding it, cards)
        self._frequencies: dict[str, tuple[float, dict[int, int], int]] = {}
        self._expired_at: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    # --- the request's side: append, never wait ----------------------------------------

    def record(self, recall: LoggedRecall) -> None:
        if self.settings.enabled:
            self._put(recall)

    def proposed(self, workspace: str, session: str) -> None:
        """The session proposed a new card: mark its recalls so far."""
        if self.settings.enabled:
            self._put(ProposedAfter(workspace, session))

    def _put(self, item: LoggedRecall | ProposedAfter) -> None:
        with self._cond:
            if self._stopping or len(self._queue) >= QUEUE_BOUND:
                if isinstance(item, LoggedRecall):
                    self._lost[item.workspace] += 1
                return
            self._queue.append(item)
            self._queued += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._write_loop, name="tht-recall-log", daemon=True
                )
                self._thread.start()
            # the writer waits for a first item, then for a batch (or its moment):
            # woken for those only, not by every recall
            if len(self._queue) == 1 or len(self._queue) >= BATCH:
                self._cond.notify_all()

    # --- the readers' side -------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until what was queued before this call is written (True), at most
        ``timeout`` seconds: an administrator reads the log as recalls left it."""
        with self._cond:
            target = self._queued
            if self._done >= target or self._thread is None:
                return True
            self._flushing += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: self._done >= target, timeout)
            finally:
                self._flushing -= 1

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self.flush()
        with self._cond:
            self._stopping = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout=30)

    def pending_lost(self, workspace: str) -> int:
        """Recalls of the workspace this process could not log and has not counted in
        the archive yet."""
        with self._cond:
            return self._lost.get(workspace, 0)

    # --- the writer --------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if not self._queue and self._stopping:
                    return
                if self.gather:  # for a moment: one transaction for many recalls
                    self._cond.wait_for(
                        lambda: len(self._queue) >= BATCH or self._flushing or self._stopping,
                        FLUSH_SECONDS,
                    )
                batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
            try:
                self._write(batch)
            except Exception:  # the log never stops: what failed is counted as lost
                log.exception("the recall log could not write %d entries", len(batch))
            with self._cond:
                self._done += len(batch)
                self._cond.notify_all()

    def _write(self, batch: list[LoggedRecall | ProposedAfter]) -> None:
        by_workspace: dict[str, list[LoggedRecall | ProposedAfter]] = {}
        for item in batch:
            by_workspace.setdefault(item.workspace, []).append(item)
        with self._cond:
            for workspace in self._lost:
                by_workspace.setdefault(workspace, [])
        for workspace, items in by_workspace.items():
            recalls = [i for i in items if isinstance(i, LoggedRecall)]
            try:
                self._write_workspace(workspace, items)
            except NotFound:
                log.warning(
                    "recall log: workspace %s is gone; %d entries dropped", workspace, len(recalls)
                )
            except ThothError as exc:
                with self._cond:
                    self._lost[workspace] += len(recalls)
                log.warning(
                    "recall log: %d entries of workspace %s not written: %s",
                    len(recalls),
                    workspace,
                    exc.message,
                )

    def _write_workspace(self, workspace: str, items: list[LoggedRecall | ProposedAfter]) -> None:
        recalls = [i for i in items if isinstance(i, LoggedRecall)]
        with self._cond:
            lost = self._lost.pop(workspace, 0)
        try:
            with self.archive.transaction(workspace) as tx:
                records = tx.curation
                records.commit_without_waiting()
                if workspace not in self._languages:
                    self._languages[workspace] = tx.require_workspace().language
                encoder = self._encoder(self._languages[workspace])
                firsts = [card_id_to_uuid(r.returned[0]) for r in recalls if r.returned]
                terms_of = records.projection_terms(list(dict.fromkeys(firsts)))
                questions = [
                    set(encoder.encode_query(searchable(r.question or r.error or "")).indices)
                    for r in recalls
                ]
                frequencies, cards = self._term_frequencies(
                    workspace, records, set[int]().union(*questions)
                )
                rows = []
                for recall, asked in zip(recalls, questions, strict=True):
                    first = (
                        terms_of.get(card_id_to_uuid(recall.returned[0]))
                        if recall.returned
                        else None
                    )
                    rows.append(
                        LogRow(
                            at=recall.at,
                            principal=recall.principal,
                            command=recall.command,
                            question=recall.question,
                            error=recall.error,
                            session=recall.session,
                            returned=[card_id_to_uuid(i) for i in recall.returned],
                            scores=list(recall.scores),
                            terms=sorted(asked),
                            # an exact error-signature match answers the error
                            coverage=1.0
                            if recall.exact
                            else coverage(asked, first, frequencies, cards),
                        )
                    )
                records.insert_log(rows)
                for item in items:
                    if isinstance(item, ProposedAfter):
                        records.mark_proposed(item.session, item.at)
                dropped = self._keep_bound(workspace, records, len(rows))
                expired = self._expire(workspace, records)
                if dropped or expired or lost:
                    records.add_to_state(dropped=dropped, expired=expired, lost=lost)
        except BaseException:
            with self._cond:
                self._lost[workspace] += lost  # counted again at the next write
            self._entries.pop(workspace, None)
            raise

    def _term_frequencies(
        self, workspace: str, records: Any, asked: set[int]
    ) -> tuple[dict[int, int], int]:
        if not self.whole_frequencies:
            counted: tuple[dict[int, int], int] = records.term_frequencies(sorted(asked))
            return counted
        known = self._frequencies.get(workspace)
        if known is None or time.monotonic() - known[0] > IDF_SECONDS:
            frequencies, cards = records.term_frequencies()
            known = self._frequencies[workspace] = (time.monotonic(), frequencies, cards)
        return known[1], known[2]

    def _encoder(self, language: str) -> SparseEncoder:
        if language not in self._encoders:
            self._encoders[language] = SparseEncoder(language)
        return self._encoders[language]

    def _keep_bound(self, workspace: str, records: Any, written: int) -> int:
        """Delete the oldest entries past the bound; how many. The entries are counted
        once per workspace, then followed as they are written (another replica's
        writes are seen when this one deletes: the delete counts the real rows)."""
        if workspace not in self._entries:
            self._entries[workspace] = records.log_count()
        else:
            self._entries[workspace] += written
        if self._entries[workspace] <= self.settings.max_entries:
            return 0
        dropped: int = records.drop_oldest(self.settings.max_entries)
        self._entries[workspace] = self.settings.max_entries
        return dropped

    def _expire(self, workspace: str, records: Any) -> int:
        now = time.monotonic()
        if now - self._expired_at.get(workspace, float("-inf")) < EXPIRY_SECONDS:
            return 0
        self._expired_at[workspace] = now
        expired: int = records.expire(self.settings.retention_days)
        if expired and workspace in self._entries:
            self._entries[workspace] = max(0, self._entries[workspace] - expired)
        return expired

    # --- reading ------------------------------------------------------------------------

    def entries(
        self,
        workspace: str,
        *,
        limit: int = 100,
        before: int | None = None,
        principal: str | None = None,
    ) -> dict[str, Any]:
        """The workspace's latest logged recalls, newest first, and the log's state."""
        self.flush()
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            rows = tx.curation.log_entries(limit, before=before, principal=principal)
            state = tx.curation.log_state()
        return {
            "workspace": workspace,
            "log": self.state_json(workspace, state),
            "entries": [
                {
                    "id": row["id"],
                    "at": row["at"].isoformat(),
                    "principal": row["principal"],
                    "command": row["command"],
                    "question": row["question"],
                    "error": row["error"],
                    "session": row["session"],
                    "returned": [
                        # no score: an exact error-signature match (no rank score)
                        {
                            "id": uuid_to_card_id(i),
                            "score": None if s is None else round(float(s), 6),
                        }
                        for i, s in zip(row["returned"], row["scores"], strict=True)
                    ],
                    "coverage": None if row["coverage"] is None else round(row["coverage"], 3),
                    "proposed_at": row["proposed_at"].isoformat() if row["proposed_at"] else None,
                }
                for row in rows
            ],
            "next_before": rows[-1]["id"] if len(rows) == limit else None,
        }

    def window(
        self, workspace: str, days: int, limit: int
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The entries of the last ``days`` days (at most ``limit``, newest first) and
        the log's state."""
        self.flush()
        since = datetime.now(UTC) - timedelta(days=days)
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            rows = tx.curation.log_window(since, limit)
            state = tx.curation.log_state()
        return rows, self.state_json(workspace, state)

    def state_json(self, workspace: str, state: dict[str, Any]) -> dict[str, Any]:
        return {
            "enabled": self.settings.enabled,
            "entries": int(state["entries"] or 0),
            "max_entries": self.settings.max_entries,
            "retention_days": self.settings.retention_days,
            "oldest": state["oldest"].isoformat() if state["oldest"] else None,
            "dropped": int(state["dropped"] or 0),
            "expired": int(state["expired"] or 0),
            "lost": int(state["lost"] or 0) + self.pending_lost(workspace),
        }


MAX_WINDOW = 50_000  # logged recalls the gaps are mined from, newest first


def gaps(
    log: RecallLog,
    workspace: str,
    *,
    days: int = 30,
    limit: int = 50,
    weak_below: float | None = None,
) -> dict[str, Any]:
    """The workspace's gaps over the last ``days`` days: weak recalls grouped and
    ranked (``tht.memory.gaps``), the ``limit`` first, with the rule that made them."""
    from tht.memory import gaps as mining

    threshold = mining.WEAK_COVERAGE if weak_below is None else weak_below
    rows, state = log.window(workspace, days, MAX_WINDOW)
    asked = [
        mining.Asked(
            id=row["id"],
            at=row["at"],
            principal=row["principal"],
            command=row["command"],
            text=row["question"] or row["error"] or "",
            results=row["results"] or 0,
            first=uuid_to_card_id(row["first"]) if row["first"] else None,
            terms=frozenset(row["terms"] or ()),
            coverage=row["coverage"],
            proposed=row["proposed_at"] is not None,
        )
        for row in rows
    ]
    now = datetime.now(UTC)
    found = mining.rank(mining.group(asked, threshold=threshold), now)
    shown = found[:limit]
    firsts = {card_id_to_uuid(a.first) for g in shown for a in g.asks if a.first}
    with log.archive.transaction(workspace) as tx:
        cards = tx.curation.card_revisions(list(firsts))
    titles: dict[str, str | None] = {uuid_to_card_id(i): row["title"] for i, row in cards.items()}
    return {
        "workspace": workspace,
        "log": state,
        "window": {
            "days": days,
            "recalls": len(rows),
            "weak": sum(len(g.asks) for g in found),
            "truncated": len(rows) == MAX_WINDOW,
        },
        "rule": {
            "weak": "no result; or the first card holds less than weak_below of the question's"
            " terms; or the session then proposed a new card",
            "weak_below": threshold,
            "similarity": mining.SIMILARITY,
            "half_life_days": mining.HALF_LIFE_DAYS,
        },
        "total": len(found),
        "gaps": [g.as_json(now, titles) for g in shown],
    }
