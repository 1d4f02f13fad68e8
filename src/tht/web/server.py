"""`tht serve`: the administration web app on the embedded engines (or configured ones).

`tht serve` is the installation's service (tht.service.server) with the pages and the
API. It prints one JSON line on stdout when ready: the URL, a one-time login link for
the `admin` user, the file holding that user's API token (written 0600 in THT_HOME on
the first start, never printed) and the service's socket. Logs go to stderr.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tht.accounts import INSTALLATION_ADMIN
from tht.errors import ConfigurationError, Conflict, PortInUse
from tht.installation import load_installation
from tht.settings import default_home

if TYPE_CHECKING:
    from fastapi import FastAPI

    from tht.bootstrap import Services
    from tht.service.server import Service
    from tht.web.limits import ServerLimits

ADMIN_USER = INSTALLATION_ADMIN
ADMIN_TOKEN_FILE = "admin-token"


def ensure_admin(services: Any, home: Path) -> Path | None:
    """On the first start only: an `admin` user for the workspaces that exist (a
    `default` one when there is none), its token written to a 0600 file in THT_HOME.
    Later starts change no account: an administrator's memberships are the
    administrators' business. Returns the token file when it exists."""
    token_file = home / ADMIN_TOKEN_FILE
    if any(user["user"] == ADMIN_USER for user in services.accounts.users.list_users()):
        return token_file if token_file.exists() else None
    workspaces = [w.id for w in services.workspaces.list()]
    if not workspaces:
        try:
            services.workspaces.create("default", "en", "Default workspace")
        except Conflict:  # another replica, starting at the same time, made it
            pass
        workspaces = ["default"]
    try:
        token = services.accounts.users.create_user(ADMIN_USER, "admin", workspaces)["token"]
    except Conflict:  # another process created it meanwhile
        return token_file if token_file.exists() else None
    home.mkdir(parents=True, exist_ok=True)
    token_file.unlink(missing_ok=True)
    descriptor = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    return token_file


def run_server(
    *,
    host: str,
    port: int,
    demo: bool,
    config: Path | None,
    secure: bool,
    web: bool = True,
    idle_timeout: float = 0,
    limits: ServerLimits | None = None,
    public_origins: tuple[str, ...] = (),
    proxies: tuple[str, ...] = (),
) -> None:
    """The installation's service: the engines, the socket, and (unless ``web`` is
    False) the pages and the API on ``host:port``.

    What can fail is tried before a running auto-started service is asked to stop
    (``take_over``): the configuration, the port (bound here, then handed to uvicorn,
    so no other program can take it meanwhile) and the archive. A start that fails
    after that starts an auto-started service again (``restore``)."""
    from tht.service.server import Service, restore, run_headless, settle_heap, take_over

    home = default_home()
    installation = load_installation(config)
    if not web:
        if demo:
            raise ConfigurationError("--demo needs the web app")
        run_headless(home, idle_timeout=idle_timeout, announce=_announce, installation=installation)
        return
    import uvicorn

    from tht.demo import demo_sessions_root
    from tht.web.guard import served_origins
    from tht.web.limits import ServerLimits, uvicorn_options

    listener = listen(host, port, home)
    port = listener.getsockname()[1]  # --port 0: the one the system chose
    scheme = "https" if secure else "http"
    base = f"{scheme}://{_url_host(host)}:{port}"
    if demo and installation.sessions_root is None:
        installation = installation.model_copy(update={"sessions_root": demo_sessions_root(home)})
    service = Service(home, idle_timeout=idle_timeout, web=True, installation=installation)
    service.url = f"{base}/"
    started = False
    replaced = None
    try:
        service.open()
        replaced = take_over(home, service)
    except BaseException:
        listener.close()
        service.close()
        raise
    previous_handlers = _stop_on_termination(service)
    try:
        service.start()
        services = service.open_engines().services()
        announcement = _welcome(services, service, home, demo, base)

        class AnnouncingServer(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                nonlocal started
                await super().startup(sockets)
                if self.started:  # listening: a client may connect as soon as it reads the line
                    started = True
                    _announce(announcement)

        limits = limits or ServerLimits()
        app = _web_app(
            services,
            service,
            limits,
            public_origins or served_origins(scheme, host, port),
            secure=secure,
        )
        server = AnnouncingServer(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level="warning",
                # uvloop's event loop (C): named, so a missing one fails instead of
                # falling back to asyncio's unnoticed
                loop="uvloop",
                **uvicorn_options(limits, proxies),
            )
        )
        service.on_stop = lambda: setattr(server, "should_exit", True)
        settle_heap()
        server.run(sockets=[listener])
    except _Terminated:
        pass  # stopped by the system: as graceful as any other stop, exit 0
    finally:
        listener.close()
        try:
            service.close()
        finally:
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)
            if not started:
                restore(home, replaced)


def _welcome(
    services: Services, service: Service, home: Path, demo: bool, base: str
) -> dict[str, Any]:
    """The demo loaded when asked, the installation's admin made sure of, and the line
    `tht serve` prints once it listens: its URLs, the admin's one-time login link and
    token file, the service's socket."""
    from tht.demo import DEMO_WORKSPACE, load_demo

    if demo:
        from tht.commands.progress_rate import RateProgress

        def say(message: str) -> None:
            print(message, file=sys.stderr, flush=True)

        load_demo(services, say, RateProgress(say))
    token_file = ensure_admin(services, home)
    if demo:  # the operator asked for the demo: the admin may see it
        services.accounts.users.add_memberships(ADMIN_USER, [DEMO_WORKSPACE])
    login = services.accounts.sessions.open_session(ADMIN_USER, one_time=True)
    return {
        "url": f"{base}/",
        "login_url": f"{base}/login/once/{login}",
        "admin_user": ADMIN_USER,
        "admin_token_file": str(token_file) if token_file else None,
        "socket": str(service.status()["socket"]),
        "pid": os.getpid(),
        "stop": "tht service stop",
    }


def _web_app(
    services: Services,
    service: Service,
    limits: ServerLimits,
    public_origins: tuple[str, ...],
    *,
    secure: bool,
) -> FastAPI:
    """The pages and the API over the service's engines, with its command runner
    (`POST /api/cli`) and its health report."""
    from tht.web.app import WebSettings, build_routes, create_app

    settings = WebSettings(
        secure=secure, body_timeout=limits.body_timeout, public_origins=public_origins
    )
    app = create_app(
        services, settings, run_command=service.run_command, health=service.health_check
    )
    build_routes(app)
    return app


class _Terminated(BaseException):
    """SIGTERM or SIGHUP reached ``tht serve`` before it served."""


def _stop_on_termination(service: Service) -> dict[int, Any]:
    """SIGTERM and SIGHUP stop ``tht serve`` as gracefully as the service stops
    itself (idle, or taken over): the commands running through the socket drain, the
    engines close, the socket goes, and it exits 0; returns the handlers replaced.

    Needed because uvicorn handles SIGTERM (not SIGHUP) while it serves and, once shut
    down, raises it again under the handler it found: under the default one, the
    process ended inside ``server.run()``, before ``service.close()`` (exit 143, the
    engines left open, service.json left behind). Before uvicorn serves, the signal
    stops the start-up (``_Terminated``)."""
    if threading.current_thread() is not threading.main_thread():
        return {}  # signals only reach the main thread

    def stop(signum: int, _frame: object) -> None:
        if service.on_stop is None:
            raise _Terminated(signum)
        service.request_stop()

    return {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}


def _announce(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def listen(host: str, port: int, home: Path) -> socket.socket:
    """A socket bound to ``host:port`` for uvicorn to serve on; a port another program
    holds is ``port_in_use``, saying which program when it is this installation's own
    service, and how to choose another port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    # As uvicorn's own listener does: connections of a killed predecessor linger in
    # TIME-WAIT for a minute and would fail a plain bind; a live listener still does.
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        if exc.errno != errno.EADDRINUSE:
            raise ConfigurationError(
                f"cannot listen on {host}:{port}: {exc.strerror}",
                details={"host": host, "port": port},
            ) from exc
        raise _port_in_use(host, port, home) from exc
    listener.set_inheritable(False)
    return listener


def _port_in_use(host: str, port: int, home: Path) -> PortInUse:
    from tht.service.client import running_service

    details: dict[str, Any] = {"host": host, "port": port}
    running = running_service(str(home))
    url = running.get("url") if running else None
    if running and isinstance(url, str) and url.rstrip("/").endswith(f":{port}"):
        details["service"] = running
        return PortInUse(
            f"this installation's service (pid {running.get('pid')}) already serves {url} on"
            f" port {port}: open it, or stop it with `tht service stop`",
            details=details,
        )
    other = port + 1 if 0 < port < 65535 else 8766
    return PortInUse(
        f"another program listens on {host}:{port}: choose another port, e.g."
        f" `tht serve --port {other}` (`make run PORT={other}`)",
        details=details,
    )
