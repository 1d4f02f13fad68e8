"""Web sessions and login links: logging in with a password (with its backoff and
bounded hashing) or an API token, the session a login opens, one-time login links,
logging out."""

from __future__ import annotations

import math
import secrets

from tht.access.records import AccountsPart, record_event
from tht.accounts import (
    CLIENT_FREE_FAILURES,
    DUMMY_HASH,
    LOGIN_WINDOW_SECONDS,
    ONE_TIME_SECONDS,
    SESSION_SECONDS,
    USER_FREE_FAILURES,
    Principal,
    digest,
    hashing_slot,
    login_backoff,
    verify_password,
)
from tht.errors import NotFound, TooManyRequests, Unauthenticated
from tht.memory.archive.account_records import UserByName


class WebSessions(AccountsPart):
    def by_password(self, name: str, password: str, client: str = "unknown") -> Principal:
        """The user with this name and password, or Unauthenticated; TooManyRequests
        while the name or the client (its address) is in login backoff."""
        name, client = name[:64] or "-", client[:128] or "unknown"
        self._refuse_in_backoff(name, client)  # at once, without waiting for a hashing slot
        with hashing_slot():
            # Again in the slot: the attempts that passed the first check beside this one
            # have recorded their failures by now (else a burst of concurrent guesses
            # would all pass before the first failure was counted).
            user = self._refuse_in_backoff(name, client)
            stored = user.password_hash if user is not None else None
            # no database connection is held while hashing: a flood must not drain the pool
            ok = verify_password(password, stored or DUMMY_HASH) and stored is not None
            if not ok:
                with self.archive.transaction(None, accounts=True) as tx:
                    tx.accounts.record_login_failure(name, client, LOGIN_WINDOW_SECONDS)
                    # the backoff forgets this row after its window; the audit log keeps it
                    record_event(
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
            record_event(
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
            record_event(
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
            record_event(
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
