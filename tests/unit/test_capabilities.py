"""The roles' capabilities (tht.accounts) and the error they raise: no I/O."""

from __future__ import annotations

import pytest

from tht.accounts import MANAGE, PROPOSE, READ, RECALL, ROLE_PERMISSIONS, Principal
from tht.errors import Forbidden, PermissionDenied
from tht.usecases.card_administration import OPERATIONS, required_permission

TABLE = {
    "admin": {MANAGE, READ, RECALL, PROPOSE},
    "user": {READ, RECALL},
    "agent": {RECALL, PROPOSE},
}


def test_the_capability_table_is_the_design():
    assert (MANAGE, READ, RECALL, PROPOSE) == (
        "memory.manage",
        "memory.read",
        "memory.recall",
        "memory.propose",
    )
    assert {role: set(permissions) for role, permissions in ROLE_PERMISSIONS.items()} == TABLE


@pytest.mark.parametrize("role", sorted(TABLE))
@pytest.mark.parametrize("permission", [MANAGE, READ, RECALL, PROPOSE])
def test_require_and_can_follow_the_table_in_the_members_workspaces_only(role, permission):
    principal = Principal("someone", role, frozenset({"ws-a"}))
    held = permission in TABLE[role]
    assert principal.can(permission, "ws-a") is held
    assert principal.can(permission, None) is held  # a capability that is not per workspace
    assert principal.can(permission, "ws-b") is False
    if held:
        principal.require(permission, "ws-a")
    else:
        with pytest.raises(Forbidden) as refused:
            principal.require(permission, "ws-a")
        assert refused.value.details == {"permission": permission, "role": role}
    with pytest.raises(Forbidden) as outside:
        principal.require(permission, "ws-b")
    error = outside.value
    assert isinstance(error, PermissionDenied)
    assert (error.code, error.http_status, error.exit_code) == ("forbidden", 403, 5)


def test_require_manage_delegates_and_an_unknown_role_holds_nothing():
    assert Principal("a", "admin", frozenset({"w"})).can_manage("w")
    with pytest.raises(Forbidden):
        Principal("u", "user", frozenset({"w"})).require_manage("w")
    ghost = Principal("g", "ghost", frozenset({"w"}))  # type: ignore[arg-type]
    assert ghost.permissions == frozenset() and not ghost.can(RECALL, "w")


def test_the_administrative_surface_needs_manage_reads_included():
    assert {op: required_permission(op) for op in OPERATIONS} == {
        "list": MANAGE,
        "show": MANAGE,
        "pending": MANAGE,
        "create": MANAGE,
        "update": MANAGE,
        "delete": MANAGE,
        "retry": MANAGE,
    }
    assert required_permission("drop_everything") == MANAGE
