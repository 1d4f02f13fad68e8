"""Which driver errors, raised while a transaction commits, leave its outcome unknown:
the connection's end, not a statement the server refused and answered."""

from __future__ import annotations

import psycopg
import pytest

from tht.db.connector import StoreErrors, commit_outcome_unknown, connection_lost
from tht.errors import ArchiveUnavailable, ThothError


@pytest.mark.parametrize(
    "error, lost",
    [
        (psycopg.OperationalError("server closed the connection unexpectedly"), True),
        (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), True),
        (psycopg.errors.ConnectionFailure("connection failure"), True),
        (psycopg.errors.SerializationFailure("could not serialize access"), False),
        (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), False),
        (psycopg.errors.UniqueViolation("duplicate key"), False),
        (psycopg.InterfaceError("the connection is closed"), False),
    ],
)
def test_only_the_end_of_the_connection_leaves_a_commit_unknown(error, lost):
    assert connection_lost(error) is lost


def test_an_unknown_outcome_is_an_outage_that_says_how_to_find_out():
    errors = StoreErrors(
        "the memory archive (PostgreSQL)", ArchiveUnavailable, ThothError, ThothError
    )
    error = commit_outcome_unknown(psycopg.OperationalError("server closed the connection"), errors)
    assert isinstance(error, ArchiveUnavailable)
    assert (error.code, error.http_status, error.exit_code) == ("commit_outcome_unknown", 503, 6)
    assert "may or may not have been applied" in error.message
    assert "same idempotency key" in error.message
    assert error.details == {"reason": "server closed the connection"}
