"""Take the README's screenshots from the demo workspace, as `make run` shows it.

    .venv/bin/python scripts/take_screenshots.py      # writes docs/screenshots/*.png

Starts `tht serve --demo` in a temporary THT_HOME (the demo's cards come from BIRD
Mini-Dev, CC BY-SA 4.0), logs in with the one-time link it prints, and drives Debian's
Chromium (THT_CHROMIUM to use another): a card with its dependencies and links, then a
save while the index is down (THT_OUTAGE_FILE, the fault hook the tests use) and the
pending index updates it leaves. Everything it started is stopped at the end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = os.environ.get("THT_CHROMIUM", "/usr/bin/chromium")
CARD = "In 2012, who had the least consumption in LAM?"  # a solved question: dependencies, links


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "THT_HOME": home, "THT_OUTAGE_FILE": f"{home}/outage"}
        serve = subprocess.Popen(
            [sys.executable, "-m", "tht", "serve", "--demo", "--port", str(free_port())],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert serve.stdout is not None
            ready = json.loads(serve.stdout.readline())
            shoot(ready["login_url"], Path(home) / "outage")
        finally:
            serve.terminate()
            serve.wait(timeout=60)
            subprocess.run(
                [sys.executable, "-m", "tht", "db", "stop"],
                env={**env, "THT_SERVICE": "off"},
                capture_output=True,
            )
    return 0


def shoot(login_url: str, outage: Path) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.set_default_timeout(30_000)
        page.goto(login_url)
        page.get_by_test_id("workspace-select").select_option("demo")
        page.locator("#filter-q").fill("least consumption LAM")
        page.get_by_role("button", name="Search", exact=True).click()
        page.locator("a.card-link", has_text=CARD).first.click()
        expect(page.locator("#detail-title")).to_contain_text(CARD)
        page.set_viewport_size(
            {"width": 1280, "height": 1500}
        )  # down to its dependencies and links
        page.screenshot(path=str(OUT / "memory-management.png"))
        page.set_viewport_size({"width": 1280, "height": 860})
        print("wrote", OUT / "memory-management.png")

        outage.write_text("index\n")  # the index goes down: saves are kept, indexing waits
        page.get_by_test_id("edit-card").click()
        title = page.locator("#edit-title")
        title.fill(title.input_value().replace("least", "least (reviewed)", 1))
        page.get_by_test_id("save-card").click()
        expect(page.get_by_test_id("feedback")).to_contain_text("index update incomplete")
        expect(page.get_by_test_id("pending-item")).to_have_count(1)
        page.get_by_test_id("pending-item").first.scroll_into_view_if_needed()
        page.screenshot(path=str(OUT / "pending-index-updates.png"))
        print("wrote", OUT / "pending-index-updates.png")
        outage.unlink()
        browser.close()


if __name__ == "__main__":
    raise SystemExit(main())
