"""Where the service lives in ``THT_HOME``, and whether a client may trust what it finds.

Standard library only: the command-line client imports this on its fast path.

``<home>/run/`` (mode 0700, owned by the installation's user) holds:
- ``service.sock``: the Unix socket commands talk to;
- ``service.lock``: held (flock) by the running service for its whole life, so the
  kernel frees it when the process dies, however it dies;
- ``start.lock``: taken by a client while it checks for a service and starts one, so
  two racing commands start one service;
- ``service.json``: the running service's pid, mode and build;
- ``service.log``: the standard error of auto-started services.
"""

from __future__ import annotations

import os
import stat

from tht.home import default_home as default_home  # where THT_HOME is, for the client

# The client and the service must speak the same protocol and run the same code.
PROTOCOL = 3  # a command and its arguments as JSON; stdout in pieces; files passed open
# A stopping service lets running commands and the pending-work retrier finish within
# DRAIN_SECONDS (one deadline for both), then closes its engines; whoever waits for it
# to go allows STOP_SECONDS, so a stop that keeps to its own bounds is never reported
# as a timeout.
DRAIN_SECONDS = 30.0
STOP_SECONDS = DRAIN_SECONDS + 30.0


def run_dir(home: str | os.PathLike[str]) -> str:
    return os.path.join(home, "run")


def socket_path(home: str | os.PathLike[str]) -> str:
    return os.path.join(run_dir(home), "service.sock")


def make_run_dir(home: str | os.PathLike[str]) -> str:
    """The run directory, created 0700 when missing (never loosened if it exists: a
    directory with other permissions is refused by ``untrusted_reason``)."""
    folder = run_dir(home)
    os.makedirs(home, exist_ok=True)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    return folder


def untrusted_reason(path: str, *, directory: bool) -> str | None:
    """Why the client must not talk to this run directory or socket, or None.

    A client sends its token to whatever listens there and believes its answers, so
    both must belong to this user (or root) and the directory must be closed to
    others (0700): anyone else able to place a socket there could impersonate the
    service."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be inspected ({exc.strerror})"
    if directory and not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if not directory and not stat.S_ISSOCK(info.st_mode):
        return f"{path} is not a socket"
    if info.st_uid not in (os.geteuid(), 0):
        return f"{path} belongs to another user (uid {info.st_uid})"
    if directory and info.st_mode & 0o077:
        return (
            f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):04o}, expected 0700)"
        )
    return None


def build_stamp() -> str:
    """The package version and the newest source file's time: a service started before
    the code changed (an upgrade, a checkout) is told apart from a current one."""
    from tht import __version__

    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    newest = 0
    for folder, _, files in os.walk(package):
        for name in files:
            if name.endswith((".py", ".sql")):
                try:
                    newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime_ns)
                except OSError:
                    pass
    return f"{__version__}+{newest}"
