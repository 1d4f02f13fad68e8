"""Every process a test run starts goes when the run ends, however it ends.

A run starts PostgreSQL servers (the session's cluster, the embedded server of every home a
test makes), services in sessions of their own, `tht serve` processes and Chromium. Their
fixtures stop them; what makes that hold on Ctrl-C and on SIGTERM:

- SIGTERM and SIGHUP become the KeyboardInterrupt that Ctrl-C raises, so pytest runs the
  fixtures' teardowns for them too; the xdist controller passes the signal on to its
  workers, which would not see it otherwise.
- Every process the run starts inherits ``THOTH_TEST_RUN``: the run's own value is its
  parent's (a pytest run inside a test) followed by a token of its own, and an xdist
  worker adds its token to its controller's. When a pytest process ends, it stops what
  still carries its value or one under it: what a test started without a teardown, or
  what a teardown cut short did not reach. PostgreSQL servers get a fast shutdown
  (SIGINT), anything else SIGTERM, then SIGKILL (SIGQUIT for PostgreSQL) after 15 seconds.

The servers started by pg_ctl run in a session of their own, so the terminal's Ctrl-C never
reaches them: only this sweep or their fixture stops them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import psutil

MARK = "THOTH_TEST_RUN"
CLUSTER_PREFIX = "tht-test-pg-"  # the session cluster's folder (tests/conftest.py)
_FOLDERS: list[Path] = []  # removed once this process's leftovers are stopped
STOPPING = (signal.SIGTERM, signal.SIGHUP)
GRACE_SECONDS = 15.0


def mark_this_run() -> str:
    """This process's value of the mark, inherited from now on by every child."""
    value = f"{os.environ.get(MARK, '')}/{secrets.token_hex(4)}"
    os.environ[MARK] = value
    return value


RUN_MARK_FILE = "run-mark"  # in a folder of the run: the mark of the run it belongs to


def remove_at_the_end(folder: Path) -> None:
    """A folder of this process's run (a server's data) that goes after its processes,
    even when the teardown that removes it was cut short (a second Ctrl-C), or the
    process itself was (its run's sweep finds the folder by the mark written in it)."""
    _FOLDERS.append(folder)
    (folder / RUN_MARK_FILE).write_text(os.environ.get(MARK, ""))


def _marked_folders(value: str) -> list[Path]:
    """The session clusters' folders whose run is ``value`` or one under it."""
    found = []
    for folder in Path(tempfile.gettempdir()).glob(CLUSTER_PREFIX + "*"):
        try:
            mark = (folder / RUN_MARK_FILE).read_text()
        except OSError:
            continue
        if mark == value or mark.startswith(value + "/"):
            found.append(folder)
    return found


def interrupt_on_stop_signals(is_xdist_controller: Callable[[], bool]) -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if is_xdist_controller():  # its workers are its only children
            for child in psutil.Process().children():
                with contextlib.suppress(psutil.Error):
                    child.send_signal(signum)
        raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")

    for signum in STOPPING:
        signal.signal(signum, interrupt)


def marked(value: str) -> list[psutil.Process]:
    """The processes whose environment carries ``value`` or a value under it."""
    found = []
    for process in psutil.process_iter(["name"]):
        if process.pid == os.getpid():
            continue
        try:
            mark = process.environ().get(MARK, "")
        except (psutil.Error, OSError):  # gone, a zombie, or not ours to read
            continue
        if mark == value or mark.startswith(value + "/"):
            found.append(process)
    return found


def is_postmaster(process: psutil.Process) -> bool:
    """A PostgreSQL server's first process (its backends are its children and go with it)."""
    try:
        if process.name() != "postgres":
            return False
        parent = process.parent()
        return parent is None or parent.name() != "postgres"
    except psutil.Error:
        return False


def _is_postgres_backend(process: psutil.Process) -> bool:
    try:
        return process.name() == "postgres" and not is_postmaster(process)
    except psutil.Error:
        return True


def _cluster_folder(postmaster: psutil.Process) -> Path | None:
    """The session cluster's temporary folder, when this server is one."""
    try:
        command = postmaster.cmdline()
    except psutil.Error:
        return None
    if "-D" in command[:-1]:
        home = Path(command[command.index("-D") + 1]).parent
        if home.name.startswith(CLUSTER_PREFIX):
            return home
    return None


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """A second Ctrl-C waits until the sweep is over."""
    held = {signal.SIGINT, *STOPPING}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def stop_leftovers(value: str) -> list[str]:
    """Stop what carries ``value``; returns a description of each process stopped."""
    with _signals_held():
        found = [p for p in marked(value) if not _is_postgres_backend(p)]
        described = []
        clusters = []
        for process in found:
            try:
                described.append(f"{process.pid} {' '.join(process.cmdline())[:160]}")
                if is_postmaster(process):
                    clusters.append(_cluster_folder(process))
                    process.send_signal(signal.SIGINT)  # fast shutdown
                else:
                    process.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(found, timeout=GRACE_SECONDS)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                if is_postmaster(process):
                    process.send_signal(signal.SIGQUIT)  # immediate shutdown
                else:
                    process.kill()
        psutil.wait_procs(alive, timeout=5)
        # this process's own folders go only with its own run: a test that stops what a
        # run of its own left (tests/integration/test_interrupted_run.py) must not remove
        # the data of the server its process still uses
        own = _FOLDERS if value == os.environ.get(MARK) else []
        for folder in [*clusters, *own, *_marked_folders(value)]:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        return described


def report(stopped: list[str]) -> None:
    if stopped:
        lines = "\n".join(f"  {line}" for line in stopped)
        print(
            f"\nstopped {len(stopped)} process(es) the run left behind:\n{lines}", file=sys.stderr
        )
