"""Every page at a laptop's width (1280 px) and a phone's (390 px), in Debian's Chromium
against the real `tht serve`: nothing wider than the window, the reviewer's summary
readable (its dependency changes as lists, not JSON), empty states before a choice, one
date format with its time zone, a visible "Saving…", a clear message for a workspace in
the URL that the user cannot open, and an inverted date range refused.

Screenshots go to test-output/screenshots/layout-<width>-NN-name.png.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.browser.conftest import (
    DWH_CONNECTIONS,
    FOREIGN_WORKSPACE,
    PASSWORD,
    SERVER_CONFIG,
    USER,
    WORKSPACE,
    _server_env,
    running_server,
)
from tests.integration.catalog_support import DWH_ENV, create_sqlite_dwh
from tests.integration.workflow_support import Session, add, decision, join_rule, solved, update

SESSION = "s-layout"
WIDTHS = (1280, 390)
DATE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$")
# a long unbroken value: the kind of text that pushed the summary past the window
LONG_SQL = (
    "SELECT movements.job_code, jobs.fiscal_year, sum(movements.amount_in_company_currency)"
    "_total_for_the_whole_fiscal_year_per_job_and_cost_centre FROM acc.movements"
)


def _seed(env: dict[str, str], root: Path) -> None:
    from tests.factories import installation_of
    from tht.bootstrap import build_services
    from tht.memory.model import parse_card_input

    services = build_services(
        env=env, installation=installation_of(sessions_root=root, dwh=DWH_CONNECTIONS)
    )
    from tht.catalog.model import Binding

    try:
        services.workspaces.create(WORKSPACE, "en", "Acme accounting")
        services.catalog.bind(Binding(WORKSPACE, "dwh", "main", DWH_ENV))
        services.workspaces.create(FOREIGN_WORKSPACE, "en", "Gamma (not mine)")
        services.accounts.users.create_user(USER, "admin", [WORKSPACE], password=PASSWORD)
        current = services.memory.create_card(
            WORKSPACE,
            parse_card_input(
                join_rule(
                    title="Job join",
                    content="Join movements and jobs on job_code.",
                    concepts=["job"],
                    dependencies=[
                        {
                            "database": "dwh",
                            "schema": "acc",
                            "table": "movements",
                            "column": "job_code",
                        },
                        {"database": "dwh", "schema": "acc", "table": "legacy_jobs"},
                    ],
                )
            ),
        ).card
        Session(root, WORKSPACE, SESSION).log(
            decision("d1", "sql_corrected", explanation="A job code repeats across fiscal years."),
            decision("d2", "concept_clarified", text="a commessa is a job"),
            decision("d3", "sql_approved", sql=solved()["sql"]),
        )
        services.proposals.propose(
            WORKSPACE,
            SESSION,
            {
                "proposals": [
                    update(
                        "fix",
                        ["d1"],
                        current.id,
                        1,
                        join_rule(
                            title="Job join",
                            sql=LONG_SQL,
                            concepts=["job", "fiscal year"],
                        ),
                        change="add fiscal_year to the join, drop the legacy table",
                    ),
                    add(
                        "job",
                        ["d2"],
                        {
                            "family": "domain_clarification",
                            "title": "Commessa",
                            "content": "A commessa is a job.",
                            "scope": "Accounting",
                        },
                    ),
                    add("q", ["d3"], solved()),
                ]
            },
        )
    finally:
        services.close()


@pytest.fixture
def layout_server(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "sessions"
    root.mkdir()
    env = _server_env(database, home)
    env[DWH_ENV] = create_sqlite_dwh(tmp_path / "dwh.sqlite")  # for a sync run with dates
    _seed(env, root)
    config = SERVER_CONFIG + f"sessions_root: {root}\n"
    with running_server(env, config, tmp_path, home) as server:
        server.api("POST", f"/api/workspaces/{WORKSPACE}/catalog/sync")
        yield server


@contextmanager
def held_requests(page, pattern: str, method: str | None = None) -> Iterator[Callable[[], None]]:
    """Requests to ``pattern`` wait until ``release()``: what the page shows meanwhile is
    what a user sees while the server works."""
    held: list = []

    def hold(route) -> None:
        if method is None or route.request.method == method:
            held.append(route)
        else:
            route.continue_()

    def release() -> None:
        for _ in range(200):
            if held:
                break
            page.wait_for_timeout(25)
        assert held, f"no request to {pattern} was made"
        for route in held:
            route.continue_()

    page.route(re.compile(pattern), hold)
    try:
        yield release
    finally:
        page.unroute(re.compile(pattern))


def _fits(page, width: int, where: str) -> None:
    scroll = page.evaluate("document.scrollingElement.scrollWidth")
    assert scroll <= width, f"{where}: the page is {scroll} px wide in a {width} px window"


def _menu_hugs_its_links(page, width: int) -> None:
    """Stacked on a phone, the menu is as tall as its links: a short page below it once
    stretched the menu row to half the screen, empty."""
    if width >= 760:
        return
    menu = page.locator(".sidenav").bounding_box()
    last = page.locator(".sidenav a").last.bounding_box()
    assert menu and last, "the menu is not rendered"
    empty = menu["y"] + menu["height"] - (last["y"] + last["height"])
    assert empty <= 32, f"{empty:.0f} px of empty menu under its last link"


def _inside(page, locator, width: int, what: str) -> None:
    box = locator.bounding_box()
    assert box is not None, f"{what} is not rendered"
    assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, f"{what} is clipped: {box}"


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_fits_and_says_what_it_waits_for(layout_server, chromium, screenshots, width):
    from playwright.sync_api import expect

    server = layout_server
    expect.set_options(timeout=15_000)
    context = chromium.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "console",
        lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None,
    )
    step = {"n": 0}

    def shot(name: str) -> None:
        step["n"] += 1
        page.screenshot(
            path=str(screenshots / f"layout-{width}-{step['n']:02d}-{name}.png"), full_page=True
        )

    try:
        page.goto(server.url + "login")
        _fits(page, width, "login")
        page.get_by_label("User name").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in", exact=True).click()
        expect(page).to_have_url(re.compile(r"/admin/memory$"))
        expect(page.locator('[data-page="memory"][data-ready="true"]')).to_have_count(1)
        expect(page.get_by_test_id("no-workspace")).to_be_visible()
        _fits(page, width, "memory, no workspace")
        _menu_hugs_its_links(page, width)

        # --- the reviewer's page: empty states before any choice --------------------------
        page.goto(server.url + "admin/review")
        expect(page.locator('#review-app[data-review-ready="true"]')).to_have_count(1)
        expect(page.get_by_test_id("sessions-placeholder")).to_be_visible()
        expect(page.get_by_test_id("summary-placeholder")).to_be_visible()
        _fits(page, width, "review, no workspace")
        shot("review-empty")
        page.get_by_test_id("review-workspace").select_option(WORKSPACE)
        expect(page.get_by_test_id("sessions-placeholder")).to_be_hidden()
        expect(page.get_by_test_id("summary-placeholder")).to_be_visible()
        page.locator(f'[data-session="{SESSION}"]').click()
        expect(page.get_by_test_id("review-item")).to_have_count(3)
        expect(page.get_by_test_id("summary-placeholder")).to_be_hidden()
        expect(page).to_have_url(re.compile(rf"workspace={WORKSPACE}&session={SESSION}$"))

        # --- the summary fits, the proposed side is visible, the diff is readable ---------
        _fits(page, width, "review summary")
        update_item = page.locator('[data-testid=review-item][data-proposal="fix"]')
        dependencies = update_item.locator(
            '[data-testid=change-row][data-change-field="dependencies"]'
        )
        expect(dependencies).to_have_count(1)
        expect(dependencies).not_to_contain_text("{")  # no JSON
        expect(dependencies.locator('li[data-change="removed"]')).to_have_text(
            ["dwh.acc.legacy_jobs"]
        )
        expect(dependencies.locator('li[data-change="added"]')).to_have_text(
            ["dwh.acc.jobs.job_code"]
        )
        expect(dependencies.locator('li[data-change="same"]')).to_have_text(
            ["dwh.acc.movements.job_code", "dwh.acc.movements.job_code"]
        )
        concepts = update_item.locator('[data-testid=change-row][data-change-field="concepts"]')
        expect(concepts.locator('li[data-change="added"]')).to_have_text(["fiscal year"])
        sql = update_item.locator('[data-testid=change-row][data-change-field="sql"] td').nth(1)
        expect(sql).to_contain_text("sum(movements")
        _inside(page, sql, width, "the proposed SQL")
        if width >= 1000:
            header = update_item.get_by_role("columnheader", name="Proposed")
            _inside(page, header, width, "the Proposed column")
        else:  # stacked: each value labelled
            expect(sql).to_have_attribute("data-label", "Proposed")
            # one word per line is what a squeezed column did: the text keeps its width
            box = page.get_by_test_id("field-job-content").bounding_box() or {}
            assert box.get("width", 0) >= width * 0.6, box
        update_item.scroll_into_view_if_needed()
        shot("review-summary")

        # --- saving: the button says so until the server answers --------------------------
        with held_requests(page, r"/review/sessions/.*/apply$") as release:
            page.get_by_test_id("apply-review").click()
            expect(page.get_by_test_id("apply-review")).to_have_text("Saving…")
            expect(page.get_by_test_id("apply-review")).to_have_class(re.compile("is-saving"))
            expect(page.get_by_test_id("summary")).to_have_attribute("aria-busy", "true")
            shot("review-saving")
            release()
        expect(page.get_by_test_id("review-result")).to_be_visible(timeout=30_000)
        expect(page.get_by_test_id("apply-review")).to_have_text("Apply selection")
        banner = page.get_by_test_id("reviewed-banner")
        expect(banner).to_contain_text(re.compile(r"at \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\."))
        _fits(page, width, "review result")
        shot("review-result")

        # --- a workspace in the URL that the user cannot open -----------------------------
        # (an admin is told which, and how to be made a member)
        for url, says in (
            (f"admin/review?workspace={FOREIGN_WORKSPACE}", "tht user grant"),
            ("admin/memory?workspace=no-such-workspace", "does not exist"),
        ):
            page.goto(server.url + url)
            problem = page.get_by_test_id("workspace-problem")
            expect(problem).to_be_visible()
            expect(problem).to_contain_text(says)
            _fits(page, width, url)
        expect(page.get_by_test_id("no-workspace")).to_be_visible()
        shot("memory-unknown-workspace")

        # --- Memory management: dates in one format, the range checked, saving shown ------
        page.goto(server.url + f"admin/memory?workspace={WORKSPACE}")
        expect(page.get_by_test_id("workspace-problem")).to_have_count(0)
        rows = page.locator("#card-rows tr")
        expect(rows.first).to_be_visible()
        _fits(page, width, "memory list")
        title = page.locator("#card-rows tr").first.locator("a.card-link")
        title.click()
        for field in ("created_at", "updated_at"):
            shown = page.locator(f'[data-detail="{field}"] time')
            expect(shown).to_have_text(DATE)
        _fits(page, width, "memory detail")
        page.get_by_test_id("edit-card").click()
        with held_requests(page, r"/memory/mem-[0-9a-f-]+$", method="PUT") as release:
            page.get_by_test_id("save-card").click()
            expect(page.get_by_test_id("save-card")).to_have_text("Saving…")
            shot("memory-saving")
            release()
        expect(page.get_by_test_id("feedback")).to_contain_text("Saved", timeout=30_000)

        details = page.locator("#filter-details")
        if not details.evaluate("d => d.open"):
            details.locator("summary").click()
        today = datetime.now(UTC).date()
        before, after = str(today - timedelta(days=30)), str(today + timedelta(days=30))
        page.locator("#filter-updated-from").fill(after)
        page.locator("#filter-updated-to").fill(before)
        page.locator("#filters").evaluate("f => f.requestSubmit()")
        error = page.get_by_test_id("filter-date-error")
        expect(error).to_be_visible()
        expect(error).to_contain_text("is after")
        expect(page.locator("#filter-updated-from")).to_have_attribute("aria-invalid", "true")
        _fits(page, width, "memory filters")
        shot("memory-date-range")
        page.locator("#filter-updated-from").fill(before)  # a range holding today's cards
        page.locator("#filter-updated-to").fill(after)
        page.locator("#filters").evaluate("f => f.requestSubmit()")
        expect(error).to_be_hidden()
        expect(rows.first).to_be_visible()

        # --- the Catalog page: its dates in the same format ----------------------------
        page.goto(server.url + "admin/databases")
        expect(page.get_by_test_id("workspace-table")).to_be_visible()
        started = page.get_by_test_id("run-row").first.locator('td[data-label="Started"]')
        expect(started).to_have_text(DATE)
        expect(page.get_by_test_id("binding-last-snapshot")).to_contain_text(
            re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC · ")
        )
        _fits(page, width, "databases")
        shot("databases")

        # --- the interactive API docs --------------------------------------------------------
        page.goto(server.url + "api/docs")
        expect(page.locator('#swagger-ui[data-ready="true"]')).to_have_count(1)
        expect(page.locator(".swagger-ui .title")).to_contain_text("Thoth Memory")
        expect(page.locator(".swagger-ui .btn.authorize")).to_be_visible()  # API tokens
        _fits(page, width, "api docs")
        shot("api-docs")
        assert not problems, problems
    finally:
        context.close()
