"""Idempotency keys in the archive (migration 013): the answer recorded for a key.
Typed methods over the named SQL of ``sql/idempotency.sql``, inside an archive
transaction under the workspace's exclusive lock (``tx.idempotency``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from tht.sqlfiles import named_queries

if TYPE_CHECKING:
    from tht.memory.archive.postgres import ArchiveTransaction


@dataclass(frozen=True)
class RecordedAnswer:
    """What a key answered: the digest of its request and the JSON document."""

    request_digest: str
    response: dict[str, Any]


def _queries() -> dict[str, str]:
    return named_queries("tht.memory.archive", "sql/idempotency.sql")


class IdempotencyRecords:
    def __init__(self, tx: ArchiveTransaction) -> None:
        self._tx = tx._using(_queries())

    def prune(self, retention: timedelta) -> None:
        """Forget the workspace's keys first used longer than ``retention`` ago."""
        self._tx._execute("idempotency_prune", retention=_interval(retention))

    def answer_of(self, principal: str, key: str) -> RecordedAnswer | None:
        row = self._tx._row("idempotency_get", principal=principal, key=key)
        return RecordedAnswer(**row) if row else None

    def record(self, principal: str, key: str, digest: str, response: dict[str, Any]) -> None:
        self._tx._execute(
            "idempotency_record",
            principal=principal,
            key=key,
            digest=digest,
            response=Jsonb(response),
        )

    def replace_answer(
        self, principal: str, key: str, digest: str, response: dict[str, Any]
    ) -> None:
        """The key's answer is now ``response`` (when it answered this same request)."""
        self._tx._execute(
            "idempotency_answer",
            principal=principal,
            key=key,
            digest=digest,
            response=Jsonb(response),
        )


def _interval(value: timedelta) -> str:
    return f"{int(value.total_seconds())} seconds"
