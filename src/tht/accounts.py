"""Local accounts: users with a role and workspace membership, API tokens, web
sessions, and the single-use nonces of protected requests.

Secrets are stored hashed: passwords with scrypt (salted, memory-hard), tokens and
session ids with SHA-256 (they are 256-bit random values, so a fast hash is enough).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import re
import secrets
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from tht.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    PermissionDenied,
    TooManyRequests,
    Unauthenticated,
)
from tht.memory.archive.postgres import PostgresArchive

Role = Literal["admin", "user", "agent"]
# Capabilities. The service enforces them (DESIGN.md §3a); faces only ask.
MANAGE = "memory.manage"  # create, edit, delete, retry; the reviewer's review-apply
READ = "memory.read"  # browse the archive: list, show, pending, workspaces
RECALL = "memory.recall"  # search, rules, solved-search
PROPOSE = "memory.propose"  # propose, summary, solved-index: the workflow's side
# An agent recalls and proposes but never reads the archive wholesale nor edits it:
# what it learns reaches the archive only through a reviewer's decision.
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "admin": frozenset({MANAGE, READ, RECALL, PROPOSE}),
    "user": frozenset({READ, RECALL}),
    "agent": frozenset({RECALL, PROPOSE}),
}
ROLES: tuple[str, ...] = tuple(ROLE_PERMISSIONS)
SESSION_SECONDS = 8 * 3600
ONE_TIME_SECONDS = 15 * 60
_NAME = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}

# Login backoff (failures recorded in PostgreSQL, migration 009, so that every service
# instance counts the same ones): a name, or a client address, has a few free failures
# within the window; beyond them each attempt must wait twice as long as the one
# before, up to the cap. A name's failures are forgiven by its successful login.
LOGIN_WINDOW_SECONDS = 15 * 60
USER_FREE_FAILURES = 5
CLIENT_FREE_FAILURES = 20
LOGIN_BACKOFF_CAP_SECONDS = 5 * 60
# scrypt is CPU- and memory-bound (~40 ms): an 8-thread login flood raised other
# requests' latency from 4 to 391 ms. Only this many logins hash at once; one that
# cannot get a slot in time is refused (429) rather than queued without bound.
HASHING_SLOTS = max(1, (os.cpu_count() or 2) // 2)
HASHING_WAIT_SECONDS = 5.0
_hashing = threading.BoundedSemaphore(HASHING_SLOTS)
# The hash of a random password nobody kept. An unknown name or a user without a
# password is verified against it, so every password login costs exactly one scrypt
# whoever the name is: the time does not tell which names exist or have a password.
_DUMMY_HASH = (
    "scrypt$83ad7982b93e0916d2aa42315bfa26cf$"
    "7d39551c4269a9e25a7302aa8e063427308fb3e0891bfce4e316ee1b7c0d9c51"
)


@dataclass(frozen=True)
class Principal:
    """Who is acting: checked by the route and again by the service."""

    user: str
    role: Role
    workspaces: frozenset[str]

    @property
    def permissions(self) -> frozenset[str]:
        return ROLE_PERMISSIONS.get(self.role, frozenset())

    def can(self, permission: str, workspace: str | None) -> bool:
        """Whether the role holds ``permission`` (in ``workspace``, when one is named)."""
        return permission in self.permissions and (
            workspace is None or workspace in self.workspaces
        )

    def require(self, permission: str, workspace: str | None) -> None:
        """Raise Forbidden unless the role holds ``permission`` and the user belongs to
        ``workspace`` (None: a capability that is not per workspace)."""
        if permission not in self.permissions:
            raise Forbidden(
                f"user {self.user} (role {self.role}) does not have {permission}",
                details={"permission": permission, "role": self.role},
            )
        if workspace is not None and workspace not in self.workspaces:
            raise Forbidden(
                f"user {self.user} does not belong to workspace '{workspace}'",
                details={"permission": permission, "workspace": workspace},
            )

    def can_manage(self, workspace: str) -> bool:
        return self.can(MANAGE, workspace)

    def require_manage(self, workspace: str) -> None:
        self.require(MANAGE, workspace)

    def as_json(self) -> dict:
        return {
            "user": self.user,
            "role": self.role,
            "workspaces": sorted(self.workspaces),
            "permissions": sorted(self.permissions),
        }


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8", "surrogatepass"), salt=salt, **_SCRYPT)
    return f"scrypt${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str | None) -> bool:
    if not stored or not stored.startswith("scrypt$"):
        return False
    _, salt, digest = stored.split("$")
    candidate = hashlib.scrypt(
        password.encode("utf-8", "surrogatepass"), salt=bytes.fromhex(salt), **_SCRYPT
    )
    return hmac.compare_digest(candidate.hex(), digest)


def login_backoff(failures: int, idle: float | None, free: int) -> float:
    """Seconds still to wait after ``failures`` recent failures, the last ``idle`` seconds ago."""
    if failures < free or idle is None:
        return 0.0
    return min(LOGIN_BACKOFF_CAP_SECONDS, 2.0 ** (failures - free)) - float(idle)


@contextmanager
def _hashing_slot() -> Iterator[None]:
    if not _hashing.acquire(timeout=HASHING_WAIT_SECONDS):
        raise TooManyRequests("too many logins at once: try again", retry_after=1)
    try:
        yield
    finally:
        _hashing.release()


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


class Accounts:
    def __init__(self, archive: PostgresArchive) -> None:
        self.archive = archive

    def create_user(
        self, name: str, role: str, workspaces: list[str], password: str | None = None
    ) -> dict:
        """Create a user; returns its API token, shown this once."""
        if not _NAME.match(name or ""):
            raise InvalidInput("a user name has 1 to 64 letters, digits, '.', '_', '@' or '-'")
        if role not in ROLE_PERMISSIONS:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}, not '{role}'")
        if password is not None and len(password) < 12:
            raise InvalidInput("a password has at least 12 characters")
        if not workspaces:
            raise InvalidInput("a user needs at least one workspace (--workspace)")
        known = {w.id for w in self._workspaces()}
        missing = sorted(set(workspaces) - known)
        if missing:
            raise NotFound(f"workspace '{missing[0]}' does not exist", details={"missing": missing})
        token = "tht_" + secrets.token_urlsafe(32)
        user_id = uuid.uuid4()
        with self.archive.transaction(None, accounts=True) as tx:
            created = tx.row(
                "user_insert",
                id=user_id,
                name=name,
                role=role,
                password_hash=hash_password(password) if password else None,
                token_hash=digest(token),
            )
            if created is None:
                raise Conflict(f"user '{name}' already exists")
            for workspace in sorted(set(workspaces)):
                tx.execute("user_workspace_insert", user_id=user_id, workspace=workspace)
        return {"user": name, "role": role, "workspaces": sorted(set(workspaces)), "token": token}

    def add_memberships(self, name: str, workspaces: list[str]) -> None:
        with self.archive.transaction(None, accounts=True) as tx:
            row = tx.row("user_by_name", name=name)
            if row is None:
                raise NotFound(f"user '{name}' does not exist")
            for workspace in workspaces:
                tx.execute("user_workspace_grant", user_id=row["id"], workspace=workspace)

    def _workspaces(self):
        with self.archive.transaction(None, directory=True) as tx:
            return tx.list_workspaces()

    def list_users(self) -> list[dict]:
        with self.archive.transaction(None, accounts=True) as tx:
            return [
                {
                    "user": r["name"],
                    "role": r["role"],
                    "workspaces": r["workspaces"],
                    "created_at": r["created_at"].isoformat(),
                }
                for r in tx.rows("users_list")
            ]

    def _principal(self, tx, row: dict) -> Principal:
        workspaces = frozenset(
            r["workspace_id"] for r in tx.rows("user_workspaces", user_id=row["id"])
        )
        return Principal(user=row["name"], role=row["role"], workspaces=workspaces)

    def by_token(self, token: str) -> Principal:
        with self.archive.transaction(None, accounts=True) as tx:
            row = tx.row("user_by_token", token_hash=digest(token))
            if row is None:
                raise Unauthenticated("invalid API token")
            return self._principal(tx, row)

    def by_password(self, name: str, password: str, client: str = "unknown") -> Principal:
        """The user with this name and password, or Unauthenticated; TooManyRequests
        while the name or the client (its address) is in login backoff."""
        name, client = name[:64] or "-", client[:128] or "unknown"
        self._refuse_in_backoff(name, client)  # at once, without waiting for a hashing slot
        with _hashing_slot():
            # Again in the slot: the attempts that passed the first check beside this one
            # have recorded their failures by now (else a burst of concurrent guesses
            # would all pass before the first failure was counted).
            row = self._refuse_in_backoff(name, client)
            stored = row["password_hash"] if row is not None else None
            # no database connection is held while hashing: a flood must not drain the pool
            ok = verify_password(password, stored or _DUMMY_HASH) and stored is not None
            if not ok:
                with self.archive.transaction(None, accounts=True) as tx:
                    tx.execute(
                        "login_failure_record",
                        name=name,
                        client=client,
                        window=LOGIN_WINDOW_SECONDS,
                    )
        if not ok:
            raise Unauthenticated("wrong user name or password")
        with self.archive.transaction(None, accounts=True) as tx:
            tx.execute("login_failures_clear", name=name)
            return self._principal(tx, row)

    def _refuse_in_backoff(self, name: str, client: str) -> dict | None:
        """The user row of ``name`` (None if there is none), unless the name or the
        client must still wait: TooManyRequests."""
        with self.archive.transaction(None, accounts=True) as tx:
            failures = tx.row(
                "login_failures", name=name, client=client, window=LOGIN_WINDOW_SECONDS
            )
            row = tx.row("user_by_name", name=name)
        wait = max(
            login_backoff(failures["user_failures"], failures["user_idle"], USER_FREE_FAILURES),
            login_backoff(
                failures["client_failures"], failures["client_idle"], CLIENT_FREE_FAILURES
            ),
        )
        if wait > 0:
            raise TooManyRequests(
                "too many failed logins: wait before trying again", retry_after=math.ceil(wait)
            )
        return row

    def open_session(self, principal_name: str, *, one_time: bool = False) -> str:
        """A new web session id (or a one-time login token) for this user."""
        session = secrets.token_urlsafe(32)
        with self.archive.transaction(None, accounts=True) as tx:
            tx.execute("sessions_expire")
            row = tx.row("user_by_name", name=principal_name)
            if row is None:
                raise NotFound(f"user '{principal_name}' does not exist")
            tx.execute(
                "session_insert",
                id_hash=digest(session),
                user_id=row["id"],
                one_time=one_time,
                seconds=ONE_TIME_SECONDS if one_time else SESSION_SECONDS,
            )
        return session

    def by_session(self, session: str) -> Principal:
        with self.archive.transaction(None, accounts=True) as tx:
            row = tx.row("user_by_session", id_hash=digest(session))
            if row is None or row["one_time"]:
                raise Unauthenticated("the session expired: log in again")
            return self._principal(tx, row)

    def redeem_one_time(self, token: str) -> str:
        """Exchange a one-time login token for a new session (the token is spent)."""
        with self.archive.transaction(None, accounts=True) as tx:
            row = tx.row("user_by_session", id_hash=digest(token))
            spent = tx.row("session_delete", id_hash=digest(token))
            if row is None or spent is None or not row["one_time"]:
                raise Unauthenticated("this login link was already used or has expired")
            name = row["name"]
        return self.open_session(name)

    def close_session(self, session: str) -> None:
        with self.archive.transaction(None, accounts=True) as tx:
            tx.row("session_delete", id_hash=digest(session))

    def use_nonce(self, nonce: str, expires_at: datetime) -> None:
        """Record a protected request's nonce; a second use is refused."""
        with self.archive.transaction(None, accounts=True) as tx:
            if tx.row("nonce_use", nonce=nonce, expires_at=expires_at) is None:
                raise PermissionDenied("this protected request was already used (replay refused)")
