"""The README and the pages of docs/ are run as a newcomer would run them.

Every fenced command block (bash, sh, shell, console) is either a ```bash block, executed here, or a block marked
illustrative with a reason (an HTML comment `<!-- illustrative: why -->` on the line
before it). The ```bash blocks of one page run in order in one bash process (`set -euo
pipefail`), in a temporary directory with its own THT_HOME, the repository's `.venv` and
`scripts/` linked in, THT_SERVICE=off (the README: auto, as a newcomer has it), and PORT set
to a free port. Whatever a page leaves running (an embedded PostgreSQL, a service) is
stopped afterwards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The pages whose blocks this test runs. A page added to docs/ belongs here once its
# blocks are bash (run) or marked illustrative.
PAGES = (
    "README.md",
    "docs/configuration.md",
    "docs/cli.md",
    "docs/http-api.md",
    "docs/workflow.md",
    "docs/operations.md",
    "docs/recall.md",
    "docs/catalog.md",
    "docs/benchmarks.md",
)
COMMAND_LANGUAGES = {"bash", "sh", "shell", "console", "zsh"}
FENCE = re.compile(r"^```(\w*)\s*$")
ILLUSTRATIVE = re.compile(r"^<!-- illustrative: (?P<reason>\S.*\S) -->$")
LINKED = (".venv", "scripts", "bench", "schemas")
# Run as a newcomer runs them: each command through the service it starts.
THROUGH_THE_SERVICE = {"README.md"}
PAGE_TIMEOUT = 600


def blocks(page: str) -> list[tuple[int, str, str | None, str]]:
    """(line, language, illustrative reason or None, text) of every fenced block."""
    lines = (ROOT / page).read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start, language = i, match.group(1)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marked = ILLUSTRATIVE.match(before.strip())
        found.append(
            (
                start + 1,
                language,
                marked["reason"] if marked else None,
                "\n".join(lines[i + 1 : end]),
            )
        )
        i = end + 1
    return found


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_run_or_marked_illustrative(page):
    unmarked = [
        f"{page}:{line} ```{language}"
        for line, language, reason, _ in blocks(page)
        if language in COMMAND_LANGUAGES - {"bash"} and reason is None
    ]
    assert not unmarked, "run these as ```bash, or mark them <!-- illustrative: why -->"
    runnable = [text for _, language, reason, text in blocks(page) if language == "bash"]
    marked_runnable = [
        line for line, language, reason, _ in blocks(page) if language == "bash" and reason
    ]
    assert not marked_runnable, (
        f"bash blocks are run: drop the illustrative mark at {marked_runnable}"
    )
    assert runnable or page in ("docs/cli.md", "docs/benchmarks.md"), f"{page} runs nothing"


def test_the_readme_stays_short_and_links_its_pages():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 12 * 1024
    for page in PAGES[1:]:
        if page not in ("docs/recall.md", "docs/catalog.md"):  # linked from the other pages
            assert f"({page})" in text, page


LINK = re.compile(r"\]\((?!https?:|mailto:)([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize(
    "page",
    sorted({*PAGES, *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))}),
)
def test_links_lead_somewhere(page):
    source = ROOT / page
    broken = []
    for target in LINK.findall(source.read_text()):
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    assert not broken, f"{page}: {broken}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop_leftovers(workdir: Path) -> None:
    """Services and embedded servers a failed page left behind, by their own records."""
    for record in workdir.rglob("run/service.json"):
        try:
            os.kill(json.loads(record.read_text())["pid"], signal.SIGTERM)
        except (OSError, ValueError, KeyError):
            pass
    for pgdata in workdir.rglob("postgres"):
        if (pgdata / "postmaster.pid").exists():
            env = {**os.environ, "THT_HOME": str(pgdata.parent), "THT_SERVICE": "off"}
            subprocess.run(
                [sys.executable, "-m", "tht", "db", "stop"], env=env, capture_output=True
            )


@pytest.mark.parametrize("page", [p for p in PAGES if any(b[1] == "bash" for b in blocks(p))])
def test_the_page_runs(page, tmp_path):
    script = "\n\n".join(
        f"# {page}:{line}\n{text}" for line, language, _, text in blocks(page) if language == "bash"
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    for name in LINKED:
        (workdir / name).symlink_to(ROOT / name)
    env = {
        **os.environ,
        "THT_HOME": str(tmp_path / "home"),
        "THT_SERVICE": "auto" if page in THROUGH_THE_SERVICE else "off",
        "TMPDIR": str(tmp_path),  # the README's `mktemp -d` lands here, and is cleaned up
        "PORT": str(_free_port()),
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    process = subprocess.Popen(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=PAGE_TIMEOUT)
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)  # a `tht serve &` the page did not stop
        except ProcessLookupError:
            pass
        _stop_leftovers(tmp_path)
    assert process.returncode == 0, f"{page} failed (exit {process.returncode}):\n{output[-6000:]}"
    if page == "README.md":  # its quickstart runs in the repository: it writes elsewhere
        left = sorted(p.name for p in workdir.iterdir() if p.name not in LINKED)
        assert not left, f"the quickstart left {left} where it was run"
