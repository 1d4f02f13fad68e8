"""Administration → Memory management in a real browser (Debian's Chromium), against
the real `tht serve` on a test database. Each step is asserted and leaves a screenshot
in test-output/screenshots/NN-name.png."""

from __future__ import annotations

import re

from tests.browser.conftest import (
    FOREIGN_WORKSPACE,
    OTHER_WORKSPACE,
    PASSWORD,
    SEED_COUNT,
    USER,
    WORDS,
    WORKSPACE,
    Server,
)


def test_memory_management_page(server: Server, chromium, index_blocker, screenshots):
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "dialog",
        lambda dialog: (problems.append(f"unexpected dialog: {dialog.message}"), dialog.dismiss()),
    )
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
        page.screenshot(path=str(screenshots / f"{step['n']:02d}-{name}.png"), full_page=False)

    count = page.get_by_test_id("result-count")
    page_info = page.get_by_test_id("page-info")
    rows = page.get_by_test_id("card-row")
    feedback = page.get_by_test_id("feedback")
    detail_title = page.get_by_test_id("detail-title")
    revision = page.get_by_test_id("detail-revision")
    pending_items = page.get_by_test_id("pending-item")
    seed = server.cards

    def ready(name: str) -> None:
        """The page's script has attached its behaviour (it is deferred)."""
        expect(page.locator(f'[data-page="{name}"][data-ready="true"]')).to_have_count(1)

    def row_titles() -> list[str]:
        return [
            t.strip()
            for t in page.locator('[data-testid="card-row"] a.card-link').all_text_contents()
        ]

    try:
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

        # --- the Catalog page -----------------------------------------------------------
        page.get_by_role("link", name="Catalog", exact=True).click()
        expect(page.get_by_role("heading", name="Catalog", level=1, exact=True)).to_be_visible()
        expect(page.get_by_test_id("catalog-note")).to_contain_text(
            "their DWH bindings and sync runs"
        )
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

        # --- sorting (stable: title ascending, then descending) -------------------------
        page.get_by_label("Sort by").select_option("title")
        page.get_by_label("Order").select_option("asc")
        expect(page_info).to_have_text(re.compile(r"^Page 1 of 3"))
        expect(rows.first).to_contain_text(f"Card 00 {WORDS[0]}")
        assert row_titles() == [f"Card {i:02d} {WORDS[i]}" for i in range(10)]
        page.get_by_label("Order").select_option("desc")
        expect(rows.first).to_contain_text(f"Card 29 {WORDS[29]}")
        shot("sorted")

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
        page.get_by_role("textbox", name="Rationale", exact=True).fill(
            "Finance reports net figures."
        )
        page.get_by_test_id("save-card").click()
        expect(errors).to_contain_text("the server refused the card")
        expect(errors).to_contain_text("Rule: must be text with a visible character")
        expect(page.get_by_role("textbox", name="Rule", exact=True)).to_have_attribute(
            "aria-invalid", "true"
        )
        expect(count).to_have_text(f"{SEED_COUNT} cards")  # nothing was created
        page.get_by_role("textbox", name="Rule", exact=True).fill(
            "Subtract refunds from gross revenue."
        )
        page.get_by_role("textbox", name="Scope", exact=True).fill("Finance reports")
        page.get_by_role("textbox", name="Rationale", exact=True).fill(
            "Finance reports net figures."
        )
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
        dependencies = page.get_by_test_id("detail-dependencies").locator("tbody tr")
        expect(dependencies).to_have_count(2)
        expect(dependencies.filter(has_text="refund_amount")).to_have_text(
            re.compile(r"dwh\s*sales\s*orders\s*refund_amount")
        )
        expect(dependencies.filter(has_text="finance")).to_have_text(
            re.compile(r"finance\s*—\s*—\s*—")
        )
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
        server.api(
            "PUT", f"/api/workspaces/{WORKSPACE}/memory/{new_id}", body
        )  # another administrator
        page.get_by_test_id("save-card").click()
        expect(errors).to_be_visible()
        expect(errors).to_contain_text("someone changed this card")
        expect(errors).to_contain_text("revision 3")
        shot("conflict")
        page.get_by_test_id("reload-card").click()
        expect(revision).to_have_text("3")
        expect(page.locator('[data-detail="scope"]')).to_have_text("Changed elsewhere")

        # --- index down: saved, index update incomplete ------------------------------------
        blocker = index_blocker()  # the server sees its index down
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
        expect(feedback).to_have_attribute(
            "data-status", "saved"
        )  # the deletion's warning is resolved
        shot("retried")

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
        expect(page.locator(f'[data-testid="card-row"] a[data-card-id="{new_id}"]')).to_have_count(
            0
        )
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

        # --- logout ---------------------------------------------------------------------------
        page.get_by_test_id("logout").click()
        expect(page).to_have_url(re.compile(r"/login$"))
        ready("login")
        page.goto(server.url + "admin/memory")
        expect(page).to_have_url(re.compile(r"/login"))
        shot("logged-out")
        assert problems == [], problems
    except Exception:
        page.screenshot(path=str(screenshots / "failure.png"), full_page=True)
        print(server.stderr_tail())
        raise
    finally:
        context.close()
