"""Bulk import and export of any size through the service: the import's file passed
open on the Unix socket (never read whole, never opened by path in the service), the
export's stdout streamed back as it is written, over the socket and over HTTP."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.factories import card_document
from tests.integration.service_support import Installation, installation, wait_for
from tht import __version__
from tht.memory.model import MAX_DOCUMENT_BYTES
from tht.memory_client import Memory
from tht.service.client import MAX_FILE_BYTES, MAX_HTTP_BODY_BYTES
from tht.service.paths import PROTOCOL

LONG = 19_000  # characters of each long text field (the limit is 20 000)


@pytest.fixture
def tht(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    found = installation(database, home)
    assert found.run("workspace", "create", "acme", "--language", "en").code == 0
    yield found
    found.stop()


def _big_jsonl(path: Path, size: int) -> int:
    """Distinct rules with long text fields until the file passes ``size`` bytes (few
    cards: cheap to embed with the hashing embedder); returns how many."""
    count = 0
    with path.open("w") as out:
        while out.tell() <= size:
            document = card_document(
                "sql_rule",
                title=f"Rule {count}",
                content=f"rule {count} " + "c" * LONG,
                rationale="r" * LONG,
                context="x" * LONG,
                sql="SELECT 1 -- " + "s" * 45_000,
            )
            out.write(json.dumps(document) + "\n")
            count += 1
    return count


def _export(tht: Installation, config: str, *extra: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tht", *extra, "memory", "export", "-c", config],
        env={**tht.env, **env},
        capture_output=True,
        timeout=120,
        cwd=tht.home,
    )


def _held_export(tht: Installation, config: str, marker: Path) -> subprocess.Popen:
    """`tht memory export` whose service (started by it: stop the running one first)
    holds at the pause point after each piece of stdout it sends, until released."""
    return subprocess.Popen(
        [sys.executable, "-m", "tht", "memory", "export", "-c", config],
        env={**tht.env, "THT_PAUSE_AT": "service.sent_stdout", "THT_PAUSE_FILE": str(marker)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tht.home,
    )


def _read_while_held(command: subprocess.Popen, marker: Path) -> bytes:
    """What the client printed while the service holds the command at the pause point,
    after its first piece of stdout (the old protocol sent nothing before the command
    ended: this would time out)."""
    assert wait_for(marker.exists, 60), "the command never reached the pause point"
    assert command.stdout is not None
    ready, _, _ = select.select([command.stdout], [], [], 30)
    assert ready, "nothing reached the client's stdout while the command was held"
    head = os.read(command.stdout.fileno(), 1 << 20)  # unbuffered: communicate reads on
    assert head and marker.exists() and command.poll() is None  # held: it has not ended
    return head


def _release(command: subprocess.Popen, marker: Path) -> None:
    """Let the held command go on, and on past each later piece, until it ends."""

    def release() -> None:
        while command.poll() is None:
            marker.unlink(missing_ok=True)
            time.sleep(0.01)

    threading.Thread(target=release, daemon=True).start()


def _held_then_drained(
    command: subprocess.Popen, marker: Path, while_held: Callable[[], None] = lambda: None
) -> tuple[bytes, bytes, bytes]:
    """The client's stdout while the service holds the command (``while_held`` runs
    then), then the rest and its stderr once released (the command killed if it hangs)."""
    try:
        first = _read_while_held(command, marker)
        while_held()
        _release(command, marker)
        rest, err = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
        command.wait(30)
    return first, rest, err


def test_an_import_over_16_mib_is_passed_open_on_the_socket_and_a_rerun_creates_nothing(
    tht, tmp_path, monkeypatch
):
    config = tht.runtime("acme")
    big = tht.home / "big.jsonl"
    cards = _big_jsonl(big, MAX_FILE_BYTES + (1 << 20))
    assert big.stat().st_size > MAX_FILE_BYTES
    imported = tht.run("memory", "import", "big.jsonl", "-c", config)  # relative to the client
    assert imported.code == 0, (imported.document, imported.stderr[-2000:])
    assert (imported.document["created"], imported.document["skipped"]) == (cards, 0)
    assert tht.service_pid() is not None and "records" in imported.stderr
    again = tht.run("memory", "import", str(big), "-c", config)
    assert again.code == 0, again.document
    assert (again.document["created"], again.document["skipped"]) == (0, cards)

    # standard input (a pipe) too: the client copies it to a temporary file it passes
    piped = subprocess.run(
        [sys.executable, "-m", "tht", "memory", "import", "-", "-c", config, "--format", "jsonl"],
        env=tht.env,
        stdin=big.open("rb"),
        capture_output=True,
        timeout=120,
        cwd=tht.home,
    )
    assert piped.returncode == 0, piped.stdout + piped.stderr[-2000:]
    assert json.loads(piped.stdout)["skipped"] == cards

    # the export through the service: the same bytes as in its own process
    through = _export(tht, config)
    alone = _export(tht, config, THT_SERVICE="off")
    assert through.returncode == alone.returncode == 0, through.stdout[-500:] + through.stderr
    assert len(through.stdout) > MAX_FILE_BYTES
    assert through.stdout == alone.stdout
    assert len(through.stdout.splitlines()) == cards

    # the Python client parses the pieces as they come (lines span pieces of 64 KiB)
    for key in [k for k in os.environ if k.startswith("THT_")]:
        monkeypatch.delenv(key)
    for key, value in tht.env.items():
        if key.startswith("THT_"):
            monkeypatch.setenv(key, value)
    exported = Memory.connect(config).export_cards()
    assert [dict(card.raw) for card in exported] == [
        json.loads(line) for line in through.stdout.splitlines()
    ]
    assert tht.service_pid() is not None


def test_the_export_reaches_the_client_while_the_command_still_runs(tht, tmp_path):
    config = tht.runtime("acme")
    source = tmp_path / "cards.jsonl"
    cards = _big_jsonl(source, 1 << 20)  # ~8 pieces of stdout
    assert tht.run("memory", "import", str(source), "-c", config).code == 0
    alone = _export(tht, config, THT_SERVICE="off")
    tht.stop()  # the next command starts a service that holds after its first piece
    marker = tmp_path / "held"
    command = _held_export(tht, config, marker)
    first, rest, err = _held_then_drained(command, marker)
    assert command.returncode == 0, err
    assert alone.stdout.startswith(first) and first + rest == alone.stdout
    assert len(alone.stdout.splitlines()) == cards


def test_bad_import_files_exit_2_with_json_through_the_socket(tht):
    config = tht.runtime("acme")
    (tht.home / "folder").mkdir()
    for path, reason in (
        ("missing.jsonl", "No such file or directory"),
        ("folder", "Is a directory"),
    ):
        refused = tht.run("memory", "import", path, "-c", config, "--format", "jsonl")
        assert (refused.code, refused.document["error"]["code"]) == (2, "invalid_input"), path
        assert refused.document["error"]["message"] == f"cannot read {path}: {reason}"
    assert tht.service_pid() is not None


@pytest.fixture
def served(tht, tmp_path):
    """`tht serve` on a free port, holding every command after its first piece of
    stdout while the file ``held`` exists (a test removes it to go on)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tht.home / "server.yaml").write_text(
        f"embedders: {{default: {{provider: hashing}}}}\nindex: {{path: {tht.home / 'index'}}}\n"
    )
    marker = tmp_path / "held"
    server = tht.start(
        "serve",
        "--port",
        str(port),
        "-c",
        str(tht.home / "server.yaml"),
        THT_PAUSE_AT="service.sent_stdout",
        THT_PAUSE_FILE=str(marker),
    )
    try:
        json.loads(server.stdout.readline())
        yield f"http://127.0.0.1:{port}", (tht.home / "admin-token").read_text().strip(), marker
    finally:
        server.terminate()
        server.wait(30)


def test_over_http_the_export_streams_and_a_file_past_the_limit_is_refused(tht, served, tmp_path):
    url, token, marker = served
    config = tht.runtime("acme")
    over_http = {"THT_SERVICE_URL": url, "THT_TOKEN": token, "THT_HOME": str(tmp_path / "none")}
    source = tmp_path / "cards.jsonl"
    cards = _big_jsonl(source, 300_000)  # under the body's limit: sent whole over HTTP
    imported = tht.run("memory", "import", str(source), "-c", config, **over_http)
    assert imported.code == 0 and imported.document["created"] == cards, imported.document

    command = subprocess.Popen(
        [sys.executable, "-m", "tht", "memory", "export", "-c", config],
        env={**tht.env, **over_http},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tht.home,
    )
    first, out, err = _held_then_drained(command, marker)
    assert command.returncode == 0, err
    alone = _export(tht, config, THT_SERVICE="off")
    assert first + out == alone.stdout and len(alone.stdout.splitlines()) == cards

    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as sparse:  # 1 GB that costs no disk
        sparse.truncate(1 << 30)
    refused = tht.run("memory", "import", str(huge), "-c", config, **over_http)
    assert (refused.code, refused.document["error"]["code"]) == (2, "invalid_input")
    error = refused.document["error"]
    assert error["details"]["limit"] == MAX_HTTP_BODY_BYTES == MAX_DOCUMENT_BYTES
    assert "1 MiB" in error["message"] and "Unix socket" in error["message"]
    assert not (tmp_path / "none").exists()


def test_an_export_failing_midway_ends_with_its_error_document_and_exit_code(
    tht, database, tmp_path
):
    """As in its own process: the cards written before the failure, then the error
    document on the last line, and the error's exit code."""
    config = tht.runtime("acme")
    source = tmp_path / "cards.jsonl"
    source.write_text(  # more than one batch of 256 cards
        "".join(
            json.dumps(card_document(title=f"Card {n}", content=f"card {n} " + "t" * 500)) + "\n"
            for n in range(600)
        )
    )
    assert tht.run("memory", "import", str(source), "-c", config).code == 0
    alone = _export(tht, config, THT_SERVICE="off").stdout.splitlines(keepends=True)
    tht.stop()
    marker = tmp_path / "held"
    command = _held_export(tht, config, marker)

    def kill_the_snapshot() -> None:  # the export's snapshot, between two batches
        with database.cluster.admin() as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND state = 'idle in transaction'",
                (database.name,),
            ).fetchall()
        assert ended

    first, rest, err = _held_then_drained(command, marker, kill_the_snapshot)
    lines = (first + rest).splitlines(keepends=True)
    error = json.loads(lines[-1])["error"]
    assert (command.returncode, error["code"]) == (6, "archive_unavailable"), (error, err)
    assert 0 < len(lines) - 1 < len(alone) and lines[:-1] == alone[: len(lines) - 1]


def test_a_descriptor_is_taken_only_from_the_socket_never_named_over_http(tht, served, tmp_path):
    url, token, _marker = served
    config = tht.runtime("acme")
    request = {
        "protocol": PROTOCOL,
        "version": __version__,
        "command": "memory.import",
        "args": {"file": "/x.jsonl", "config": config},
        "cwd": "/",
        "files": {"/x.jsonl": {"fd": 0}, config: {"data": ""}},
    }
    answer = httpx.post(
        f"{url}/api/cli", json=request, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    final = json.loads(answer.text.strip().splitlines()[-1])
    error = json.loads(final["stdout"])["error"]
    assert final["exit"] == 2 and "only on the Unix socket" in error["message"]
    # on the socket, a file naming no descriptor it passed is refused too
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(tht.run_dir / "service.sock"))
        sock.sendall(json.dumps({**request, "files": {"/x.jsonl": {"fd": 3}}}).encode() + b"\n")
        final = json.loads(sock.makefile().readline())
    assert final["exit"] == 2
    assert "names no passed descriptor" in json.loads(final["stdout"])["error"]["message"]


def test_over_http_a_command_travels_by_name_with_typed_arguments(tht, served):
    """`POST /api/cli` takes a command's name and its JSON arguments (no command line):
    they are checked against the command's input model before anything runs, and a
    command of the operator's own process is refused there."""
    import base64

    url, token, _marker = served
    config = tht.runtime("acme")
    runtime = {"data": base64.b64encode(Path(config).read_bytes()).decode()}

    def run(command: str, args: object) -> tuple[int, dict]:
        request = {
            "protocol": PROTOCOL,
            "version": __version__,
            "command": command,
            "args": args,
            "cwd": "/",
            "files": {config: runtime},
        }
        answer = httpx.post(
            f"{url}/api/cli", json=request, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        final = json.loads(answer.text.strip().splitlines()[-1])
        return final["exit"], json.loads(final["stdout"])

    code, listed = run("memory.list", {"config": config, "filters": {"page_size": 1}})
    assert code == 0 and listed["page_size"] == 1
    code, refused = run("memory.search", {"config": config, "question": 5, "colour": "red"})
    assert code == 2 and refused["error"]["code"] == "invalid_input"
    assert "question" in refused["error"]["message"] and "'colour'" in refused["error"]["message"]
    code, refused = run("db.stop", {})
    assert code == 2 and "its own process" in refused["error"]["message"]
    code, refused = run("memory.frobnicate", {})
    assert code == 2 and "unknown command" in refused["error"]["message"]
    code, refused = run("memory.list", ["-c", config])  # a command line is no arguments
    assert code == 2 and "JSON object" in refused["error"]["message"]


def test_a_client_that_does_not_read_holds_the_export_in_the_service_not_its_output(tht, tmp_path):
    """Backpressure: while the client's stdout is not read, the service sends a few
    pieces (what the socket and the pipe buffer) and its command waits, still running;
    reading then brings every byte. (Before, the service ran the export to its end and
    held all of it.)"""
    config = tht.runtime("acme")
    source = tmp_path / "cards.jsonl"
    _big_jsonl(source, 5 << 20)  # ~80 pieces of 64 KiB
    assert tht.run("memory", "import", str(source), "-c", config).code == 0
    alone = _export(tht, config, THT_SERVICE="off").stdout
    tht.stop()
    marker = tmp_path / "held"
    pieces = [0]
    command = _held_export(tht, config, marker)

    def count_and_release() -> None:  # each piece sent holds once at the pause point
        while command.poll() is None:
            if marker.exists():
                pieces[0] += 1
                marker.unlink()
            time.sleep(0.005)

    threading.Thread(target=count_and_release, daemon=True).start()
    try:
        seen = [-1]

        def settled() -> bool:  # pieces were sent, and no more for a second
            time.sleep(1)
            settled_now = pieces[0] > 0 and pieces[0] == seen[0]
            seen[0] = pieces[0]
            return settled_now

        assert wait_for(settled, 60), "no piece of stdout was sent before the command ended"
        assert pieces[0] * 64 * 1024 < len(alone) // 4, (pieces[0], len(alone))
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(tht.run_dir / "service.sock"))
            sock.sendall(b'{"op": "status"}\n')
            status = json.loads(sock.makefile().readline())["status"]
        assert status["active"] == 1 and command.poll() is None  # the export waits, running
        out, err = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
        command.wait(30)
    assert command.returncode == 0, err
    assert out == alone
