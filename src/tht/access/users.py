"""Users and roles: creating users (with their first API token), their memberships
of workspaces, their role, their deletion, and the list an admin reads.

``by`` is the admin asking (None: the operator); it may give access only to what it
administers, and the last admin keeps its role (LastAdmin).
"""

from __future__ import annotations

import uuid
from typing import Any

from tht.access.records import AccountsPart, keep_an_admin, record_event, target_user
from tht.accounts import (
    INSTALLATION_ADMIN,
    MANAGE,
    ROLE_PERMISSIONS,
    ROLES,
    USER_NAME,
    Principal,
    digest,
    hash_password,
    iso,
    new_token,
    token_lifetime,
)
from tht.errors import Conflict, InvalidInput, NotFound


class Users(AccountsPart):
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
        if not USER_NAME.match(name or ""):
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
            expires = iso(created.token_expires_at)
            record_event(
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

    def list_users(self) -> list[dict[str, Any]]:
        """Every user (the operator's view): see ``users``."""
        return self.users()

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
                    "created_at": iso(u.created_at),
                    "has_password": u.has_password,
                    "token_issued_at": iso(u.token_issued_at),
                    "token_expires_at": iso(u.token_expires_at),
                }
            )
        return found

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
                record_event(tx, action, by, target=name, workspace=workspace)
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
            target = target_user(tx, name, by)
            if role != "admin":
                keep_an_admin(tx, target.user, f"making it {role}")
            if target.user.role != role:
                tx.accounts.set_role(target.user.id, role)
                record_event(
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

    def delete_user(self, name: str, *, by: Principal | None = None) -> dict[str, Any]:
        """Delete ``name`` with its memberships and sessions; the last admin stays."""
        with self.archive.transaction(None, accounts=True) as tx:
            target = target_user(tx, name, by)
            keep_an_admin(tx, target.user, "deleting it")
            tx.accounts.delete_user(target.user.id)
            record_event(
                tx,
                "user.delete",
                by,
                target=name,
                workspaces=target.workspaces,
                details={"role": target.user.role},
            )
        return {"deleted": name, "role": target.user.role, "workspaces": target.workspaces}
