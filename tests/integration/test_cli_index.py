"""The embedded index is single-process: concurrent CLI commands wait for each other,
and a command facing a held index gets a clear outcome, never a raw WAL error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.factories import card_document, write_installation
from tht.memory.index import EdgeIndex


@pytest.fixture
def env(database, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env.update(database.env(), THT_HOME=str(tmp_path / "home"))
    return env


def tht(env, *args, stdin=None):
    proc = subprocess.run(
        [sys.executable, "-m", "tht", *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=120,
    )
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def write_config(tmp_path, open_timeout=10):
    """The runtime file, and the installation's configuration of the home: the tests'
    embedder, the embedded index waiting ``open_timeout`` seconds for another holder."""
    write_installation(tmp_path / "home", index={"engine": "edge", "open_timeout": open_timeout})
    path = tmp_path / "rt.yaml"
    path.write_text("workspace: acme\ndatabase: dwh\nschema: sales\n")
    return str(path)


def test_concurrent_commands_on_the_embedded_index_all_succeed(env, tmp_path):
    config = write_config(tmp_path)
    assert tht(env, "workspace", "create", "acme", "--language", "en")[0] == 0
    code, created, _ = tht(
        env, "memory", "create", "-c", config, "--data", "-", stdin=json.dumps(card_document())
    )
    assert code == 0 and created["status"] == "saved", created
    commands = [("memory", "search", "shipped order", "-c", config)] * 3 + [
        ("memory", "create", "-c", config, "--data", "-")
    ] * 2
    other = json.dumps(
        card_document(title="Carrier codes", content="three letter carrier identifiers")
    )
    with ThreadPoolExecutor(len(commands)) as pool:
        runs = list(pool.map(lambda c: tht(env, *c, stdin=other), commands))
    for code, document, stderr in runs:
        assert code == 0, (document, stderr)
        assert "WouldBlock" not in json.dumps(document) + stderr
    assert all(d["status"] == "saved" for _, d, _ in runs[3:])
    assert all(d["results"][0]["id"] == created["card"]["id"] for _, d, _ in runs[:3])


def test_a_held_index_gives_a_clear_outcome(env, tmp_path):
    config = write_config(tmp_path, open_timeout=1)
    assert tht(env, "workspace", "create", "acme", "--language", "en")[0] == 0
    assert tht(env, "memory", "index", "-c", config)[0] == 0  # creates the collection
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tht.memory.index import EdgeIndex; "
            "i = EdgeIndex(sys.argv[1], 'thoth_memory'); i.ensure_collection(64); print('held', flush=True); "
            "sys.stdin.read(); i.close()",
            str(tmp_path / "home" / "index"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        code, saved, _ = tht(
            env, "memory", "create", "-c", config, "--data", "-", stdin=json.dumps(card_document())
        )
        assert code == 0 and saved["status"] == "saved_index_incomplete"
        assert "held by another process" in saved["index"]["error"]
        code, failed, _ = tht(env, "memory", "search", "shipped", "-c", config)
        assert code == 8 and failed["error"]["code"] == "index_busy"
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    code, retried, _ = tht(env, "memory", "retry", saved["card"]["id"], "-c", config)
    assert code == 0 and retried["index"]["status"] == "current"
    code, found, _ = tht(env, "memory", "search", "shipped order", "-c", config)
    assert code == 0 and [r["id"] for r in found["results"]] == [saved["card"]["id"]]


def _shard(tmp_path, workspace="acme"):
    """The folder of the workspace's serving shard (a rebuild switches to a new one)."""
    return EdgeIndex(tmp_path / "home" / "index", "thoth_memory").workspace_path(workspace)


@pytest.mark.parametrize("loss", ["workspace folder", "edge_config.json"])
def test_a_lost_workspace_shard_fails_recall_and_check_until_rebuilt(
    cli, runtime_file, tmp_path, loss
):
    config = runtime_file("acme")
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    created = cli(
        "memory", "create", "-c", config, "--data", "-", stdin=json.dumps(card_document())
    )
    assert created.document["status"] == "saved"
    card_id = created.document["card"]["id"]
    shard = _shard(tmp_path)
    if loss == "workspace folder":
        shutil.rmtree(shard)
    else:
        (shard / "edge_config.json").unlink()

    # every card has a recorded projection: an empty answer would be a silent lie
    searched = cli("memory", "search", "shipped order", "-c", config)
    assert searched.code == 8 and searched.document["error"]["code"] == "index_lost_points"
    assert "tht memory index" in searched.document["error"]["message"]
    checked = cli("memory", "check", "-c", config)
    assert checked.code == 8 and checked.document["error"]["code"] == "index_drift"
    assert checked.document["error"]["details"]["missing"] == [card_id]

    rebuilt = cli("memory", "index", "-c", config)
    assert rebuilt.code == 0 and rebuilt.document["indexed"] == 1, rebuilt.document
    found = cli("memory", "search", "shipped order", "-c", config)
    assert found.code == 0 and [r["id"] for r in found.document["results"]] == [card_id]
    clean = cli("memory", "check", "-c", config)
    assert clean.code == 0 and clean.document["missing"] == []


def test_an_empty_search_of_an_intact_index_is_an_answer(cli, runtime_file):
    config = runtime_file("acme")
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    assert (
        cli("memory", "create", "-c", config, "--data", "-", stdin=json.dumps(card_document())).code
        == 0
    )
    # nothing matches the filter: the index holds the workspace's points, so [] is true
    searched = cli(
        "memory", "search", "shipped order", "-c", config, "--filters", '{"scope": "Nowhere"}'
    )
    assert searched.code == 0 and searched.document == {"results": []}


def _garble_segment(shard):
    for path in shard.glob("segments/*/segment.json"):
        path.write_bytes(os.urandom(300))


def _garble_wal(shard):
    for path in shard.glob("wal/open-*"):
        with open(path, "r+b") as handle:
            handle.write(os.urandom(4096))


@pytest.mark.parametrize("damage", [_garble_segment, _garble_wal], ids=["segment", "wal"])
def test_a_corrupt_shard_blocks_only_its_own_workspace_and_its_rebuild_replaces_it(
    cli, runtime_file, tmp_path, damage
):
    mine, theirs = runtime_file("acme"), runtime_file("other")
    for workspace in ("acme", "other"):
        assert cli("workspace", "create", workspace, "--language", "en").code == 0
    assert (
        cli("memory", "create", "-c", mine, "--data", "-", stdin=json.dumps(card_document())).code
        == 0
    )
    damaged = cli(
        "memory", "create", "-c", theirs, "--data", "-", stdin=json.dumps(card_document())
    )
    assert damaged.document["status"] == "saved"
    assert cli("memory", "index", "-c", theirs).code == 0  # optimized: segment files on disk
    damage(_shard(tmp_path, "other"))

    # nothing of acme depends on other's files
    assert cli("memory", "index", "-c", mine).code == 0
    saved = cli(
        "memory",
        "create",
        "-c",
        mine,
        "--data",
        "-",
        stdin=json.dumps(
            card_document(title="Carrier codes", content="three letter carrier identifiers")
        ),
    )
    assert saved.code == 0 and saved.document["status"] == "saved", saved.document
    assert (
        cli("memory", "search", "carrier", "-c", mine).document["results"][0]["id"]
        == saved.document["card"]["id"]
    )

    # the damaged workspace's own recall says so; its rebuild replaces the shard
    failed = cli("memory", "search", "shipped order", "-c", theirs)
    assert failed.code == 8 and failed.document["error"]["code"] == "index_unavailable"
    assert "'other'" in failed.document["error"]["message"]
    assert "tht memory index" in failed.document["error"]["message"]
    rebuilt = cli("memory", "index", "-c", theirs)
    assert rebuilt.code == 0 and rebuilt.document["indexed"] == 1, rebuilt.document
    aside = rebuilt.document["replaced_unreadable"]
    assert aside.startswith(str(tmp_path / "home" / "index" / "thoth_memory" / "damaged"))
    found = cli("memory", "search", "shipped order", "-c", theirs)
    assert [r["id"] for r in found.document["results"]] == [damaged.document["card"]["id"]]
    assert cli("memory", "check", "-c", theirs).code == 0


def test_check_finds_damaged_dense_vectors_and_repair_rewrites_them(cli, runtime_file, tmp_path):
    config = runtime_file("acme")
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    titles = ["Shipped orders", "Carrier codes", "Fiscal years"]
    ids = sorted(
        cli(
            "memory",
            "create",
            "-c",
            config,
            "--data",
            "-",
            stdin=json.dumps(card_document(title=t)),
        ).document["card"]["id"]
        for t in titles
    )
    assert cli("memory", "index", "-c", config).code == 0
    assert cli("memory", "check", "-c", config).document["vectors_checked"] == 3
    stores = list(_shard(tmp_path).glob("segments/*/vector_storage-dense/vectors/chunk_*.mmap"))
    assert stores
    for store in stores:
        with open(store, "r+b") as handle:
            handle.write(os.urandom(64 * 4 * len(titles)))

    checked = cli("memory", "check", "-c", config)
    assert checked.code == 8 and checked.document["error"]["code"] == "index_drift"
    assert checked.document["error"]["details"]["damaged"] == ids
    repaired = cli("memory", "check", "--repair", "-c", config)
    assert repaired.code == 0 and repaired.document["repaired"]["indexed"] == 3, repaired.document
    clean = cli("memory", "check", "-c", config)
    assert clean.code == 0 and clean.document["damaged"] == [], clean.document


@pytest.mark.parametrize("first", ["a-save", "a-rebuild"])  # a rebuild: as `tht demo` does
def test_the_index_is_private_to_its_owner(cli, runtime_file, tmp_path, first):
    # points hold scopes, concepts and dependency names in plain text
    config = runtime_file("acme")
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    if first == "a-rebuild":  # the workspace's first shard is a rebuild's generation
        assert cli("memory", "index", "-c", config).code == 0
    assert (
        cli("memory", "create", "-c", config, "--data", "-", stdin=json.dumps(card_document())).code
        == 0
    )
    if first == "a-save":
        assert cli("memory", "index", "-c", config).code == 0
    root = tmp_path / "home" / "index"
    assert root.stat().st_mode & 0o777 == 0o700
    exposed = [str(p) for p in root.rglob("*") if p.stat().st_mode & 0o077]
    assert exposed == []


def test_an_index_written_before_is_made_private(cli, runtime_file, tmp_path):
    config = runtime_file("acme")
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    assert (
        cli("memory", "create", "-c", config, "--data", "-", stdin=json.dumps(card_document())).code
        == 0
    )
    root = tmp_path / "home" / "index"
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (root / "not-ours.txt").write_text("the index path may hold what is not the index's")
    (root / "not-ours.txt").chmod(0o644)
    assert cli("memory", "search", "shipped order", "-c", config).code == 0
    exposed = [p.name for p in [root, *root.rglob("*")] if p.stat().st_mode & 0o077]
    assert exposed == ["not-ours.txt"]


def test_damaged_collection_metadata_is_rewritten_by_the_next_write(cli, runtime_file, tmp_path):
    config = runtime_file("acme")
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    created = cli(
        "memory", "create", "-c", config, "--data", "-", stdin=json.dumps(card_document())
    )
    (tmp_path / "home" / "index" / "thoth_memory" / "layout.json").write_bytes(os.urandom(64))
    failed = cli("memory", "search", "shipped order", "-c", config)
    assert failed.code == 8 and "layout.json" in failed.document["error"]["message"]
    assert cli("memory", "index", "-c", config).code == 0
    found = cli("memory", "search", "shipped order", "-c", config)
    assert [r["id"] for r in found.document["results"]] == [created.document["card"]["id"]]
