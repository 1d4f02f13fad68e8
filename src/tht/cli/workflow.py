"""Workflow commands on `tht memory`: propose, summary, review-apply, solved-index.

The session directory is `<sessions_root>/<workspace>/<session-id>` (sessions_root
comes from the runtime file, the workspace is the runtime file's). `review-apply` belongs to the reviewer gate: it takes a signed gate
request (see tht.workflow.gate) and refuses anything else.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tht.cli._common import (
    ConfigOption,
    IdempotencyKeyOption,
    JsonFlag,
    _read_document,
    _services,
    emit,
    idempotency_key_of,
    load_runtime,
)

SessionOption = Annotated[
    str,
    typer.Option("--session", help="The workflow session id (in <sessions_root>/<workspace>/)"),
]


def memory_propose(
    config: ConfigOption,
    session: SessionOption,
    data: Annotated[
        str, typer.Option(help="memory_proposals.json to validate ('-' for standard input)")
    ],
    idempotency_key: IdempotencyKeyOption = None,
) -> None:
    """Validate the session's Memory proposals against its ledger and the archive, and record them."""
    runtime = load_runtime(config)
    document = _read_document(data)
    with _services(runtime) as services:
        emit(
            services.proposals.propose(
                runtime.workspace,
                session,
                document,
                idempotency=idempotency_key_of(idempotency_key),
            )
        )


def memory_summary(
    config: ConfigOption, session: SessionOption, json_output: JsonFlag = False
) -> None:
    """The reviewer's editable summary: additions, updates with their change, the solved question, links."""
    runtime = load_runtime(config)
    with _services(runtime) as services:
        emit(services.summaries.summary(runtime.workspace, session))


def memory_review_apply(
    config: ConfigOption,
    request: Annotated[
        str, typer.Option(help="The signed gate request of reviewer_memory_promote ('-' for stdin)")
    ],
) -> None:
    """Apply the reviewer's choice (reviewer gate only: needs a request signed with the protected-request key)."""
    from tht.protected import load_key
    from tht.workflow.gate import verify_gate_request

    runtime = load_runtime(config)
    key = load_key()
    gate = verify_gate_request(_read_document(request), key, workspace=runtime.workspace)
    with _services(runtime) as services:
        emit(
            services.review.review_apply(
                gate.principal,
                runtime.workspace,
                gate.session,
                gate.review,
                nonce=gate.nonce,
                nonce_expires=gate.expires_at,
            )
        )


def memory_solved_index(
    session: Annotated[
        str, typer.Argument(help="The session whose reviewed solved question to re-index")
    ],
    config: ConfigOption,
    json_output: JsonFlag = False,
) -> None:
    """Retry the projection of a session's reviewed solved question (never creates content)."""
    runtime = load_runtime(config)
    with _services(runtime) as services:
        emit(services.review.solved_index(runtime.workspace, session))


def register(memory_app: typer.Typer) -> None:
    """Add the workflow commands to `tht memory` (in this order: the help lists them so)."""
    memory_app.command("propose")(memory_propose)
    memory_app.command("summary")(memory_summary)
    memory_app.command("review-apply")(memory_review_apply)
    memory_app.command("solved-index")(memory_solved_index)
