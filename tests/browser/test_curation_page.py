"""The Recall quality page in Debian's Chromium against the real `tht serve`: a curator
adds three cases from misses (cards recall leaves out: their dependencies lie outside
the workspace's bound database), runs the benchmark, fixes one card on the Memory
management page, runs again and sees the chart change; an agent's weak question shows
as a gap with a prefilled new card. Screenshots: test-output/screenshots/curation-NN-*.png."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest

from tests.browser.conftest import (
    DWH_CONNECTIONS,
    PASSWORD,
    SERVER_CONFIG,
    USER,
    WORKSPACE,
    _server_env,
    running_server,
)

# the cards the questions should find, their dependencies outside dwh.sales (the binding)
MISSED = {
    "carrier": ("Carrier codes", "Carriers are identified by three letter codes.", "carriers"),
    "fiscal": ("Fiscal calendar", "The fiscal year starts in April.", "calendar"),
    "shipped": ("Shipped order", "An order is shipped when all its lines are shipped.", "orders"),
}
QUESTIONS = {
    "carrier": "three letter carrier codes",
    "fiscal": "when does the fiscal year start",
    "shipped": "when is an order shipped",
}


def _seed(env: dict[str, str]) -> dict[str, str]:
    from tests.factories import installation_of
    from tht.bootstrap import build_services
    from tht.catalog.model import Binding
    from tht.memory.model import parse_card_input

    services = build_services(env=env, installation=installation_of(dwh=DWH_CONNECTIONS))
    try:
        services.workspaces.create(WORKSPACE, "en", "Acme sales")
        services.accounts.users.create_user(USER, "admin", [WORKSPACE], password=PASSWORD)
        services.catalog.bind(Binding(WORKSPACE, "dwh", "sales", "ACME_DWH_URL"))
        ids = {}
        for key, (title, content, table) in MISSED.items():
            document = {
                "family": "domain_clarification",
                "title": title,
                "content": content,
                "scope": "Operations",
                "dependencies": [{"database": "legacy", "schema": "ops", "table": table}],
            }
            ids[key] = services.memory.create_card(WORKSPACE, parse_card_input(document)).card.id
        services.memory.create_card(
            WORKSPACE,
            parse_card_input(
                {
                    "family": "domain_clarification",
                    "title": "Customer segment",
                    "content": "A customer's segment is set by the sales team.",
                    "scope": "Sales",
                    "dependencies": [{"database": "dwh", "schema": "sales", "table": "customers"}],
                }
            ),
        )
        return ids
    finally:
        services.close()


@pytest.fixture
def curation_server(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = _server_env(database, home)
    cards = _seed(env)
    with running_server(env, SERVER_CONFIG, tmp_path, home) as server:
        yield server, cards


def test_a_curator_adds_cases_from_misses_runs_fixes_a_card_and_sees_the_chart_change(
    curation_server, chromium, screenshots
):
    from playwright.sync_api import expect

    server, cards = curation_server
    expect.set_options(timeout=20_000)
    page = chromium.new_context(viewport={"width": 1280, "height": 1000}).new_page()
    page.set_default_timeout(20_000)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "console",
        lambda m: (
            problems.append(f"console: {m.text}")
            if m.type == "error" and "Content Security Policy" in m.text
            else None
        ),
    )
    step = {"n": 0}

    def shot(name: str) -> None:
        step["n"] += 1
        page.screenshot(
            path=str(screenshots / f"curation-{step['n']:02d}-{name}.png"), full_page=True
        )

    def loaded() -> None:
        expect(page.locator('#curation-app[data-loaded="true"]')).to_have_count(1)

    page.goto(server.url + "login")
    page.get_by_label("User name").fill(USER)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page).to_have_url(re.compile(r"/admin/memory$"))
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Recall quality").click()
    expect(page).to_have_url(re.compile(r"/admin/curation"))
    expect(page.locator("#nav-curation")).to_have_attribute("aria-current", "page")
    # the only workspace the curator manages is chosen for them
    loaded()
    expect(page.get_by_test_id("cases-empty")).to_be_visible()
    expect(page.get_by_test_id("run-benchmark")).to_be_disabled()

    # --- three cases, each from a miss ----------------------------------------------------
    for number, (key, question) in enumerate(QUESTIONS.items(), start=1):
        page.get_by_test_id("try-question").fill(question)
        page.get_by_test_id("try-submit").click()
        expect(page.get_by_test_id("find-input")).to_be_visible()
        # the card it should find is not among recall's results
        expect(page.locator(f'[data-testid=try-result][data-card="{cards[key]}"]')).to_have_count(0)
        page.get_by_test_id("find-input").fill(MISSED[key][0])
        page.get_by_test_id("find-button").click()
        page.locator(f'#find-results li[data-card="{cards[key]}"]').get_by_test_id(
            "find-pick"
        ).click()
        chosen = page.locator(f'[data-testid=chosen-card][data-card="{cards[key]}"]')
        expect(chosen).to_have_attribute("data-reason", "binding")
        expect(chosen.get_by_test_id("chosen-reason")).to_contain_text("missed")
        if key == "carrier":
            shot("miss-explained")
        page.get_by_test_id("add-case").click()
        expect(page.get_by_test_id("try-feedback")).to_contain_text(f"Case added: “{question}”")
        expect(page.get_by_test_id("case-count")).to_have_text(f"({number})")
    expect(page.get_by_test_id("case-count")).to_have_text("(3)")
    expect(page.get_by_test_id("case")).to_have_count(3)
    expect(page.get_by_test_id("case").first).to_contain_text("miss")

    # --- the first run: every case missed, for the binding --------------------------------
    page.get_by_test_id("run-benchmark").click()
    expect(page.get_by_test_id("run-row")).to_have_count(1)
    expect(page.get_by_test_id("run-r5").first).to_have_text("0.000")
    expect(page.get_by_test_id("miss")).to_have_count(3)
    expect(page.locator('[data-testid=miss-card][data-reason="binding"]')).to_have_count(3)
    expect(page.get_by_test_id("bench-chart-svg")).to_be_visible()
    shot("first-run")

    # --- the curator fixes the carrier card's dependency on Memory management ------------
    page.locator(f'[data-testid=miss-card][data-card="{cards["carrier"]}"] a').click()
    expect(page).to_have_url(re.compile(r"/admin/memory\?"))
    page.get_by_test_id("edit-card").click()
    page.get_by_label("Database, dependency 1").fill("dwh")
    page.get_by_label("Schema, dependency 1").fill("sales")
    page.get_by_test_id("save-card").click()
    expect(page.get_by_test_id("feedback")).to_have_attribute("data-status", "saved")

    # --- the second run: better, with the edit between the runs on the chart -------------
    page.goto(server.url + f"admin/curation?workspace={WORKSPACE}")
    loaded()
    page.get_by_test_id("run-benchmark").click()
    expect(page.get_by_test_id("run-row")).to_have_count(2)
    expect(page.get_by_test_id("run-r5").first).to_have_text("0.333")
    expect(page.get_by_test_id("run-edits").first).to_have_text("1")
    expect(page.get_by_test_id("chart-edits")).to_have_attribute("data-edits", "1")
    recall5 = page.locator('circle[data-series="recall@5"]')
    expect(recall5).to_have_count(2)
    assert [float(recall5.nth(i).get_attribute("data-value") or "") for i in (0, 1)] == [
        0,
        pytest.approx(1 / 3, abs=1e-3),
    ]
    expect(page.get_by_test_id("chart-worse")).to_have_count(0)
    expect(page.get_by_test_id("worse-banner")).to_be_hidden()
    expect(page.get_by_test_id("miss")).to_have_count(2)
    # the edited expected card is reported as changed since its case was written
    expect(page.locator('[data-testid=expected-change][data-state="changed"]')).to_have_count(1)
    shot("second-run")

    # --- a question an agent asked that no card answers is a gap --------------------------
    asked = server.api(
        "POST",
        f"/api/workspaces/{WORKSPACE}/memory/search",
        {"question": "how many pallets fit in a truck"},
    )
    assert "results" in asked
    page.get_by_test_id("gaps-refresh").click()
    gap = page.get_by_test_id("gap").filter(has_text="pallets")
    expect(gap).to_have_count(1)
    href = gap.get_by_test_id("gap-write").get_attribute("href") or ""
    draft = parse_qs(urlparse(href).query)
    assert draft["draft"] == ["1"] and "pallets" in draft["draft_title"][0]
    shot("gap")
    assert not problems, problems
