"""A PostgreSQL server as production runs one: TCP, scram-sha-256 passwords, TLS only.

    python scripts/real_postgres.py start DIR [--port 55432]
    python scripts/real_postgres.py stop DIR
    python scripts/real_postgres.py run DIR [--port 55432] -- COMMAND...

`start` uses Debian's `postgresql` package (installed with apt-get when missing and we are
root), makes a cluster in DIR/data with a self-signed certificate made now, accepts only
TLS connections on 127.0.0.1 with passwords, and creates the migrator and runtime logins
and the database that the `THT_CATALOG_*` variables name, with passwords read from the
files those variables name (files made here, 0600, when the variables are unset). It
writes DIR/env: the `THT_CATALOG_*` settings a `tht` process needs (and the superuser's
URL for tests/real_server), and DIR/test-env: only `THT_TEST_ADMIN_DATABASE_URL`, the
superuser over TLS, with which the test suite makes its own databases and logins.

`run` starts the cluster, runs COMMAND and stops the cluster when COMMAND ends, however it
ends: Ctrl-C, SIGTERM and SIGHUP are passed on to COMMAND's whole process group (a shell
that dies of them would leave its pytest running), and the cluster stops once that group
is gone. Its exit code is COMMAND's.

Runs as root (the server then runs as the `postgres` user) or as the user who owns DIR.
Standard library only: it runs before and without the project's virtual environment.
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

# Not the embedded server's login names: the test suite's own logins (tests/conftest.py) live
# on the same server and get new passwords at each session.
DEFAULTS = {
    "THT_CATALOG_DB_HOST": "localhost",
    "THT_CATALOG_DB_NAME": "thoth",
    "THT_CATALOG_MIGRATOR_USER": "memory_migrator",
    "THT_CATALOG_RUNTIME_USER": "memory_app",
}


class SetupError(Exception):
    """A clear reason the server could not be set up; printed without a traceback."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="make and start the cluster; write DIR/env")
    start.add_argument("dir", type=Path)
    start.add_argument("--port", type=int, default=55432)
    stop = sub.add_parser("stop", help="stop the cluster (idempotent)")
    stop.add_argument("dir", type=Path)
    run = sub.add_parser(
        "run", help="start the cluster, run the command after --, stop the cluster"
    )
    run.add_argument("dir", type=Path)
    run.add_argument("--port", type=int, default=55432)
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        if args.command == "start":
            start_server(args.dir.resolve(), args.port)
        elif args.command == "run":
            if not command:
                parser.error("run needs a command after --")
            return run_with_server(args.dir.resolve(), args.port, command)
        else:
            stop_server(args.dir.resolve())
    except SetupError as exc:
        print(f"real PostgreSQL: {exc}", file=sys.stderr)
        return 1
    return 0


def run_with_server(root: Path, port: int, command: list[str]) -> int:
    """COMMAND's exit code; the cluster is stopped before this returns."""
    child: subprocess.Popen[bytes] | None = None

    def pass_on(signum: int, frame: FrameType | None) -> None:
        if child is None:  # still starting the cluster: stop there, then stop it
            raise KeyboardInterrupt(signal.Signals(signum).name)
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, pass_on)
    try:
        start_server(root, port)
        # its own process group, so that a signal reaches every process of it
        child = subprocess.Popen(command, start_new_session=True)
        code = child.wait()
        _wait_for_group(child.pid, seconds=120)  # a pytest still tearing down its fixtures
        return 128 - code if code < 0 else code  # killed by a signal: the shell's convention
    except KeyboardInterrupt:
        return 130
    finally:
        stop_server(root)


def _wait_for_group(group: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def bin_dir() -> Path:
    """The newest installed server's binaries; installs the package when missing and root."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        print("real PostgreSQL: installing Debian's postgresql package", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "postgresql"],
        ):
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SetupError(f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]}")
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if not found:
        raise SetupError(
            "Debian's postgresql package is not installed (no /usr/lib/postgresql/*/bin/initdb):"
            " run `apt-get install postgresql` as root"
        )
    return Path(found[-1]).parent


def _version(path: str) -> int:
    return int(Path(path).parts[4]) if Path(path).parts[4].isdigit() else 0


def start_server(root: Path, port: int) -> None:
    binaries = bin_dir()
    if (root / "data" / "postmaster.pid").exists():
        stop_server(root)
    _refuse_a_taken_port(port)
    owner = _server_owner()
    data, sock = root / "data", root / "sock"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True, mode=0o700)
    sock.mkdir(mode=0o700)
    env = dict(DEFAULTS) | {k: v for k, v in os.environ.items() if k.startswith("THT_CATALOG_")}
    passwords = {
        role: _password_file(root, env, role) for role in ("SUPERUSER", "MIGRATOR", "RUNTIME")
    }
    superuser_file = passwords["SUPERUSER"]
    _certificate(root)
    _chown(root, owner)

    _run_as(owner, [str(binaries / "initdb"), "-D", str(data), "-U", "postgres",
                    "--auth-local=scram-sha-256", "--auth-host=scram-sha-256",
                    f"--pwfile={superuser_file}", "-E", "UTF8", "--locale=C.UTF-8"])  # fmt: skip
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(
            "\n# written by scripts/real_postgres.py\n"
            f"listen_addresses = '127.0.0.1'\nport = {port}\n"
            f"unix_socket_directories = '{sock}'\n"
            f"ssl = on\nssl_cert_file = '{root / 'server.crt'}'\n"
            f"ssl_key_file = '{root / 'server.key'}'\n"
            "password_encryption = 'scram-sha-256'\nmax_connections = 300\n"
            # the tests make and drop many databases; durability is not what they check
            "fsync = off\nfull_page_writes = off\n"
        )
    (data / "pg_hba.conf").write_text(
        "# TLS and passwords only: a client without TLS is refused, whatever its password\n"
        "local     all all              scram-sha-256\n"
        "hostssl   all all 127.0.0.1/32 scram-sha-256\n"
        "hostnossl all all 0.0.0.0/0    reject\n"
    )
    _chown(data, owner)
    started = _run_as(owner, [str(binaries / "pg_ctl"), "-D", str(data), "-l",
                              str(root / "server.log"), "-w", "-t", "60", "start"], check=False)  # fmt: skip
    if started.returncode != 0:
        log = (root / "server.log").read_text(errors="replace")[-2000:]
        raise SetupError(f"the server did not start:\n{log}")

    host, name = env["THT_CATALOG_DB_HOST"], env["THT_CATALOG_DB_NAME"]
    migrator, runtime = env["THT_CATALOG_MIGRATOR_USER"], env["THT_CATALOG_RUNTIME_USER"]
    statements = [
        f"CREATE ROLE {_ident(migrator)} LOGIN CREATEROLE NOSUPERUSER NOBYPASSRLS"
        f" PASSWORD {_literal(_read(passwords['MIGRATOR']))}",
        f"CREATE ROLE {_ident(runtime)} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS"
        f" PASSWORD {_literal(_read(passwords['RUNTIME']))}",
        f"CREATE DATABASE {_ident(name)} OWNER {_ident(migrator)}",
    ]
    for statement in statements:
        _psql(binaries, owner, sock, port, superuser_file, statement)

    ca = root / "server.crt"
    exports = {
        "THT_CATALOG_DB_HOST": host,
        "THT_CATALOG_DB_PORT": str(port),
        "THT_CATALOG_DB_NAME": name,
        "THT_CATALOG_DB_SSLMODE": "verify-full",
        "THT_CATALOG_DB_SSLROOTCERT": str(ca),
        "THT_CATALOG_MIGRATOR_USER": migrator,
        "THT_CATALOG_MIGRATOR_PASSWORD_FILE": str(passwords["MIGRATOR"]),
        "THT_CATALOG_RUNTIME_USER": runtime,
        "THT_CATALOG_RUNTIME_PASSWORD_FILE": str(passwords["RUNTIME"]),
    }
    # the test suite's own fixtures make their databases and logins as the superuser
    superuser = (
        f"host={host} port={port} dbname=postgres user=postgres"
        f" password={_read(superuser_file)} sslmode=verify-full sslrootcert={ca}"
    )
    _write_env(root / "env", exports | {"THT_TEST_ADMIN_DATABASE_URL": superuser})
    _write_env(root / "test-env", {"THT_TEST_ADMIN_DATABASE_URL": superuser})
    print(
        f"real PostgreSQL {binaries.parent.name} on {host}:{port}, TLS + scram-sha-256; env in {root / 'env'}"
    )


def _refuse_a_taken_port(port: int) -> None:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise SetupError(
                f"port {port} on 127.0.0.1 is taken ({exc.strerror}): stop what listens there"
                " or choose another port (--port, REAL_PG_PORT for make)"
            ) from exc


def stop_server(root: Path) -> None:
    data = root / "data"
    if not (data / "postmaster.pid").exists():
        return
    owner = _server_owner()
    _run_as(
        owner, [str(bin_dir() / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], check=False
    )


def _server_owner() -> str | None:
    """initdb refuses root: as root the server runs as Debian's `postgres` user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise SetupError(
            "running as root but there is no `postgres` user to run the server"
        ) from exc
    return "postgres"


def _run_as(
    owner: str | None, command: list[str], check: bool = True
) -> subprocess.CompletedProcess:
    full = ["runuser", "-u", owner, "--", *command] if owner else command
    done = subprocess.run(full, capture_output=True, text=True, cwd="/")
    if check and done.returncode != 0:
        raise SetupError(
            f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()[-1500:]}"
        )
    return done


def _psql(
    binaries: Path, owner: str | None, sock: Path, port: int, password_file: Path, statement: str
) -> None:
    env = {**os.environ, "PGPASSWORD": _read(password_file)}
    command = [str(binaries / "psql"), "-h", str(sock), "-p", str(port), "-U", "postgres",
               "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", statement]  # fmt: skip
    full = ["runuser", "-u", owner, "--", *command] if owner else command
    done = subprocess.run(full, capture_output=True, text=True, env=env, cwd="/")
    if done.returncode != 0:
        raise SetupError(f"`{statement.split(' PASSWORD')[0]}` failed: {done.stderr.strip()}")


def _password_file(root: Path, env: dict[str, str], role: str) -> Path:
    named = env.get(f"THT_CATALOG_{role}_PASSWORD_FILE")
    if named:
        if not Path(named).is_file():
            raise SetupError(f"THT_CATALOG_{role}_PASSWORD_FILE names {named}, which is not a file")
        return Path(named)
    path = root / f"{role.lower()}.password"
    path.write_text(secrets.token_urlsafe(24) + "\n")
    path.chmod(0o600)
    return path


def _certificate(root: Path) -> None:
    if not shutil.which("openssl"):
        raise SetupError("openssl is missing: it makes the server's self-signed certificate")
    done = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(root / "server.key"), "-out", str(root / "server.crt")],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SetupError(f"openssl could not make the certificate: {done.stderr.strip()}")
    (root / "server.key").chmod(0o600)


def _chown(path: Path, owner: str | None) -> None:
    if owner is None:
        return
    entry = pwd.getpwnam(owner)
    for item in [path, *path.rglob("*")]:
        os.chown(item, entry.pw_uid, entry.pw_gid)


def _write_env(path: Path, variables: dict[str, str]) -> None:
    path.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in variables.items()))
    path.chmod(0o600)


def _read(path: Path) -> str:
    return path.read_text().rstrip("\r\n")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


if __name__ == "__main__":
    sys.exit(main())
