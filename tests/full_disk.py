"""A full disk for the embedded index's file copies (a compaction's), without one."""

from __future__ import annotations

import errno
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def _no_space(source: str, target: str, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def copies_run_out_of_space(
    monkeypatch: pytest.MonkeyPatch, when: Callable[[Path], bool] = lambda target: True
) -> None:
    """Every file of a ``shutil.copytree`` into a target for which ``when`` holds fails
    with ENOSPC, as on a full disk: copytree goes on past each and raises one
    ``shutil.Error`` listing them all, as it does on a real one."""
    copytree = shutil.copytree

    def copy(source: str, target: str, *args: object, **kwargs: object) -> object:
        if not args and when(Path(target)):  # copytree recurses with every argument
            kwargs["copy_function"] = _no_space
        return copytree(source, target, *args, **kwargs)

    monkeypatch.setattr(shutil, "copytree", copy)
