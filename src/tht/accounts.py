"""The rules of local accounts: roles and their capabilities, the principal (who is
acting), password hashing and its bounded slots, token lifetimes, the login backoff.
No I/O: the accounts over the archive (users, tokens, web sessions, the audit log)
are tht.access.

Secrets are stored hashed: passwords with scrypt (salted, memory-hard), tokens and
session ids with SHA-256 (they are 256-bit random values, so a fast hash is enough).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tht.errors import (
    Forbidden,
    InvalidInput,
    NotFound,
    ThothError,
    TooManyRequests,
)

Role = Literal["admin", "user", "agent"]
# Capabilities. The service enforces them (docs/accounts.md); faces only ask.
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
# The installation's own administrator: `tht serve` creates it on its first start and
# prints its login link; a workspace the operator creates is granted to it.
INSTALLATION_ADMIN = "admin"
SESSION_SECONDS = 8 * 3600
# API tokens expire (migration 012). A new or rotated token lives this long unless its
# command or request says otherwise (`--expires-in 30d`, or `never` for a service
# account that an operator rotates by hand); THT_TOKEN_EXPIRES_IN, where tokens are
# issued (the service, `tht serve`, or the operator's process), changes the default.
DEFAULT_TOKEN_LIFETIME = "90d"
TOKEN_LIFETIME_ENV = "THT_TOKEN_EXPIRES_IN"
NEVER = "never"
_LIFETIME = re.compile(r"^([1-9][0-9]{0,5})([hdw])$")
_LIFETIME_UNIT_SECONDS = {"h": 3600, "d": 86400, "w": 7 * 86400}
MAX_TOKEN_SECONDS = 10_000 * 86400  # about 27 years: longer is `never`, said so
AUDIT_LIMIT = 1000  # rows one audit read returns at most
# The key of an account event's details that records the workspaces of the user it is
# about, at the time: what decides which admins read it.
AUDIT_WORKSPACES = "workspaces"
ONE_TIME_SECONDS = 15 * 60
USER_NAME = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
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
DUMMY_HASH = (
    "scrypt$83ad7982b93e0916d2aa42315bfa26cf$"
    "7d39551c4269a9e25a7302aa8e063427308fb3e0891bfce4e316ee1b7c0d9c51"
)


@dataclass(frozen=True)
class Principal:
    """Who is acting: checked by the route and again by the service."""

    user: str
    role: Role
    workspaces: frozenset[str]
    # Whether a workspace exists (the archive's answer), asked only to word a refusal
    # (``outside``); None: not known, every refusal is the same.
    workspace_exists: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)

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
            raise self.outside(permission, workspace)

    def outside(self, permission: str, workspace: str) -> ThothError:
        """The refusal of a workspace this user is not a member of. An admin is told
        whether it exists: an admin may create workspaces, and a taken id is refused
        there anyway, so existence is no secret to it; it is also told who can add it.
        Any other role gets one answer for both, so a token cannot probe which
        workspaces exist."""
        details = {"permission": permission, "workspace": workspace}
        if MANAGE not in self.permissions or self.workspace_exists is None:
            return Forbidden(
                f"user {self.user} does not belong to workspace '{workspace}' (or it does not"
                " exist)",
                details=details,
            )
        if not self.workspace_exists(workspace):
            return NotFound(f"workspace '{workspace}' does not exist", details=details)
        return Forbidden(
            f"user {self.user} does not belong to workspace '{workspace}': an admin of it, or"
            f" the installation's operator, adds it (`tht user grant {self.user} --workspace"
            f" {workspace}`)",
            details={**details, "exists": True},
        )

    def can_manage(self, workspace: str) -> bool:
        return self.can(MANAGE, workspace)

    def require_manage(self, workspace: str) -> None:
        self.require(MANAGE, workspace)

    def as_json(self) -> dict[str, Any]:
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
def hashing_slot() -> Iterator[None]:
    if not _hashing.acquire(timeout=HASHING_WAIT_SECONDS):
        raise TooManyRequests("too many logins at once: try again", retry_after=1)
    try:
        yield
    finally:
        _hashing.release()


def token_lifetime(text: str | None) -> int | None:
    """Seconds a token lives, from '12h', '30d', '8w' or 'never' (None); None or an
    empty text: the configured default."""
    if text is None or not text.strip():
        text = os.environ.get(TOKEN_LIFETIME_ENV) or DEFAULT_TOKEN_LIFETIME
    text = text.strip().lower()
    if text == NEVER:
        return None
    match = _LIFETIME.match(text)
    if match is None:
        raise InvalidInput(
            f"a token lifetime is a number of hours, days or weeks ('12h', '30d', '8w') or"
            f" '{NEVER}', not '{text[:20]}'",
            details={"field": "expires_in"},
        )
    seconds = int(match.group(1)) * _LIFETIME_UNIT_SECONDS[match.group(2)]
    if seconds > MAX_TOKEN_SECONDS:
        raise InvalidInput(
            f"a token lifetime is at most 10000 days: use '{NEVER}' for a token that does not"
            " expire",
            details={"field": "expires_in"},
        )
    return seconds


def new_token() -> str:
    return "tht_" + secrets.token_urlsafe(32)


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
