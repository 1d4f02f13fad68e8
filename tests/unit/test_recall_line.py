"""The agent's recall lines read without Typer (tht.cli.entry) give the command and
typed arguments the Typer CLI gives for the same line, or leave the line to it."""

from __future__ import annotations

import itertools

import pytest

from tht.cli import entry
from tht.cli import main as cli

COMMANDS = sorted(entry.RECALL_LINES)
QUESTIONS = [["shipped orders"], ["ordini spediti l'anno scorso"], [""], [], ["a", "b"], ["-"]]
CONFIGS = [
    ["-c", "rt.yaml"],
    ["--config", "./conf//rt.yaml"],
    ["--config=/abs/rt.yaml"],
    ["--config="],
    ["-crt.yaml"],
    ["-c"],
    [],
]
OPTIONS = [
    [],
    ["--json"],
    ["--filters", '{"top": 3}'],
    ['--filters={"scope": "a=b"}'],
    ["--session", "ses-1", "--view", "compact"],
    ["--explain=mem-1", "--error", "relation does not exist"],
    ["--error=-ERROR: x"],
    ["--error", "-ERROR: x"],
    ["--view", "full", "--view", "compact"],
    ["--json=1"],
    ["--unknown", "x"],
    ["--"],
    ["--help"],
    ["-h"],
    ["--filters"],
]


def typer_reading(line: list[str], monkeypatch, capsys) -> tuple[str, dict] | None:
    """What the Typer CLI submits for ``line``, or None when it refuses the line."""
    submitted: list[tuple[str, dict]] = []
    monkeypatch.setattr(cli, "submit", lambda name, args: submitted.append((name, args)) or 0)
    cli.run_line(line, None)
    capsys.readouterr()
    assert len(submitted) <= 1
    return submitted[0] if submitted else None


LINES = [
    ["memory", command, *head, *tail]
    for command, question, config, options in itertools.product(
        COMMANDS, QUESTIONS, CONFIGS, OPTIONS
    )
    for head, tail in ((question + config, options), (options + config, question))
]


def test_every_line_read_here_is_read_so_by_typer(monkeypatch, capsys):
    read_here = 0
    for line in LINES:
        found = entry.recall_line(line)
        if found is not None:
            read_here += 1
            assert typer_reading(line, monkeypatch, capsys) == found, line
    assert read_here == 360  # the plain lines (of 3 780) are read here


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            ["memory", "search", "shipped orders", "-c", "rt.yaml", "--json"],
            ("memory.search", {"question": "shipped orders", "config": "rt.yaml"}),
        ),
        (
            ["memory", "rules", "--config=./a//rt.yaml", "--error", "boom", "--view=compact"],
            ("memory.rules", {"config": "a/rt.yaml", "error": "boom", "view": "compact"}),
        ),
        (
            ["memory", "solved-search", "q", "-c", "rt.yaml", "--filters", '{"top": 3}'],
            (
                "memory.solved-search",
                {"question": "q", "config": "rt.yaml", "filters": '{"top": 3}'},
            ),
        ),
    ],
)
def test_the_agents_lines_are_read_here(line, expected, monkeypatch, capsys):
    assert entry.recall_line(line) == expected
    assert typer_reading(line, monkeypatch, capsys) == expected


@pytest.mark.parametrize(
    "line",
    [
        ["memory", "search", "q", "-c", "rt.yaml", "--session", "s", "--session", "t"],
        ["memory", "solved-search", "q", "-c", "rt.yaml", "--session", "s"],  # not its option
        ["memory", "search", "-c", "rt.yaml"],  # no question
        ["memory", "rules", "q"],  # no runtime file
        ["memory", "search", "q", "-c", "rt.yaml", "--help"],
        ["memory", "list", "-c", "rt.yaml"],
        ["search", "q", "-c", "rt.yaml"],
    ],
)
def test_other_lines_are_left_to_typer(line):
    assert entry.recall_line(line) is None


@pytest.mark.parametrize("command", COMMANDS)
def test_the_options_named_here_are_the_typer_commands(command):
    """An option added to a recall command in the Typer CLI is named here too (else
    every line using it would pay Typer's import), and none is named here that Typer
    does not know."""
    group, _, _ = cli._parser(["memory", command])
    options = {
        name
        for param in group.commands[command].params
        for name in param.opts
        if name.startswith("-")
    }
    line = entry.RECALL_LINES[command]
    assert options - {"--help"} == {*entry.CONFIG, *entry.FLAGS, *line.options}
