"""Reading a command line's values without pydantic.

Typer coerces each value through a pydantic TypeAdapter built for its parameter: on the
client's path, where the service runs the command, that was most of the command's
time (pydantic's import and one schema per parameter). Our parameters are strings,
lists of strings, flags, paths and integers: a value of those that needs nothing more is
taken here as Typer would take it; any other value, and every other parameter, goes
to Typer's own coercion, so its checks and error messages stay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer._click import Context
from typer._coercion import RuntimeParam, build_runtime_param
from typer.core import _TyperParameter

_INTEGER = re.compile(r"-?[0-9]{1,18}")
_STRINGS = list[str]


@dataclass(frozen=True)
class PlainValue(RuntimeParam):
    """A string, a list of strings, a flag, a path or an unbounded integer, taken as it is."""

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
        annotation = self.annotation
        if annotation is str and isinstance(value, str):
            return value
        if annotation is bool and isinstance(value, bool):
            return value
        if annotation == _STRINGS and all(isinstance(item, str) for item in value):
            return list(value)
        if annotation is Path and isinstance(value, str) and value:
            return Path(value)
        if annotation is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if annotation is int and isinstance(value, str) and _INTEGER.fullmatch(value):
            return int(value)
        return build_runtime_param(param.type_descriptor)._coerce_value(value, param, ctx)


def _plain(param: _TyperParameter) -> bool:
    descriptor = param.type_descriptor
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None:
        return False
    if descriptor.annotation is int:
        return info.min is None and info.max is None and not info.clamp
    if descriptor.annotation is Path:
        return not (info.allow_dash or info.path_type or info.resolve_path or info.exists)
    return descriptor.annotation in (str, bool) or descriptor.annotation == _STRINGS


def take_plain_values(command: Any) -> Any:
    """``command`` (a Typer group's tree), its plain parameters read here."""
    for sub in getattr(command, "commands", {}).values():
        take_plain_values(sub)
    # --help: made once per command, on first use (here, then)
    help_option = command.get_help_option(Context(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if isinstance(param, _TyperParameter) and _plain(param):
            descriptor = param.type_descriptor
            param._runtime_param = PlainValue(
                parameter_info=descriptor.parameter_info, annotation=descriptor.annotation
            )
    return command
