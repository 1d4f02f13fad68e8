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

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tht.accounts import Principal
from tht.errors import PermissionDenied
from tht.protected import SignedRequest, verify_signed
from tht.workflow.contract import GATE, SESSION_ID_PATTERN, Review

VERSION = 1


def new_gate_request(
    principal: Principal,
    workspace: str,
    session: str,
    review: dict[str, Any],
    *,
    lifetime: timedelta = timedelta(minutes=2),
    now: datetime | None = None,
) -> dict[str, Any]:
    """The request snapshot the workflow backend signs (with `tht.protected.sign`)."""
    now = now or datetime.now(UTC)
    return {
        "version": VERSION,
        "gate": GATE,
        "workspace": workspace,
        "session": session,
        "principal": {
            "user": principal.user,
            "role": principal.role,
            "workspaces": sorted(principal.workspaces),
        },
        "review": review,
        "issued_at": now.isoformat(),
        "expires_at": (now + lifetime).isoformat(),
        "nonce": secrets.token_urlsafe(24),
    }


class _GateRequest(SignedRequest):
    gate: str
    session: str = Field(pattern=SESSION_ID_PATTERN)
    review: Review


class GateRequest(BaseModel):
    principal: Principal
    workspace: str
    session: str
    review: Review
    nonce: str
    expires_at: datetime

    model_config = ConfigDict(arbitrary_types_allowed=True)


def verify_gate_request(
    document: Any, key: bytes, *, workspace: str, now: datetime | None = None
) -> GateRequest:
    parsed = verify_signed(
        document, key, _GateRequest, kind="gate request", workspace=workspace, now=now
    )
    if parsed.gate != GATE:
        raise PermissionDenied(f"review-apply is owned by the {GATE} gate, not '{parsed.gate}'")
    return GateRequest(
        principal=parsed.trusted_principal(),
        workspace=parsed.workspace,
        session=parsed.session,
        review=parsed.review,
        nonce=parsed.nonce,
        expires_at=parsed.expires_at,
    )
