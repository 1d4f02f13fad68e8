"""The session directories on a real file system: `<root>/<workspace>/<session>/`, one
workspace never reaching another's files, and no symbolic link followed below the root."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tht.errors import InvalidInput, NotFound
from tht.workflow.contract import ProposalsFile
from tht.workflow.session import SessionFiles, SessionStore

CARD_A = "mem-00000000-0000-4000-8000-00000000000a"
CARD_B = "mem-00000000-0000-4000-8000-00000000000b"


def decided(card: str) -> str:
    return json.dumps({"event": "memory_decided", "card": card, "status": "approved"}) + "\n"


def reviewed(session: str) -> dict:
    return {
        "event": "memory_summary_reviewed",
        "session": session,
        "outcome": "declined",
        "reviewer": "rev",
        "request_digest": "a" * 64,
        "proposals_digest": "b" * 64,
        "cards": [],
        "at": "2026-12-04T10:00:00+00:00",
    }


def make(root: Path, workspace: str, session: str, ledger: str = "") -> Path:
    path = root / workspace / session
    path.mkdir(parents=True)
    (path / "ledger.jsonl").write_text(ledger)
    return path


def contents(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in path.rglob("*") if f.is_file()}


def every_access(files: SessionFiles) -> list[Callable[[], object]]:
    """Each way Memory reads or writes a session's files."""
    proposals = ProposalsFile(session=files.id, workspace=files.workspace)
    return [
        files.require,
        files.ledger,
        files.proposals,
        functools.partial(files.write_proposals, proposals),
        functools.partial(files.append_once, reviewed(files.id), lambda ledger: False),
    ]


@pytest.fixture
def root(tmp_path) -> Path:
    found = tmp_path / "sessions"
    found.mkdir()
    return found


def test_a_session_is_a_directory_of_its_workspace(root):
    store = SessionStore(root)
    make(root, "acme", "s-1", decided(CARD_A))
    make(root, "beta", "s-1", decided(CARD_B))
    acme, beta = store.session("acme", "s-1"), store.session("beta", "s-1")
    assert [c.hex[-1] for c in acme.decided_cards()] == ["a"]
    assert [c.hex[-1] for c in beta.decided_cards()] == ["b"]
    written = acme.write_proposals(ProposalsFile(session="s-1", workspace="acme"))
    assert written == "acme/s-1/memory_proposals.json"
    assert (root / written).is_file() and not (root / "beta/s-1/memory_proposals.json").exists()
    assert beta.proposals() is None and acme.proposals() is not None
    assert acme.append_once(reviewed("s-1"), lambda ledger: False)
    assert (root / "beta/s-1/ledger.jsonl").read_text() == decided(CARD_B)
    assert store.sessions("acme") == ["s-1"] and store.sessions("beta") == []
    assert store.sessions("gamma") == []
    # a session only another workspace has is not found, and named without any path
    make(root, "beta", "s-2")
    with pytest.raises(NotFound) as missing:
        store.session("acme", "s-2").ledger()
    assert missing.value.details == {"workspace": "acme", "session": "s-2"}
    assert str(root) not in missing.value.message


@pytest.mark.parametrize(
    ("workspace", "session"),
    [("acme", "../beta/s-1"), ("acme", "s-1\n"), ("../beta", "s-1"), ("Acme", "s-1"), ("", "s")],
)
def test_ids_are_checked_before_the_file_system_is_touched(root, workspace, session):
    with pytest.raises(InvalidInput):
        SessionStore(root).session(workspace, session)
    with pytest.raises(InvalidInput):
        SessionStore(None).session(workspace, session)


def test_without_a_root_no_session_is_known(root):
    with pytest.raises(NotFound, match="sessions_root") as unknown:
        SessionStore(None).session("acme", "s-1")
    assert unknown.value.details["reason"] == "no_sessions_root"
    assert SessionStore(None).sessions("acme") == []


def test_a_session_directory_that_is_a_symbolic_link_is_refused(root, tmp_path):
    store = SessionStore(root)
    theirs = make(root, "beta", "s-1", decided(CARD_B))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "ledger.jsonl").write_text(decided(CARD_B))
    (root / "acme").mkdir()
    (root / "acme" / "s-theirs").symlink_to(theirs)  # into another workspace
    (root / "acme" / "s-out").symlink_to(outside)  # out of the root
    before = contents(root / "beta"), contents(outside)
    for session in ("s-theirs", "s-out"):
        for attempt in every_access(store.session("acme", session)):
            with pytest.raises(InvalidInput) as refused:
                attempt()
            assert refused.value.details["reason"] == "symbolic_link", session
            assert str(tmp_path) not in refused.value.message
    assert (contents(root / "beta"), contents(outside)) == before
    assert store.sessions("acme") == []  # a link is not listed either


def test_a_workspace_directory_that_is_a_symbolic_link_is_refused(root):
    store = SessionStore(root)
    make(root, "beta", "s-1", decided(CARD_B))
    (root / "beta" / "s-1" / "memory_proposals.json").write_text("{}")
    (root / "acme").symlink_to(root / "beta")
    with pytest.raises(InvalidInput) as refused:
        store.session("acme", "s-1").ledger()
    assert refused.value.details["reason"] == "symbolic_link"
    assert store.sessions("acme") == []


def test_linked_session_files_are_neither_read_nor_written_through(root, tmp_path):
    store = SessionStore(root)
    session = make(root, "acme", "s-1")
    secret = tmp_path / "secret.jsonl"
    secret.write_text(decided(CARD_B))
    (session / "ledger.jsonl").unlink()
    (session / "ledger.jsonl").symlink_to(secret)
    (session / "memory_proposals.json").symlink_to(secret)
    linked = store.session("acme", "s-1")
    for attempt in (
        linked.ledger,
        linked.proposals,
        functools.partial(linked.append_once, reviewed("s-1"), lambda ledger: False),
    ):
        with pytest.raises(InvalidInput) as refused:
            attempt()
        assert refused.value.details["reason"] == "symbolic_link"
    # recording proposals replaces the link itself, never the file it points to
    linked.write_proposals(ProposalsFile(session="s-1", workspace="acme"))
    assert not (session / "memory_proposals.json").is_symlink()
    assert secret.read_text() == decided(CARD_B)


def test_the_root_itself_may_be_a_link_the_operator_chose(root, tmp_path):
    make(root, "acme", "s-1", decided(CARD_A))
    linked = tmp_path / "linked-root"
    linked.symlink_to(root)
    store = SessionStore(linked)
    assert len(store.session("acme", "s-1").decided_cards()) == 1
    assert store.sessions("acme") == []  # no proposals recorded yet
