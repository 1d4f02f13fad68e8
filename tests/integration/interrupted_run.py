"""A test that holds what a run starts until the run is interrupted, for
tests/integration/test_interrupted_run.py (its name does not match ``test_*.py``: it runs
only when named on the command line, by that test).

It holds the session's PostgreSQL (the `database` fixture), a service started for a test's
THT_HOME, and a home with its own embedded PostgreSQL, as the CLI tests make; none of the
last two has a teardown here, as when a test is cut short before its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.service_support import installation

READY = "THOTH_HOLD_READY"  # the file written once everything runs
HOLD_SECONDS = 600


def test_hold(database, tmp_path):
    assert READY in os.environ, "run by tests/integration/test_interrupted_run.py"
    served = installation(database, tmp_path / "served")
    assert served.run("workspace", "list").code == 0  # starts the home's service
    assert served.service_pid() is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env.update(THT_HOME=str(tmp_path / "embedded"), THT_SERVICE="off")
    listed = subprocess.run(
        [sys.executable, "-m", "tht", "workspace", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )  # starts the home's embedded PostgreSQL
    assert listed.returncode == 0, listed.stderr
    Path(os.environ[READY]).write_text("ready\n")
    time.sleep(HOLD_SECONDS)
    raise AssertionError(f"not interrupted within {HOLD_SECONDS} s")
