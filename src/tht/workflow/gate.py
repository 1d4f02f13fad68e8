"""Signed gate requests: how the reviewer gate (`reviewer_memory_promote`) hands the
harness the reviewer's choice.

The same protected-request machinery as `tht memory admin` (tht.protected): the
trusted workflow backend signs a snapshot of the request with HMAC-SHA256 under the
key in THT_PROTECTED_REQUEST_KEY_FILE, with a lifetime of at most five minutes and a
nonce. The agent has no key, so it cannot call `review-apply`. The nonce is spent in
the transaction that saves the review; a redelivery of an already-applied review
(same session, same content) reads its receipt back whatever its nonce.
"""

from __future__ import annotations

import hmac
import secrets
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tht.accounts import Principal
from tht.errors import InvalidInput, PermissionDenied
from tht.protected import CLOCK_SKEW, MAX_LIFETIME, sign
from tht.validation import describe_validation_error
from tht.workflow.contract import GATE, SESSION_ID_PATTERN, Review

VERSION = 1


def new_gate_request(principal: Principal, workspace: str, session: str, review: dict[str, Any], *,
                     lifetime: timedelta = timedelta(minutes=2), now: datetime | None = None) -> dict[str, Any]:
    """The request snapshot the workflow backend signs (with `tht.protected.sign`)."""
    now = now or datetime.now(timezone.utc)
    return {
        "version": VERSION, "gate": GATE, "workspace": workspace, "session": session,
        "principal": {"user": principal.user, "role": principal.role, "workspaces": sorted(principal.workspaces)},
        "review": review,
        "issued_at": now.isoformat(), "expires_at": (now + lifetime).isoformat(),
        "nonce": secrets.token_urlsafe(24),
    }


class _Principal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str = Field(min_length=1, max_length=64)
    role: str
    workspaces: list[str]


class _GateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int
    gate: str
    workspace: str
    session: str = Field(pattern=SESSION_ID_PATTERN)
    principal: _Principal
    review: Review
    issued_at: datetime
    expires_at: datetime
    nonce: str = Field(min_length=16, max_length=128)


class GateRequest(BaseModel):
    principal: Principal
    workspace: str
    session: str
    review: Review
    nonce: str
    expires_at: datetime

    model_config = ConfigDict(arbitrary_types_allowed=True)


def verify_gate_request(document: Any, key: bytes, *, workspace: str, now: datetime | None = None) -> GateRequest:
    now = now or datetime.now(timezone.utc)
    if not isinstance(document, dict) or set(document) != {"request", "signature"}:
        raise PermissionDenied("not a signed gate request: expected {\"request\": ..., \"signature\": ...}")
    request, signature = document["request"], document["signature"]
    if not isinstance(request, dict) or not isinstance(signature, str):
        raise PermissionDenied("not a signed gate request")
    if not hmac.compare_digest(sign(request, key)["signature"], signature):
        raise PermissionDenied("the gate request's signature does not match (unsigned or tampered)")
    try:
        parsed = _GateRequest.model_validate(request)
    except ValidationError as exc:
        raise InvalidInput(f"malformed gate request: {describe_validation_error(exc)}") from exc
    if parsed.version != VERSION:
        raise InvalidInput(f"gate request version {parsed.version} is not supported")
    if parsed.gate != GATE:
        raise PermissionDenied(f"review-apply is owned by the {GATE} gate, not '{parsed.gate}'")
    issued, expires = parsed.issued_at, parsed.expires_at
    if issued.tzinfo is None or expires.tzinfo is None:
        raise InvalidInput("gate request times need a time zone")
    if expires <= now:
        raise PermissionDenied("the gate request has expired")
    if issued > now + CLOCK_SKEW or expires - issued > MAX_LIFETIME:
        raise PermissionDenied("the gate request's lifetime is not acceptable")
    if parsed.workspace != workspace:
        raise PermissionDenied(f"the gate request is for workspace '{parsed.workspace}', not '{workspace}'")
    if parsed.principal.role not in ("admin", "user"):
        raise PermissionDenied(f"unknown role '{parsed.principal.role}'")
    principal = Principal(parsed.principal.user, parsed.principal.role, frozenset(parsed.principal.workspaces))
    return GateRequest(principal=principal, workspace=parsed.workspace, session=parsed.session,
                       review=parsed.review, nonce=parsed.nonce, expires_at=expires)
