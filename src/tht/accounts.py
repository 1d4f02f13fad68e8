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
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from tht import audit
from tht.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    LastAdmin,
    NotFound,
    PermissionDenied,
    ThothError,
    TokenExpired,
    TooManyRequests,
    Unauthenticated,
)
from tht.memory.archive.account_records import LockedUser, SessionUser, TokenUser, UserByName
from tht.memory.archive.port import Archive, ArchiveTx
from tht.memory.model import Workspace

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
def _hashing_slot() -> Iterator[None]:
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


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class _Target:
    """A user a lifecycle change acts on, locked, with its workspaces."""

    user: LockedUser
    workspaces: list[str]


class Accounts:
    def __init__(self, archive: Archive) -> None:
        self.archive = archive

    def create_user(
        self,
        name: str,
        role: str,
        workspaces: list[str],
        password: str | None = None,
        *,
        expires_in: str | None = None,
        by: Principal | None = None,
    ) -> dict[str, Any]:
        """Create a user; returns its API token, shown this once. ``by``: the admin
        asking (None: the operator), who may give access only to what it administers."""
        if not _NAME.match(name or ""):
            raise InvalidInput("a user name has 1 to 64 letters, digits, '.', '_', '@' or '-'")
        if role not in ROLE_PERMISSIONS:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}, not '{role}'")
        if password is not None and len(password) < 12:
            raise InvalidInput("a password has at least 12 characters")
        if not workspaces:
            raise InvalidInput("a user needs at least one workspace (--workspace)")
        token_seconds = token_lifetime(expires_in)
        if by is not None:
            for workspace in workspaces:
                by.require(MANAGE, workspace)
        known = {w.id for w in self._workspaces()}
        missing = sorted(set(workspaces) - known)
        if missing:
            raise NotFound(f"workspace '{missing[0]}' does not exist", details={"missing": missing})
        token = new_token()
        user_id = uuid.uuid4()
        with self.archive.transaction(None, accounts=True) as tx:
            created = tx.accounts.insert_user(
                user_id,
                name=name,
                role=role,
                password_hash=hash_password(password) if password else None,
                token_hash=digest(token),
                token_seconds=token_seconds,
            )
            if created is None:
                raise Conflict(f"user '{name}' already exists")
            for workspace in sorted(set(workspaces)):
                tx.accounts.insert_membership(user_id, workspace)
            expires = _iso(created.token_expires_at)
            self._record(
                tx,
                "user.create",
                by,
                target=name,
                workspaces=workspaces,
                details={"role": role, "token_expires_at": expires},
            )
        return {
            "user": name,
            "role": role,
            "workspaces": sorted(set(workspaces)),
            "token": token,
            "token_expires_at": expires,
        }

    def add_memberships(self, name: str, workspaces: list[str]) -> None:
        with self.archive.transaction(None, accounts=True) as tx:
            user = tx.accounts.user_by_name(name)
            if user is None:
                raise NotFound(f"user '{name}' does not exist")
            for workspace in workspaces:
                tx.accounts.ensure_membership(user.id, workspace)

    def _workspaces(self) -> list[Workspace]:
        with self.archive.transaction(None, directory=True) as tx:
            return tx.list_workspaces()

    def list_users(self) -> list[dict[str, Any]]:
        """Every user (the operator's view): see ``users``."""
        return self.users()

    def _principal(self, tx: ArchiveTx, user: UserByName | TokenUser | SessionUser) -> Principal:
        workspaces = frozenset(tx.accounts.user_workspaces(user.id))
        # the column's check constraint (migration 007) admits only the roles
        return Principal(
            user=user.name,
            role=cast(Role, user.role),
            workspaces=workspaces,
            workspace_exists=self.workspace_exists,
        )

    def workspace_exists(self, workspace: str) -> bool:
        return workspace in {w.id for w in self._workspaces()}

    def by_token(self, token: str) -> Principal:
        with self.archive.transaction(None, accounts=True) as tx:
            user = tx.accounts.token_user(digest(token))
            if user is None:
                raise Unauthenticated("invalid API token")
            if user.expired:
                raise TokenExpired(
                    f"the API token of {user.name} expired at {_iso(user.token_expires_at)}:"
                    f" an admin issues a new one (tht user token rotate {user.name})",
                    details={"expired_at": _iso(user.token_expires_at)},
                )
            return self._principal(tx, user)

    def by_password(self, name: str, password: str, client: str = "unknown") -> Principal:
        """The user with this name and password, or Unauthenticated; TooManyRequests
        while the name or the client (its address) is in login backoff."""
        name, client = name[:64] or "-", client[:128] or "unknown"
        self._refuse_in_backoff(name, client)  # at once, without waiting for a hashing slot
        with _hashing_slot():
            # Again in the slot: the attempts that passed the first check beside this one
            # have recorded their failures by now (else a burst of concurrent guesses
            # would all pass before the first failure was counted).
            user = self._refuse_in_backoff(name, client)
            stored = user.password_hash if user is not None else None
            # no database connection is held while hashing: a flood must not drain the pool
            ok = verify_password(password, stored or _DUMMY_HASH) and stored is not None
            if not ok:
                with self.archive.transaction(None, accounts=True) as tx:
                    tx.accounts.record_login_failure(name, client, LOGIN_WINDOW_SECONDS)
                    # the backoff forgets this row after its window; the audit log keeps it
                    self._record(
                        tx,
                        "login.failure",
                        None,
                        target=name,
                        workspaces=tx.accounts.user_workspaces(user.id) if user else [],
                        client=client,
                        anonymous=True,
                    )
        if not ok or user is None:
            raise Unauthenticated("wrong user name or password")
        with self.archive.transaction(None, accounts=True) as tx:
            tx.accounts.clear_login_failures(name)
            found = self._principal(tx, user)
            self._record(
                tx,
                "login.success",
                found,
                target=name,
                workspaces=found.workspaces,
                client=client,
                details={"method": "password"},
            )
            return found

    def record_token_login(self, principal: Principal, client: str) -> None:
        """A web login with an API token (the token was checked by ``by_token``)."""
        with self.archive.transaction(None, accounts=True) as tx:
            self._record(
                tx,
                "login.success",
                principal,
                target=principal.user,
                workspaces=principal.workspaces,
                client=client[:128] or "unknown",
                details={"method": "token"},
            )

    def _refuse_in_backoff(self, name: str, client: str) -> UserByName | None:
        """The user of ``name`` (None if there is none), unless the name or the client
        must still wait: TooManyRequests."""
        with self.archive.transaction(None, accounts=True) as tx:
            failures = tx.accounts.login_failures(name, client, LOGIN_WINDOW_SECONDS)
            user = tx.accounts.user_by_name(name)
        wait = max(
            login_backoff(failures.user_failures, failures.user_idle, USER_FREE_FAILURES),
            login_backoff(failures.client_failures, failures.client_idle, CLIENT_FREE_FAILURES),
        )
        if wait > 0:
            raise TooManyRequests(
                "too many failed logins: wait before trying again", retry_after=math.ceil(wait)
            )
        return user

    def open_session(self, principal_name: str, *, one_time: bool = False) -> str:
        """A new web session id (or a one-time login token) for this user."""
        session = secrets.token_urlsafe(32)
        with self.archive.transaction(None, accounts=True) as tx:
            tx.accounts.expire_sessions()
            user = tx.accounts.user_by_name(principal_name)
            if user is None:
                raise NotFound(f"user '{principal_name}' does not exist")
            tx.accounts.insert_session(
                digest(session),
                user.id,
                one_time=one_time,
                seconds=ONE_TIME_SECONDS if one_time else SESSION_SECONDS,
            )
        return session

    def by_session(self, session: str) -> Principal:
        with self.archive.transaction(None, accounts=True) as tx:
            user = tx.accounts.session_user(digest(session))
            if user is None or user.one_time:
                raise Unauthenticated("the session expired: log in again")
            return self._principal(tx, user)

    def redeem_one_time(self, token: str) -> str:
        """Exchange a one-time login token for a new session (the token is spent)."""
        with self.archive.transaction(None, accounts=True) as tx:
            user = tx.accounts.session_user(digest(token))
            spent = tx.accounts.delete_session(digest(token))
            if user is None or not spent or not user.one_time:
                raise Unauthenticated("this login link was already used or has expired")
            name = user.name
            found = self._principal(tx, user)
            self._record(
                tx,
                "login.success",
                found,
                target=name,
                workspaces=found.workspaces,
                details={"method": "one_time_link"},
            )
        return self.open_session(name)

    def close_session(self, session: str) -> None:
        with self.archive.transaction(None, accounts=True) as tx:
            tx.accounts.delete_session(digest(session))

    def use_nonce(self, nonce: str, expires_at: datetime) -> None:
        """Record a protected request's nonce; a second use is refused."""
        with self.archive.transaction(None, accounts=True) as tx:
            if not tx.use_nonce(nonce, expires_at):
                raise PermissionDenied("this protected request was already used (replay refused)")

    # --- lifecycle (migration 012) ------------------------------------------------------
    # ``by`` is the admin asking (None: the operator). An admin acts only on what it
    # administers: the workspace it grants or revokes, and every workspace of a user
    # whose role, token or existence it changes. The routes check the same before.

    @staticmethod
    def _record(
        tx: ArchiveTx,
        action: str,
        by: Principal | None,
        *,
        target: str | None = None,
        workspace: str | None = None,
        workspaces: Iterable[str] | None = None,
        client: str | None = None,
        details: Mapping[str, Any] | None = None,
        anonymous: bool = False,
    ) -> None:
        """One audit row, in the transaction of the change it records. An event about a
        user (``target``) records the workspaces that user belongs to now (``workspaces``):
        their admins, and only they, read it (see ``audit_log``)."""
        actor = (
            None if anonymous else by.user if by is not None else audit.actor() or audit.OPERATOR
        )
        recorded = dict(details or {})
        if workspaces is not None:
            recorded[AUDIT_WORKSPACES] = sorted(set(workspaces))
        tx.accounts.insert_audit(
            actor=actor,
            action=action,
            target_user=target,
            workspace=workspace,
            client=client,
            details=recorded,
        )

    def _target(self, tx: ArchiveTx, name: str, by: Principal | None) -> _Target:
        """The user ``name``, locked, once ``by`` may administer it."""
        if by is not None:
            by.require(MANAGE, None)
        user = tx.accounts.lock_user(name)
        if user is None:
            raise NotFound(f"user '{name}' does not exist", details={"user": name})
        target = _Target(user, sorted(tx.accounts.user_workspaces(user.id)))
        if by is not None:
            for workspace in target.workspaces:
                by.require(MANAGE, workspace)
        return target

    def _keep_an_admin(self, tx: ArchiveTx, user: LockedUser, change: str) -> None:
        admins = tx.accounts.lock_admins()
        if user.role == "admin" and admins == [user.name]:
            raise LastAdmin(
                f"{user.name} is the last admin: {change} would leave nobody to administer"
                " the installation; make another user admin first (tht user role NAME admin)",
                details={"user": user.name},
            )

    def grant_installation_admin(self, workspace: str) -> str | None:
        """Make the installation's ``admin`` user (``tht serve``'s) a member of a
        workspace the operator created, so that it administers it on the pages; its
        name, or None when the installation has no such admin (yet: its first start
        then grants it every workspace there is)."""
        with self.archive.transaction(None, accounts=True) as tx:
            user = tx.accounts.user_by_name(INSTALLATION_ADMIN)
        if user is None or user.role != "admin":
            return None
        self.grant(INSTALLATION_ADMIN, workspace)
        return INSTALLATION_ADMIN

    def grant(self, name: str, workspace: str, *, by: Principal | None = None) -> dict[str, Any]:
        """Make ``name`` a member of ``workspace`` (already one: nothing changes)."""
        return self._membership(name, workspace, member=True, by=by)

    def revoke(self, name: str, workspace: str, *, by: Principal | None = None) -> dict[str, Any]:
        """End ``name``'s membership of ``workspace``: its token and sessions lose the
        workspace with their next request (not a member: nothing changes)."""
        return self._membership(name, workspace, member=False, by=by)

    def _membership(
        self, name: str, workspace: str, *, member: bool, by: Principal | None
    ) -> dict[str, Any]:
        # the admin must administer the workspace, not the user's other workspaces: an
        # admin of ws-a may add a member of ws-b to ws-a
        if by is not None:
            by.require(MANAGE, workspace)
        if member and workspace not in {w.id for w in self._workspaces()}:
            raise NotFound(
                f"workspace '{workspace}' does not exist", details={"workspace": workspace}
            )
        with self.archive.transaction(None, accounts=True) as tx:
            user = tx.accounts.lock_user(name)
            if user is None:
                raise NotFound(f"user '{name}' does not exist", details={"user": name})
            changed = (
                tx.accounts.add_membership(user.id, workspace)
                if member
                else tx.accounts.revoke_membership(user.id, workspace)
            )
            if changed:
                action = "membership.grant" if member else "membership.revoke"
                self._record(tx, action, by, target=name, workspace=workspace)
        return {
            "user": name,
            "workspace": workspace,
            "member": member,
            "changed": changed,
        }

    def set_role(self, name: str, role: str, *, by: Principal | None = None) -> dict[str, Any]:
        """Change ``name``'s role; the last admin keeps its role (LastAdmin)."""
        if role not in ROLE_PERMISSIONS:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}, not '{role}'")
        with self.archive.transaction(None, accounts=True) as tx:
            target = self._target(tx, name, by)
            if role != "admin":
                self._keep_an_admin(tx, target.user, f"making it {role}")
            if target.user.role != role:
                tx.accounts.set_role(target.user.id, role)
                self._record(
                    tx,
                    "user.role",
                    by,
                    target=name,
                    workspaces=target.workspaces,
                    details={"from": target.user.role, "to": role},
                )
        return {
            "user": name,
            "role": role,
            "previous_role": target.user.role,
            "workspaces": target.workspaces,
        }

    def rotate_token(
        self, name: str, *, expires_in: str | None = None, by: Principal | None = None
    ) -> dict[str, Any]:
        """A new API token for ``name`` (returned this once); the old one stops working
        now, and so do the user's web sessions, which a leaked token may have opened."""
        seconds = token_lifetime(expires_in)
        token = new_token()
        with self.archive.transaction(None, accounts=True) as tx:
            target = self._target(tx, name, by)
            expires = _iso(tx.accounts.set_token(target.user.id, digest(token), seconds))
            tx.accounts.close_user_sessions(target.user.id)
            self._record(
                tx,
                "token.rotate",
                by,
                target=name,
                workspaces=target.workspaces,
                details={"token_expires_at": expires},
            )
        return {"user": name, "token": token, "token_expires_at": expires}

    def delete_user(self, name: str, *, by: Principal | None = None) -> dict[str, Any]:
        """Delete ``name`` with its memberships and sessions; the last admin stays."""
        with self.archive.transaction(None, accounts=True) as tx:
            target = self._target(tx, name, by)
            self._keep_an_admin(tx, target.user, "deleting it")
            tx.accounts.delete_user(target.user.id)
            self._record(
                tx,
                "user.delete",
                by,
                target=name,
                workspaces=target.workspaces,
                details={"role": target.user.role},
            )
        return {"deleted": name, "role": target.user.role, "workspaces": target.workspaces}

    def users(self, *, by: Principal | None = None) -> list[dict[str, Any]]:
        """Users with role, workspaces and token dates (never a secret). An admin sees
        the users of its workspaces, and users of none (to clean them up), with only
        the memberships it administers; ``other_workspaces`` counts the rest."""
        if by is not None:
            by.require(MANAGE, None)
        with self.archive.transaction(None, accounts=True) as tx:
            users = tx.accounts.users()
        found = []
        for u in users:
            workspaces = list(u.workspaces)
            visible = workspaces if by is None else [w for w in workspaces if w in by.workspaces]
            if workspaces and not visible:
                continue
            found.append(
                {
                    "user": u.name,
                    "role": u.role,
                    "workspaces": visible,
                    "other_workspaces": len(workspaces) - len(visible),
                    "created_at": _iso(u.created_at),
                    "has_password": u.has_password,
                    "token_issued_at": _iso(u.token_issued_at),
                    "token_expires_at": _iso(u.token_expires_at),
                }
            )
        return found

    def audit_log(
        self,
        *,
        since: datetime | None = None,
        user: str | None = None,
        limit: int = 100,
        by: Principal | None = None,
    ) -> list[dict[str, Any]]:
        """Audit rows, newest first. The operator reads everything; an admin reads the
        events of the workspaces it administers: an event of a workspace (a card, a
        membership, the workspace's creation) by its ``workspace``, an event about a
        user by the workspaces that user belonged to when it happened, of which the
        admin sees only its own (``other_workspaces`` counts the rest). An event of no
        workspace (a failed login of an unknown name) is the operator's alone."""
        if by is not None:
            by.require(MANAGE, None)
        if not 1 <= limit <= AUDIT_LIMIT:
            raise InvalidInput(f"--limit is 1 to {AUDIT_LIMIT}", details={"field": "limit"})
        with self.archive.transaction(None, accounts=True) as tx:
            entries = tx.accounts.audit(
                since=since,
                user=user,
                limit=limit,
                workspaces=(
                    sorted(w for w in by.workspaces if by.can_manage(w)) if by is not None else None
                ),
            )
        return [
            {
                "id": e.id,
                "at": _iso(e.at),
                "actor": e.actor,
                "action": e.action,
                "user": e.target_user,
                "workspace": e.workspace_id,
                "client": e.client,
                "details": e.details if by is None else _visible_details(e.details, by),
            }
            for e in entries
        ]


def _visible_details(details: Any, by: Principal) -> Any:
    """An event's details as an admin reads them: of the user's workspaces, only those
    the admin administers, and how many others there are."""
    if not isinstance(details, dict) or not isinstance(details.get(AUDIT_WORKSPACES), list):
        return details
    workspaces = details[AUDIT_WORKSPACES]
    visible = [w for w in workspaces if by.can_manage(w)]
    return {
        **details,
        AUDIT_WORKSPACES: visible,
        "other_workspaces": len(workspaces) - len(visible),
    }
