"""API tokens: the principal of a token, a token's rotation, and the single-use
nonces of protected requests."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from tht.access.records import AccountsPart, record_event, target_user
from tht.accounts import Principal, digest, iso, new_token, token_lifetime
from tht.errors import PermissionDenied, TokenExpired, Unauthenticated
from tht.memory.archive.port import ArchiveTx

_Read = TypeVar("_Read")


class Tokens(AccountsPart):
    def by_token(self, token: str) -> Principal:
        return self.by_token_reading(token, None, lambda tx, principal: None)[0]

    def by_token_reading(
        self,
        token: str,
        workspace: str | None,
        read: Callable[[ArchiveTx, Principal], _Read],
    ) -> tuple[Principal, _Read]:
        """The token's principal, and what ``read`` reads after it in the same
        transaction, scoped to ``workspace``: a request's token check and the first thing
        its route reads cost one pooled checkout and one transaction. Nothing is kept: a
        token revoked or a workspace rebound is seen by the next request."""
        with self.archive.transaction(workspace, accounts=True) as tx:
            user = tx.accounts.token_user(digest(token))
            if user is None:
                raise Unauthenticated("invalid API token")
            if user.expired:
                raise TokenExpired(
                    f"the API token of {user.name} expired at {iso(user.token_expires_at)}:"
                    f" an admin issues a new one (tht user token rotate {user.name})",
                    details={"expired_at": iso(user.token_expires_at)},
                )
            principal = self._principal(tx, user)
            return principal, read(tx, principal)

    def rotate_token(
        self, name: str, *, expires_in: str | None = None, by: Principal | None = None
    ) -> dict[str, Any]:
        """A new API token for ``name`` (returned this once); the old one stops working
        now, and so do the user's web sessions, which a leaked token may have opened."""
        seconds = token_lifetime(expires_in)
        token = new_token()
        with self.archive.transaction(None, accounts=True) as tx:
            target = target_user(tx, name, by)
            expires = iso(tx.accounts.set_token(target.user.id, digest(token), seconds))
            tx.accounts.close_user_sessions(target.user.id)
            record_event(
                tx,
                "token.rotate",
                by,
                target=name,
                workspaces=target.workspaces,
                details={"token_expires_at": expires},
            )
        return {"user": name, "token": token, "token_expires_at": expires}

    def use_nonce(self, nonce: str, expires_at: datetime) -> None:
        """Record a protected request's nonce; a second use is refused."""
        with self.archive.transaction(None, accounts=True) as tx:
            if not tx.use_nonce(nonce, expires_at):
                raise PermissionDenied("this protected request was already used (replay refused)")
