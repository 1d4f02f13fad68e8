"""Curation in the archive: the workspace's benchmark (cases and stored runs) and the
recall log. Typed methods over the named SQL of ``sql/curation.sql``, inside an
archive transaction (``tx.curation``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from tht.memory.archive.port import LogRow, NewCase
from tht.sqlfiles import named_queries

if TYPE_CHECKING:
    from tht.memory.archive.postgres import ArchiveTransaction


def _queries() -> dict[str, str]:
    return named_queries("tht.memory.archive", "sql/curation.sql")


class CurationRecords:
    def __init__(self, tx: ArchiveTransaction) -> None:
        self._tx = tx._using(_queries())

    # --- cards a case names -----------------------------------------------------------

    def card_revisions(self, card_uuids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
        """The workspace's cards among these ids: id -> {revision, title, family}."""
        if not card_uuids:
            return {}
        rows = self._tx._rows("card_revisions", ids=list(card_uuids))
        return {row["id"]: row for row in rows}

    # --- cases ------------------------------------------------------------------------

    def cases(self, limit: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._tx._rows("cases_all", limit=limit)
        return rows

    def case(self, case_id: uuid.UUID) -> dict[str, Any] | None:
        row: dict[str, Any] | None = self._tx._row("case_get", id=case_id)
        return row

    def insert_cases(self, cases: Sequence[NewCase], principal: str | None) -> None:
        if not cases:
            return
        self._tx._execute(
            "cases_insert",
            principal=principal,
            ids=[c.id for c in cases],
            names=[c.name for c in cases],
            questions=[c.question for c in cases],
            commands=[c.command for c in cases],
            filters=[json.dumps(dict(c.filters), sort_keys=True) for c in cases],
            expected=[json.dumps([str(e) for e in c.expected]) for c in cases],
            revisions=[json.dumps(list(c.revisions)) for c in cases],
            origins=[c.origin for c in cases],
        )

    def update_cases(self, cases: Sequence[NewCase]) -> None:
        """The expected cards (and revisions) of existing cases, by id; a name given
        replaces the case's."""
        if not cases:
            return
        self._tx._execute(
            "cases_update",
            ids=[c.id for c in cases],
            names=[c.name for c in cases],
            expected=[json.dumps([str(e) for e in c.expected]) for c in cases],
            revisions=[json.dumps(list(c.revisions)) for c in cases],
        )

    def delete_case(self, case_id: uuid.UUID) -> bool:
        return self._tx._row("case_delete", id=case_id) is not None

    # --- runs -------------------------------------------------------------------------

    def insert_run(self, run_id: uuid.UUID, principal: str | None, run: Mapping[str, Any]) -> None:
        self._tx._execute(
            "run_insert",
            id=run_id,
            principal=principal,
            started_at=run["started_at"],
            seconds=run["seconds"],
            cases=run["cases"],
            metrics=Jsonb(run["metrics"]),
            by_command=Jsonb(run["by_command"]),
            ranks=Jsonb(run["ranks"]),
            misses=Jsonb(run["misses"]),
            expected_changes=Jsonb(run["expected_changes"]),
            index_state=Jsonb(run["index"]),
            comparison=Jsonb(run["comparison"]) if run["comparison"] is not None else None,
        )

    def last_run(self) -> dict[str, Any] | None:
        row: dict[str, Any] | None = self._tx._row("run_last")
        return row

    def runs(self, limit: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._tx._rows("runs_list", limit=limit)
        return rows

    def run(self, run_id: uuid.UUID) -> dict[str, Any] | None:
        row: dict[str, Any] | None = self._tx._row("run_get", id=run_id)
        return row

    def prune_runs(self, keep: int) -> None:
        self._tx._execute("runs_prune", keep=keep)

    def card_edits(
        self, intervals: Sequence[tuple[datetime, datetime]], sample: int
    ) -> list[dict[str, Any]]:
        """Per interval (since, until], the card events of the audit log: their number
        and the latest ``sample``. Needs a transaction in the accounts mode."""
        if not intervals:
            return []
        rows: list[dict[str, Any]] = self._tx._rows(
            "card_edits_between",
            since=[since for since, _ in intervals],
            until=[until for _, until in intervals],
            sample=sample,
        )
        return rows

    # --- the recall log ---------------------------------------------------------------

    def commit_without_waiting(self) -> None:
        self._tx._execute("commit_without_waiting")

    def projection_terms(self, card_uuids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[int]]:
        if not card_uuids:
            return {}
        rows = self._tx._rows("projection_terms", ids=list(card_uuids))
        return {row["card_id"]: row["terms"] for row in rows if row["terms"] is not None}

    def term_frequencies(self, terms: Sequence[int] | None = None) -> tuple[dict[int, int], int]:
        """How many of the workspace's projected cards hold each BM25 term (each of
        ``terms`` only, if given), and how many cards there are."""
        if terms is None:
            rows = self._tx._rows("term_frequencies")
        else:
            rows = self._tx._rows("term_frequencies_of", terms=sorted(set(terms)))
        cards = next((int(r["cards"]) for r in rows if r["term"] is None), 0)
        return {int(r["term"]): int(r["cards"]) for r in rows if r["term"] is not None}, cards

    def insert_log(self, rows: Sequence[LogRow]) -> None:
        if not rows:
            return
        self._tx._execute(
            "log_insert",
            ats=[r.at for r in rows],
            principals=[r.principal for r in rows],
            commands=[r.command for r in rows],
            questions=[r.question for r in rows],
            errors=[r.error for r in rows],
            sessions=[r.session for r in rows],
            returned=[json.dumps([str(i) for i in r.returned]) for r in rows],
            scores=[json.dumps(list(r.scores)) for r in rows],
            terms=[json.dumps(list(r.terms)) for r in rows],
            coverages=[r.coverage for r in rows],
        )

    def mark_proposed(self, session: str, at: datetime) -> None:
        self._tx._execute("log_mark_proposed", session=session, at=at)

    def log_count(self) -> int:
        count: int = self._tx._one("log_count")["entries"]
        return count

    def drop_oldest(self, keep: int) -> int:
        dropped: int = self._tx._one("log_drop_oldest", keep=keep)["dropped"]
        return dropped

    def expire(self, days: int) -> int:
        expired: int = self._tx._one("log_expire", days=days)["expired"]
        return expired

    def add_to_state(self, *, dropped: int = 0, expired: int = 0, lost: int = 0) -> None:
        self._tx._execute("log_state_add", dropped=dropped, expired=expired, lost=lost)

    def log_state(self) -> dict[str, Any]:
        row: dict[str, Any] = self._tx._one("log_state")
        return row

    def log_entries(
        self, limit: int, before: int | None = None, principal: str | None = None
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._tx._rows(
            "log_list", limit=limit, before=before, principal=principal
        )
        return rows

    def log_window(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._tx._rows("log_window", since=since, limit=limit)
        return rows
