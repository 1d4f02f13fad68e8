"""A cluster as scripts/cluster.py brings it up: PostgreSQL over TCP with passwords, two
`tht serve` replicas and HAProxy in front, each a process of its own; and the HTTP
clients the tests of tests/integration/test_scale_out.py drive it with."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml

from tests.factories import TEST_EMBEDDER

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster.py"
WORKSPACE_BINDING = {"database": "dwh", "schema": "sales"}
CONNECTION = "warehouse"


def free_ports(count: int, *, consecutive: int = 1) -> list[int]:
    """``count`` ports free on 127.0.0.1; the first ``consecutive`` follow each other."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + consecutive >= 65000:
            continue
        run = list(range(base, base + consecutive))
        if all(_free(port) for port in run):
            others = []
            while len(others) < count - consecutive:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", 0))
                    port = probe.getsockname()[1]
                if port not in run and port not in others:
                    others.append(port)
            return run + others
    raise RuntimeError("no free ports")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Answer:
    status: int
    document: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Cluster:
    """The cluster in ``root``: ``urls`` are HAProxy's ("lb") and each replica's (1, 2)."""

    root: Path
    status: dict[str, Any]
    ports: dict[str, int]

    # --- the script --------------------------------------------------------------------

    def script(self, *args: str, **env: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), *args, "--dir", str(self.root)],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (done.stdout, done.stderr)
        return json.loads(done.stdout)

    def up(self, **env: str) -> dict[str, Any]:
        """``cluster.py up``: starts what is not running (with ``env`` added to its own)."""
        self.status = self.script(
            "up",
            "--pg-port",
            str(self.ports["pg"]),
            "--port",
            str(self.ports["lb"]),
            "--replica-port",
            str(self.ports["replica"]),
            **env,
        )
        return self.status

    def replica_pid(self, number: int) -> int:
        pid = self.status["replicas"][number - 1]["pid"]
        assert pid, self.status
        return int(pid)

    def stop_replica(self, number: int, signum: int = signal.SIGTERM) -> None:
        pid = self.replica_pid(number)
        os.kill(pid, signum)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _running(pid):
            time.sleep(0.05)
        assert not _running(pid)

    def haproxy_view(self) -> dict[str, str]:
        return {r["name"]: r["haproxy"] for r in self.script("status")["replicas"]}

    # --- HTTP ----------------------------------------------------------------------------

    def url(self, target: str | int) -> str:
        if target == "lb":
            return self.status["url"]
        return self.status["replicas"][int(target) - 1]["url"]

    @property
    def admin_token(self) -> str:
        return Path(self.status["admin_token_file"]).read_text().strip()

    def client(self, target: str | int, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url(target), headers=headers, timeout=60)

    def call(
        self,
        target: str | int,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        with self.client(target, token if token is not None else self.admin_token) as client:
            response = client.request(method, path, json=body, headers=headers)
        return _answer(response)

    # --- the operator's commands, in their own process ---------------------------------

    def operator_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
        for line in (self.root / "env").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'")
        return env | {"THT_HOME": str(self.root / "operator")}

    def tht(self, *args: str, stdin: str | None = None, **env: str) -> tuple[int, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "tht", *args],
            env=self.operator_env() | env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=self.root,
        )
        lines = done.stdout.strip().splitlines()
        assert len(lines) == 1, (done.returncode, done.stdout, done.stderr)
        return done.returncode, json.loads(lines[0])

    def runtime(self, workspace: str) -> str:
        path = self.root / f"{workspace}.yaml"
        path.write_text(yaml.safe_dump({"workspace": workspace, **WORKSPACE_BINDING}))
        return str(path)

    def workspace(self, workspace: str) -> str:
        """A workspace bound to the DWH, the admin a member of it; its runtime file."""
        code, made = self.tht("workspace", "create", workspace, "--language", "en")
        assert code == 0, made
        runtime = self.runtime(workspace)
        code, bound = self.tht("catalog", "bind", "-c", runtime, "--connection", CONNECTION)
        assert code == 0, bound
        code, granted = self.tht("user", "grant", "admin", "--workspace", workspace)
        assert code == 0, granted
        return runtime

    def superuser(self) -> psycopg.Connection:
        password = (self.root / "secrets" / "superuser.password").read_text().strip()
        return psycopg.connect(
            host="127.0.0.1",
            port=self.ports["pg"],
            dbname="thoth",
            user="postgres",
            password=password,
            sslmode="disable",
            autocommit=True,
        )


def _answer(response: httpx.Response) -> Answer:
    try:
        document = response.json()
    except ValueError:
        document = response.text
    return Answer(response.status_code, document, dict(response.headers))


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


RETRY_SECONDS = 2.0


def config_text(sessions: Path) -> str:
    return yaml.safe_dump(
        {
            "index": {"engine": "pgvector"},
            "embedders": {"default": TEST_EMBEDDER},
            "sessions_root": str(sessions),
            "dwh": {CONNECTION: {"url_env": "WAREHOUSE_URL"}},
            # the survivor of a kill -9 drains what the dead replica left within this
            "pending_work": {"retry_seconds": RETRY_SECONDS},
        }
    )


@contextmanager
def running_cluster(root: Path) -> Iterator[Cluster]:
    replica, _, pg, lb = free_ports(4, consecutive=2)  # the replicas' ports follow each other
    cluster = Cluster(root, {}, {"pg": pg, "lb": lb, "replica": replica})
    config = root.parent / f"{root.name}-config.yaml"
    config.write_text(config_text(root / "sessions"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "sessions").mkdir(mode=0o700, exist_ok=True)
    try:
        cluster.status = cluster.script(
            "up",
            "--replicas",
            "2",
            "--config",
            str(config),
            "--pg-port",
            str(pg),
            "--port",
            str(lb),
            "--replica-port",
            str(replica),
        )
        yield cluster
    finally:
        subprocess.run(
            [sys.executable, str(SCRIPT), "down", "--purge", "--dir", str(root)],
            capture_output=True,
            timeout=300,
        )


def card(title: str, family: str = "sql_rule", **extra: Any) -> dict[str, Any]:
    """A card every recall of the tests' binding may return."""
    return {
        "family": family,
        "title": title,
        "content": f"{title}: join movements to jobs on job_code and fiscal_year.",
        "scope": "Accounting",
        "rationale": "A job code repeats across fiscal years.",
        "dependencies": [{**WORKSPACE_BINDING, "table": "movements"}],
        **extra,
    }


class Errors:
    """What went wrong in the threads of a burst, for one assertion at the end."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._lock = threading.Lock()

    def add(self, what: str) -> None:
        with self._lock:
            self.items.append(what)
