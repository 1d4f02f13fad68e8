"""The workflow's records in the archive: review receipts (one per reviewed session),
and the lookups that proposals and error rules make. Typed methods over the named SQL
of ``sql/reviews.sql``, inside an archive transaction (``tx.reviews``)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from tht.sqlfiles import named_queries

if TYPE_CHECKING:
    from tht.memory.archive.postgres import ArchiveTransaction

# A review receipt as stored: session_id, request_digest, proposals_digest, outcome,
# reviewer, result (the JSON the review answered), created_at, ledger_appended_at.
ReviewReceipt = dict[str, Any]


def _queries() -> dict[str, str]:
    return named_queries("tht.memory.archive", "sql/reviews.sql")


class ReviewRecords:
    def __init__(self, tx: ArchiveTransaction) -> None:
        self._tx = tx._using(_queries())

    def receipt(self, session: str) -> ReviewReceipt | None:
        return self._tx._row("receipt_get", session=session)

    def insert_receipt(
        self,
        session: str,
        *,
        request_digest: str,
        proposals_digest: str,
        outcome: str,
        reviewer: str,
        result: dict[str, Any],
    ) -> ReviewReceipt:
        return self._tx._one(
            "receipt_insert",
            session=session,
            request_digest=request_digest,
            proposals_digest=proposals_digest,
            outcome=outcome,
            reviewer=reviewer,
            result=Jsonb(result),
        )

    def mark_ledger_appended(self, session: str) -> None:
        self._tx._execute("receipt_ledger_appended", session=session)

    def exact_duplicates(
        self, family: str, *, content: str, scope: str, question: str, sql: str, context: str
    ) -> list[uuid.UUID]:
        """Cards of ``family`` whose folded texts (lowercase, white space collapsed) are
        these, oldest first."""
        rows = self._tx._rows(
            "exact_duplicates",
            family=family,
            content=content,
            scope=scope,
            question=question,
            sql=sql,
            context=context,
        )
        return [row["id"] for row in rows]

    def error_signature_matches(self, signature: str) -> list[uuid.UUID]:
        """Explained errors with exactly this normalized signature."""
        return [row["id"] for row in self._tx._rows("error_signature_matches", signature=signature)]
