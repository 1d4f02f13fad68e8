"""Named crash points for fault-injection tests and the fault benchmarks.

``crash_point("name")`` ends the process at once (``os._exit``, no cleanup, no
rollback, like a kill) when ``THT_CRASH_AT`` names that point. Production code calls
it at the steps where a crash must be recoverable (between a commit and the next
durable effect); the cost when the variable is unset is one dictionary lookup.
"""

from __future__ import annotations

import os

CRASH_EXIT_CODE = 70


def crash_point(name: str) -> None:
    if os.environ.get("THT_CRASH_AT") == name:
        os._exit(CRASH_EXIT_CODE)
