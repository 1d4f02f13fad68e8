"""Protected requests: an administrative operation signed by the trusted backend.

The backend authenticates the person, then hands the harness a snapshot of the
request and the principal, signed with HMAC-SHA256 under the key in the file named by
THT_PROTECTED_REQUEST_KEY_FILE, with an expiry and a single-use nonce. `tht memory
admin` refuses anything unsigned, tampered, expired, replayed or for another
workspace, then checks the principal itself before acting.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeGuard, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tht.accounts import ROLE_PERMISSIONS, Principal, Role
from tht.errors import ConfigurationError, InvalidInput, PermissionDenied
from tht.usecases.card_administration import AdminRequest, Operation
from tht.validation import describe_validation_error

KEY_ENV = "THT_PROTECTED_REQUEST_KEY_FILE"
MAX_LIFETIME = timedelta(minutes=5)
CLOCK_SKEW = timedelta(seconds=30)
VERSION = 1


def load_key(env: Mapping[str, str] | None = None) -> bytes:
    env = os.environ if env is None else env
    path = env.get(KEY_ENV)
    if not path:
        raise ConfigurationError(f"{KEY_ENV} is not set: protected requests cannot be verified")
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigurationError(
            f"{KEY_ENV} names {path}, which cannot be read ({exc.strerror})"
        ) from exc
    if len(key) < 32:
        raise ConfigurationError(f"the key in {KEY_ENV} is shorter than 32 bytes")
    return key


def _canonical(request: Mapping[str, Any]) -> bytes:
    return json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(request: Mapping[str, Any], key: bytes) -> dict[str, Any]:
    return {
        "request": dict(request),
        "signature": hmac.new(key, _canonical(request), hashlib.sha256).hexdigest(),
    }


def new_request(
    principal: Principal,
    admin: AdminRequest,
    *,
    lifetime: timedelta = timedelta(minutes=2),
    now: datetime | None = None,
) -> dict[str, Any]:
    """The request snapshot a backend signs (see `sign`)."""
    now = now or datetime.now(UTC)
    # a backend that lost an answer signs the request again (a nonce is single-use) with
    # the same idempotency key: present only when set, older snapshots stay as they were
    key = {"idempotency_key": admin.idempotency_key} if admin.idempotency_key else {}
    return {
        **key,
        "version": VERSION,
        "workspace": admin.workspace,
        "principal": {
            "user": principal.user,
            "role": principal.role,
            "workspaces": sorted(principal.workspaces),
        },
        "operation": admin.operation,
        "card_id": admin.card_id,
        "body": admin.body,
        "filters": admin.filters,
        "revision": admin.revision,
        "issued_at": now.isoformat(),
        "expires_at": (now + lifetime).isoformat(),
        "nonce": secrets.token_urlsafe(24),
    }


class _Principal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str = Field(min_length=1, max_length=64)
    role: str
    workspaces: list[str]


class SignedRequest(BaseModel):
    """What every signed request carries; each kind adds its own fields."""

    model_config = ConfigDict(extra="forbid")
    version: int
    workspace: str
    principal: _Principal
    issued_at: datetime
    expires_at: datetime
    nonce: str = Field(min_length=16, max_length=128)

    def trusted_principal(self) -> Principal:
        role = self.principal.role
        if not _is_role(role):  # verify_signed refused it already
            raise PermissionDenied(f"unknown role '{role}'")
        return Principal(self.principal.user, role, frozenset(self.principal.workspaces))


# The snapshot's fields stay plain strings (an unknown role or operation is refused with
# its own message, not as a malformed request); these narrow them once checked.
def _is_role(name: str) -> TypeGuard[Role]:
    return name in get_args(Role)


def _is_operation(name: str) -> TypeGuard[Operation]:
    return name in get_args(Operation)


class _Request(SignedRequest):
    operation: str
    card_id: str | None = None
    body: Any = None
    filters: dict[str, Any] = Field(default_factory=dict)
    revision: int | None = None
    idempotency_key: str | None = None


Signed = TypeVar("Signed", bound=SignedRequest)


def verify_signed(
    document: Any,
    key: bytes,
    model: type[Signed],
    *,
    kind: str,
    workspace: str,
    now: datetime | None = None,
) -> Signed:
    """Check a signed request's signature, shape, version, lifetime, workspace and role
    (``kind`` names it in errors: "protected request", "gate request")."""
    now = now or datetime.now(UTC)
    if not isinstance(document, dict) or set(document) != {"request", "signature"}:
        raise PermissionDenied(f'not a {kind}: expected {{"request": ..., "signature": ...}}')
    request, signature = document["request"], document["signature"]
    if not isinstance(request, dict) or not isinstance(signature, str):
        raise PermissionDenied(f"not a {kind}")
    expected = hmac.new(key, _canonical(request), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise PermissionDenied(f"the {kind}'s signature does not match (unsigned or tampered)")
    try:
        parsed = model.model_validate(request)
    except ValidationError as exc:
        raise InvalidInput(f"malformed {kind}: {describe_validation_error(exc)}") from exc
    if parsed.version != VERSION:
        raise InvalidInput(f"{kind} version {parsed.version} is not supported")
    issued, expires = parsed.issued_at, parsed.expires_at
    if issued.tzinfo is None or expires.tzinfo is None:
        raise InvalidInput(f"{kind} times need a time zone")
    if expires <= now:
        raise PermissionDenied(f"the {kind} has expired")
    if issued > now + CLOCK_SKEW or expires - issued > MAX_LIFETIME:
        raise PermissionDenied(f"the {kind}'s lifetime is not acceptable")
    if parsed.workspace != workspace:
        raise PermissionDenied(
            f"the {kind} is for workspace '{parsed.workspace}', not '{workspace}'"
        )
    if parsed.principal.role not in ROLE_PERMISSIONS:
        raise PermissionDenied(f"unknown role '{parsed.principal.role}'")
    return parsed


def verify(
    document: Any, key: bytes, *, workspace: str, now: datetime | None = None
) -> tuple[Principal, AdminRequest, str, datetime]:
    """Check signature, version, lifetime and workspace; returns the principal, the
    request, and the nonce with its expiry (to be spent by the caller)."""
    parsed = verify_signed(
        document, key, _Request, kind="protected request", workspace=workspace, now=now
    )
    operation = parsed.operation
    if not _is_operation(operation):
        raise InvalidInput(f"unknown operation '{operation}'")
    admin = AdminRequest(
        parsed.workspace,
        operation,
        parsed.card_id,
        parsed.body,
        parsed.filters,
        parsed.revision,
        parsed.idempotency_key,
    )
    return parsed.trusted_principal(), admin, parsed.nonce, parsed.expires_at
