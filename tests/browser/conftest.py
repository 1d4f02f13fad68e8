"""Browser fixtures: the real `tht serve` on a test database, Debian's Chromium, and a
helper process that holds the embedded index to simulate an index outage.

Chromium comes from the distribution (`apt-get install chromium`): Playwright cannot
download browsers here. Set THT_CHROMIUM to use another executable.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("THT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-output" / "screenshots"
# the served installation's configuration: the tests' embedder, and the Catalog tests'
# DWH connection, named after its URL's variable
SERVER_CONFIG = (
    "index: {engine: edge, open_timeout: 1}\n"
    "embedders: {default: {provider: hashing, dimension: 64}}\n"
    "dwh: {ACME_DWH_URL: {url_env: ACME_DWH_URL}}\n"
)
DWH_CONNECTIONS = {"ACME_DWH_URL": {"url_env": "ACME_DWH_URL"}}

SERVE = [sys.executable, "-m", "tht", "serve"]
OUTAGE_FILE = "outage"  # lists the components the running server sees down
WORKSPACE = "acme"
OTHER_WORKSPACE = "beta"
FOREIGN_WORKSPACE = "gamma"  # the test user does not belong to it
USER = "ui-admin"
PASSWORD = "correct horse battery staple"
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliett",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "amber",
    "basalt",
    "cobalt",
    "dune",
]
FAMILY_ORDER = ["domain_clarification", "sql_rule", "solved_question", "explained_error"]


def seed_document(i: int) -> dict:
    """Card i of the seeded workspace: family i % 4, table orders when i % 3 == 0,
    concept revenue for even i and churn for odd i; the title's word is unique."""
    family = FAMILY_ORDER[i % 4]
    document: dict = {
        "family": family,
        "title": f"Card {i:02d} {WORDS[i]}",
        "concepts": ["revenue" if i % 2 == 0 else "churn"],
        "dependencies": [
            {
                "database": "dwh",
                "schema": "sales",
                "table": "orders" if i % 3 == 0 else "customers",
                "column": "id",
            }
        ],
    }
    texts = {
        "domain_clarification": {
            "content": "A definition used by the sales team.",
            "scope": "Sales",
        },
        "sql_rule": {
            "content": "Filter cancelled rows first.",
            "scope": "Sales",
            "rationale": "They are not revenue.",
        },
        "solved_question": {
            "question": "How many customers bought something?",
            "sql": "SELECT count(DISTINCT customer_id) FROM sales.orders",
            "context": "Approved.",
        },
        "explained_error": {
            "context": "column amount does not exist",
            "content": "Use total_amount.",
            "rationale": "The column was renamed.",
        },
    }
    document.update(texts[family])
    return document


SEED_COUNT = 30


@dataclass
class Server:
    url: str
    home: Path
    admin_token: str | None
    process: subprocess.Popen
    log: Path
    cards: dict[int, str] = field(default_factory=dict)  # seed index -> card id
    login_url: str | None = None  # the one-time link of the line `tht serve` prints

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        """Call the API with the admin's bearer token (outside the browser)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url.rstrip("/") + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.admin_token}",
                "Accept": "application/json",
                **({"Content-Type": "application/json"} if data else {}),
            },
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def stderr_tail(self) -> str:
        try:
            return self.log.read_text()[-4000:]
        except OSError:
            return ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _server_env(database, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_CATALOG_")}
    env.update(database.env())
    env["THT_HOME"] = str(home)
    env["THT_OUTAGE_FILE"] = str(home / OUTAGE_FILE)
    env.pop("THT_QDRANT_API_KEY", None)
    return env


def _seed(env: dict[str, str]) -> dict[int, str]:
    """Three workspaces, the test user, and SEED_COUNT indexed cards in WORKSPACE."""
    from tests.factories import installation_of
    from tht.bootstrap import build_services
    from tht.memory.model import parse_card_input

    services = build_services(env=env, installation=installation_of(dwh=DWH_CONNECTIONS))
    try:
        services.workspaces.create(WORKSPACE, "en", "Acme sales")
        services.workspaces.create(OTHER_WORKSPACE, "it", "Beta vendite")
        services.workspaces.create(FOREIGN_WORKSPACE, "en", "Gamma (not mine)")
        services.accounts.users.create_user(
            USER, "admin", [WORKSPACE, OTHER_WORKSPACE], password=PASSWORD
        )
        ids = {}
        for i in range(SEED_COUNT):
            result = services.memory.create_card(WORKSPACE, parse_card_input(seed_document(i)))
            assert result.status == "saved", result.as_json()
            ids[i] = result.card.id
        return ids
    finally:
        services.close()


@contextmanager
def running_server(
    env: dict[str, str],
    config_text: str,
    tmp_path: Path,
    home: Path,
    cards: dict[int, str] | None = None,
    args: tuple[str, ...] = (),
) -> Iterator[Server]:
    """`tht serve` as a real process (with ``args``, e.g. ``--demo``), until the block
    ends; yields once it answers /healthz."""
    config = tmp_path / "serve.yaml"
    config.write_text(config_text)
    log = tmp_path / "serve.stderr"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [*SERVE, "--port", str(_free_port()), "-c", str(config), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        try:
            first = lines.get(timeout=120)
        except queue.Empty:
            first = b""
        if not first.strip():
            pytest.fail(
                f"tht serve printed nothing (exit {process.poll()}):\n{log.read_text()[-4000:]}"
            )
        ready = json.loads(first)
        assert ready["admin_user"] == "admin" and "admin_token" not in ready, ready
        token_file = Path(ready["admin_token_file"])
        assert token_file.stat().st_mode & 0o077 == 0  # the token is the operator's alone
        admin_token = token_file.read_text().strip()
        url = ready["url"]
        deadline = time.monotonic() + 60
        while True:  # the line comes just before the server listens
            try:
                with urllib.request.urlopen(url + "healthz", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"tht serve did not start (exit {process.poll()}):\n{log.read_text()[-4000:]}"
                )
            time.sleep(0.1)
        yield Server(
            url=url,
            home=home,
            admin_token=admin_token,
            process=process,
            log=log,
            cards=cards or {},
            login_url=ready["login_url"],
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
        if process.stdout:
            process.stdout.close()


@pytest.fixture
def server(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = _server_env(database, home)
    cards = _seed(env)
    with running_server(env, SERVER_CONFIG, tmp_path, home, cards) as running:
        yield running


class IndexBlocker:
    """The server's search index down (an outage the service sees through
    THT_OUTAGE_FILE): its saves then end "saved, index update incomplete"."""

    def __init__(self, server: Server) -> None:
        self.outage = server.home / OUTAGE_FILE

    def __enter__(self) -> IndexBlocker:
        self.outage.write_text("index\n")
        return self

    def release(self) -> None:
        self.outage.unlink(missing_ok=True)

    def __exit__(self, *exc) -> None:
        self.release()


@pytest.fixture
def index_blocker(server):
    blockers: list[IndexBlocker] = []

    def start() -> IndexBlocker:
        blocker = IndexBlocker(server).__enter__()
        blockers.append(blocker)
        return blocker

    yield start
    for blocker in blockers:
        blocker.release()


@pytest.fixture(scope="session")
def chromium():
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's Chromium (apt-get install -y chromium)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture
def screenshots():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
