"""Memory management shows which cards an import wrote: the list says "Imported" (not
"Manual"), filters them, and a card's record names the import's file, format and id,
and the origin its file recorded. Screenshots in test-output/screenshots/imported-*.png."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.browser.conftest import PASSWORD, USER, WORKSPACE, _server_env


def test_imported_cards_read_as_imported(server, database, chromium, screenshots, tmp_path):
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)
    documents = [
        {
            "family": "sql_rule",
            "title": "Always filter on the tenant",
            "content": "Add tenant_id = 1 to every query.",
            "scope": "Sales",
            "rationale": "Every table holds every tenant.",
            "origin": "workflow",
            "source": {"session": "s-elsewhere", "decisions": ["d-1"]},
        },
        {
            "family": "domain_clarification",
            "title": "Quokka day",
            "content": "A quokka day is a day without a sale.",
            "scope": "Sales",
        },
    ]
    path = tmp_path / "cards.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in documents))
    config = tmp_path / "runtime.yaml"
    config.write_text(f"workspace: {WORKSPACE}\ndatabase: dwh\nschema: sales\n")
    env = {**_server_env(database, server.home), "THT_SERVICE": "auto"}
    done = subprocess.run(
        [sys.executable, "-m", "tht", "memory", "import", str(path), "-c", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    import_id = json.loads(done.stdout)["import"]

    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.goto(server.url + "admin/memory")
    page.get_by_label("User name").fill(USER)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page).to_have_url(re.compile(r"/admin/memory$"))
    expect(page.locator('[data-page="memory"][data-ready="true"]')).to_have_count(1)
    page.locator("#workspace-select").select_option(WORKSPACE)
    page.locator("#filter-details > summary").click()  # the filters are folded
    page.locator("#filter-origin").select_option("imported")
    page.get_by_test_id("filters-apply").click()
    rows = page.get_by_test_id("card-row")
    expect(rows).to_have_count(2)
    expect(rows.locator('[data-origin="imported"]')).to_have_text(["Imported", "Imported"])
    rows.last.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "imported-list.png"))

    rows.filter(has_text="Always filter on the tenant").locator("a.card-link").click()
    meta = page.get_by_test_id("detail-meta")
    expect(meta.locator('[data-detail="origin"]')).to_have_text("Imported (recorded as workflow)")
    expect(meta.locator('[data-detail="source"]')).to_contain_text("s-elsewhere")
    imported = meta.locator('[data-detail="imported"]')
    expect(imported).to_contain_text("cards.jsonl (jsonl)")
    expect(imported).to_contain_text(import_id)
    imported.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "imported-card.png"))
    context.close()
    assert problems == []
