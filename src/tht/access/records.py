"""What the account parts share: the principal of a user row, the audit row of a
change, and the user a lifecycle change acts on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from tht import audit
from tht.accounts import AUDIT_WORKSPACES, MANAGE, Principal, Role
from tht.errors import LastAdmin, NotFound
from tht.memory.archive.account_records import LockedUser, SessionUser, TokenUser, UserByName
from tht.memory.archive.port import Archive, ArchiveTx
from tht.memory.model import Workspace


class AccountsPart:
    """One part of the accounts over the archive; every part builds principals, which
    ask the archive whether a workspace exists to word a refusal."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive

    def _workspaces(self) -> list[Workspace]:
        with self.archive.transaction(None, directory=True) as tx:
            return tx.list_workspaces()

    def workspace_exists(self, workspace: str) -> bool:
        return workspace in {w.id for w in self._workspaces()}

    def _principal(self, tx: ArchiveTx, user: UserByName | TokenUser | SessionUser) -> Principal:
        workspaces = frozenset(
            user.workspaces if isinstance(user, TokenUser) else tx.accounts.user_workspaces(user.id)
        )
        # the column's check constraint (migration 007) admits only the roles
        return Principal(
            user=user.name,
            role=cast(Role, user.role),
            workspaces=workspaces,
            workspace_exists=self.workspace_exists,
        )


def record_event(
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
    their admins, and only they, read it (see ``AuditLog.audit_log``)."""
    actor = None if anonymous else by.user if by is not None else audit.actor() or audit.OPERATOR
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


# ``by`` is the admin asking (None: the operator). An admin acts only on what it
# administers: the workspace it grants or revokes, and every workspace of a user
# whose role, token or existence it changes. The routes check the same before.


@dataclass(frozen=True)
class Target:
    """A user a lifecycle change acts on, locked, with its workspaces."""

    user: LockedUser
    workspaces: list[str]


def target_user(tx: ArchiveTx, name: str, by: Principal | None) -> Target:
    """The user ``name``, locked, once ``by`` may administer it."""
    if by is not None:
        by.require(MANAGE, None)
    user = tx.accounts.lock_user(name)
    if user is None:
        raise NotFound(f"user '{name}' does not exist", details={"user": name})
    target = Target(user, sorted(tx.accounts.user_workspaces(user.id)))
    if by is not None:
        for workspace in target.workspaces:
            by.require(MANAGE, workspace)
    return target


def keep_an_admin(tx: ArchiveTx, user: LockedUser, change: str) -> None:
    admins = tx.accounts.lock_admins()
    if user.role == "admin" and admins == [user.name]:
        raise LastAdmin(
            f"{user.name} is the last admin: {change} would leave nobody to administer"
            " the installation; make another user admin first (tht user role NAME admin)",
            details={"user": user.name},
        )
