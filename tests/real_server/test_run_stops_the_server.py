"""`scripts/real_postgres.py run` (what `make test-real-postgres` runs): the server it
started goes when the command ends, and when the run is stopped with SIGTERM or Ctrl-C
while the command still runs. A second server of its own, on a free port, beside the one
this step runs on (Debian's postgresql package is installed by then)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _naming(folder: Path) -> list[str]:
    found = []
    for process in psutil.process_iter(["pid", "cmdline"], ad_value=None):
        command = " ".join(process.info["cmdline"] or [])
        if str(folder) in command:
            found.append(f"{process.info['pid']} {command[:120]}")
    return found


def _command_runs(pid: int) -> bool:
    """The server started and the command after `--` runs."""
    try:
        return any(
            "sleep" in " ".join(child.cmdline())
            for child in psutil.Process(pid).children(recursive=True)
        )
    except psutil.Error:  # one of them just ended
        return False


@pytest.mark.parametrize(
    ("signum", "whom", "code"),
    [(None, None, 3), (signal.SIGTERM, "run", 143), (signal.SIGINT, "group", 130)],
    ids=["command-ends", "sigterm", "ctrl-c"],
)
def test_the_server_stops_with_the_command(signum, whom, code):
    # directly in /tmp: as root the server runs as `postgres`, which must reach the folder
    folder = Path("/tmp") / f"tht-real-run-{secrets.token_hex(4)}"
    command = "sleep 600" if signum else "exit 3"
    run = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "real_postgres.py"), "run", str(folder),
         "--port", str(_free_port()), "--", "sh", "-c", command],
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, as a terminal gives a command
    )  # fmt: skip
    try:
        if signum is not None:
            deadline = time.monotonic() + 120
            while not _command_runs(run.pid):
                assert run.poll() is None and time.monotonic() < deadline, run.poll()
                time.sleep(0.2)
            assert (folder / "data" / "postmaster.pid").exists()
            if whom == "group":
                os.killpg(run.pid, signum)
            else:
                run.send_signal(signum)
        assert run.wait(timeout=120) == code
        assert not (folder / "data" / "postmaster.pid").exists()
        assert not _naming(folder)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "real_postgres.py"), "stop", str(folder)],
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)
