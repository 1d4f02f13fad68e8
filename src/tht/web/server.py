"""`tht serve`: the administration web app on the embedded engines (or configured ones).

Prints one JSON line on stdout when ready: the URL, a one-time login link for the
`admin` user (who belongs to every workspace) and that user's API token when it was
just created. Logs go to stderr.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from tht.bootstrap import ProjectionSettings, build_services
from tht.errors import ConfigurationError, Conflict
from tht.memory.index import EdgeIndex
from tht.settings import find_credentials, load_yaml
from tht.validation import describe_validation_error

ADMIN_USER = "admin"
# The web server gives the embedded index up after this idle time, so CLI commands on
# the same data directory get their turn.
EDGE_IDLE_RELEASE_SECONDS = 0.5


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: dict[str, Any] | None = None
    embedding: dict[str, Any] | None = None
    sessions_root: Path | None = None  # the workflow's session directories (the reviewer's page)


def load_server_config(path: Path | None) -> ProjectionSettings:
    config = read_server_config(path)
    return ProjectionSettings(config.index, config.embedding)


def read_server_config(path: Path | None) -> ServerConfig:
    if path is None:
        return ServerConfig()
    try:
        document = load_yaml(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"cannot read server configuration {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise ConfigurationError(f"server configuration {path} must be a mapping")
    credentials = find_credentials(document)
    if credentials:
        raise ConfigurationError(f"server configuration {path} contains what looks like a credential "
                                 f"({', '.join(credentials)}); use the environment")
    try:
        return ServerConfig.model_validate(document)
    except ValidationError as exc:
        raise ConfigurationError(f"server configuration {path}: {describe_validation_error(exc)}") from exc


def ensure_admin(services: Any) -> str | None:
    """The `admin` user belongs to every workspace; returns its token when created now."""
    workspaces = [w.id for w in services.workspaces.list()]
    if not workspaces:
        services.workspaces.create("default", "en", "Default workspace")
        workspaces = ["default"]
    try:
        return services.accounts.create_user(ADMIN_USER, "admin", workspaces)["token"]
    except Conflict:
        services.accounts.add_memberships(ADMIN_USER, workspaces)
        return None


def run_server(*, host: str, port: int, demo: bool, config: Path | None, secure: bool) -> None:
    import uvicorn

    from tht.demo import load_demo
    from tht.web.app import WebSettings, create_app

    server_config = read_server_config(config)
    services = build_services(projection=ProjectionSettings(server_config.index, server_config.embedding),
                              sessions_root=server_config.sessions_root)
    if isinstance(services.projector.index, EdgeIndex):
        services.projector.index.release_after = EDGE_IDLE_RELEASE_SECONDS
    try:
        if demo:
            load_demo(services)
        token = ensure_admin(services)
        _check_port_free(host, port)
        login = services.accounts.open_session(ADMIN_USER, one_time=True)
        scheme = "https" if secure else "http"
        base = f"{scheme}://{host}:{port}"
        announcement = json.dumps({"url": f"{base}/", "login_url": f"{base}/login/once/{login}",
                                   "admin_user": ADMIN_USER, "admin_token": token})

        class AnnouncingServer(uvicorn.Server):
            async def startup(self, sockets=None) -> None:
                await super().startup(sockets)
                if self.started:  # listening: a client may connect as soon as it reads the line
                    sys.stdout.write(announcement + "\n")
                    sys.stdout.flush()

        config = uvicorn.Config(create_app(services, WebSettings(secure=secure)), host=host, port=port,
                                log_level="warning")
        AnnouncingServer(config).run()
    finally:
        services.close()


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
