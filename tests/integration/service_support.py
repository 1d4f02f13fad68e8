"""Running `tht` as a user does, against a real service started for a test's THT_HOME."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.factories import write_installation

RUNTIME_KEYS = ("database", "schema")


@dataclass
class Result:
    code: int
    document: Any
    stderr: str


@dataclass
class Installation:
    """A THT_HOME on the test database; `run` is the `tht` command as a user types it."""

    home: Path
    env: dict[str, str]

    def runtime(self, workspace: str, **extra: Any) -> str:
        """A runtime file for ``workspace`` (database dwh and schema sales unless
        ``extra`` says otherwise); the other keys of ``extra`` go to the installation's
        configuration."""
        path = self.home / f"{workspace}.yaml"
        binding = {"database": "dwh", "schema": "sales"}  # recall is always bound
        binding.update({k: v for k, v in extra.items() if k in RUNTIME_KEYS})
        text = f"workspace: {workspace}\n"
        text += "".join(f"{key}: {json.dumps(value)}\n" for key, value in binding.items())
        installation = {k: v for k, v in extra.items() if k not in RUNTIME_KEYS}
        if installation:
            write_installation(self.home, **installation)
        path.write_text(text)
        return str(path)

    def run(
        self,
        *args: str,
        token: str | None = None,
        stdin: str | None = None,
        timeout: float = 120,
        **env: str,
    ) -> Result:
        environment = {**self.env, **env}
        if token is not None:
            environment["THT_TOKEN"] = token
        done = subprocess.run(
            [sys.executable, "-m", "tht", *args],
            env=environment,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.home,
        )
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 1, (done.returncode, done.stdout, done.stderr)
        return Result(done.returncode, json.loads(lines[0]), done.stderr)

    def start(self, *args: str, **env: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "tht", *args],
            env={**self.env, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.home,
        )

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    def service(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.run_dir / "service.json").read_text())
        except (OSError, ValueError):
            return None

    def service_pid(self) -> int | None:
        found = self.service()
        return found["pid"] if found and alive(found["pid"]) else None

    def starts_logged(self) -> int:
        log = self.run_dir / "service.log"
        return log.read_text().count("listening on") if log.exists() else 0

    def stop(self) -> None:
        pid = self.service_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        if not wait_for(lambda: not alive(pid), 30):
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not alive(pid), 10)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (a service started by this test process) is dead
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def installation(database, home: Path) -> Installation:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env.update(database.env(), THT_HOME=str(home), THT_SERVICE="auto", THT_SERVICE_TIMEOUT="60")
    write_installation(home, embedders={"default": {"provider": "hashing"}})
    return Installation(home, env)
