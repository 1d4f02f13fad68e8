"""One error hierarchy for every entry point.

Each error carries a stable ``code`` (machine readable, documented), a message for
people, optional ``details`` and the HTTP status and CLI exit code it maps to. Driver
and library errors are translated where they enter the package (``raise ... from exc``)
so callers never see a psycopg or pydantic exception.
"""

from __future__ import annotations

from typing import Any


class ThothError(Exception):
    code = "internal_error"
    http_status = 500
    exit_code = 1
    default_message = "internal error"

    def __init__(self, message: str | None = None, *, details: Any = None) -> None:
        self.message = message or self.default_message
        self.details = details
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}

    @classmethod
    def from_dict(cls, document: Any, exit_code: int = 1) -> ThothError:
        """An error document received from the service, kept as it was sent."""
        body = document.get("error") if isinstance(document, dict) else None
        if not isinstance(body, dict):
            return ServiceUnavailable("the service answered with an unreadable error")
        code = str(body.get("code") or cls.code)
        # the class of that code when this process knows it (a caller may catch
        # Forbidden, NotFound, ...), else the base class carrying the code
        kind = _classes_by_code().get(code, ThothError)
        error = kind.__new__(kind)
        ThothError.__init__(error, str(body.get("message") or ""), details=body.get("details"))
        error.code = code
        error.exit_code = exit_code
        return error


def _classes_by_code() -> dict[str, type[ThothError]]:
    found: dict[str, type[ThothError]] = {}
    pending = list(ThothError.__subclasses__())
    while pending:
        kind = pending.pop()
        found.setdefault(kind.code, kind)
        pending += kind.__subclasses__()
    return found


class InvalidInput(ThothError):
    code = "invalid_input"
    http_status = 422
    exit_code = 2
    default_message = "invalid input"


class NotFound(ThothError):
    code = "not_found"
    http_status = 404
    exit_code = 3
    default_message = "not found"


class Conflict(ThothError):
    code = "conflict"
    http_status = 409
    exit_code = 4
    default_message = "conflict"


class LastAdmin(Conflict):
    """The change would leave the installation without an admin."""

    code = "last_admin"
    default_message = "the last admin cannot be removed"


class PortInUse(Conflict):
    """``tht serve`` cannot listen on its address: another program (or this
    installation's own service) holds the port."""

    code = "port_in_use"
    default_message = "the port is in use"


class StaleRevision(Conflict):
    code = "stale_revision"
    default_message = "the card changed since it was read"


class FamilyImmutable(Conflict):
    """A card's family is part of its identity (what it is for, which fields it has, which
    recall serves it): an update names the card's own family."""

    code = "family_immutable"
    default_message = "a card's family cannot change: create a card of the other family instead"


class ReceiptConflict(Conflict):
    """A review (or cleanup) delivered again under the same key with different content."""

    code = "receipt_conflict"
    default_message = "this key already has a receipt for different content"


class ProposalRefused(InvalidInput):
    """Proposals that cannot become knowledge (unapproved or inadmissible sources, ...)."""

    code = "proposal_refused"
    default_message = "the proposals are refused"


class ApprovedSqlReadOnly(InvalidInput):
    """The Memory review cannot change the approved SQL: that is SQL review's decision."""

    code = "approved_sql_read_only"
    default_message = (
        "the approved SQL cannot be changed in the Memory review: return to SQL review"
    )


class PermissionDenied(ThothError):
    code = "permission_denied"
    http_status = 403
    exit_code = 5
    default_message = "permission denied"


class Forbidden(PermissionDenied):
    """Authenticated, but the role lacks the capability or the user the workspace."""

    code = "forbidden"
    default_message = "not allowed"


class Unauthenticated(PermissionDenied):
    code = "unauthenticated"
    http_status = 401
    default_message = "authentication required"


class TokenExpired(Unauthenticated):
    """The API token was valid but its expiry has passed: an admin rotates it
    (`tht user token rotate NAME`)."""

    code = "token_expired"
    default_message = "the API token has expired"


class TooManyRequests(PermissionDenied):
    """Refused for now (login backoff, or the server is busy hashing): retry after
    ``retry_after`` seconds (the HTTP Retry-After header)."""

    code = "too_many_requests"
    http_status = 429
    default_message = "too many attempts: retry later"

    def __init__(
        self, message: str | None = None, *, retry_after: int, details: Any = None
    ) -> None:
        self.retry_after = max(1, int(retry_after))
        super().__init__(message, details={"retry_after": self.retry_after, **(details or {})})


class UnsupportedMediaType(InvalidInput):
    code = "unsupported_media_type"
    http_status = 415
    default_message = "the body must be application/json"


class PayloadTooLarge(InvalidInput):
    code = "payload_too_large"
    http_status = 413
    default_message = "the request body is too large"


class RequestTimeout(InvalidInput):
    """The client did not send its request body in time (a slow or half-sent request)."""

    code = "request_timeout"
    http_status = 408
    default_message = "the request did not arrive in time"


class ArchiveUnavailable(ThothError):
    code = "archive_unavailable"
    http_status = 503
    exit_code = 6
    default_message = "the memory archive (PostgreSQL) is unavailable"


class CommitOutcomeUnknown(ArchiveUnavailable):
    """The connection was lost while the transaction committed: the server may have
    committed it and died before answering, or not. Never reported as a plain outage,
    which would tell the caller its write was lost."""

    code = "commit_outcome_unknown"
    default_message = "the archive connection was lost while committing: the outcome is unknown"


class SchemaNotReady(ArchiveUnavailable):
    """The database is reachable but its memory schema is missing or not the expected version."""

    code = "schema_not_ready"
    default_message = "the memory schema is missing or not at the expected version"


class MigrationRefused(ThothError):
    code = "migration_refused"
    http_status = 500
    exit_code = 7
    default_message = "migration refused"


class DwhUnavailable(ThothError):
    """A DWH scan failed (connection, permission, missing schema): it proves no removal."""

    code = "dwh_unavailable"
    http_status = 502
    exit_code = 9
    default_message = "the DWH could not be scanned"


class CleanupPending(Conflict):
    """A physical change's Memory cleanup is not complete: a new sync would lose it."""

    code = "cleanup_pending"
    default_message = "a Memory cleanup of an earlier sync is still pending"


class ConfigurationError(InvalidInput):
    code = "invalid_configuration"
    default_message = "invalid configuration"


class SettingNotAllowed(ConfigurationError):
    """A runtime file (or a request) named what only the installation or a workspace
    decides: an engine, a path, a URL, an embedder, a DWH connection."""

    code = "setting_not_allowed"
    default_message = "this setting is not the caller's to choose"


class BindingRequired(ConfigurationError):
    """Recall is always bound to a DWH database and schema: a caller without one gets
    this, never a wider answer."""

    code = "binding_required"
    http_status = 409  # a valid request; the workspace's configuration lacks the binding
    default_message = "recall needs a DWH binding (database and schema)"


class BindingUnknown(ConfigurationError):
    """The binding names a database or schema the workspace does not know."""

    code = "binding_unknown"
    default_message = "the workspace is not bound to this database and schema"


class ArchiveLoginRefused(ConfigurationError):
    """PostgreSQL answered and refused the login (password, TLS, pg_hba): waiting or
    retrying cannot help, the configuration must change."""

    code = "archive_login_refused"
    default_message = "PostgreSQL refused the login"


class DatabaseRolesMisconfigured(ConfigurationError):
    """The database's logins or roles are not what the installation needs; only its DBA
    can fix that. The details name the login and the statements to run (``dba``)."""

    code = "database_roles_misconfigured"
    http_status = 503
    default_message = "the database logins are not configured as Thoth Memory needs them"


class RuntimeRoleNotGrantable(DatabaseRolesMisconfigured):
    """The migrator may not make the runtime login a member of the runtime role (a second
    installation on a cluster where another migrator created that role)."""

    code = "runtime_role_not_grantable"
    default_message = "the migrator login cannot grant the runtime role to the runtime login"


class RuntimeLoginPrivileged(DatabaseRolesMisconfigured):
    """The runtime login is a superuser or bypasses row-level security: tenancy would
    rest on the application alone, so the runtime refuses to start."""

    code = "runtime_login_privileged"
    default_message = "the runtime database login is a superuser or bypasses row-level security"


class ServiceUnavailable(ThothError):
    """The service could not be reached or started (the command did not run)."""

    code = "service_unavailable"
    http_status = 503
    exit_code = 10
    default_message = "the Thoth Memory service is unavailable"


class ServiceLost(ServiceUnavailable):
    """The service went away while running the command: whether the command took
    effect is unknown (a save is either committed whole or not at all)."""

    code = "service_lost"
    default_message = "the service stopped while running the command"


class ServiceTimeout(ServiceUnavailable):
    code = "service_timeout"
    default_message = "the service did not answer in time"


class ServiceBusy(ServiceUnavailable):
    """The service holds as many connections as it admits: nothing ran; retry."""

    code = "service_busy"
    default_message = "the service has too many connections open: retry later"


class ServiceUntrusted(ServiceUnavailable):
    """The socket or its directory could be someone else's: nothing is sent to it."""

    code = "service_untrusted"
    default_message = "the service socket is not trusted"


class ServiceVersionMismatch(ServiceUnavailable):
    code = "service_version_mismatch"
    http_status = 409
    default_message = "the running service is another version of thoth-memory"


class Interrupted(ThothError):
    code = "interrupted"
    exit_code = 130
    default_message = "interrupted"


# Documented in docs/configuration.md (exit codes); tests check that each class keeps its code.
EXIT_CODES = {
    0: "success",
    1: "internal error",
    2: "invalid input or configuration (also command-line usage errors, and database logins or"
    " roles the DBA must fix: runtime_role_not_grantable, runtime_login_privileged)",
    3: "not found",
    4: "conflict (stale revision, duplicate, family_immutable, idempotency_key_reused; a service"
    " already running, or its port taken: service_running, port_in_use)",
    5: "permission denied",
    6: "archive unavailable or schema not ready; commit_outcome_unknown: the connection was lost"
    " while a write committed (it may or may not have been applied)",
    7: "migration refused (changed or unknown applied migration)",
    8: "search index or embedder unavailable (recall), the index lost points the archive records"
    " (index_lost_points), or `memory check` found drift (index_drift), or `memory retry` left the"
    " work pending; a save still succeeds with its index update pending",
    9: "DWH unavailable: a Catalog scan failed (connection, permission, missing schema); nothing was deleted",
    10: "service unavailable: not reachable or startable, lost mid-command, timed out, untrusted socket,"
    " or another version",
    130: "interrupted (Ctrl-C); through the service the command goes on there (detached)",
}


def first_line(exc: BaseException) -> str:
    """The first line of a driver's error message (its detail lines stay in logs)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
