"""What a new user meets first, in Debian's Chromium at 1280 and 390 px against the real
`tht serve`: the demo (`tht serve --demo`, as `make run` starts it) gives the reviewer's
page a sessions root and the page says where sessions come from; a server without one
says so and how to name one; the page's heading names no internal gate; a login link
used twice says it was used; the login page's token hint names the admin's token file.
Screenshots go to test-output/screenshots/first-visit-NAME-WIDTH.png."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import SERVER_CONFIG, Server, _server_env, running_server

WIDTHS = (1280, 390)


@pytest.fixture
def demo_server(database, tmp_path):
    """`tht serve --demo` with no sessions root in its configuration."""
    home = tmp_path / "home"
    home.mkdir()
    with running_server(
        _server_env(database, home), SERVER_CONFIG, tmp_path, home, args=("--demo",)
    ) as running:
        yield running


def _page(chromium, width: int):
    context = chromium.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    return context, page, problems


def _review_is_ready(page) -> None:
    from playwright.sync_api import expect

    expect(page.locator('#review-app[data-review-ready="true"]')).to_have_count(1)
    expect(page.get_by_role("heading", level=1)).to_have_text("Memory review")
    assert "reviewer_memory_promote" not in page.inner_text("body")
    assert "gate" not in page.get_by_role("heading", level=1).inner_text()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_demo_review_page_says_where_sessions_come_from(
    demo_server: Server, chromium, screenshots, width
):
    from playwright.sync_api import expect

    context, page, problems = _page(chromium, width)
    try:
        page.goto(demo_server.login_url)
        expect(page).to_have_url(re.compile(r"/admin/memory$"))
        page.goto(demo_server.url + "admin/review?workspace=demo")
        _review_is_ready(page)
        expect(page.get_by_test_id("no-sessions-root")).to_have_count(0)
        empty = page.get_by_test_id("sessions-empty")
        expect(empty).to_be_visible()
        expect(empty).to_contain_text("No session of this workspace has Memory proposals yet")
        expect(empty).to_contain_text("tht memory propose")
        root = demo_server.home / "sessions"
        expect(page.get_by_test_id("sessions-root")).to_have_text(str(root))
        assert root.is_dir()
        page.screenshot(path=str(screenshots / f"first-visit-demo-review-{width}.png"))

        # the link of the line `tht serve` printed is spent: a second visit says so
        other = context.browser.new_context(viewport={"width": width, "height": 900})
        spent = other.new_page()
        spent.goto(demo_server.login_url)
        expect(spent).to_have_url(re.compile(r"/login\?link=spent$"))
        notice = spent.get_by_test_id("login-link-spent")
        expect(notice).to_contain_text("This login link was already used or has expired")
        expect(notice).to_contain_text("$THT_HOME/admin-token")
        expect(spent.get_by_test_id("token-hint")).to_contain_text("$THT_HOME/admin-token")
        expect(spent.get_by_test_id("token-hint")).not_to_contain_text("printed by")
        spent.screenshot(
            path=str(screenshots / f"first-visit-spent-link-{width}.png"), full_page=True
        )
        other.close()
        assert not problems, problems
    finally:
        context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_server_without_sessions_root_says_how_to_name_one(
    server: Server, chromium, screenshots, width
):
    from playwright.sync_api import expect

    from tests.browser.conftest import PASSWORD, USER, WORKSPACE

    context, page, problems = _page(chromium, width)
    try:
        page.goto(server.url + "login")
        expect(page.get_by_test_id("login-link-spent")).to_have_count(0)
        page.get_by_label("User name").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in", exact=True).click()
        expect(page).to_have_url(re.compile(r"/admin/memory$"))
        page.goto(server.url + f"admin/review?workspace={WORKSPACE}")
        _review_is_ready(page)
        missing = page.get_by_test_id("no-sessions-root")
        expect(missing).to_be_visible()
        expect(missing).to_contain_text("This server reads no agent sessions")
        expect(missing).to_contain_text("sessions_root: /path/to/sessions")
        expect(missing).to_contain_text("tht serve -c")
        expect(page.get_by_test_id("sessions-empty")).to_be_visible()
        expect(page.get_by_test_id("sessions-root")).to_have_count(0)
        page.screenshot(
            path=str(screenshots / f"first-visit-no-sessions-root-{width}.png"), full_page=True
        )
        assert not problems, problems
    finally:
        context.close()
