"""Where an installation keeps its data: ``THT_HOME``, else the per-user data directory.

Standard library only: the command-line client imports this on its fast path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping


def default_home(env: Mapping[str, str] | None = None) -> str:
    """``THT_HOME``, else the per-user data directory (platformdirs' user_data_dir for
    "thoth-memory", computed without importing platformdirs). Paths here are strings:
    pathlib costs the client ~4 ms of imports."""
    env = os.environ if env is None else env
    if env.get("THT_HOME"):
        return env["THT_HOME"]
    user = os.path.expanduser("~")
    if sys.platform == "darwin":
        return os.path.join(user, "Library", "Application Support", "thoth-memory")
    if sys.platform == "win32":
        return os.path.join(
            env.get("LOCALAPPDATA") or os.path.join(user, "AppData", "Local"), "thoth-memory"
        )
    base = (env.get("XDG_DATA_HOME") or "").strip() or os.path.join(user, ".local", "share")
    return os.path.join(base, "thoth-memory")
