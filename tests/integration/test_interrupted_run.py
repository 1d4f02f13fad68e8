"""An interrupted test run leaves nothing running: Ctrl-C (SIGINT to the run's process
group, as the terminal sends it) or SIGTERM to pytest alone (`kill`, or `make` passing on
its own SIGTERM) stops the run's PostgreSQL servers, services and commands.

The run is a real `pytest -n 2` (as `make test` runs it) of tests/integration/interrupted_run.py,
whose test starts the session's PostgreSQL, a service and a home's embedded PostgreSQL and
then waits. Every process of that run inherits the THOTH_TEST_RUN value given here; the
processes still carrying it after the run has exited are what it left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests import run_cleanup
from tests.integration.interrupted_run import READY

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
HELD = ROOT / "tests" / "integration" / "interrupted_run.py"


def _describe(processes: list[psutil.Process]) -> list[str]:
    """pid and command line of each process (a PostgreSQL server: only its first process)."""
    described = []
    for process in processes:
        try:
            if process.name() != "postgres" or run_cleanup.is_postmaster(process):
                described.append(f"{process.pid} {' '.join(process.cmdline())[:160]}")
        except psutil.Error:  # it just ended
            pass
    return described


def _mentioning(folder: Path) -> list[psutil.Process]:
    """Processes whose command line names a path under ``folder`` (a home's PostgreSQL)."""
    found = []
    for process in psutil.process_iter(["cmdline"], ad_value=None):
        if any(str(folder) in part for part in process.info["cmdline"] or []):
            found.append(process)
    return found


@pytest.mark.parametrize(
    ("signum", "whom"),
    [(signal.SIGINT, "process group"), (signal.SIGTERM, "pytest")],
    ids=["ctrl-c", "sigterm"],
)
def test_an_interrupted_run_leaves_no_server_or_service(signum, whom, tmp_path):
    probe = f"{os.environ[run_cleanup.MARK]}/probe-{tmp_path.name}"
    ready = tmp_path / "ready"
    # short: the service's socket path lies under it, and a socket path has 107 bytes at most
    basetemp = Path(tempfile.mkdtemp(prefix="tht-interrupted-"))
    env = {**os.environ, run_cleanup.MARK: probe, READY: str(ready)}
    log = tmp_path / "run.log"
    with open(log, "wb") as output:
        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
             f"--basetemp={basetemp}", str(HELD)],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a terminal gives a command
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            assert run.poll() is None, f"the run ended early:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"not ready:\n{log.read_text()[-4000:]}"
            time.sleep(0.2)
        running = _describe(run_cleanup.marked(probe))
        # the session's cluster and the home's embedded server, the home's service, the
        # controller and its two workers
        assert sum("bin/postgres -D" in line for line in running) == 2, running
        assert sum("-m tht.service" in line for line in running) == 1, running
        assert sum("python" in line for line in running) >= 3, running
        clusters = [
            Path(line.split(" -D ")[1].split()[0]).parent
            for line in running
            if f"/{run_cleanup.CLUSTER_PREFIX}" in line
        ]
        assert len(clusters) == 1, running

        if whom == "process group":
            os.killpg(run.pid, signum)
        else:
            run.send_signal(signum)
        code = run.wait(timeout=120)

        left = _describe(run_cleanup.marked(probe) + _mentioning(basetemp))
        assert not left, left
        assert not clusters[0].exists()  # the session cluster's data went with it
        assert code == pytest.ExitCode.INTERRUPTED, log.read_text()[-4000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        run_cleanup.stop_leftovers(probe)
        shutil.rmtree(basetemp, ignore_errors=True)
