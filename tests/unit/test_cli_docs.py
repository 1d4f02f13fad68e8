"""docs/cli.md is generated from the commands' --help (scripts/gen_cli_docs.py): a
command or an option changed without regenerating the page fails here."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_reference_is_current():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, (
        f"{done.stderr}\nrun: .venv/bin/python scripts/gen_cli_docs.py and commit docs/cli.md"
    )


def test_the_reference_names_every_command():
    page = (ROOT / "docs" / "cli.md").read_text()
    for command in ("tht demo", "tht workspace list", "tht workspace show", "tht user list"):
        assert f"## {command}\n" in page, command
