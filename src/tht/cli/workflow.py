"""Workflow commands on `tht memory`: propose, summary, review-apply, solved-index
(parsers of the commands of ``tht.commands.workflow``).

The session directory is `<sessions_root>/<workspace>/<session-id>` (the
installation's sessions root, the runtime file's workspace). `review-apply` belongs to
the reviewer gate: it takes a signed gate request (see tht.workflow.gate) and refuses
anything else.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tht.cli._common import ConfigOption, IdempotencyKeyOption, JsonFlag
from tht.cli.apps import memory_app
from tht.cli.submit import path, submit

SessionOption = Annotated[
    str,
    typer.Option("--session", help="The workflow session id (in <sessions_root>/<workspace>/)"),
]


@memory_app.command("propose")
def memory_propose(
    config: ConfigOption,
    session: SessionOption,
    data: Annotated[
        str, typer.Option(help="memory_proposals.json to validate ('-' for standard input)")
    ],
    idempotency_key: IdempotencyKeyOption = None,
) -> int:
    """Validate the session's Memory proposals against its ledger and the archive, and record them."""
    return submit(
        "memory.propose",
        {
            "config": path(config),
            "session": session,
            "data": data,
            "idempotency_key": idempotency_key,
        },
    )


@memory_app.command("summary")
def memory_summary(
    config: ConfigOption, session: SessionOption, json_output: JsonFlag = False
) -> int:
    """The reviewer's editable summary: additions, updates with their change, the solved question, links."""
    return submit("memory.summary", {"config": path(config), "session": session})


@memory_app.command("review-apply")
def memory_review_apply(
    config: ConfigOption,
    request: Annotated[
        str, typer.Option(help="The signed gate request of reviewer_memory_promote ('-' for stdin)")
    ],
) -> int:
    """Apply the reviewer's choice (reviewer gate only: needs a request signed with the protected-request key)."""
    return submit("memory.review-apply", {"config": path(config), "request": request})


@memory_app.command("solved-index")
def memory_solved_index(
    session: Annotated[
        str, typer.Argument(help="The session whose reviewed solved question to re-index")
    ],
    config: ConfigOption,
    json_output: JsonFlag = False,
) -> int:
    """Retry the projection of a session's reviewed solved question (never creates content)."""
    return submit("memory.solved-index", {"session": session, "config": path(config)})
