"""Idempotency keys: a client that lost the answer to a mutation sends it again safely.

The contract (docs/reliability.md):

- a key (``Idempotency-Key`` header, or ``--idempotency-key``) is 1-255 printable ASCII
  characters, chosen by the client (a UUID is a good key); it belongs to one principal
  in one workspace, so two users never collide;
- the first successful request records its answer in the SAME transaction as its
  mutation, under the workspace's lock: a crash cannot keep the one without the other,
  and a duplicate sent at the same time waits for the lock, then finds the record;
- the same key with the same request answers the recorded document without doing
  anything again; with another request (operation, card or body) it is refused,
  ``idempotency_key_reused``;
- a request that fails records nothing: it may be retried with the same key;
- keys are kept ``RETENTION`` (24 h) after their first use and pruned as new ones
  arrive; a key older than that is new again.

The recorded answer of a save is written with the commit, before the index update
("saved, index update pending"), and replaced by the final answer once the update is
done; a crash in between leaves the first one, which was true when it was written.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tht.errors import Conflict, InvalidInput
from tht.memory.archive.port import Archive, ArchiveTx

RETENTION = timedelta(hours=24)
HEADER = "Idempotency-Key"
_KEY = re.compile(r"^[!-~]{1,255}$")
# The principal of commands run without a token (the installation's operator): not a
# valid user name, so it never shares keys with a user.
OPERATOR = "(operator)"


class IdempotencyKeyReused(Conflict):
    """The key already answered another request: 409, as every conflict with recorded
    state here (the IETF draft "The Idempotency-Key HTTP Header Field" suggests 422; a
    schema-valid request is not unprocessable, its key is taken)."""

    code = "idempotency_key_reused"
    default_message = "this idempotency key was already used for a different request"


def request_digest(operation: str, target: str | None, body: Any) -> str:
    """What identifies a request: its operation, the card it names and its parsed body
    (so that a retry with the same content but other white space or key order is the
    same request)."""
    canonical = json.dumps(
        {"operation": operation, "target": target, "body": body},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class IdempotencyKey:
    key: str
    principal: str

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _KEY.match(self.key):
            raise InvalidInput(
                f"the {HEADER} must be 1 to 255 printable ASCII characters without spaces",
                details={"field": HEADER},
            )

    @classmethod
    def given(cls, key: str | None, principal: str | None) -> IdempotencyKey | None:
        """The key of a request that sent one (``principal`` None: the operator)."""
        return None if key is None else cls(key, principal or OPERATOR)

    def recorded(self, tx: ArchiveTx, digest: str) -> dict[str, Any] | None:
        """Under the workspace's lock: the answer recorded for this key, None for a new
        key (expired keys are pruned first); another request's key is refused."""
        tx.idempotency.prune(RETENTION)
        found = tx.idempotency.answer_of(self.principal, self.key)
        if found is None:
            return None
        if found.request_digest != digest:
            raise IdempotencyKeyReused(
                f"the idempotency key '{self.key}' was used for a different request in the last"
                f" {int(RETENTION.total_seconds() // 3600)} hours: use a new key for a new request",
                details={"field": HEADER, "key": self.key},
            )
        return found.response

    def record(self, tx: ArchiveTx, digest: str, response: dict[str, Any]) -> None:
        """In the mutation's transaction: this key answered ``response``."""
        tx.idempotency.record(self.principal, self.key, digest, response)

    def answer(
        self, archive: Archive, workspace: str, digest: str, response: dict[str, Any]
    ) -> None:
        """After the commit: the final answer (index update included) replaces the one
        recorded with the commit."""
        # one row by its key: a replay reads the first answer or this one, both true
        with archive.transaction(workspace) as tx:
            tx.idempotency.replace_answer(self.principal, self.key, digest, response)
