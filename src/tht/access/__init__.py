"""The accounts over the archive, by job: users and roles (`Users`), API tokens and
protected requests' nonces (`Tokens`), web sessions and login links (`WebSessions`),
the audit log (`AuditLog`). Their rules (roles, capabilities, the principal, password
hashing, token lifetimes, login backoff) are tht.accounts, which does no I/O.
"""

from tht.access.audit_log import AuditLog
from tht.access.sessions import WebSessions
from tht.access.tokens import Tokens
from tht.access.users import Users
from tht.memory.archive.port import Archive

__all__ = ["Accounts", "AuditLog", "Tokens", "Users", "WebSessions"]


class Accounts:
    """The four parts over one archive, as one object because the wiring hands one to
    every face (``Services.accounts``); it holds the parts and nothing else, and
    forwards no call: a caller names the part (``accounts.tokens.by_token(...)``)."""

    def __init__(self, archive: Archive) -> None:
        self.users = Users(archive)
        self.tokens = Tokens(archive)
        self.sessions = WebSessions(archive)
        self.audit = AuditLog(archive)
