"""Named crash points and simulated outages for fault-injection tests and benchmarks.

``crash_point("name")`` ends the process at once (``os._exit``, no cleanup, no
rollback, like a kill) when ``THT_CRASH_AT`` names that point. Production code calls
it at the steps where a crash must be recoverable (between a commit and the next
durable effect); the cost when the variable is unset is one dictionary lookup.
"""

from __future__ import annotations

import os
import time

CRASH_EXIT_CODE = 70


def crash_point(name: str) -> None:
    if os.environ.get("THT_CRASH_AT") == name:
        os._exit(CRASH_EXIT_CODE)


def simulated_outage(component: str) -> bool:
    """True while the file that ``THT_OUTAGE_FILE`` names lists ``component`` ("index"):
    a running service's dependency taken down from outside, as an operator's outage
    would (the embedded index cannot be taken from the process that owns it)."""
    path = os.environ.get("THT_OUTAGE_FILE")
    if not path:
        return False
    try:
        with open(path) as listed:
            return component in listed.read().split()
    except OSError:
        return False


def pause_point(name: str) -> None:
    """Hold this thread at ``name`` when ``THT_PAUSE_AT`` names it: the file that
    ``THT_PAUSE_FILE`` names is created, and the thread waits until it is removed. Lets
    a test act at a known step of a long command (a save or Ctrl-C during a rebuild)
    without timing it."""
    if os.environ.get("THT_PAUSE_AT") != name:
        return
    marker = os.environ["THT_PAUSE_FILE"]
    with open(marker, "w"):
        pass
    while os.path.exists(marker):
        time.sleep(0.02)
