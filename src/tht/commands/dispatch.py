"""Running one command: its arguments validated against its input model, its runtime
file read, its principal's capability checked, then its application function.

The one place where a command's capability is checked, whatever face sent it (the
CLI in its own process, the service's socket, ``POST /api/cli``, the MCP server, the
Python client); a function may check again where it acts on something its arguments
name (a user's workspaces, a session). Every outcome is the command's output or one
JSON error document on its stdout, and an exit code.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tht import audit
from tht.commands.context import CommandContext
from tht.commands.table import DOCUMENT, OPERATOR, RUNTIME, SIGNED, Command, command
from tht.errors import Forbidden, InvalidInput, ThothError
from tht.validation import validation_details

log = logging.getLogger("tht")


class CommandInput(BaseModel):
    """A command's arguments: exactly the fields of its input model (its validation
    built when the command first runs, not when its module is imported with others)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def resolve(path: str) -> Any:
    """The object a ``module:name`` path of the table names."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def run(name: str, args: Any, context: CommandContext) -> int:
    """Run command ``name``: its output, or its error document, goes to the context's
    stdout; returns the exit code."""
    with audit.scoped():
        try:
            _run(name, args, context)
            return 0
        except ThothError as exc:
            error = exc
        except Exception as exc:  # the last line of defence: JSON, never a traceback on stdout
            log.error("unexpected error: %s", exc, exc_info=os.environ.get("THT_DEBUG") == "1")
            error = ThothError(
                f"internal error ({type(exc).__name__}); rerun with THT_DEBUG=1 for details"
            )
        finally:
            context.close()
    context.emit(error.to_dict())
    return error.exit_code


def _run(name: str, args: Any, context: CommandContext) -> None:
    found = command(name)
    if found is None or found.function is None or found.input is None:
        raise InvalidInput(f"unknown command '{name}'", details={"command": name})
    if context.token is not None and found.capability == OPERATOR:
        # closed by default: a token never runs what is the operator's
        raise Forbidden(
            f"`tht {' '.join(found.words)}` is the operator's: run it where THT_HOME is,"
            " without a token"
        )
    parsed = validate(found, args)
    if found.runtime is not None:
        from tht.settings import load_runtime_config

        context.runtime = load_runtime_config(
            getattr(parsed, found.runtime), read=context.read_bytes
        )
    authorize(found, parsed, context)
    result = resolve(found.function)(context, parsed)
    if found.output == DOCUMENT:
        context.emit(result)


def validate(found: Command, args: Any) -> Any:
    """The arguments as the command's input model, or ``invalid_input`` naming each
    bad one."""
    assert found.input is not None
    if not isinstance(args, Mapping):
        raise InvalidInput(f"the arguments of {found.name} must be a JSON object")
    model: type[BaseModel] = resolve(found.input)
    try:
        return model.model_validate(dict(args))
    except ValidationError as exc:
        details = validation_details(exc)
        message = "; ".join(dict.fromkeys(_describe(error) for error in details))
        raise InvalidInput(
            f"invalid arguments for {found.name}: {message}", details={"arguments": details}
        ) from exc


def _describe(error: dict[str, Any]) -> str:
    if error["type"] == "missing":
        return f"missing argument '{error['field']}'"
    if error["type"] == "extra_forbidden":
        return f"unknown argument '{error['field']}'"
    return f"{error['field']}: {error['message']}" if error["field"] else error["message"]


def workspace_of(found: Command, parsed: Any, context: CommandContext) -> str | None:
    """The workspace the command's capability is checked in (None: not one)."""
    if found.workspace is None:
        return None
    if found.workspace == RUNTIME:
        return context.workspace
    value = getattr(parsed, found.workspace)
    return value if isinstance(value, str) else None


def authorize(found: Command, parsed: Any, context: CommandContext) -> None:
    """The principal's capability for the command: a token's user, or the operator
    (no token), who may do everything. A signed command's authority is its request's
    signature, which its function checks."""
    if context.token is None:
        audit.act_as(audit.OPERATOR)
        return
    principal = context.principal = context.services.accounts.tokens.by_token(context.token)
    audit.act_as(principal.user)
    capability = found.capability_for(parsed.model_dump())
    if capability != SIGNED:
        principal.require(capability, workspace_of(found, parsed, context))
