"""The reviewer's page (gate reviewer_memory_promote) in Debian's Chromium against the
real `tht serve` with a sessions root: choose, edit, apply (with the index held by
another process: pending indexing shown, then retried), a refused change, and decline
all. Screenshots go to test-output/screenshots/review-NN-name.png."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.browser.conftest import (
    PASSWORD,
    SERVER_CONFIG,
    USER,
    WORKSPACE,
    IndexBlocker,
    _server_env,
    running_server,
)
from tests.integration.workflow_support import (
    APPROVED_SQL,
    Session,
    add,
    decision,
    join_rule,
    solved,
    update,
)

SESSION = "s-review"
DECLINED = "s-decline"


def _seed(env: dict[str, str], root: Path) -> dict[str, str]:
    from tests.factories import installation_of
    from tht.bootstrap import build_services
    from tht.memory.model import parse_card_input

    services = build_services(env=env, installation=installation_of(sessions_root=root))
    try:
        services.workspaces.create(WORKSPACE, "en", "Acme sales")
        services.accounts.users.create_user(USER, "admin", [WORKSPACE], password=PASSWORD)
        manual = services.memory.create_card(
            WORKSPACE,
            parse_card_input(
                join_rule(title="Job join (manual)", content="Join movements and jobs on job_code.")
            ),
        ).card
        target = services.memory.create_card(
            WORKSPACE,
            parse_card_input(
                {
                    "family": "domain_clarification",
                    "title": "Fiscal year",
                    "content": "The year of the books.",
                    "scope": "Accounting",
                }
            ),
        ).card
        Session(root, WORKSPACE, SESSION).log(
            decision("d1", "sql_corrected", explanation="A job code repeats across fiscal years."),
            decision("d2", "concept_clarified", text="a commessa is a job"),
            decision("d3", "sql_approved", sql=APPROVED_SQL),
        )
        services.proposals.propose(
            WORKSPACE,
            SESSION,
            {
                "proposals": [
                    update(
                        "fix",
                        ["d1"],
                        manual.id,
                        1,
                        join_rule(title="Job join"),
                        change="add fiscal_year to the join",
                        links=[{"target": target.id, "meaning": "uses"}],
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
                        links=[{"proposal": "fix", "meaning": "explained by"}],
                    ),
                    add("q", ["d3"], solved()),
                ]
            },
        )
        Session(root, WORKSPACE, DECLINED).log(decision("d1", "concept_clarified", text="x"))
        services.proposals.propose(
            WORKSPACE,
            DECLINED,
            {
                "proposals": [
                    add(
                        "c",
                        ["d1"],
                        {
                            "family": "domain_clarification",
                            "title": "Backlog",
                            "content": "Open orders.",
                            "scope": "Sales",
                        },
                    )
                ]
            },
        )
        return {"manual": manual.id, "target": target.id}
    finally:
        services.close()


@pytest.fixture
def review_server(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "sessions"
    root.mkdir()
    env = _server_env(database, home)
    cards = _seed(env, root)
    config = SERVER_CONFIG + f"sessions_root: {root}\n"
    with running_server(env, config, tmp_path, home) as server:
        yield server, cards, root


def test_reviewer_page_chooses_edits_applies_and_declines(review_server, chromium, screenshots):
    from playwright.sync_api import expect

    server, cards, root = review_server
    expect.set_options(timeout=15_000)
    page = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(15_000)
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
            path=str(screenshots / f"review-{step['n']:02d}-{name}.png"), full_page=True
        )

    blocker = None
    try:
        page.goto(server.url + "login")
        page.get_by_label("User name").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in", exact=True).click()
        expect(page).to_have_url(re.compile(r"/admin/memory$"))
        page.get_by_role("navigation", name="Main").get_by_role(
            "link", name="Memory review"
        ).click()
        expect(page).to_have_url(re.compile(r"/admin/review$"))
        expect(page.locator("#nav-review")).to_have_attribute("aria-current", "page")
        expect(page.locator('#review-app[data-review-ready="true"]')).to_have_count(1)
        expect(
            page.get_by_role("heading", name=re.compile("Memory review"), level=1)
        ).to_be_visible()
        page.get_by_test_id("review-workspace").select_option(WORKSPACE)
        sessions = page.get_by_test_id("session-item")
        expect(sessions).to_have_count(2)
        expect(page.locator(f'[data-session="{SESSION}"]')).to_contain_text("to review")

        # --- the summary: an update with its change, an addition, the solved question ----
        page.locator(f'[data-session="{SESSION}"]').click()
        expect(page.get_by_test_id("review-item")).to_have_count(3)
        update_item = page.locator('[data-testid=review-item][data-proposal="fix"]')
        content_change = update_item.get_by_test_id("change-row").filter(has_text="content")
        expect(content_change).to_contain_text("Join movements and jobs on job_code.")
        expect(content_change).to_contain_text(
            "Join movements and jobs on job_code and fiscal_year."
        )
        expect(page.get_by_test_id("approved-sql")).to_have_text(APPROVED_SQL)
        expect(page.get_by_test_id("field-q-sql")).to_have_count(
            0
        )  # no editor for the approved SQL
        shot("summary")

        # --- edit, choose, apply while the index is down -----------------------------------
        page.get_by_test_id("field-job-content").fill("A commessa is a job (Italian ledgers).")
        page.get_by_test_id("field-job-scope").fill("Accounting (Italy)")
        page.get_by_test_id("field-job-dependencies").fill("dwh.acc.jobs")
        page.get_by_test_id("select-q").uncheck()
        page.get_by_test_id("link-fix-0").uncheck()  # drop the proposed link to "Fiscal year"
        blocker = IndexBlocker(server).__enter__()
        page.get_by_test_id("apply-review").click()
        expect(page.get_by_test_id("review-message")).to_contain_text("Saved", timeout=60_000)
        expect(page.get_by_test_id("result-status")).to_contain_text("applied")
        expect(page.get_by_test_id("result-status")).to_contain_text("Declined proposals: q")
        expect(page.get_by_test_id("result-card")).to_have_count(2)
        expect(page.get_by_test_id("pending-card")).to_have_count(
            2
        )  # saved, index update incomplete
        expect(page.get_by_test_id("reviewed-banner")).to_contain_text(
            "reviewed (applied) by " + USER
        )
        expect(page.get_by_test_id("apply-review")).to_be_disabled()
        shot("applied-pending")

        # the archive holds the reviewer's edits; the update kept identity and origin
        new_id = (
            page.locator("[data-testid=result-card]")
            .filter(has_text="proposal job")
            .get_attribute("data-card")
        )
        job = server.api("GET", f"/api/workspaces/{WORKSPACE}/memory/{new_id}")
        assert (
            job["content"] == "A commessa is a job (Italian ledgers)."
            and job["scope"] == "Accounting (Italy)"
        )
        assert job["dependencies"] == [
            {"database": "dwh", "schema": "acc", "table": "jobs", "column": None}
        ]
        assert [link["target"] for link in job["links"]] == [cards["manual"]]
        fixed = server.api("GET", f"/api/workspaces/{WORKSPACE}/memory/{cards['manual']}")
        assert fixed["origin"] == "manual" and fixed["revision"] == 2 and fixed["links"] == []
        assert "fiscal_year" in fixed["content"]
        listed = server.api("GET", f"/api/workspaces/{WORKSPACE}/memory?family=solved_question")
        assert listed["total"] == 0

        # --- the index is back: retry from the page ---------------------------------------
        blocker.release()
        blocker = None
        for remaining in (1, 0):  # one retry at a time: the next click waits for the list to shrink
            page.get_by_test_id("retry-pending").first.click()
            expect(page.get_by_test_id("review-message")).to_contain_text("Indexed", timeout=60_000)
            expect(page.get_by_test_id("pending-card")).to_have_count(remaining)
        expect(page.get_by_test_id("result-pending")).to_be_hidden()
        assert server.api("GET", f"/api/workspaces/{WORKSPACE}/memory/pending")["items"] == []
        shot("indexed")
        # reopened later, a reviewed session shows its receipt instead of editors
        page.reload()
        page.get_by_test_id("review-workspace").select_option(WORKSPACE)
        page.locator(f'[data-session="{SESSION}"]').click()
        expect(page.get_by_test_id("reviewed-banner")).to_be_visible()
        expect(page.get_by_test_id("review-item").first).to_be_hidden()
        expect(page.get_by_test_id("result-card")).to_have_count(2)
        expect(page.get_by_test_id("result-status")).to_contain_text("from the review receipt")
        expect(page.get_by_test_id("pending-card")).to_have_count(0)

        # --- decline all on the other session -------------------------------------------
        page.locator(f'[data-session="{DECLINED}"]').click()
        expect(page.get_by_test_id("review-item")).to_have_count(1)
        page.get_by_test_id("decline-all").click()
        expect(page.get_by_test_id("review-message")).to_contain_text("Declined: nothing was saved")
        expect(page.get_by_test_id("result-card")).to_have_count(0)
        expect(page.locator(f'[data-session="{DECLINED}"]')).to_contain_text("reviewed (declined)")
        assert server.api("GET", f"/api/workspaces/{WORKSPACE}/memory?q=Backlog")["total"] == 0
        ledger = (root / WORKSPACE / DECLINED / "ledger.jsonl").read_text().splitlines()
        assert json.loads(ledger[-1])["outcome"] == "declined"
        shot("declined")
        assert problems == []
    finally:
        if blocker is not None:
            blocker.release()
        page.context.close()
