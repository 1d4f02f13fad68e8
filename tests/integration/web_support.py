"""A running administration app on the test database: two workspaces, their admins,
a plain user and an agent of ws-a, a few cards each."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastapi.testclient import TestClient

from tests.factories import card, installation_of
from tht.bootstrap import Services, build_services
from tht.catalog.model import Binding
from tht.web.app import WebSettings, create_app
from tht.web.limits import ServerLimits, uvicorn_options

ORIGIN = "http://testserver"
# the DWH connections of the world's installation, each named after its URL's variable
DWH_CONNECTIONS = ("ACME_DWH_URL", "DWH_URL")


@dataclass
class WebWorld:
    services: Services
    client: TestClient
    tokens: dict[str, str]
    cards: dict[str, list[str]] = field(default_factory=dict)

    def close(self) -> None:
        self.client.close()
        self.services.close()

    def bearer(self, actor: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[actor]}"} if actor else {}

    def snapshot(self) -> dict[str, list[tuple[str, int]]]:
        """Everything an unauthorized request must leave untouched."""
        state = {}
        for workspace in ("ws-a", "ws-b"):
            with self.services.archive.transaction(workspace) as tx:
                state[workspace] = sorted((str(k), v) for k, v in tx.card_revisions().items())
                state[workspace + ":links"] = sorted(
                    (str(s), str(t))
                    for s, targets in tx.links_with_facts(list(tx.card_revisions()))[0].items()
                    for t, _ in targets
                )
        return state


def build_world(
    database,
    tmp_path,
    *,
    sessions_root: Path | None = None,
    bound: tuple[str, ...] = ("ws-a", "ws-b"),
) -> WebWorld:
    """The world; each workspace of ``bound`` has a recorded DWH binding (dwh.sales),
    since recall through the service's faces is always bound."""
    services = build_services(
        env=database.env(),
        installation=installation_of(
            index=str(tmp_path / "index"),
            sessions_root=sessions_root,
            dwh={name: {"url_env": name} for name in DWH_CONNECTIONS},
        ),
    )
    services.workspaces.create("ws-a", "en")
    services.workspaces.create("ws-b", "en")
    for workspace in bound:
        services.catalog.bind(Binding(workspace, "dwh", "sales", "DWH_URL"))
    tokens = {
        "admin_a": services.accounts.users.create_user(
            "admin_a", "admin", ["ws-a"], password="correct horse battery"
        )["token"],
        "admin_b": services.accounts.users.create_user("admin_b", "admin", ["ws-b"])["token"],
        "user_a": services.accounts.users.create_user(
            "user_a", "user", ["ws-a"], password="correct horse battery"
        )["token"],
        "agent_a": services.accounts.users.create_user("agent_a", "agent", ["ws-a"])["token"],
    }
    cards = {
        ws: [
            services.memory.create_card(ws, card(title=f"{ws} card {i}")).card.id for i in range(3)
        ]
        for ws in ("ws-a", "ws-b")
    }
    client = TestClient(
        create_app(services, WebSettings(public_origins=(ORIGIN,))), base_url=ORIGIN
    )
    return WebWorld(services, client, tokens, cards)


@contextmanager
def serving(app, limits: ServerLimits, proxies: tuple[str, ...] = ()) -> Iterator[tuple[str, int]]:
    """``app`` behind uvicorn as `tht serve` configures it (same protocol, limits and
    timeouts), in a thread, on a free loopback port; yields (host, port)."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            **uvicorn_options(limits, proxies),
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield "127.0.0.1", port
    finally:
        server.should_exit = True
        thread.join(timeout=30)
