"""The workflow's side of Memory (``tht memory propose|summary|review-apply|
solved-index``). A session is ``<sessions_root>/<workspace>/<session-id>``: the
installation's sessions root, the runtime file's workspace. ``review-apply`` belongs to
the reviewer gate: it takes a signed gate request (tht.workflow.gate) and refuses
anything else."""

from __future__ import annotations

from typing import Any

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput


class MemoryProposeIn(CommandInput):
    config: str
    session: str
    data: str  # memory_proposals.json ('-': standard input)
    idempotency_key: str | None = None


def memory_propose(ctx: CommandContext, args: MemoryProposeIn) -> dict[str, Any]:
    from tht.usecases.recall_and_proposals import propose_command

    document = ctx.read_document(args.data)
    return propose_command(
        ctx.services,
        ctx.workspace,
        args.session,
        document,
        principal=ctx.principal,
        idempotency_key=args.idempotency_key,
    )


class MemorySummaryIn(CommandInput):
    config: str
    session: str
    json_output: bool = False


def memory_summary(ctx: CommandContext, args: MemorySummaryIn) -> dict[str, Any]:
    from tht.usecases.recall_and_proposals import summary_command

    return summary_command(ctx.services, ctx.workspace, args.session, principal=ctx.principal)


class MemoryReviewApplyIn(CommandInput):
    config: str
    request: str  # the signed gate request of reviewer_memory_promote ('-': standard input)


def memory_review_apply(ctx: CommandContext, args: MemoryReviewApplyIn) -> dict[str, Any]:
    from tht.protected import load_key
    from tht.workflow.gate import verify_gate_request

    key = load_key()
    gate = verify_gate_request(ctx.read_document(args.request), key, workspace=ctx.workspace)
    return ctx.services.review.review_apply(
        gate.principal,
        ctx.workspace,
        gate.session,
        gate.review,
        nonce=gate.nonce,
        nonce_expires=gate.expires_at,
    )


class MemorySolvedIndexIn(CommandInput):
    session: str
    config: str
    json_output: bool = False


def memory_solved_index(ctx: CommandContext, args: MemorySolvedIndexIn) -> dict[str, Any]:
    from tht.usecases.recall_and_proposals import solved_index_command

    return solved_index_command(ctx.services, ctx.workspace, args.session, principal=ctx.principal)
