"""The cards of one workspace: browse, edit, the projection's pending work and its
rebuild (``tht memory list|show|create|update|delete|pending|retry|index|check|admin``)."""

from __future__ import annotations

from typing import Any

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput

Filters = dict[str, Any] | str | None  # an object, or its JSON text (the CLI's --filters)


def json_argument(value: Filters, option: str) -> Any:
    """An argument given as an object, or as the JSON text of one (``option`` names it
    in the error)."""
    if not isinstance(value, str):
        return value
    from tht.validation import parse_json

    return parse_json(value, option)


class MemoryListIn(CommandInput):
    config: str
    filters: Filters = None


def memory_list(ctx: CommandContext, args: MemoryListIn) -> dict[str, Any]:
    from tht.memory.model import parse_list_query

    query = parse_list_query(json_argument(args.filters, "--filters"))
    return ctx.services.memory.list_cards(ctx.workspace, query).as_json()


class MemoryShowIn(CommandInput):
    card_id: str
    config: str


def memory_show(ctx: CommandContext, args: MemoryShowIn) -> dict[str, Any]:
    return ctx.services.memory.get_card(ctx.workspace, args.card_id).as_json()


class MemoryCreateIn(CommandInput):
    config: str
    data: str  # the card's JSON file ('-': standard input)
    idempotency_key: str | None = None


def memory_create(ctx: CommandContext, args: MemoryCreateIn) -> dict[str, Any]:
    from tht.memory.model import parse_card_input

    card = parse_card_input(ctx.read_document(args.data))
    return ctx.services.memory.create_card(
        ctx.workspace, card, idempotency=ctx.idempotency(args.idempotency_key)
    ).as_json()


class MemoryUpdateIn(CommandInput):
    card_id: str
    config: str
    data: str
    idempotency_key: str | None = None


def memory_update(ctx: CommandContext, args: MemoryUpdateIn) -> dict[str, Any]:
    from tht.memory.model import card_id_to_uuid, parse_card_input, uuid_to_card_id

    card_id = uuid_to_card_id(card_id_to_uuid(args.card_id))
    card = parse_card_input(ctx.read_document(args.data), card_id=card_id, workspace=ctx.workspace)
    return ctx.services.memory.update_card(
        ctx.workspace, card_id, card, idempotency=ctx.idempotency(args.idempotency_key)
    ).as_json()


class MemoryDeleteIn(CommandInput):
    card_id: str
    config: str
    yes: bool = False
    revision: int | None = None
    idempotency_key: str | None = None


def memory_delete(ctx: CommandContext, args: MemoryDeleteIn) -> dict[str, Any]:
    from tht.errors import InvalidInput

    if not args.yes:
        raise InvalidInput(f"refusing to delete {args.card_id} without --yes")
    return ctx.services.memory.delete_card(
        ctx.workspace,
        args.card_id,
        args.revision,
        idempotency=ctx.idempotency(args.idempotency_key),
    ).as_json()


class MemoryPendingIn(CommandInput):
    config: str


def memory_pending(ctx: CommandContext, args: MemoryPendingIn) -> dict[str, Any]:
    items = ctx.services.memory.pending(ctx.workspace)
    return {"items": [item.model_dump(mode="json") for item in items]}


class MemoryRetryIn(CommandInput):
    card_id: str
    config: str


def memory_retry(ctx: CommandContext, args: MemoryRetryIn) -> dict[str, Any]:
    from tht.usecases.card_administration import retry_index_work

    return retry_index_work(ctx.services.projector, ctx.workspace, args.card_id)


class MemoryIndexIn(CommandInput):
    config: str


def memory_index(ctx: CommandContext, args: MemoryIndexIn) -> dict[str, Any]:
    from tht.commands.progress_rate import RateProgress
    from tht.errors import Interrupted

    try:
        return ctx.services.projector.rebuild(ctx.workspace, RateProgress(ctx.progress))
    except Interrupted as exc:  # the resume command needs this invocation's runtime file
        exc.details["resume"] = f"tht memory index -c {args.config}"
        raise


class MemoryCheckIn(CommandInput):
    config: str
    repair: bool = False


def memory_check(ctx: CommandContext, args: MemoryCheckIn) -> dict[str, Any]:
    return ctx.services.projector.check(ctx.workspace, repair=args.repair)


class MemoryAdminIn(CommandInput):
    workspace: str
    config: str  # the signed protected request, not a runtime file


def memory_admin(ctx: CommandContext, args: MemoryAdminIn) -> dict[str, Any]:
    from tht.protected import load_key, verify

    key = load_key()
    principal, request, nonce, expires = verify(
        ctx.read_document(args.config), key, workspace=args.workspace
    )
    services = ctx.services
    services.accounts.tokens.use_nonce(nonce, expires)
    result: dict[str, Any] = services.admin.execute(principal, request)
    return result
