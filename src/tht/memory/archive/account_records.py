"""Local accounts in the archive: users, memberships, web sessions, login failures,
and the audit log. Typed methods over the named SQL of ``sql/accounts.sql``, inside
an archive transaction opened in the accounts mode (``tx.accounts``)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from tht.sqlfiles import named_queries

if TYPE_CHECKING:
    from tht.memory.archive.postgres import ArchiveTransaction


@dataclass(frozen=True)
class CreatedUser:
    id: uuid.UUID
    token_expires_at: datetime | None  # None: a token that never expires


@dataclass(frozen=True)
class UserByName:
    id: uuid.UUID
    name: str
    role: str
    password_hash: str | None


@dataclass(frozen=True)
class TokenUser:
    """The user an API token names, and whether the token has expired (by the
    database clock every service instance shares)."""

    id: uuid.UUID
    name: str
    role: str
    token_expires_at: datetime | None
    expired: bool
    workspaces: tuple[str, ...]  # the user's, in order


@dataclass(frozen=True)
class SessionUser:
    """The user of an unexpired web session (or one-time login token)."""

    id: uuid.UUID
    name: str
    role: str
    one_time: bool


@dataclass(frozen=True)
class LockedUser:
    """A user row locked until commit (a lifecycle change)."""

    id: uuid.UUID
    name: str
    role: str
    token_expires_at: datetime | None


@dataclass(frozen=True)
class LoginFailures:
    """Recent failed logins of a name and of a client, and the seconds since the last
    of each (None when there is none)."""

    user_failures: int
    user_idle: float | None
    client_failures: int
    client_idle: float | None


@dataclass(frozen=True)
class UserDetail:
    name: str
    role: str
    created_at: datetime
    token_issued_at: datetime | None
    token_expires_at: datetime | None
    has_password: bool
    workspaces: list[str]


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: datetime
    actor: str | None
    action: str
    target_user: str | None
    workspace_id: str | None
    client: str | None
    details: Any  # the JSON the action recorded


def _seconds(value: Any) -> float | None:
    # extract(epoch ...) is numeric (a Decimal) in PostgreSQL 14 and later
    return None if value is None else float(value)


def _queries() -> dict[str, str]:
    return named_queries("tht.memory.archive", "sql/accounts.sql")


class AccountRecords:
    def __init__(self, tx: ArchiveTransaction) -> None:
        self._tx = tx._using(_queries())

    # --- users and memberships -------------------------------------------------------

    def insert_user(
        self,
        user_id: uuid.UUID,
        *,
        name: str,
        role: str,
        password_hash: str | None,
        token_hash: str,
        token_seconds: int | None,
    ) -> CreatedUser | None:
        """The new user; None when the name is taken."""
        row = self._tx._row(
            "user_insert",
            id=user_id,
            name=name,
            role=role,
            password_hash=password_hash,
            token_hash=token_hash,
            token_seconds=token_seconds,
        )
        return CreatedUser(**row) if row else None

    def insert_membership(self, user_id: uuid.UUID, workspace: str) -> None:
        """A membership of a new user (a duplicate is an error)."""
        self._tx._execute("user_workspace_insert", user_id=user_id, workspace=workspace)

    def ensure_membership(self, user_id: uuid.UUID, workspace: str) -> None:
        """A membership, unless the user already has it."""
        self._tx._execute("user_workspace_grant", user_id=user_id, workspace=workspace)

    def add_membership(self, user_id: uuid.UUID, workspace: str) -> bool:
        """Whether the membership is new (it was not there before)."""
        return self._tx._row("user_workspace_add", user_id=user_id, workspace=workspace) is not None

    def revoke_membership(self, user_id: uuid.UUID, workspace: str) -> bool:
        """Whether there was a membership to end."""
        return (
            self._tx._row("user_workspace_revoke", user_id=user_id, workspace=workspace) is not None
        )

    def user_by_name(self, name: str) -> UserByName | None:
        row = self._tx._row("user_by_name", name=name)
        return UserByName(**row) if row else None

    def user_workspaces(self, user_id: uuid.UUID) -> list[str]:
        """The user's workspaces, in order."""
        return [r["workspace_id"] for r in self._tx._rows("user_workspaces", user_id=user_id)]

    def token_user(self, token_hash: str) -> TokenUser | None:
        row = self._tx._row("token_principal", token_hash=token_hash)
        return TokenUser(**{**row, "workspaces": tuple(row["workspaces"])}) if row else None

    def lock_user(self, name: str) -> LockedUser | None:
        row = self._tx._row("user_lock", name=name)
        return LockedUser(**row) if row else None

    def lock_admins(self) -> list[str]:
        """The names of every admin, their rows locked until commit (two concurrent
        demotions cannot both see another admin left)."""
        return [r["name"] for r in self._tx._rows("admins_lock")]

    def set_role(self, user_id: uuid.UUID, role: str) -> None:
        self._tx._execute("user_role_set", user_id=user_id, role=role)

    def set_token(
        self, user_id: uuid.UUID, token_hash: str, seconds: int | None
    ) -> datetime | None:
        """Replace the user's token; its expiry (None: never, or no such user)."""
        row = self._tx._row(
            "user_token_set", user_id=user_id, token_hash=token_hash, seconds=seconds
        )
        expires: datetime | None = row["token_expires_at"] if row else None
        return expires

    def delete_user(self, user_id: uuid.UUID) -> None:
        """The user, with its sessions and memberships (they cascade)."""
        self._tx._execute("user_delete", user_id=user_id)

    def users(self) -> list[UserDetail]:
        """Every user with its workspaces, by name."""
        return [UserDetail(**r) for r in self._tx._rows("users_detail")]

    # --- web sessions --------------------------------------------------------------------

    def expire_sessions(self) -> None:
        self._tx._execute("sessions_expire")

    def insert_session(
        self, id_hash: str, user_id: uuid.UUID, *, one_time: bool, seconds: int
    ) -> None:
        self._tx._execute(
            "session_insert", id_hash=id_hash, user_id=user_id, one_time=one_time, seconds=seconds
        )

    def session_user(self, id_hash: str) -> SessionUser | None:
        row = self._tx._row("user_by_session", id_hash=id_hash)
        return SessionUser(**row) if row else None

    def delete_session(self, id_hash: str) -> bool:
        """Whether there was such a session."""
        return self._tx._row("session_delete", id_hash=id_hash) is not None

    def close_user_sessions(self, user_id: uuid.UUID) -> None:
        self._tx._execute("user_sessions_close", user_id=user_id)

    # --- login failures ------------------------------------------------------------------

    def login_failures(self, name: str, client: str, window: int) -> LoginFailures:
        row = self._tx._one("login_failures", name=name, client=client, window=window)
        return LoginFailures(
            user_failures=row["user_failures"],
            user_idle=_seconds(row["user_idle"]),
            client_failures=row["client_failures"],
            client_idle=_seconds(row["client_idle"]),
        )

    def record_login_failure(self, name: str, client: str, window: int) -> None:
        """One failure (failures older than ``window`` seconds are forgotten)."""
        self._tx._execute("login_failure_record", name=name, client=client, window=window)

    def clear_login_failures(self, name: str) -> None:
        self._tx._execute("login_failures_clear", name=name)

    # --- the audit log -------------------------------------------------------------------

    def insert_audit(
        self,
        *,
        actor: str | None,
        action: str,
        target_user: str | None,
        workspace: str | None,
        client: str | None,
        details: Mapping[str, Any],
    ) -> None:
        self._tx._execute(
            "audit_insert",
            actor=actor,
            action=action,
            target_user=target_user,
            workspace=workspace,
            client=client,
            details=Jsonb(dict(details)),
        )

    def audit(
        self,
        *,
        since: datetime | None,
        user: str | None,
        limit: int,
        workspaces: list[str] | None,
    ) -> list[AuditEntry]:
        """Newest first. ``workspaces`` None: every row; otherwise the rows of those
        workspaces: of a card, a membership or a workspace by its workspace, of a user
        by the workspaces it belonged to then (``details.workspaces``)."""
        return [
            AuditEntry(**r)
            for r in self._tx._rows(
                "audit_list", since=since, user=user, limit=limit, workspaces=workspaces
            )
        ]
