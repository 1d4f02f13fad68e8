"""Administration → Accounts in a real browser (Debian's Chromium) against the real `tht
serve`: create a workspace and a user, grant and revoke memberships, change a role,
rotate a token and delete the user, at 1280 px and at 390 px. Screenshots go to
test-output/screenshots/accounts-*.png."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest

from tests.browser.conftest import (
    PASSWORD,
    USER,
    WORKSPACE,
    Server,
    _server_env,
)


def bearer_status(server: Server, token: str) -> int:
    request = urllib.request.Request(
        server.url + "api/workspaces", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def users(database, server: Server) -> dict[str, dict]:
    """Every user as the operator sees them (THT_HOME and the database credentials)."""
    from tests.factories import installation_of
    from tht.bootstrap import build_services

    services = build_services(
        env=_server_env(database, server.home), installation=installation_of()
    )
    try:
        return {u["user"]: u for u in services.accounts.users.users()}
    finally:
        services.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_accounts_page(server: Server, database, chromium, screenshots, width):
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)
    context = chromium.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("dialog", lambda dialog: (problems.append(dialog.message), dialog.dismiss()))
    page.on(
        "console",
        lambda message: (
            problems.append(message.text)
            # a refused request (the last admin's 409) is logged by Chromium itself
            if message.type == "error" and "Failed to load resource" not in message.text
            else None
        ),
    )

    def shot(name: str, section: str | None = None) -> None:
        """The viewport, scrolled to ``section`` (a test id) when one is named."""
        if section:
            page.get_by_test_id(section).scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / f"accounts-{width}-{name}.png"))

    feedback = page.get_by_test_id("accounts-feedback")
    try:
        page.goto(server.url + "login")
        page.get_by_label("User name").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in", exact=True).click()
        expect(page).to_have_url(re.compile(r"/admin/memory$"))
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Accounts").click()
        expect(page).to_have_url(re.compile(r"/admin/accounts$"))
        expect(page.locator('[data-page="accounts"][data-ready="true"]')).to_have_count(1)
        expect(page.locator("#nav-accounts")).to_have_attribute("aria-current", "page")
        shot("loaded")

        # a workspace, administered by its creator at once
        workspace = f"team-{width}"
        workspace_form = page.get_by_test_id("workspace-form")
        workspace_form.get_by_label("ID").fill(workspace)
        workspace_form.get_by_label("Name").fill(f"Team {width}")
        page.get_by_test_id("create-workspace").click()
        expect(feedback).to_contain_text(f"Workspace {workspace} created")
        expect(page.locator(f'#admin-workspaces tr[data-workspace="{workspace}"]')).to_have_count(1)

        # a user of WORKSPACE, whose token the page shows once
        name = f"reader-{width}"
        form = page.get_by_test_id("user-form")
        form.get_by_label("Name").fill(name)
        form.get_by_label("Role").select_option("user")
        form.get_by_label("Token lifetime").select_option("30d")
        form.get_by_label(re.compile(rf"\({WORKSPACE}\)")).check()
        page.get_by_test_id("create-user").click()
        expect(feedback).to_contain_text(f"User {name} created")
        token_box = page.get_by_test_id("new-token-value")
        expect(token_box).to_have_value(re.compile(r"^tht_"))
        first_token = token_box.input_value()
        assert bearer_status(server, first_token) == 200
        shot("token-shown", "new-token")
        page.get_by_test_id("new-token-done").click()
        expect(page.get_by_test_id("new-token")).to_be_hidden()

        row = page.locator(f'[data-testid="user-row"][data-user="{name}"]')
        memberships = row.get_by_test_id("membership")
        expect(memberships).to_have_text([re.compile(WORKSPACE)])

        # grant the new workspace, then revoke the first one
        row.get_by_test_id("grant-select").select_option(workspace)
        row.get_by_test_id("grant").click()
        expect(feedback).to_contain_text(f"{name} now belongs to {workspace}")
        expect(memberships).to_have_count(2)
        row.get_by_role("button", name=f"Revoke {name} from {WORKSPACE}").click()
        expect(feedback).to_contain_text(f"{name} no longer belongs to {WORKSPACE}")
        expect(memberships).to_have_text([re.compile(workspace)])
        assert users(database, server)[name]["workspaces"] == [workspace]

        # a new role
        row.get_by_test_id("role-select").select_option("agent")
        expect(feedback).to_contain_text(f"{name} is now agent")
        assert users(database, server)[name]["role"] == "agent"
        shot("granted-revoked-role", "user-table")

        # rotation: the old token stops working, the new one works
        row.get_by_test_id("rotate-token").click()
        expect(feedback).to_contain_text(f"The old token of {name} no longer works")
        expect(token_box).to_have_value(re.compile(r"^tht_"))
        second_token = token_box.input_value()
        assert second_token != first_token
        assert bearer_status(server, first_token) == 401
        assert bearer_status(server, second_token) == 200
        page.get_by_test_id("new-token-done").click()

        # deletion asks once more, in place
        row.get_by_test_id("delete-user").click()
        row.get_by_test_id("confirm-delete").click()
        expect(feedback).to_contain_text(f"{name} was deleted")
        expect(row).to_have_count(0)
        assert name not in users(database, server)
        assert bearer_status(server, second_token) == 401

        # the last admin is refused, and says why (the server's own `admin` demotes itself
        # so that USER is the last one; its token cannot call the admin routes after that)
        admin_row = page.locator(f'[data-testid="user-row"][data-user="{USER}"]')
        assert [u for u, v in users(database, server).items() if v["role"] == "admin"] == [
            "admin",
            USER,
        ]
        server.api("PUT", "/api/admin/users/admin/role", {"role": "user"})
        page.reload()
        expect(page.locator('[data-page="accounts"][data-ready="true"]')).to_have_count(1)
        admin_row.get_by_test_id("role-select").select_option("user")
        expect(feedback).to_contain_text("last admin")
        expect(admin_row.get_by_test_id("role-select")).to_have_value("admin")

        # the audit log shows what happened, newest first
        page.get_by_test_id("audit-refresh").click()
        actions = page.get_by_test_id("audit-row")
        expect(actions.first).to_be_visible()
        logged = [row.get_attribute("data-action") for row in actions.all()]
        for action in ("user.delete", "token.rotate", "user.role", "membership.revoke"):
            assert action in logged, (action, logged)
        shot("audit", "audit-table")

        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px at {width}px"
        assert not problems, problems
    finally:
        context.close()
