"""Python's cyclic garbage collector while a command starts in its own process.

A command run as a program imports and builds what it uses (modules, models, the
engines: some 100 000 container objects, none of them garbage). With Python's young
generation of 700 objects that start sets off about 130 collections, some 30 ms of a
recall's half second, each walking objects that live as long as the process.
``hold_during_start`` lets the young generation grow for the start; ``started`` moves
what was built out of the collector's reach (``gc.freeze``: it is never walked
again, and is freed by reference counting as ever) and restores the threshold. A
command that never says ``started`` (one that builds no engines) still collects, at
the raised threshold: what waits between collections stays bounded.
"""

from __future__ import annotations

import gc

START_YOUNG_OBJECTS = 200_000  # the young generation while a command starts

_held: tuple[int, int, int] | None = None  # the thresholds to restore


def hold_during_start() -> None:
    global _held
    if _held is None:
        _held = gc.get_threshold()
        gc.set_threshold(START_YOUNG_OBJECTS, *_held[1:])


def started() -> None:
    global _held
    if _held is not None:
        held, _held = _held, None
        gc.freeze()
        gc.set_threshold(*held)
