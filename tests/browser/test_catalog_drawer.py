"""The Catalog page's sync runs in a real browser (Debian's Chromium) against the
real `tht serve` and a real SQLite DWH: the binding, "Sync now", the run drawer with
the deleted Memory cards and the errors of a cleanup whose index update failed, and
retry from the drawer. Screenshots in test-output/screenshots/catalog-NN-name.png."""

from __future__ import annotations

import re
import urllib.error

import pytest

from tests.browser.conftest import DWH_CONNECTIONS, PASSWORD, USER, WORKSPACE, Server
from tests.integration.catalog_support import DWH_ENV, create_sqlite_dwh, sqlite_execute


@pytest.fixture
def dwh_path(tmp_path, monkeypatch):
    """A SQLite DWH whose URL the server finds in its environment (set before it starts)."""
    path = tmp_path / "dwh.sqlite"
    monkeypatch.setenv(DWH_ENV, create_sqlite_dwh(path))
    return path


@pytest.fixture
def bound_server(dwh_path, server, database):
    from tests.factories import installation_of
    from tht.bootstrap import build_services
    from tht.catalog.model import Binding

    services = build_services(
        env={**database.env(), "THT_HOME": str(server.home)},
        installation=installation_of(dwh=DWH_CONNECTIONS),
    )
    try:
        services.catalog.bind(Binding(WORKSPACE, "dwh", "main", DWH_ENV))
    finally:
        services.close()
    return server


def card(title: str, table: str, column: str | None = None) -> dict:
    dependency = {"database": "dwh", "schema": "main", "table": table}
    if column:
        dependency["column"] = column
    return {
        "family": "sql_rule",
        "title": title,
        "content": "A rule.",
        "scope": "Sales",
        "rationale": "Because.",
        "dependencies": [dependency],
    }


def test_run_drawer_reports_deleted_cards_errors_and_retry(
    bound_server: Server, dwh_path, chromium, index_blocker, screenshots
):
    from playwright.sync_api import expect

    server = bound_server
    expect.set_options(timeout=20_000)
    baseline = server.api("POST", f"/api/workspaces/{WORKSPACE}/catalog/sync")
    assert baseline["status"] == "completed"
    memory = f"/api/workspaces/{WORKSPACE}/memory"
    doomed = {
        server.api("POST", memory, card("Customer names are legal names", "customers", "name"))[
            "card"
        ]["id"],
        server.api("POST", memory, card("Customers are deduplicated", "customers"))["card"]["id"],
    }
    kept = server.api("POST", memory, card("Order status is lower case", "orders", "status"))[
        "card"
    ]["id"]

    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "console",
        lambda message: (
            problems.append(f"console: {message.text}")
            if message.type == "error" and "Content Security Policy" in message.text
            else None
        ),
    )
    step = {"n": 0}

    def shot(name: str) -> None:
        step["n"] += 1
        page.screenshot(
            path=str(screenshots / f"catalog-{step['n']:02d}-{name}.png"), full_page=False
        )

    try:
        page.goto(server.url + "login")
        expect(page.locator('[data-page="login"][data-ready="true"]')).to_have_count(1)
        page.get_by_label("User name").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in", exact=True).click()
        expect(page).to_have_url(re.compile(r"/admin/memory"))
        page.get_by_role("link", name="Catalog", exact=True).click()
        expect(page.locator('[data-catalog][data-ready="true"]')).to_have_count(1)

        acme = page.locator(f'[data-catalog-workspace="{WORKSPACE}"]')
        expect(acme.get_by_test_id("binding-database")).to_have_text("dwh")
        expect(acme.get_by_test_id("binding-schema")).to_have_text("main")
        expect(acme.get_by_test_id("binding-connection")).to_have_text(DWH_ENV)
        expect(acme.get_by_test_id("run-row")).to_have_count(1)
        drawer = page.get_by_test_id("run-drawer")
        expect(drawer).to_be_hidden()
        shot("bindings-and-runs")

        # the DWH loses a table; the index is down during the sync
        sqlite_execute(dwh_path, "DROP TABLE customers;")
        blocker = index_blocker()
        acme.get_by_test_id("sync-now").click()
        expect(page.get_by_test_id("catalog-feedback")).to_contain_text("failed")
        expect(drawer).to_be_visible()
        expect(drawer).to_have_attribute("data-status", "pending")
        expect(page.get_by_test_id("run-status")).to_have_text("Cleanup pending")
        expect(page.get_by_test_id("run-removed")).to_contain_text("Table customers")
        deleted = page.get_by_test_id("deleted-card")
        expect(deleted).to_have_count(2)
        assert {d.get_attribute("data-card") for d in deleted.all()} == doomed
        expect(page.get_by_test_id("run-error")).to_have_count(1)
        expect(page.get_by_test_id("run-error")).to_contain_text("cleanup_incomplete")
        expect(page.get_by_test_id("run-retry")).to_be_visible()
        expect(acme.get_by_test_id("pending-run")).to_contain_text("pending")
        shot("drawer-cleanup-pending")

        # a new sync is refused while the cleanup is pending
        page.get_by_test_id("run-drawer-close").click()
        expect(drawer).to_be_hidden()
        acme.get_by_test_id("sync-now").click()
        expect(page.get_by_test_id("catalog-feedback")).to_contain_text("pending Memory cleanup")
        expect(drawer).to_be_visible()
        shot("sync-refused")

        blocker.release()
        page.get_by_test_id("run-retry").click()
        expect(page.get_by_test_id("run-feedback")).to_contain_text(
            "Cleanup completed: 2 Memory cards deleted"
        )
        expect(drawer).to_have_attribute("data-status", "completed")
        expect(page.get_by_test_id("run-status")).to_have_text("Completed")
        expect(page.get_by_test_id("run-retry")).to_be_hidden()
        expect(page.get_by_test_id("deleted-card")).to_have_count(2)
        expect(page.get_by_test_id("run-error")).to_have_count(1)  # the history stays
        expect(acme.get_by_test_id("pending-run")).to_be_hidden()
        expect(acme.locator('[data-testid="run-row"][data-status="completed"]')).to_have_count(2)
        shot("drawer-after-retry")
        page.keyboard.press("Escape")
        expect(drawer).to_be_hidden()

        # nothing else changed: the next sync deletes nothing
        acme.get_by_test_id("sync-now").click()
        expect(page.get_by_test_id("catalog-feedback")).to_contain_text("0 Memory cards deleted")
        expect(page.get_by_test_id("run-deleted")).to_contain_text("None")
        shot("drawer-no-change")
        assert problems == []
    finally:
        context.close()

    for card_id in doomed:
        with pytest.raises(urllib.error.HTTPError) as gone:
            server.api("GET", f"{memory}/{card_id}")
        assert gone.value.code == 404
    assert server.api("GET", f"{memory}/{kept}")["id"] == kept
