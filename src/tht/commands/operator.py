"""The operator's commands: the demo workspace, the schema's migrations and the
embedded PostgreSQL (``tht demo``, ``tht memory migrate``, ``tht db status|stop``).
All but the demo run only in the operator's own process (the table says so)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tht.commands.context import CommandContext
from tht.commands.dispatch import CommandInput
from tht.errors import InvalidInput
from tht.memory.index.engines import ENGINES, engine_names, spoken

if TYPE_CHECKING:
    from tht.db.embedded import EmbeddedPostgres


class DemoIn(CommandInput):
    pass


def demo(ctx: CommandContext, args: DemoIn) -> dict[str, Any]:
    from tht.commands.progress_rate import RateProgress
    from tht.demo import load_demo

    result: dict[str, Any] = load_demo(ctx.services, ctx.progress, RateProgress(ctx.progress))
    return result


class MemoryMigrateIn(CommandInput):
    engine: str | None = None


def memory_migrate(ctx: CommandContext, args: MemoryMigrateIn) -> dict[str, Any]:
    from tht.bootstrap import run_migrations

    if args.engine is not None and args.engine not in ENGINES:
        raise InvalidInput(
            f"unknown index engine '{args.engine}' (expected {spoken(engine_names())})"
        )
    return run_migrations(engine=args.engine)


def _embedded() -> EmbeddedPostgres:
    from tht.bootstrap import embedded_database

    embedded = embedded_database()
    if embedded is None:
        raise InvalidInput(
            "THT_CATALOG_* names an external database: `tht db` manages only the embedded one"
        )
    return embedded


class DbStatusIn(CommandInput):
    pass


def db_status(ctx: CommandContext, args: DbStatusIn) -> dict[str, Any]:
    result: dict[str, Any] = _embedded().status()
    return result


class DbStopIn(CommandInput):
    pass


def db_stop(ctx: CommandContext, args: DbStopIn) -> dict[str, Any]:
    result: dict[str, Any] = _embedded().stop()
    return result
