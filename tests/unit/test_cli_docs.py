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


def test_a_groups_own_parser_prints_the_help_of_the_whole_tree(capsys):
    """`tht memory …` is parsed by the memory group's parser alone (built faster): its
    help, and every other group's, reads as the reference's whole tree prints it."""
    import typer.main

    from tests.unit.test_service_commands import _commands
    from tht.cli.main import app, main

    tree = typer.main.get_command(app)
    paths = sorted(_commands(tree))
    groups = sorted({path[:n] for path in paths for n in range(1, len(path))})
    assert ("memory",) in groups and ("user", "token") in groups
    for path in [*paths, *groups]:
        tree.main(args=[*path, "--help"], prog_name="tht", standalone_mode=False)
        whole = capsys.readouterr().out
        assert main([*path, "--help"]) == 0
        assert capsys.readouterr().out == whole, path
