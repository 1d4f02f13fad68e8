"""The `tht` client's stdout when its reader goes away (`tht memory export | head`)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_reader_that_went_away_gets_no_traceback(tmp_path):
    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write fails (EPIPE)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tht", "--version"],
            stdout=write,
            stderr=subprocess.PIPE,
            env={**os.environ, "THT_HOME": str(tmp_path)},
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    assert done.returncode == 141  # as a shell reports a command that SIGPIPE ended
