"""Who is acting, for the audit log (migration 012).

The faces name the actor once, where they resolve the principal: the CLI when it
authorizes a command (a token's user, or ``operator``), the web app in its principal
dependency. Every archive transaction opened afterwards in the same context carries
the actor to PostgreSQL (``thoth.actor``), where the cards' audit trigger reads it:
no service method has to pass it along, and no mutation path can forget it.

``via`` names the workflow a mutation carries out (the reviewer's gate sets
``review``), so a card written by a review decision reads as such in the log.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

OPERATOR = "operator"  # whoever holds THT_HOME or the database credentials, without a token

_actor: ContextVar[str | None] = ContextVar("tht_audit_actor", default=None)
_via: ContextVar[str | None] = ContextVar("tht_audit_via", default=None)


def act_as(actor: str | None) -> None:
    """Name the actor of everything that follows in this context (a request, a command)."""
    _actor.set(actor)


def actor() -> str | None:
    return _actor.get()


def via() -> str | None:
    return _via.get()


@contextmanager
def acting(actor: str, *, via: str | None = None) -> Iterator[None]:
    """Within the block, ``actor`` acts (through the workflow ``via``): a principal that
    a command or request carries besides its own, such as a signed review's reviewer."""
    tokens = (_actor.set(actor), _via.set(via))
    try:
        yield
    finally:
        _via.reset(tokens[1])
        _actor.reset(tokens[0])


@contextmanager
def scoped() -> Iterator[None]:
    """Within the block nobody is named yet, and whoever is named in it is forgotten
    after it: one command of a process that runs many never lends its actor to the next."""
    tokens = (_actor.set(None), _via.set(None))
    try:
        yield
    finally:
        _via.reset(tokens[1])
        _actor.reset(tokens[0])
