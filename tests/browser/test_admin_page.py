"""Administration → Memory management in a real browser (Debian's Chromium), against
the real `tht serve` on a test database. Each step is asserted and leaves a screenshot
in test-output/screenshots/NN-name.png (a failing test: failure-<test>.png).

One server and one logged-in browser context serve the module's tests, which run in
file order. Each test opens its own page at the view the URL names (workspace, filters,
page, card) and logs in if no test did, so that one failing test does not hide the
others. What the archive keeps flows on: the card the create test makes is the one the
next tests edit, conflict on, see pending and delete, and the counts after the outage
test count the seed card it deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import (
    FOREIGN_WORKSPACE,
    OTHER_WORKSPACE,
    PASSWORD,
    SCREENSHOTS,
    SEED_COUNT,
    SERVER_CONFIG,
    USER,
    WORDS,
    WORKSPACE,
    IndexBlocker,
    Server,
    _seed,
    _server_env,
    running_server,
)


@pytest.fixture(scope="module")
def admin_server(module_database, tmp_path_factory) -> Iterator[Server]:
    tmp_path = tmp_path_factory.mktemp("admin-page")
    home = tmp_path / "home"
    home.mkdir()
    env = _server_env(module_database, home)
    cards = _seed(env)
    with running_server(env, SERVER_CONFIG, tmp_path, home, cards) as running:
        yield running
        IndexBlocker(running).release()


class Scenario:
    """What the module's tests share: the server, the browser context (its session
    cookie once a test logged in), the screenshots' numbering, the card created."""

    def __init__(self, server: Server, context: Any, screenshots: Path) -> None:
        self.server = server
        self.context = context
        self.screenshots = screenshots
        self.shots = 0
        self.card_id: str | None = None


@pytest.fixture(scope="module")
def scenario(admin_server, chromium) -> Iterator[Scenario]:
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    try:
        yield Scenario(admin_server, context, SCREENSHOTS)
    finally:
        context.close()


class MemoryPage:
    """One test's page in the module's browser context, with the locators and helpers
    of the Memory management page; ``problems``: page errors, dialogs and CSP
    violations seen."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.server = scenario.server
        self.page = page = scenario.context.new_page()
        page.set_default_timeout(15_000)
        self.problems: list[str] = []
        problems = self.problems
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on(
            "dialog",
            lambda dialog: (
                problems.append(f"unexpected dialog: {dialog.message}"),
                dialog.dismiss(),
            ),
        )
        page.on(
            "console",
            lambda message: (
                problems.append(f"console: {message.text}")
                if message.type == "error" and "Content Security Policy" in message.text
                else None
            ),
        )
        self.count = page.get_by_test_id("result-count")
        self.page_info = page.get_by_test_id("page-info")
        self.rows = page.get_by_test_id("card-row")
        self.feedback = page.get_by_test_id("feedback")
        self.detail_title = page.get_by_test_id("detail-title")
        self.revision = page.get_by_test_id("detail-revision")
        self.pending_items = page.get_by_test_id("pending-item")

    def shot(self, name: str) -> None:
        self.scenario.shots += 1
        path = self.scenario.screenshots / f"{self.scenario.shots:02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=False)

    def ready(self, name: str) -> None:
        """The page's script has attached its behaviour (it is deferred)."""
        from playwright.sync_api import expect

        expect(self.page.locator(f'[data-page="{name}"][data-ready="true"]')).to_have_count(1)

    def row_titles(self) -> list[str]:
        return [
            t.strip()
            for t in self.page.locator('[data-testid="card-row"] a.card-link').all_text_contents()
        ]

    def logged_in(self) -> bool:
        return any(c["name"] == "tht_session" for c in self.scenario.context.cookies())

    def log_in(self) -> None:
        """The login form, for a test after a login test that failed."""
        self.page.goto(self.server.url + "login")
        self.ready("login")
        self.page.get_by_label("User name").fill(USER)
        self.page.get_by_label("Password").fill(PASSWORD)
        self.page.get_by_role("button", name="Log in", exact=True).click()
        self.page.wait_for_url(re.compile(r"/admin/memory"))

    def open(self, query: str) -> None:
        """Memory management at the view ``query`` names, once it is shown."""
        from playwright.sync_api import expect

        self.page.goto(self.server.url + "admin/memory" + query)
        self.ready("memory")
        if "workspace=" in query:
            expect(self.count).to_have_text(re.compile(r"\d+ cards?"))
        if "card=" in query:
            expect(self.page.get_by_test_id("card-detail")).to_be_visible()

    def created_card(self) -> str:
        if self.scenario.card_id is None:
            pytest.fail("the card this test works on is made by the create test, which failed")
        return self.scenario.card_id


def _memory_page(scenario: Scenario, request: pytest.FixtureRequest) -> Iterator[MemoryPage]:
    ui = MemoryPage(scenario)
    failed = request.session.testsfailed
    try:
        yield ui
    finally:
        if request.session.testsfailed > failed:
            name = f"failure-{request.node.name}.png"
            ui.page.screenshot(path=str(scenario.screenshots / name), full_page=True)
            print(scenario.server.stderr_tail())
        ui.page.close()


@pytest.fixture
def login_ui(scenario, request) -> Iterator[MemoryPage]:
    """A page of the module's context as it is: logged out before the login test."""
    yield from _memory_page(scenario, request)


@pytest.fixture
def ui(scenario, request) -> Iterator[MemoryPage]:
    """A page of the module's context, logged in."""
    for ui in _memory_page(scenario, request):
        if not ui.logged_in():
            ui.log_in()
        yield ui


def test_login_refuses_a_wrong_password_then_shows_the_administered_workspaces(login_ui) -> None:
    """The login form, the navigation, and only the workspaces the user administers."""
    from playwright.sync_api import expect

    ui = login_ui
    page = ui.page
    ready = ui.ready
    shot = ui.shot
    server = ui.server
    # --- login ------------------------------------------------------------------
    page.goto(server.url + "admin/memory")
    expect(page).to_have_url(re.compile(r"/login"))
    ready("login")
    page.get_by_label("User name").fill(USER)
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page.get_by_test_id("login-error")).to_be_visible()
    expect(page.get_by_test_id("login-error")).to_contain_text("Log in failed")
    shot("login-error")

    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page).to_have_url(re.compile(r"/admin/memory$"))
    ready("memory")
    expect(page.get_by_role("heading", name="Memory management", level=1)).to_be_visible()
    expect(page.get_by_test_id("current-user")).to_contain_text(USER)
    # Administration: Catalog, immediately followed by Memory management
    nav = page.get_by_role("navigation", name="Main").get_by_role("link")
    expect(nav).to_have_text(
        ["Catalog", "Memory management", "Memory review", "Recall quality", "Accounts"]
    )
    expect(page.locator("#nav-memory")).to_have_attribute("aria-current", "page")
    # explicit choice, and only the workspaces the user administers
    options = page.locator("#workspace-select option")
    expect(options).to_have_count(3)
    assert [o.get_attribute("value") for o in options.all()] == ["", WORKSPACE, OTHER_WORKSPACE]
    assert page.locator(f'#workspace-select option[value="{FOREIGN_WORKSPACE}"]').count() == 0
    expect(page.locator("#workspace-content")).to_be_hidden()
    shot("logged-in")
    assert ui.problems == [], ui.problems


def test_the_catalog_page_lists_the_workspaces_and_how_to_bind_one(ui) -> None:
    """The Catalog page: the workspaces, and the command that binds one to a DWH."""
    from playwright.sync_api import expect

    page = ui.page
    ready = ui.ready
    shot = ui.shot
    ui.open("")
    # --- the Catalog page -----------------------------------------------------------
    page.get_by_role("link", name="Catalog", exact=True).click()
    expect(page.get_by_role("heading", name="Catalog", level=1, exact=True)).to_be_visible()
    expect(page.get_by_test_id("catalog-note")).to_contain_text("their DWH bindings and sync runs")
    ws_rows = page.locator('[data-testid="workspace-table"] tbody tr')
    expect(ws_rows).to_have_count(2)
    expect(ws_rows.nth(0)).to_contain_text(WORKSPACE)
    expect(ws_rows.nth(0)).to_contain_text("Acme sales")
    expect(ws_rows.nth(1)).to_contain_text("it")
    # a workspace without a DWH binding says how to make one, the command as code
    unbound = page.get_by_test_id("no-binding").first
    expect(unbound.locator("code")).to_have_text(
        "tht catalog bind -c runtime.yaml --connection NAME"
    )
    expect(unbound).not_to_contain_text("`")
    shot("catalog")
    page.get_by_role("link", name="Memory management").click()
    expect(page).to_have_url(re.compile(r"/admin/memory"))
    ready("memory")
    assert ui.problems == [], ui.problems


def test_a_workspace_is_chosen_and_paginated(ui) -> None:
    """The chosen workspace's cards, page by page, pages never overlapping."""
    from playwright.sync_api import expect

    page = ui.page
    count = ui.count
    page_info = ui.page_info
    rows = ui.rows
    row_titles = ui.row_titles
    shot = ui.shot
    ui.open("")
    # --- workspace, pagination ------------------------------------------------------
    page.get_by_label("Workspace").select_option(WORKSPACE)
    expect(count).to_have_text(f"{SEED_COUNT} cards")
    expect(rows).to_have_count(20)
    expect(page_info).to_have_text(re.compile(r"^Page 1 of 2"))
    expect(page.get_by_test_id("pending-count")).to_contain_text("No pending index updates")
    page.get_by_label("Per page").select_option("10")
    expect(page_info).to_have_text(re.compile(r"^Page 1 of 3 \(cards 1–10\)"))
    expect(rows).to_have_count(10)
    first_page = row_titles()
    page.get_by_role("button", name="Next").click()
    expect(page_info).to_have_text(re.compile(r"^Page 2 of 3 \(cards 11–20\)"))
    second_page = row_titles()
    assert len(second_page) == 10 and not set(first_page) & set(second_page)
    page.get_by_role("button", name="Last").click()
    expect(page_info).to_have_text(re.compile(r"^Page 3 of 3"))
    assert not set(row_titles()) & (set(first_page) | set(second_page))
    expect(page.get_by_role("button", name="Next")).to_be_disabled()
    shot("paginated")
    assert ui.problems == [], ui.problems


def test_sorting_is_stable_by_title_both_ways(ui) -> None:
    """Sorted by title, ascending then descending."""
    from playwright.sync_api import expect

    page = ui.page
    page_info = ui.page_info
    rows = ui.rows
    row_titles = ui.row_titles
    shot = ui.shot
    ui.open(f"?workspace={WORKSPACE}&page_size=10&page=3")  # where the pagination test ends
    # --- sorting (stable: title ascending, then descending) -------------------------
    page.get_by_label("Sort by").select_option("title")
    page.get_by_label("Order").select_option("asc")
    expect(page_info).to_have_text(re.compile(r"^Page 1 of 3"))
    expect(rows.first).to_contain_text(f"Card 00 {WORDS[0]}")
    assert row_titles() == [f"Card {i:02d} {WORDS[i]}" for i in range(10)]
    page.get_by_label("Order").select_option("desc")
    expect(rows.first).to_contain_text(f"Card 29 {WORDS[29]}")
    shot("sorted")
    assert ui.problems == [], ui.problems


def test_combined_filters_apply_before_pagination(ui) -> None:
    """Family, table, concepts, origin and database filters together, then reset."""
    from playwright.sync_api import expect

    page = ui.page
    count = ui.count
    page_info = ui.page_info
    rows = ui.rows
    row_titles = ui.row_titles
    shot = ui.shot
    ui.open(
        f"?workspace={WORKSPACE}&page_size=10&sort=title&order=desc"
    )  # where the sorting test ends
    # --- combined filters, applied before pagination ---------------------------------
    page.locator("#filter-details summary").click()
    page.get_by_label("SQL rule").check()
    page.get_by_test_id("filters-apply").click()
    expect(count).to_have_text("8 cards")  # i % 4 == 1
    expect(page_info).to_have_text(re.compile(r"^Page 1 of 1"))
    page.get_by_role("textbox", name="Table", exact=True).fill("orders")
    page.get_by_role("textbox", name="Concepts", exact=True).fill("churn")
    page.get_by_label("Origin").select_option("manual")
    page.get_by_role("textbox", name="Database", exact=True).fill("dwh")
    page.get_by_test_id("filters-apply").click()
    expect(count).to_have_text("2 cards")  # i in (9, 21): sql rules on orders, odd i
    assert row_titles() == [f"Card 21 {WORDS[21]}", f"Card 09 {WORDS[9]}"]
    expect(page.get_by_test_id("filter-summary")).to_have_text("(5 active)")
    page.get_by_role("textbox", name="Column", exact=True).fill("nothing_here")
    page.get_by_test_id("filters-apply").click()
    expect(count).to_have_text(re.compile(r"^0 cards match"))
    expect(rows).to_have_count(0)
    page.get_by_role("textbox", name="Column", exact=True).fill("")
    page.get_by_label("Updated to").fill("2000-01-01")
    page.get_by_test_id("filters-apply").click()
    expect(count).to_have_text(re.compile(r"^0 cards"))
    shot("filtered")
    page.get_by_test_id("filters-reset").click()
    expect(count).to_have_text(f"{SEED_COUNT} cards")
    expect(page_info).to_have_text(re.compile(r"^Page 1 of 2"))
    assert ui.problems == [], ui.problems


def test_the_editor_refuses_an_incomplete_or_invalid_card(ui) -> None:
    """Only the family's fields, the required ones marked; an empty form is refused next
    to it without a request, and the server's refusal is shown beside the field."""
    from playwright.sync_api import expect

    page = ui.page
    count = ui.count
    ui.open(f"?workspace={WORKSPACE}")
    # --- create a card with a dependency and a link -----------------------------------
    page.get_by_test_id("new-card").click()
    editor = page.get_by_test_id("card-editor")
    expect(editor).to_be_visible()
    expect(page.locator("#edit-family")).to_be_focused()
    page.get_by_label("Family").select_option("sql_rule")
    # only the family's fields, required ones marked
    expect(page.get_by_role("textbox", name="Rule", exact=True)).to_be_visible()
    expect(page.locator('#family-fields [data-field="question"]')).to_be_hidden()
    for name, required in (
        ("content", True),
        ("scope", True),
        ("rationale", True),
        ("sql", False),
        ("context", False),
    ):
        box = page.locator(f'#family-fields [data-field="{name}"]')
        expect(box).to_be_visible()
        if required:
            expect(box.locator(".req")).to_be_visible()
        else:
            expect(box.locator(".req")).to_be_hidden()
    page.get_by_test_id(
        "save-card"
    ).click()  # nothing filled: refused next to the form, nothing sent
    errors = page.get_by_test_id("editor-errors")
    expect(errors).to_contain_text("Title is required")
    expect(errors).to_contain_text("Rule is required")
    page.get_by_role("textbox", name="Title", exact=True).fill("Net revenue excludes refunds")
    page.get_by_role("textbox", name="Rule", exact=True).fill(
        "Subtract\u0001refunds"
    )  # the API refuses it
    page.get_by_role("textbox", name="Scope", exact=True).fill("Finance reports")
    page.get_by_role("textbox", name="Rationale", exact=True).fill("Finance reports net figures.")
    page.get_by_test_id("save-card").click()
    expect(errors).to_contain_text("the server refused the card")
    expect(errors).to_contain_text("Rule: must be text with a visible character")
    expect(page.get_by_role("textbox", name="Rule", exact=True)).to_have_attribute(
        "aria-invalid", "true"
    )
    expect(count).to_have_text(f"{SEED_COUNT} cards")  # nothing was created
    assert ui.problems == [], ui.problems


def test_a_card_is_created_with_a_dependency_and_a_link(ui) -> None:
    """The created card shows its dependencies and its link, concepts as text, and the
    linked card the incoming link."""
    from playwright.sync_api import expect

    page = ui.page
    count = ui.count
    feedback = ui.feedback
    detail_title = ui.detail_title
    revision = ui.revision
    seed = ui.server.cards
    shot = ui.shot
    ui.open(f"?workspace={WORKSPACE}")
    # the form as the editor's refusals left it: family and title chosen
    page.get_by_test_id("new-card").click()
    page.get_by_label("Family").select_option("sql_rule")
    page.get_by_role("textbox", name="Title", exact=True).fill("Net revenue excludes refunds")
    page.get_by_role("textbox", name="Rule", exact=True).fill(
        "Subtract refunds from gross revenue."
    )
    page.get_by_role("textbox", name="Scope", exact=True).fill("Finance reports")
    page.get_by_role("textbox", name="Rationale", exact=True).fill("Finance reports net figures.")
    page.get_by_test_id("concept-input").fill("revenue, refunds, temporary, <b>gross</b>")
    page.get_by_test_id("concept-input").press("Enter")
    chips = page.get_by_test_id("concept-chips").locator("li")
    expect(chips).to_have_count(4)
    page.get_by_role("button", name="Remove concept temporary").click()
    expect(chips).to_have_count(3)
    expect(chips.nth(0)).to_contain_text("revenue")
    expect(chips.nth(1)).to_contain_text("refunds")
    expect(chips.nth(2)).to_contain_text("<b>gross</b>")  # data is text, never markup
    page.get_by_test_id("dep-add").click()
    page.get_by_label("Database, dependency 1").fill("dwh")
    page.get_by_label("Schema, dependency 1").fill("sales")
    page.get_by_label("Table, dependency 1").fill("orders")
    page.get_by_label("Column, dependency 1").fill("refund_amount")
    page.get_by_test_id("dep-add").click()
    page.get_by_label("Database, dependency 2").fill("finance")  # a whole-database dependency
    page.get_by_test_id("dep-add").click()  # an empty row is ignored
    page.get_by_test_id("dep-add").click()
    page.get_by_role("button", name="Remove dependency 4").click()
    expect(page.get_by_test_id("dep-row")).to_have_count(3)
    page.get_by_test_id("link-search-input").fill(WORDS[5])  # text search: "Card 05 foxtrot"
    page.get_by_test_id("link-search-button").click()
    results = page.get_by_test_id("link-result")
    expect(results).to_have_count(1)
    expect(results.first).to_contain_text(f"Card 05 {WORDS[5]}")
    page.get_by_role("button", name=f"Link to Card 05 {WORDS[5]}").click()
    expect(page.get_by_test_id("link-row")).to_have_count(1)
    expect(page.get_by_test_id("link-meaning")).to_be_focused()
    page.get_by_test_id("link-meaning").fill("refines")
    shot("create-form")
    page.get_by_test_id("save-card").click()
    expect(feedback).to_have_attribute("data-status", "saved")
    expect(feedback).to_have_text("Saved (new card)")
    expect(detail_title).to_have_text("Net revenue excludes refunds")
    expect(revision).to_have_text("1")
    new_id = page.locator('[data-detail="id"] code').inner_text().strip()
    assert re.fullmatch(r"mem-[0-9a-f-]{36}", new_id)
    ui.scenario.card_id = new_id  # saved: the next tests work on it, whatever follows here
    dependencies = page.get_by_test_id("detail-dependencies").locator("tbody tr")
    expect(dependencies).to_have_count(2)
    expect(dependencies.filter(has_text="refund_amount")).to_have_text(
        re.compile(r"dwh\s*sales\s*orders\s*refund_amount")
    )
    expect(dependencies.filter(has_text="finance")).to_have_text(re.compile(r"finance\s*—\s*—\s*—"))
    links = page.get_by_test_id("detail-links").locator("li")
    expect(links).to_have_count(1)
    expect(links.first).to_contain_text("refines")
    expect(links.first).to_contain_text(f"Card 05 {WORDS[5]}")
    expect(links.first).to_contain_text(seed[5])
    expect(page.locator('[data-detail="origin"]')).to_have_text("Manual")
    expect(page.locator('[data-detail="source"]')).to_contain_text("created manually")
    expect(page.locator('[data-detail="concepts"] li')).to_have_text(
        ["revenue", "refunds", "<b>gross</b>"]
    )
    assert page.locator('[data-detail="concepts"] b').count() == 0
    expect(page.get_by_test_id("detail-index")).to_contain_text("Current")
    expect(count).to_have_text(f"{SEED_COUNT + 1} cards")
    shot("created")

    # the other card shows the incoming link, with title and meaning
    links.first.get_by_role("link").click()
    expect(detail_title).to_have_text(f"Card 05 {WORDS[5]}")
    incoming = page.get_by_test_id("detail-incoming").locator("li")
    expect(incoming).to_have_count(1)
    expect(incoming.first).to_contain_text("Net revenue excludes refunds")
    expect(incoming.first).to_contain_text("refines")
    shot("incoming-link")
    incoming.first.get_by_role("link").click()
    expect(detail_title).to_have_text("Net revenue excludes refunds")
    assert ui.problems == [], ui.problems


def test_an_edit_cancelled_sends_nothing(ui) -> None:
    """Cancelling an edit discards it without a request; a reload shows the card unchanged."""
    from playwright.sync_api import expect

    page = ui.page
    feedback = ui.feedback
    detail_title = ui.detail_title
    revision = ui.revision
    ready = ui.ready
    shot = ui.shot
    new_id = ui.created_card()
    ui.open(f"?workspace={WORKSPACE}&card={new_id}")
    # --- edit, then cancel: nothing is sent ------------------------------------------
    page.get_by_test_id("edit-card").click()
    expect(page.get_by_role("textbox", name="Title", exact=True)).to_be_focused()
    page.get_by_role("textbox", name="Title", exact=True).fill("Changed but cancelled")
    page.get_by_role("textbox", name="Rule", exact=True).fill("This text must not be saved.")
    requests: list[str] = []

    def record(request) -> None:
        requests.append(f"{request.method} {request.url}")

    page.on("request", record)
    page.get_by_test_id("cancel-edit").click()
    expect(feedback).to_contain_text("Changes discarded")
    expect(detail_title).to_have_text("Net revenue excludes refunds")
    page.remove_listener("request", record)
    assert requests == [], requests  # cancelling sends nothing, not even a read
    page.reload()  # the URL keeps the workspace and the card
    ready("memory")
    expect(detail_title).to_have_text("Net revenue excludes refunds")
    expect(revision).to_have_text("1")
    expect(page.locator('[data-detail="content"]')).to_have_text(
        "Subtract refunds from gross revenue."
    )
    shot("edit-cancelled")
    assert ui.problems == [], ui.problems


def test_an_edit_is_saved_with_its_dependencies_and_links(ui) -> None:
    """A saved edit raises the revision and keeps what the form did not change."""
    from playwright.sync_api import expect

    page = ui.page
    feedback = ui.feedback
    revision = ui.revision
    shot = ui.shot
    new_id = ui.created_card()
    ui.open(f"?workspace={WORKSPACE}&card={new_id}")
    # --- edit and save ----------------------------------------------------------------
    page.get_by_test_id("edit-card").click()
    page.get_by_role("textbox", name="Rule", exact=True).fill(
        "Subtract refunds and chargebacks from gross revenue."
    )
    page.get_by_test_id("save-card").click()
    expect(feedback).to_have_attribute("data-status", "saved")
    expect(feedback).to_have_text("Saved")
    expect(revision).to_have_text("2")
    expect(page.locator('[data-detail="content"]')).to_have_text(
        "Subtract refunds and chargebacks from gross revenue."
    )
    # the dependency and the link were kept by the form
    expect(page.get_by_test_id("detail-dependencies").locator("tbody tr")).to_have_count(2)
    expect(page.get_by_test_id("detail-links").locator("li")).to_have_count(1)
    shot("saved")
    assert ui.problems == [], ui.problems


def test_a_conflicting_change_is_shown_next_to_the_form(ui) -> None:
    """A save over another administrator's change is refused next to the form; reload shows it."""
    from playwright.sync_api import expect

    page = ui.page
    revision = ui.revision
    shot = ui.shot
    server = ui.server
    errors = page.get_by_test_id("editor-errors")
    new_id = ui.created_card()
    ui.open(f"?workspace={WORKSPACE}&card={new_id}")
    # --- a conflicting change is shown next to the form ---------------------------------
    page.get_by_test_id("edit-card").click()
    page.get_by_role("textbox", name="Scope", exact=True).fill("Finance and controlling")
    current = server.api("GET", f"/api/workspaces/{WORKSPACE}/memory/{new_id}")
    body = {
        k: current[k]
        for k in (
            "family",
            "title",
            "content",
            "scope",
            "rationale",
            "sql",
            "context",
            "concepts",
            "dependencies",
            "revision",
        )
        if current[k] is not None
    }
    body["links"] = [
        {"target": link["target"], "meaning": link["meaning"]} for link in current["links"]
    ]
    body["scope"] = "Changed elsewhere"
    server.api("PUT", f"/api/workspaces/{WORKSPACE}/memory/{new_id}", body)  # another administrator
    page.get_by_test_id("save-card").click()
    expect(errors).to_be_visible()
    expect(errors).to_contain_text("someone changed this card")
    expect(errors).to_contain_text("revision 3")
    shot("conflict")
    page.get_by_test_id("reload-card").click()
    expect(revision).to_have_text("3")
    expect(page.locator('[data-detail="scope"]')).to_have_text("Changed elsewhere")
    assert ui.problems == [], ui.problems


def test_an_index_outage_leaves_pending_work_that_a_retry_completes(ui) -> None:
    """With the index down a save and a deletion are kept and listed as pending; a retry while
    it is down says so, and once it is back the retries empty the list."""
    from playwright.sync_api import expect

    page = ui.page
    count = ui.count
    rows = ui.rows
    feedback = ui.feedback
    detail_title = ui.detail_title
    revision = ui.revision
    pending_items = ui.pending_items
    seed = ui.server.cards
    shot = ui.shot
    server = ui.server
    new_id = ui.created_card()
    ui.open(f"?workspace={WORKSPACE}&card={new_id}")
    # --- index down: saved, index update incomplete ------------------------------------
    blocker = IndexBlocker(server).__enter__()  # the server sees its index down
    page.get_by_test_id("edit-card").click()
    page.get_by_role("textbox", name="Scope", exact=True).fill("Finance and controlling")
    page.get_by_test_id("save-card").click()
    expect(feedback).to_have_attribute("data-status", "incomplete")
    expect(feedback).to_contain_text("Saved — index update incomplete")
    expect(feedback).to_contain_text("Index error:")
    expect(revision).to_have_text("4")
    expect(page.locator('[data-detail="scope"]')).to_have_text("Finance and controlling")
    expect(page.get_by_test_id("detail-index")).to_contain_text("Index update pending")
    pending_new = page.locator(f'[data-testid="pending-item"][data-card-id="{new_id}"]')
    expect(pending_new).to_have_count(1)
    expect(pending_new).to_contain_text("Net revenue excludes refunds")
    # a deletion while the index is down: pending cleanup of a deleted card
    page.get_by_label("Search text or ID").fill(seed[7])
    page.get_by_label("Search text or ID").press("Enter")
    expect(count).to_have_text("1 card")
    rows.first.get_by_role("link").click()
    expect(detail_title).to_have_text(f"Card 07 {WORDS[7]}")
    page.get_by_test_id("delete-card").click()
    page.get_by_test_id("confirm-delete").click()
    expect(feedback).to_have_attribute("data-status", "incomplete")
    expect(feedback).to_contain_text(f"Deleted “Card 07 {WORDS[7]}” — index update incomplete")
    pending_deleted = page.locator(f'[data-testid="pending-item"][data-card-id="{seed[7]}"]')
    expect(pending_deleted).to_contain_text("deleted card")
    expect(pending_deleted).to_contain_text(seed[7])
    expect(pending_items).to_have_count(2)
    expect(page.get_by_test_id("pending-jump")).to_contain_text("2 pending index updates")
    expect(count).to_have_text(re.compile(r"^0 cards"))
    page.get_by_label("Search text or ID").fill("")
    page.get_by_label("Search text or ID").press("Enter")
    expect(count).to_have_text(f"{SEED_COUNT} cards")
    page.get_by_test_id("pending-section").scroll_into_view_if_needed()
    shot("index-incomplete")
    # a retry while the index is still down (HTTP 503 index_unavailable): said so
    pending_new.get_by_test_id("pending-retry").click()
    expect(page.get_by_test_id("pending-feedback")).to_contain_text(
        "Index update still incomplete for “Net revenue excludes refunds”"
    )
    expect(page.get_by_test_id("pending-feedback")).to_contain_text("Index error:")
    expect(pending_items).to_have_count(2)

    # --- index back: retry empties the pending list ------------------------------------
    blocker.release()
    pending_new.get_by_test_id("pending-retry").click()
    expect(page.get_by_test_id("pending-feedback")).to_contain_text(
        "Index updated for “Net revenue excludes refunds”"
    )
    expect(pending_new).to_have_count(0)
    expect(pending_items).to_have_count(1)
    pending_deleted.get_by_test_id("pending-retry").click()
    expect(page.get_by_test_id("pending-feedback")).to_contain_text(
        f"Index updated for {seed[7]} (deleted card)"
    )
    expect(pending_items).to_have_count(0)
    expect(page.get_by_test_id("pending-count")).to_contain_text("No pending index updates")
    expect(page.get_by_test_id("pending-jump")).to_be_hidden()
    expect(feedback).to_have_attribute("data-status", "saved")  # the deletion's warning is resolved
    shot("retried")
    assert ui.problems == [], ui.problems


def test_a_deletion_asks_for_confirmation(ui) -> None:
    """Escape keeps the card; the confirmed deletion removes it and its incident link."""
    from playwright.sync_api import expect

    page = ui.page
    count = ui.count
    rows = ui.rows
    feedback = ui.feedback
    detail_title = ui.detail_title
    seed = ui.server.cards
    shot = ui.shot
    new_id = ui.created_card()
    ui.open(f"?workspace={WORKSPACE}")
    # --- delete with confirmation (keyboard: Escape keeps the card) -----------------------
    page.locator(f'[data-testid="card-row"] a[data-card-id="{new_id}"]').click()
    expect(detail_title).to_have_text("Net revenue excludes refunds")
    expect(page.get_by_test_id("detail-index")).to_contain_text("Current")
    page.get_by_test_id("delete-card").click()
    confirm = page.get_by_test_id("delete-confirm")
    expect(confirm).to_be_visible()
    expect(confirm).to_contain_text("2 dependencies and 1 link")
    expect(page.get_by_test_id("cancel-delete")).to_be_focused()
    page.keyboard.press("Escape")
    expect(confirm).to_be_hidden()
    expect(page.get_by_test_id("delete-card")).to_be_focused()
    page.keyboard.press("Enter")  # opens the confirmation again
    expect(confirm).to_be_visible()
    shot("delete-confirm")
    page.get_by_test_id("confirm-delete").click()
    expect(feedback).to_have_attribute("data-status", "saved")
    expect(feedback).to_have_text("Deleted “Net revenue excludes refunds”")
    expect(page.get_by_test_id("card-detail")).to_be_hidden()
    expect(count).to_have_text(f"{SEED_COUNT - 1} cards")
    expect(page.locator(f'[data-testid="card-row"] a[data-card-id="{new_id}"]')).to_have_count(0)
    page.get_by_label("Search text or ID").fill(new_id)
    page.get_by_label("Search text or ID").press("Enter")
    expect(count).to_have_text(re.compile(r"^0 cards"))
    # its incident link is gone from the other card
    page.get_by_label("Search text or ID").fill(seed[5])
    page.get_by_label("Search text or ID").press("Enter")
    expect(count).to_have_text("1 card")
    rows.first.get_by_role("link").click()
    expect(detail_title).to_have_text(f"Card 05 {WORDS[5]}")
    expect(page.get_by_test_id("detail-incoming")).to_have_count(0)
    expect(page.get_by_test_id("card-detail")).to_contain_text("No incoming links.")
    shot("deleted")
    assert ui.problems == [], ui.problems


def test_a_narrow_window_is_usable_with_the_keyboard(ui) -> None:
    """At 420 px nothing overflows, and the list and the detail work with the keyboard."""
    from playwright.sync_api import expect

    page = ui.page
    count = ui.count
    rows = ui.rows
    detail_title = ui.detail_title
    ready = ui.ready
    shot = ui.shot
    server = ui.server
    # --- narrow window, keyboard ----------------------------------------------------------
    page.set_viewport_size({"width": 420, "height": 800})
    page.goto(server.url + f"admin/memory?workspace={WORKSPACE}")
    ready("memory")
    expect(count).to_have_text(f"{SEED_COUNT - 1} cards")
    expect(rows).to_have_count(20)
    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= 420, f"horizontal overflow at 420 px: scrollWidth {width}"
    shot("narrow-list")
    page.get_by_label("Workspace").focus()
    for _ in range(5):  # Workspace → New card → search box
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "filter-q":
            break
    expect(page.get_by_label("Search text or ID")).to_be_focused()
    page.keyboard.type(WORDS[11])
    page.keyboard.press("Enter")
    expect(count).to_have_text("1 card")
    expect(rows.first).to_contain_text(f"Card 11 {WORDS[11]}")
    rows.first.get_by_role("link").focus()
    page.keyboard.press("Enter")
    expect(detail_title).to_have_text(f"Card 11 {WORDS[11]}")
    expect(detail_title).to_be_focused()
    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= 420, f"horizontal overflow of the detail at 420 px: scrollWidth {width}"
    shot("narrow-keyboard")
    assert ui.problems == [], ui.problems


def test_logout_ends_the_session(ui) -> None:
    """After logging out the pages ask for a login again."""
    from playwright.sync_api import expect

    page = ui.page
    ready = ui.ready
    shot = ui.shot
    server = ui.server
    ui.open(f"?workspace={WORKSPACE}")
    # --- logout ---------------------------------------------------------------------------
    page.get_by_test_id("logout").click()
    expect(page).to_have_url(re.compile(r"/login$"))
    ready("login")
    page.goto(server.url + "admin/memory")
    expect(page).to_have_url(re.compile(r"/login"))
    shot("logged-out")
    assert ui.problems == [], ui.problems
