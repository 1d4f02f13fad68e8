"""What an agent may do, the same for every face: recall (search, rules,
solved-search) and the workflow's side of Memory (propose, summary, solved-index).

The CLI (`tht memory search|rules|solved-search`, in-process: the operator) and the
HTTP API (an agent's token) call these functions, so both answer the same JSON
document. With a principal, each function checks its capability in the workspace
again, so a bug in a route cannot widen what a token may do; the CLI's operator runs
them without one.

The DWH binding (database, schema) is never the caller's to choose: the CLI takes it
from its runtime file, the service from the workspace's configuration (the Catalog's
recorded binding). Filters can only narrow it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tht import audit
from tht.accounts import PROPOSE, RECALL, Principal
from tht.errors import BindingRequired, BindingUnknown, InvalidInput
from tht.memory.idempotency import IdempotencyKey
from tht.memory.recall_answer import View, compact_answer
from tht.memory.recall_errors import rules_for_error
from tht.memory.recall_log import logged
from tht.memory.recall_service import RecallKind, RecallQuery, RecallService, parse_recall_query

if TYPE_CHECKING:
    from tht.bootstrap import Services
    from tht.catalog.model import Binding
    from tht.memory.archive.port import ArchiveTx

RECALL_KINDS: dict[str, RecallKind] = {
    "search": "search",
    "rules": "rules",
    "solved-search": "solved",
}


@dataclass(frozen=True)
class DwhBinding:
    """The database and schema recall is bound to (both None: no binding)."""

    database: str | None = None
    schema: str | None = None


NO_BINDING = DwhBinding()


def workspace_binding(services: Services, workspace: str) -> DwhBinding:
    """The workspace's configured binding: the Catalog's recorded one, else none."""
    return _dwh_binding(services.catalog.binding(workspace))


def _dwh_binding(recorded: Binding | None) -> DwhBinding:
    return NO_BINDING if recorded is None else DwhBinding(recorded.database, recorded.schema)


def token_recall(
    services: Services, token: str, workspace: str
) -> tuple[Principal, DwhBinding | None]:
    """An API token's principal and, when it may recall in ``workspace``, the
    workspace's recorded binding, read in one archive transaction (a recall request's
    reads before recall, in one pooled checkout); both are read again by every request."""

    def binding(tx: ArchiveTx, principal: Principal) -> DwhBinding | None:
        if not principal.can(RECALL, workspace):
            return None  # refused before anything of the workspace is read
        return _dwh_binding(services.catalog.binding_in(tx))

    return services.accounts.tokens.by_token_reading(token, workspace, binding)


def recall_binding(
    services: Services,
    workspace: str,
    asked: DwhBinding | None = None,
    *,
    recorded: DwhBinding | None = None,
) -> DwhBinding:
    """The binding a recall runs with: ``asked`` (a runtime file's database and schema)
    or, without it (the service's faces), the workspace's recorded one (``recorded``
    when the caller read it already). Recall is never unbound: a missing binding is
    ``binding_required``; one the workspace's recorded binding contradicts (a typo) is
    ``binding_unknown``, naming what it knows."""
    if recorded is None:
        recorded = workspace_binding(services, workspace)
    if asked is None:
        if recorded.database is None:
            raise BindingRequired(
                f"workspace '{workspace}' has no DWH binding, and recall is always bound to one:"
                " an admin binds it with `tht catalog bind -c runtime.yaml --connection NAME`",
                details={"workspace": workspace},
            )
        return recorded
    if asked.database is None or asked.schema is None:
        raise BindingRequired(
            "recall is bound to the DWH the agent queries: the runtime file needs `database`"
            " and `schema`",
            details={"workspace": workspace, "database": asked.database, "schema": asked.schema},
        )
    if recorded.database is not None and recorded != asked:
        raise BindingUnknown(
            f"workspace '{workspace}' is bound to {recorded.database}.{recorded.schema}, not"
            f" {asked.database}.{asked.schema}",
            details={
                "workspace": workspace,
                "known": {"database": recorded.database, "schema": recorded.schema},
                "asked": {"database": asked.database, "schema": asked.schema},
            },
        )
    return asked


def _check(principal: Principal | None, permission: str, workspace: str) -> None:
    if principal is not None:
        principal.require(permission, workspace)


def _recall(services: Services, workspace: str) -> RecallService:
    """The recall of the workspace's embedder profile."""
    return services.recall.of(workspace)


def require_sessions(services: Services, workspace: str, session: str) -> None:
    """A session is a directory of its workspace's directory under the installation's
    sessions_root; an installation without one knows no session (a clear 404)."""
    services.sessions.session(workspace, session)


def recall_command(
    services: Services,
    workspace: str,
    kind: RecallKind,
    question: str | None,
    query: RecallQuery,
    *,
    session: str | None = None,
    error: str | None = None,
    explain: str | None = None,
    binding: DwhBinding = NO_BINDING,
    principal: Principal | None = None,
    view: View = "full",
) -> dict[str, Any]:
    """The answer of `tht memory search|rules|solved-search`: ``{"results": [...]}``,
    or with ``error`` (rules only) the exact error-signature matches first. With
    ``explain`` (a card id), ``"explain"`` says why that card is or is not among the
    results (tht.memory.recall_explain); an id that is not the workspace's card is
    refused as `memory show` refuses it. ``view``: each card whole (``full``), or
    what an agent needs of it (``compact``, tht.memory.recall_answer)."""
    answer = _recall_answer(
        services,
        workspace,
        kind,
        question,
        query,
        session=session,
        error=error,
        explain=explain,
        binding=binding,
        principal=principal,
    )
    if view == "compact":
        return compact_answer(answer, binding.database, binding.schema)
    return answer


def _recall_answer(
    services: Services,
    workspace: str,
    kind: RecallKind,
    question: str | None,
    query: RecallQuery,
    *,
    session: str | None,
    error: str | None,
    explain: str | None,
    binding: DwhBinding,
    principal: Principal | None,
) -> dict[str, Any]:
    _check(principal, RECALL, workspace)
    recall = _recall(services, workspace)
    exclude = (
        services.sessions.session(workspace, session).decided_cards()
        if session is not None
        else frozenset()
    )
    if error is not None and explain is not None:
        # an error's answer puts exact error-signature matches first: no recall rank to explain
        raise InvalidInput(
            "explain says why a question's recall left a card out; ask it without the error"
        )
    asker = principal.user if principal is not None else audit.actor()
    if error is not None:
        found = rules_for_error(
            recall,
            workspace,
            error,
            question,
            database=binding.database,
            schema=binding.schema,
            query=query,
            exclude=exclude,
        )
        services.recall_log.record(
            logged(
                workspace,
                "rules",
                question,
                found["results"],
                error=error,
                session=session,
                principal=asker,
                exact=found["exact"] > 0,
            )
        )
        return found
    if question is None:
        raise InvalidInput("a question is required")
    results = recall.recall(
        workspace,
        question,
        kind,
        database=binding.database,
        schema=binding.schema,
        query=query,
        exclude=exclude,
    )
    # what agents ask, for the curators' gaps: queued here, written off this thread
    services.recall_log.record(
        logged(workspace, kind, question, results, session=session, principal=asker)
    )
    answer: dict[str, Any] = {"results": [r.as_json() for r in results]}
    if explain is not None:
        answer["explain"] = recall.explain(
            workspace,
            question,
            kind,
            explain,
            results,
            database=binding.database,
            schema=binding.schema,
            query=query,
            exclude=exclude,
        ).as_json()
    return answer


def service_recall(
    services: Services,
    principal: Principal,
    workspace: str,
    kind: RecallKind,
    question: str | None,
    filters: dict[str, Any],
    *,
    session: str | None = None,
    error: str | None = None,
    explain: str | None = None,
    view: View = "full",
    recorded: DwhBinding | None = None,
) -> dict[str, Any]:
    """Recall for a token's principal in the service (the HTTP routes, the MCP tools):
    the workspace's configured binding (``recorded`` when the caller read it with the
    token), sessions from the service's sessions_root, and ``filters`` the object the
    CLI's ``--filters`` takes."""
    principal.require(RECALL, workspace)  # before reading anything; recall_command checks again
    query = parse_recall_query(filters)
    if session is not None:
        require_sessions(services, workspace, session)
    return recall_command(
        services,
        workspace,
        kind,
        question,
        query,
        session=session,
        error=error,
        explain=explain,
        binding=recall_binding(services, workspace, recorded=recorded),
        principal=principal,
        view=view,
    )


def propose_command(
    services: Services,
    workspace: str,
    session: str,
    document: Any,
    *,
    principal: Principal | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """The answer of `tht memory propose`: the proposals validated and recorded."""
    _check(principal, PROPOSE, workspace)
    require_sessions(services, workspace, session)
    key = IdempotencyKey.given(idempotency_key, principal.user if principal else None)
    result = services.proposals.propose(workspace, session, document, idempotency=key)
    if any(p.get("action") == "add" for p in result.get("proposals", [])):
        # the session's recalls ended in a new card: a gap the curators should see
        services.recall_log.proposed(workspace, session)
    return result


def summary_command(
    services: Services, workspace: str, session: str, *, principal: Principal | None = None
) -> dict[str, Any]:
    """The answer of `tht memory summary`: the reviewer's editable summary."""
    _check(principal, PROPOSE, workspace)
    require_sessions(services, workspace, session)
    return services.summaries.summary(workspace, session)


def solved_index_command(
    services: Services, workspace: str, session: str, *, principal: Principal | None = None
) -> dict[str, Any]:
    """The answer of `tht memory solved-index`: the reviewed solved question re-indexed.
    It reads the review receipt in PostgreSQL, not the session directory."""
    _check(principal, PROPOSE, workspace)
    return services.review.solved_index(workspace, session)
