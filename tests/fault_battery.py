"""Fault batteries: shared by the CI tests (short mode) and bench/fault_bench.py
(full mode). Real embedded PostgreSQL, real Qdrant Edge, the `tht` command as separate
processes; no mocks.

Crash battery
-------------
A table of (operation, crash point, recovery) rows. For each row and repetition, a
fresh workspace gets three indexed cards A, B (linking to A) and C, plus the row's
pending work; the row's command then runs as its own process with ``THT_CRASH_AT``
naming the point, and must die there (exit 70: a row whose point is never reached
fails). The operator's recovery follows as separate processes:

- ``retry``:  ``tht memory pending``, then ``tht memory retry <id>`` for each item;
- ``index``:  ``tht memory index`` again;
- ``repair``: ``tht memory check --repair``;
- ``redeliver``: ``tht memory review-apply`` with the same signed gate request (the
  review's receipt answers it);
- ``catalog-retry``: ``tht catalog status`` names the pending run, ``tht catalog retry
  <run-id>`` completes it.

Then the workspace is audited against the model of what must be there (the setup's
cards, plus the crashed mutation if the point lies after its archive commit, and not
if before: a mutation is all or nothing). The counts, per trial:

- **lost**: a card the model says exists that the archive lacks or holds at an older
  revision or with other content (a lost update), or an archive card that recall does
  not return after recovery (missing from the index, or still pending);
- **doubled**: a mutation applied twice (a create that left more than one card, a card
  above its expected revision), or one card held twice by the index or returned twice
  by one recall;
- **stale**: an archive card whose index point or recorded projection has another
  revision or fingerprint than the card (also what ``tht memory check`` reports as
  stale or wrong_fingerprint);
- **leaked**: an index point, a recorded projection or a pending operation of a card
  that no longer exists (``check``'s orphans), any pending operation left after
  recovery, or a recall result that is not a current card of this workspace.

Each card is counted once per kind. A card the command deletes (``trial.deleted``)
must not come back: recall by its own text must not return it (leaked).

Operations with more durable state than cards have their own audit in ``AUDITS``:

- ``review-apply`` (a session whose proposals add a rule linking to A and update B):
  the receipt exists and names the added card and B; the session's ledger holds
  exactly one ``memory_summary_reviewed`` event (two: doubled; none: lost), equal to
  the receipt; the receipt records the ledger append (else stale). The added card
  must exist once, B be at revision 2, both indexed.
- ``catalog-sync`` (a SQLite DWH, synchronized once, then a table dropped; two cards
  depend on it, a third links to one of them): the completed run names exactly the
  model's deleted cards; Memory's cleanup receipt is completed, with no open
  tombstone (leaked); a card written afterwards on the dropped table survives a
  second ``tht catalog retry``, which answers the same run (a no-op).

A step added later is one ``Row`` in ``ROWS``; a new operation also gets its setup
function in ``OPERATIONS`` (it writes the trial's pending state, sets ``trial.args``
and updates ``trial.expected``; ``trial.env`` and ``trial.config`` add environment
and runtime file keys), and a new recovery its function in ``RECOVERIES``. A crash
point in the product without a row fails
``test_every_crash_point_in_the_product_has_a_row``.

Commands run through a launcher: ``ForkLauncher`` (the default: a new process per
command, forked from a pre-imported parent that calls the entry point of ``tht``) or
``ExecLauncher`` (``python -m tht``, ~1.5 s of imports per command).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.factories import card, card_document
from tht.faults import CRASH_EXIT_CODE
from tht.memory.archive.postgres import PostgresArchive
from tht.memory.card_store import MemoryService, WorkspaceService
from tht.memory.embedding import HashingEmbedder
from tht.memory.index import EdgeIndex, IndexDrift
from tht.memory.indexing import IndexProjector
from tht.memory.model import card_id_to_uuid
from tht.memory.recall_service import WIDEST_FAMILIES_OF, RecallQuery, RecallService

ROOT = Path(__file__).resolve().parent.parent
COLLECTION = "thoth_memory"  # the runtime file's default collection
DIMENSION = 64


# --- running the command ------------------------------------------------------------


@dataclass
class Run:
    code: int
    document: Any
    stderr: str


class ExecLauncher:
    """`python -m tht ...`: a new interpreter per command."""

    name = "exec"

    def run(self, args: list[str], env: dict[str, str]) -> Run:
        proc = subprocess.run(
            [sys.executable, "-m", "tht", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        return Run(proc.returncode, _parse(proc.stdout), proc.stderr)

    def close(self) -> None:
        pass


class ForkLauncher:
    """A new process per command, forked from a pre-imported parent (tests/cli_forkserver.py)."""

    name = "fork"

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
        env["PYTHONPATH"] = str(ROOT)
        self._server = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "cli_forkserver.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._dir = Path(tempfile.mkdtemp(prefix="tht-fork-"))
        self._lock = threading.Lock()

    def run(self, args: list[str], env: dict[str, str]) -> Run:
        with self._lock:
            out, err = self._dir / "stdout", self._dir / "stderr"
            request = {"args": list(args), "env": env, "stdout": str(out), "stderr": str(err)}
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
            line = self._server.stdout.readline()
            if not line:
                raise RuntimeError("the tht fork server died")
            return Run(json.loads(line)["code"], _parse(out.read_text()), err.read_text())

    def close(self) -> None:
        self._server.stdin.close()
        self._server.wait(timeout=30)
        for path in self._dir.iterdir():
            path.unlink()
        self._dir.rmdir()


def launcher(name: str) -> ExecLauncher | ForkLauncher:
    return ForkLauncher() if name == "fork" else ExecLauncher()


def _parse(stdout: str) -> Any:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return json.loads(lines[0]) if len(lines) == 1 else {"unparsed_stdout": stdout}


# --- the stack a battery works on -------------------------------------------------------


@dataclass
class Target:
    """A database (runtime and superuser logins) and a directory for index data."""

    runtime: str
    migrator: str
    superuser: str
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
        env.update(
            THT_CATALOG_RUNTIME_DATABASE_URL=self.runtime,
            THT_CATALOG_MIGRATOR_DATABASE_URL=self.migrator,
            THT_HOME=str(self.home / "home"),
            **extra,
        )
        return env


class Stack:
    """Archive + Edge index + services in this process, like the bootstrap builds them.
    The Edge shard is single-process: ``release()`` before another process uses it."""

    def __init__(self, archive: PostgresArchive, index_path: Path) -> None:
        self.archive = archive
        self.index = EdgeIndex(index_path, COLLECTION, open_timeout=30)
        self.embedder = HashingEmbedder(DIMENSION)
        self.projector = IndexProjector(archive, self.index, self.embedder)
        self.memory = MemoryService(archive, self.projector)
        self.offline = MemoryService(archive)  # saves that leave their index work pending
        self.workspaces = WorkspaceService(archive)
        self.recall_service = RecallService(
            archive, self.index, self.embedder, self.projector.format
        )

    def recall(
        self, workspace: str, question: str, kind: str = "search", top: int = 50
    ) -> list[tuple[str, int]]:
        # every reusable family: the audit asks each card back by its own text
        query = RecallQuery(top=top, families=list(WIDEST_FAMILIES_OF[kind]))
        results = self.recall_service.recall(workspace, question, kind, query=query)
        return [(r.card.id, r.card.revision) for r in results]

    def release(self) -> None:
        self.index.close()


def runtime_file(directory: Path, workspace: str, index_path: Path, **extra: Any) -> str:
    """The trial's runtime file, and beside it its installation's configuration
    (``config-<workspace>.yaml``, named by ``THT_CONFIG`` in ``trial_env``): ``extra``
    sets the runtime file's schema, or the installation's sessions_root and dwh."""
    path = directory / f"runtime-{workspace}.yaml"
    keys = {"workspace": workspace, "database": "dwh", "schema": "sales"}
    keys.update({k: v for k, v in extra.items() if k in keys})
    path.write_text("".join(f"{k}: {v}\n" for k, v in keys.items()))
    installation = {
        "embedders": {"default": {"provider": "hashing", "dimension": DIMENSION}},
        "index": {"engine": "edge", "path": str(index_path), "open_timeout": 30},
        **{k: v for k, v in extra.items() if k not in keys},
    }
    (directory / f"config-{workspace}.yaml").write_text(json.dumps(installation))
    return str(path)


def installation_file(config: str) -> str:
    """The installation's configuration written beside the runtime file ``config``."""
    runtime = Path(config)
    return str(runtime.with_name(runtime.name.replace("runtime-", "config-", 1)))


# --- the crash battery ----------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    operation: str
    point: str
    recovery: str  # a key of RECOVERIES: retry | index | repair | redeliver | catalog-retry
    applied: bool = True  # the crashed command's archive commit happened (False: crash before it)


SAVE_POINTS = [
    "projector.after_embedding",
    "projector.after_index_write",
    "projector.after_clear_operation",
    "projector.after_archive_commit",
]
ROWS: list[Row] = [
    *(Row(op, "save.before_archive_commit", "retry", applied=False) for op in ("create", "update")),
    *(
        Row(op, point, "retry")
        for op in ("create", "update")
        for point in ["save.after_archive_commit", *SAVE_POINTS, "save.after_index_update"]
    ),
    Row("delete", "delete.before_archive_commit", "retry", applied=False),
    *(
        Row("delete", point, "retry")
        for point in [
            "delete.after_archive_commit",
            "projector.after_index_write",
            "projector.after_clear_operation",
            "projector.after_archive_commit",
            "delete.after_index_update",
        ]
    ),
    *(Row("retry-upsert", point, "retry") for point in SAVE_POINTS),
    *(Row("retry-delete", point, "retry") for point in SAVE_POINTS[1:]),
    *(
        Row("index", point, "index")
        for point in [*SAVE_POINTS, "index.after_batch", "index.before_optimize"]
    ),
    *(Row("repair", point, "repair") for point in SAVE_POINTS),
    # tht memory review-apply: both points lie after the memory commit (the receipt's)
    *(
        Row("review-apply", point, "redeliver")
        for point in ["review_apply.after_memory_commit", "review_apply.after_ledger_append"]
    ),
    # tht catalog sync with a removed table: after the Catalog's commit (Memory not
    # reached) and after Memory's archive delete (index deletes not done)
    *(
        Row("catalog-sync", point, "catalog-retry")
        for point in ["catalog.after_catalog_commit", "cleanup.after_archive_delete"]
    ),
]


@dataclass
class Trial:
    """One workspace's state before the crashed command, and what must hold after."""

    workspace: str
    ids: dict[str, str]  # A, B, C
    expected: dict[str, tuple[int, str]]  # card id -> (revision, content) that must exist
    args: list[str]  # the command that is made to crash
    operation: str = ""  # the row's (set by run_trial)
    created_marker: str | None = None  # content of the card a create (or a review's add) makes
    create_applied: bool = False
    deleted: dict[str, str] = field(
        default_factory=dict
    )  # id -> content of cards the command deletes
    env: dict[str, str] = field(
        default_factory=dict
    )  # more environment for every command of the trial
    config: dict[str, str] = field(default_factory=dict)  # more keys of the runtime file
    runtime: str = ""  # the runtime login (set by run_trial)
    session: Any = (
        None  # review-apply: the workflow session (tests/integration/workflow_support.Session)
    )
    recovered: Any = None  # what the recovery answered (catalog retry: the completed run)


def _content(tag: str, workspace: str) -> str:
    return f"{tag} {workspace.replace('-', ' ')} marker{uuid.uuid4().hex[:10]}"


def _base(stack: Stack, workspace: str, data_dir: Path) -> Trial:
    stack.workspaces.create(workspace, "en")
    a = stack.memory.create_card(
        workspace, card(title="A", content=_content("alpha", workspace))
    ).card
    b = stack.memory.create_card(
        workspace,
        card(
            title="B",
            content=_content("beta", workspace),
            links=[{"target": a.id, "meaning": "refines"}],
        ),
    ).card
    c = stack.memory.create_card(
        workspace, card(title="C", content=_content("gamma", workspace))
    ).card
    expected = {x.id: (x.revision, x.content) for x in (a, b, c)}
    return Trial(workspace, {"A": a.id, "B": b.id, "C": c.id}, expected, [])


def _document(data_dir: Path, workspace: str, document: dict) -> str:
    path = data_dir / f"card-{workspace}.json"
    path.write_text(json.dumps(document))
    return str(path)


def _offline_update(stack: Stack, trial: Trial) -> None:
    b = trial.ids["B"]
    content = _content("beta edited", trial.workspace)
    saved = stack.offline.update_card(
        trial.workspace, b, card(title="B", content=content, revision=1)
    )
    trial.expected[b] = (saved.card.revision, content)


def _offline_delete(stack: Stack, trial: Trial) -> None:
    stack.offline.delete_card(trial.workspace, trial.ids["C"])
    trial.deleted[trial.ids["C"]] = trial.expected.pop(trial.ids["C"])[1]


def setup_create(stack: Stack, trial: Trial, row: Row, data_dir: Path) -> None:
    trial.created_marker = _content("created", trial.workspace)
    doc = card_document(
        title="Created",
        content=trial.created_marker,
        links=[{"target": trial.ids["A"], "meaning": "refines"}],
    )
    trial.args = ["memory", "create", "--data", _document(data_dir, trial.workspace, doc)]
    trial.create_applied = row.applied


def setup_update(stack: Stack, trial: Trial, row: Row, data_dir: Path) -> None:
    b = trial.ids["B"]
    content = _content("beta edited", trial.workspace)
    doc = card_document(
        title="B",
        content=content,
        revision=1,
        links=[{"target": trial.ids["C"], "meaning": "uses"}],
    )
    trial.args = ["memory", "update", b, "--data", _document(data_dir, trial.workspace, doc)]
    if row.applied:
        trial.expected[b] = (2, content)


def setup_delete(stack: Stack, trial: Trial, row: Row, data_dir: Path) -> None:
    a = trial.ids["A"]  # B links to it: the link goes with it
    trial.args = ["memory", "delete", a, "--yes"]
    if row.applied:
        trial.deleted[a] = trial.expected.pop(a)[1]


def setup_retry_upsert(stack: Stack, trial: Trial, row: Row, data_dir: Path) -> None:
    _offline_update(stack, trial)
    trial.args = ["memory", "retry", trial.ids["B"]]


def setup_retry_delete(stack: Stack, trial: Trial, row: Row, data_dir: Path) -> None:
    _offline_delete(stack, trial)
    trial.args = ["memory", "retry", trial.ids["C"]]


def setup_index(stack: Stack, trial: Trial, row: Row, data_dir: Path) -> None:
    _offline_update(stack, trial)
    _offline_delete(stack, trial)
    trial.args = ["memory", "index"]


def setup_repair(stack: Stack, trial: Trial, row: Row, data_dir: Path) -> None:
    _offline_update(stack, trial)
    _offline_delete(stack, trial)
    stack.index.delete(
        trial.workspace, [card_id_to_uuid(trial.ids["A"])]
    )  # drift: a missing point too
    trial.args = ["memory", "check", "--repair"]


def setup_review_apply(stack: Stack, trial: Trial, row: Row, data_dir: Path) -> None:
    """A workflow session whose recorded proposals add a rule (linking to A) and update
    B (revision 1 -> 2), and the reviewer's signed gate request applying both."""
    from tests.integration.workflow_support import (
        Session,
        add,
        decision,
        gate_document,
        join_rule,
        new_key,
        update,
    )
    from tht.accounts import Principal
    from tht.workflow.proposals import ProposalService
    from tht.workflow.session import SessionStore
    from tht.workflow.summary import SummaryService

    workspace, ids = trial.workspace, trial.ids
    root = data_dir / "sessions"
    session = Session(root, workspace, f"s-{workspace}").log(
        decision("d1", "sql_corrected", explanation="A job code repeats across fiscal years."),
        decision("d2", "concept_clarified", text="B, as the reviewer explained it"),
    )
    trial.created_marker = _content("reviewed rule", workspace)
    edited = _content("beta reviewed", workspace)
    proposals = [
        add(
            "p1",
            ["d1"],
            join_rule(content=trial.created_marker),
            links=[{"target": ids["A"], "meaning": "refines"}],
        ),
        update("p2", ["d2"], ids["B"], 1, card_document(title="B", content=edited)),
    ]
    sessions = SessionStore(root)
    ProposalService(stack.archive, sessions).propose(
        workspace, session.id, {"version": 1, "proposals": proposals}
    )
    summary = SummaryService(stack.archive, sessions).summary(workspace, session.id)
    review = {
        "decision": "apply",
        "proposals_digest": summary["proposals_digest"],
        "selected": [{"proposal": "p1"}, {"proposal": "p2"}],
    }
    keys = data_dir / f"gate-{workspace}"
    keys.mkdir()
    key_path, key = new_key(keys)
    request = data_dir / f"gate-request-{workspace}.json"
    request.write_text(
        json.dumps(
            gate_document(
                key,
                session.id,
                review,
                workspace=workspace,
                principal=Principal("reviewer", "admin", frozenset({workspace})),
            )
        )
    )
    trial.args = ["memory", "review-apply", "--request", str(request)]
    trial.env["THT_PROTECTED_REQUEST_KEY_FILE"] = str(key_path)
    trial.config["sessions_root"] = str(root)
    trial.session = session
    trial.create_applied = row.applied
    if row.applied:
        trial.expected[ids["B"]] = (2, edited)


def setup_catalog_sync(stack: Stack, trial: Trial, row: Row, data_dir: Path) -> None:
    """A SQLite DWH bound to the workspace and synchronized once (the baseline); two
    cards depend on its table customers (one on the table, one on a column), a third
    on orders links to the first; then customers is dropped: `tht catalog sync` must
    delete exactly the two."""
    from tests.integration.catalog_support import DWH_ENV, create_sqlite_dwh, dep, sqlite_execute
    from tht.catalog.model import Binding
    from tht.catalog.service import Catalog
    from tht.catalog.store import CatalogStore
    from tht.installation import DwhConnection
    from tht.memory.cleanup import PhysicalCleanup

    workspace = trial.workspace
    path = data_dir / f"dwh-{workspace}.sqlite"
    url = create_sqlite_dwh(path)

    def made(
        family: str, tag: str, table: str, column: str | None = None, links: list | None = None
    ):
        return stack.memory.create_card(
            workspace,
            card(
                family,
                title=tag,
                content=_content(tag, workspace),
                dependencies=[dep(table, column, schema="main")],
                links=links or [],
            ),
        ).card

    doomed = [
        made("sql_rule", "customers deduplicated", "customers"),
        made("domain_clarification", "customer region", "customers", "region"),
    ]
    survivor = made(
        "sql_rule",
        "orders status",
        "orders",
        "status",
        links=[{"target": doomed[0].id, "meaning": "refines"}],
    )
    trial.expected[survivor.id] = (survivor.revision, survivor.content)
    trial.deleted.update({c.id: c.content for c in doomed})
    baseline = Catalog(
        CatalogStore(stack.archive),
        PhysicalCleanup(stack.archive, stack.projector),
        {DWH_ENV: url},
        connections={DWH_ENV: DwhConnection(url_env=DWH_ENV)},
    ).sync(workspace, Binding(workspace, "dwh", "main", DWH_ENV))
    assert baseline["status"] == "completed", baseline
    sqlite_execute(path, "DROP TABLE customers;")
    trial.args = ["catalog", "sync"]
    trial.env[DWH_ENV] = url
    trial.config.update(schema="main", dwh={DWH_ENV: {"url_env": DWH_ENV}})


Setup = Callable[[Stack, Trial, Row, Path], None]
OPERATIONS: dict[str, Setup] = {
    "create": setup_create,
    "update": setup_update,
    "delete": setup_delete,
    "retry-upsert": setup_retry_upsert,
    "retry-delete": setup_retry_delete,
    "index": setup_index,
    "repair": setup_repair,
    "review-apply": setup_review_apply,
    "catalog-sync": setup_catalog_sync,
}


@dataclass
class Audit:
    lost: set[str] = field(default_factory=set)
    doubled: set[str] = field(default_factory=set)
    stale: set[str] = field(default_factory=set)
    leaked: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {
            "lost": len(self.lost),
            "doubled": len(self.doubled),
            "stale": len(self.stale),
            "leaked": len(self.leaked),
        }

    def clean(self) -> bool:
        return not any(self.counts().values())


def audit(stack: Stack, target: Target, launch, config: str, trial: Trial) -> Audit:
    """Count lost, doubled, stale and leaked cards of the trial's workspace (module doc)."""
    found = Audit()
    workspace = trial.workspace
    env = target.env(**trial.env)
    extra = AUDITS.get(trial.operation)
    if (
        extra is not None
    ):  # first: it may still run commands (a second retry) the model must survive
        extra(target, launch, config, env, trial, found)
    with psycopg.connect(target.superuser) as conn:  # the whole truth, past row-level security
        cards = {
            f"mem-{r[0]}": (r[1], r[2])
            for r in conn.execute(
                "SELECT id, revision, content FROM thoth_memory.cards WHERE workspace_id = %s",
                (workspace,),
            )
        }
        ops = [
            f"mem-{r[0]}"
            for r in conn.execute(
                "SELECT card_id FROM thoth_memory.projection_ops WHERE workspace_id = %s",
                (workspace,),
            )
        ]
        projections = {
            f"mem-{r[0]}": (r[1], r[2])
            for r in conn.execute(
                "SELECT card_id, revision, fingerprint FROM thoth_memory.projections WHERE workspace_id = %s",
                (workspace,),
            )
        }
    check = launch.run(["memory", "check", "-c", config], env)
    # drift is what the audit below counts; any other failure of the check is a finding
    if check.code != 0 and check.document.get("error", {}).get("code") != "index_drift":
        raise AssertionError(f"tht memory check failed: {check.document} {check.stderr}")
    fingerprint = stack.projector.format.fingerprint("en")
    try:
        points = stack.index.scroll_ids(workspace)
        recalls = {
            card_id: stack.recall(workspace, content) for card_id, (_, content) in cards.items()
        }
        gone = {
            card_id: stack.recall(workspace, content) for card_id, content in trial.deleted.items()
        }
    finally:
        stack.release()

    # lost (and doubled updates): the model against the archive
    for card_id, (revision, content) in trial.expected.items():
        if card_id not in cards:
            found.lost.add(card_id)
            found.notes.append(f"{card_id} missing from the archive")
        elif cards[card_id][0] > revision:
            found.doubled.add(card_id)
            found.notes.append(f"{card_id} at revision {cards[card_id][0]}, expected {revision}")
        elif cards[card_id] != (revision, content):
            found.lost.add(card_id)
            found.notes.append(f"{card_id} at revision {cards[card_id][0]}, expected {revision}")
    created = [
        i
        for i, (_, content) in cards.items()
        if trial.created_marker and content == trial.created_marker
    ]
    if len(created) > 1:
        found.doubled.update(created[1:])
    if trial.create_applied and not created:
        found.lost.add("created card")
        found.notes.append("the committed create left no card")
    if not trial.create_applied and created:
        found.leaked.update(created)
        found.notes.append("a create that crashed before its commit left a card")
    unexpected = set(cards) - set(trial.expected) - set(created)
    if unexpected:
        found.leaked.update(unexpected)
        found.notes.append(f"cards outside the model: {sorted(unexpected)}")

    # the index and the recorded projections against the archive
    point_ids = Counter(f"mem-{p.id}" for p in points)
    found.doubled.update(i for i, n in point_ids.items() if n > 1)
    for p in points:
        card_id = f"mem-{p.id}"
        if card_id not in cards:
            found.leaked.add(card_id)
            found.notes.append(f"index point of absent card {card_id}")
        elif p.revision != cards[card_id][0] or p.fingerprint != fingerprint:
            found.stale.add(card_id)
            found.notes.append(
                f"point of {card_id} at revision {p.revision}, card at {cards[card_id][0]}"
            )
    for card_id, (revision, fp) in projections.items():
        if card_id not in cards:
            found.leaked.add(card_id)
            found.notes.append(f"projection record of absent card {card_id}")
        elif (revision, fp) != (cards[card_id][0], fingerprint):
            found.stale.add(card_id)
    for card_id in ops:
        (found.leaked if card_id not in cards else found.lost).add(card_id)
        found.notes.append(f"pending operation left for {card_id}")
    report = check.document
    found.stale.update(report["stale"] + report["wrong_fingerprint"])
    found.leaked.update(report["orphan"])
    found.lost.update(report["missing"])

    # recall: every current card found by its own text, nothing else ever returned; a
    # deleted card is not found by its own text (nor anything that is not a current card)
    def only_current_cards(results: list[tuple[str, int]], asked: str) -> None:
        for result_id, revision in results:
            if result_id not in cards:
                found.leaked.add(result_id)
                found.notes.append(
                    f"recall by the text of {asked} returned {result_id}, not a card of {workspace}"
                )
            elif revision != cards[result_id][0]:
                found.stale.add(result_id)

    for card_id, results in recalls.items():
        ids = [i for i, _ in results]
        if card_id not in ids:
            found.lost.add(card_id)
            found.notes.append(f"{card_id} not recalled by its own text")
        found.doubled.update(i for i, n in Counter(ids).items() if n > 1)
        only_current_cards(results, card_id)
    for card_id, results in gone.items():
        only_current_cards(results, f"deleted {card_id}")
    return found


def audit_review(
    target: Target, launch, config: str, env: dict[str, str], trial: Trial, found: Audit
) -> None:
    """review-apply: the receipt exists, the session's ledger holds exactly one
    memory_summary_reviewed event (of this receipt, naming the cards it applied), and
    the receipt records that the ledger has it."""
    with psycopg.connect(target.superuser) as conn:
        receipt = conn.execute(
            "SELECT request_digest, ledger_appended_at, result FROM thoth_memory.review_receipts"
            " WHERE workspace_id = %s AND session_id = %s",
            (trial.workspace, trial.session.id),
        ).fetchone()
    events = trial.session.reviewed_events()
    if receipt is None:
        found.lost.add("review receipt")
        found.notes.append("no review receipt")
        return
    digest, appended_at, result = receipt
    if len(events) > 1:
        found.doubled.add("memory_summary_reviewed")
        found.notes.append(f"{len(events)} memory_summary_reviewed events in the ledger")
    elif not events:
        found.lost.add("memory_summary_reviewed")
        found.notes.append("no memory_summary_reviewed event in the ledger")
    for event in events:
        if event["request_digest"] != digest or [
            (c["card"], c["action"]) for c in event["cards"]
        ] != [(c["card"], c["action"]) for c in result["cards"]]:
            found.stale.add("memory_summary_reviewed")
            found.notes.append(f"the ledger event differs from the receipt: {event}")
    if appended_at is None:
        found.stale.add("review receipt")
        found.notes.append("the receipt does not record the ledger append")
    applied = {c["card"] for c in result["cards"] if c["action"] in ("add", "update")}
    if trial.ids["B"] not in applied or len(applied) != 2:
        found.lost.add("review receipt")
        found.notes.append(f"the receipt applied {sorted(applied)}, not the added card and B")


def audit_cleanup(
    target: Target, launch, config: str, env: dict[str, str], trial: Trial, found: Audit
) -> None:
    """catalog sync: the run is completed and names exactly the model's deleted cards;
    Memory's cleanup receipt is completed with no open tombstone; a second `tht catalog
    retry` is a no-op (same run, and a card written since on the removed table is
    kept)."""
    from tests.integration.catalog_support import dep

    run = trial.recovered
    if run is None:
        found.leaked.add("catalog run")
        found.notes.append("no completed run after the recovery")
        return
    listed = {c["id"] for c in run["deleted_cards"]}
    found.lost.update(listed - set(trial.deleted))  # deleted, though the model keeps it
    found.leaked.update(set(trial.deleted) - listed)  # deleted, though the run does not say so
    if listed != set(trial.deleted):
        found.notes.append(f"the run deleted {sorted(listed)}, the model {sorted(trial.deleted)}")
    late_content = _content("written after the cleanup", trial.workspace)
    path = Path(config).parent / f"late-{trial.workspace}.json"
    path.write_text(
        json.dumps(
            card_document(
                "sql_rule",
                title="late",
                content=late_content,
                dependencies=[dep("customers", schema="main")],
            )
        )
    )
    late = launch.run(["memory", "create", "--data", str(path), "-c", config], env)
    if late.code != 0:
        raise AssertionError(f"tht memory create failed: {late.document} {late.stderr}")
    trial.expected[late.document["card"]["id"]] = (late.document["card"]["revision"], late_content)
    again = launch.run(["catalog", "retry", run["run_id"], "-c", config], env)
    if again.code != 0 or again.document != run:
        found.doubled.add("catalog retry")
        found.notes.append(f"a second retry is not a no-op: {again.code} {again.document}")
    with psycopg.connect(target.superuser) as conn:
        tombstones = [
            f"mem-{r[0]}"
            for r in conn.execute(
                "SELECT card_id FROM thoth_memory.vector_tombstones WHERE workspace_id = %s AND removed_at IS NULL",
                (trial.workspace,),
            )
        ]
        receipts = conn.execute(
            "SELECT status, jsonb_array_length(deleted_cards) FROM thoth_memory.cleanup_receipts"
            " WHERE workspace_id = %s",
            (trial.workspace,),
        ).fetchall()
    if tombstones:
        found.leaked.update(tombstones)
        found.notes.append(f"open tombstones: {tombstones}")
    if receipts != [("completed", len(trial.deleted))]:
        found.leaked.add("cleanup receipt")
        found.notes.append(
            f"cleanup receipts {receipts}, expected one completed with {len(trial.deleted)} cards"
        )


Check = Callable[[Target, Any, str, dict[str, str], Trial, Audit], None]
AUDITS: dict[str, Check] = {"review-apply": audit_review, "catalog-sync": audit_cleanup}


@dataclass
class TrialResult:
    row: Row
    repetition: int
    crashed: bool
    recovered: bool
    audit: Audit
    seconds: float


def recover_retry(launch, trial: Trial, config: str, env: dict[str, str]) -> list[str]:
    pending = launch.run(["memory", "pending", "-c", config], env)
    if pending.code != 0:
        return [f"pending: {pending.document}"]
    failures = []
    for item in pending.document["items"]:
        retried = launch.run(["memory", "retry", item["card_id"], "-c", config], env)
        if retried.code != 0 or retried.document["index"]["status"] != "current":
            failures.append(f"retry {item['card_id']}: {retried.document}")
    return failures


def _once(*args: str) -> Callable[[Any, Trial, str, dict[str, str]], list[str]]:
    def run(launch, trial: Trial, config: str, env: dict[str, str]) -> list[str]:
        done = launch.run([*args, "-c", config], env)
        return [] if done.code == 0 else [f"{' '.join(args)}: {done.document}"]

    return run


def recover_redeliver(launch, trial: Trial, config: str, env: dict[str, str]) -> list[str]:
    """The gate delivers the same signed request again: the receipt answers it."""
    done = launch.run([*trial.args, "-c", config], env)
    trial.recovered = done.document
    if done.code != 0 or done.document["index"]["status"] != "current":
        return [f"review-apply again: {done.code} {done.document}"]
    return []


def recover_catalog_retry(launch, trial: Trial, config: str, env: dict[str, str]) -> list[str]:
    """`tht catalog status` names the pending run; `tht catalog retry <run-id>` completes it."""
    status = launch.run(["catalog", "status", "-c", config], env)
    if status.code != 0 or status.document["pending_run"] is None:
        return [f"no pending run to retry: {status.code} {status.document}"]
    run_id = status.document["pending_run"]["run_id"]
    retried = launch.run(["catalog", "retry", run_id, "-c", config], env)
    if retried.code != 0 or retried.document["status"] != "completed":
        return [f"catalog retry {run_id}: {retried.code} {retried.document}"]
    trial.recovered = retried.document
    return []


Recovery = Callable[[Any, Trial, str, dict[str, str]], list[str]]
RECOVERIES: dict[str, Recovery] = {
    "retry": recover_retry,  # tht memory pending, then tht memory retry <id> per item
    "index": _once("memory", "index"),
    "repair": _once("memory", "check", "--repair"),
    "redeliver": recover_redeliver,  # tht memory review-apply with the same request
    "catalog-retry": recover_catalog_retry,
}


def recover(launch, row: Row, trial: Trial, config: str, env: dict[str, str]) -> list[str]:
    """The operator's recovery; returns the failures."""
    return RECOVERIES[row.recovery](launch, trial, config, env)


def run_trial(
    row: Row,
    repetition: int,
    archive: PostgresArchive,
    target: Target,
    launch,
    index_path: Path,
    workspace: str,
) -> TrialResult:
    started = time.perf_counter()
    data_dir = target.home / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(archive, index_path)
    try:
        trial = _base(stack, workspace, data_dir)
        trial.operation, trial.runtime = row.operation, target.runtime
        OPERATIONS[row.operation](stack, trial, row, data_dir)
    finally:
        stack.release()
    config = runtime_file(data_dir, workspace, index_path, **trial.config)
    trial.env["THT_CONFIG"] = installation_file(config)
    crashed = launch.run(
        [*trial.args, "-c", config], target.env(**trial.env, THT_CRASH_AT=row.point)
    )
    failures = recover(launch, row, trial, config, target.env(**trial.env))
    result = audit(stack, target, launch, config, trial)
    if crashed.code != CRASH_EXIT_CODE:
        result.notes.append(
            f"the command did not crash at {row.point}: exit {crashed.code} {crashed.document}"
        )
    result.notes += failures
    return TrialResult(
        row,
        repetition,
        crashed.code == CRASH_EXIT_CODE,
        not failures,
        result,
        time.perf_counter() - started,
    )


class CrashBench:
    """What the crash battery's trials share: the archive's pool, the launcher (the fork
    server imports the product once) and the Edge data directory. One trial per
    ``trial(row, number, repetition)``, in workspace ``r<number>-t<repetition>``: all
    trials' workspaces lie side by side in one data directory, or one per row."""

    def __init__(
        self, target: Target, launcher_name: str = "fork", shard_per_row: bool = False
    ) -> None:
        self.target = target
        self.shard_per_row = shard_per_row
        self.launch = launcher(launcher_name)
        try:
            self.archive = PostgresArchive(target.runtime, max_connections=2).open()
        except BaseException:
            self.launch.close()
            raise

    def trial(self, row: Row, number: int, repetition: int = 0) -> TrialResult:
        index_path = self.target.home / (f"index-{number:02d}" if self.shard_per_row else "index")
        workspace = f"r{number:02d}-t{repetition:03d}"
        return run_trial(
            row, repetition, self.archive, self.target, self.launch, index_path, workspace
        )

    def close(self) -> None:
        try:
            self.archive.close()
        finally:
            self.launch.close()


def crash_battery(
    target: Target,
    rows: list[Row],
    repetitions: int,
    launcher_name: str = "fork",
    progress: Callable[[TrialResult], None] | None = None,
    shard_per_row: bool = False,
) -> list[TrialResult]:
    """Every row ``repetitions`` times (see ``CrashBench``)."""
    results = []
    bench = CrashBench(target, launcher_name, shard_per_row)
    try:
        for number, row in enumerate(rows):
            for repetition in range(repetitions):
                result = bench.trial(row, number, repetition)
                results.append(result)
                if progress:
                    progress(result)
    finally:
        bench.close()
    return results


def summarize(results: list[TrialResult]) -> list[dict[str, Any]]:
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        line = table.setdefault(
            (r.row.operation, r.row.point),
            {
                "operation": r.row.operation,
                "crash_point": r.row.point,
                "recovery": r.row.recovery,
                "trials": 0,
                "crashed": 0,
                "recovered": 0,
                "lost": 0,
                "doubled": 0,
                "stale": 0,
                "leaked": 0,
                "seconds": 0.0,
            },
        )
        line["trials"] += 1
        line["crashed"] += r.crashed
        line["recovered"] += r.recovered
        for kind, n in r.audit.counts().items():
            line[kind] += n
        line["seconds"] = round(line["seconds"] + r.seconds, 2)
    return list(table.values())


@contextmanager
def pooled(conninfo: str, max_connections: int = 2) -> Iterator[PostgresArchive]:
    archive = PostgresArchive(conninfo, max_connections=max_connections).open()
    try:
        yield archive
    finally:
        archive.close()


# --- concurrent writers --------------------------------------------------------------


def _writer(
    stack: Stack,
    workspace: str,
    worker: int,
    mutations: int,
    shared: str,
    own: str,
    blind: str,
    errors: list,
    conflicts: list,
    churn: list,
) -> None:
    from tests.integration.test_concurrency import _append  # the same read-modify-write

    try:
        found = 0
        temporary = None
        # odd writers save their blind updates and churn without the index (left
        # pending, as with the index down), racing the even writers' propagations
        service = stack.offline if worker % 2 else stack.memory
        for i in range(mutations):
            step = i % 8
            if step in (0, 4):
                found += _append(
                    stack.memory, shared, f"w{worker}-{i}", conditional=True, workspace=workspace
                )
            elif step in (1, 5):
                found += _append(
                    stack.memory, own, f"w{worker}-{i}", conditional=True, workspace=workspace
                )
            elif step in (2, 6):
                service.update_card(workspace, blind, card(title="blind", content=f"w{worker}-{i}"))
            elif step == 3:
                temporary = service.create_card(
                    workspace, card(title=f"temp {worker}", content=f"temporary w{worker}-{i}")
                ).card
                churn.append(("created", temporary.id))
            elif temporary is not None:  # step 7: delete what step 3 created, at its revision
                service.delete_card(workspace, temporary.id, expected_revision=temporary.revision)
                churn.append(("deleted", temporary.id))
                temporary = None
        conflicts.append(found)
    except Exception as exc:  # reported by the caller
        errors.append(exc)


def writers_battery(target: Target, writers: int = 8, mutations: int = 500) -> dict[str, Any]:
    """``writers`` threads of one process (the way the web server writes: the embedded
    index is single-process) mutate one workspace: racing conditional appends on a
    shared card, appends on their own card, blind saves, and create/delete churn; half
    of the writers leave their blind saves and churn pending (no index), the others
    propagate. Then pending work is drained and archive and index compared."""
    workspace = "writers"
    expected_rev = {
        k: len([i for i in range(mutations) if i % 8 in v])
        for k, v in {"shared": (0, 4), "own": (1, 5), "blind": (2, 6)}.items()
    }
    started = time.perf_counter()
    with pooled(target.runtime, max_connections=writers + 1) as archive:
        stack = Stack(archive, target.home / "writers-index")
        stack.workspaces.create(workspace, "en")
        shared = stack.memory.create_card(workspace, card(title="shared", content="start")).card.id
        blind = stack.memory.create_card(workspace, card(title="blind", content="start")).card.id
        own = [
            stack.memory.create_card(workspace, card(title=f"own {w}", content="start")).card.id
            for w in range(writers)
        ]
        errors: list = []
        conflicts: list = []
        churn: list = []
        threads = [
            threading.Thread(
                target=_writer,
                args=(
                    stack,
                    workspace,
                    w,
                    mutations,
                    shared,
                    own[w],
                    blind,
                    errors,
                    conflicts,
                    churn,
                ),
            )
            for w in range(writers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - started
        pending_before_drain = len(stack.memory.pending(workspace))
        drained = stack.projector.drain(workspace)
        lost: list[str] = []
        final = stack.memory.get_card(workspace, shared)
        if final.revision != 1 + writers * expected_rev["shared"]:
            lost.append(f"shared card at revision {final.revision}")
        if sorted(final.content.splitlines()[1:]) != sorted(
            f"w{w}-{i}" for w in range(writers) for i in range(mutations) if i % 8 in (0, 4)
        ):
            lost.append("shared card content lost an append")
        for w in range(writers):
            mine = stack.memory.get_card(workspace, own[w])
            if mine.revision != 1 + expected_rev["own"] or mine.content.splitlines()[1:] != [
                f"w{w}-{i}" for i in range(mutations) if i % 8 in (1, 5)
            ]:
                lost.append(f"own card of writer {w}")
        if stack.memory.get_card(workspace, blind).revision != 1 + writers * expected_rev["blind"]:
            lost.append("blind card revision")
        created = {i for what, i in churn if what == "created"}
        deleted = {i for what, i in churn if what == "deleted"}
        with archive.transaction(workspace) as tx:
            cards = {f"mem-{k}": v for k, v in tx.card_revisions().items()}
            projections = {f"mem-{k}": v for k, v in tx.projections().items()}
        expected_ids = {shared, blind, *own, *(created - deleted)}
        if set(cards) != expected_ids:
            lost.append(f"archive cards differ from the model: {sorted(set(cards) ^ expected_ids)}")
        points = {
            f"mem-{p.id}": (p.revision, p.fingerprint) for p in stack.index.scroll_ids(workspace)
        }
        fingerprint = stack.projector.format.fingerprint("en")
        wanted = {i: (r, fingerprint) for i, r in cards.items()}
        index_differences = sorted(set(points.items()) ^ set(wanted.items()))
        projection_differences = sorted(set(projections.items()) ^ set(wanted.items()))
        recalled_deleted = [
            i
            for i in deleted
            if i in {c for c, _ in stack.recall(workspace, f"temporary {i}", top=100)}
        ]
        stack.release()
    return {
        "writers": writers,
        "mutations_per_writer": mutations,
        "mutations": writers * mutations,
        "seconds": round(seconds, 2),
        "mutations_per_second": round(writers * mutations / seconds, 1),
        "conflicts": sum(conflicts),
        "errors": [repr(e) for e in errors],
        "lost_updates": lost,
        "created": len(created),
        "deleted": len(deleted),
        "pending_before_drain": pending_before_drain,
        "drained": drained["indexed"] + drained["deleted"],
        "cards": len(cards),
        "points": len(points),
        "index_differences": index_differences,
        "projection_differences": projection_differences,
        "recalled_deleted": recalled_deleted,
    }


# --- pool leaks ----------------------------------------------------------------------


class MidTransactionFailure(Exception):
    pass


def pool_leak_battery(target: Target, checkouts: int = 10_000) -> dict[str, Any]:
    """``checkouts`` transactions through a pool of 2 connections, alternating two
    workspaces (and the directory mode), a third of them failing mid-transaction (a
    Python exception after a write, an SQL error, an exception holding the workspace
    lock). Each transaction checks it runs as the runtime role in exactly its
    workspace; every 50th checkout also takes a bare pooled connection, which must
    carry no role, no workspace and see no card. Counts the leaks (must be 0)."""
    from tht.memory.migrations import RUNTIME_ROLE

    leaks: list[str] = []
    failures = 0
    started = time.perf_counter()
    with pooled(target.runtime, max_connections=2) as archive:
        workspaces = WorkspaceService(archive)
        memory = MemoryService(archive)
        sizes = {"pool-a": 1, "pool-b": 2}
        for name, n in sizes.items():
            workspaces.create(name, "en")
            for i in range(n):
                memory.create_card(name, card(title=f"{name} {i}", content=f"card {i} of {name}"))
        names = list(sizes)
        with psycopg.connect(target.runtime, autocommit=True) as probe:
            for i in range(checkouts):
                workspace = names[(i // 3 + i) % 2]  # not in step with the pool's two connections
                mode = i % 6
                try:
                    with archive.transaction(
                        workspace, lock=(mode == 4), directory=(mode == 5)
                    ) as tx:
                        setting, role, directory, visible = tx.conn.execute(
                            "SELECT current_setting('thoth.workspace', true), current_user,"
                            " current_setting('thoth.directory', true), count(*) FROM thoth_memory.cards"
                        ).fetchone()
                        if (setting, role, visible) != (workspace, RUNTIME_ROLE, sizes[workspace]):
                            leaks.append(
                                f"checkout {i}: workspace {setting!r}, role {role!r}, sees {visible} cards"
                                f" (expected {workspace!r}, {sizes[workspace]})"
                            )
                        if directory != ("on" if mode == 5 else "off"):
                            leaks.append(f"checkout {i}: directory mode {directory!r}")
                        if mode == 1:
                            tx.conn.execute(
                                "UPDATE thoth_memory.cards SET title = 'leaked write'"
                                " WHERE workspace_id = %s",
                                (workspace,),
                            )
                            raise MidTransactionFailure("after a write")
                        if mode == 2:
                            tx.conn.execute("SELECT 1 / 0")
                        if mode in (4, 5):
                            raise MidTransactionFailure(
                                "holding the workspace lock" if mode == 4 else "directory"
                            )
                except MidTransactionFailure:
                    failures += 1
                except Exception as exc:  # the SQL error, translated by the archive
                    if mode != 2:
                        raise
                    failures += 1 if "division by zero" in str(exc) else 0
                if mode == 4:  # the failed transaction's workspace lock must be gone with it
                    free = probe.execute(
                        "SELECT pg_try_advisory_lock(hashtextextended('thoth_memory.workspace:' || %s, 0))",
                        (workspace,),
                    ).fetchone()[0]
                    if not free:
                        leaks.append(f"checkout {i}: workspace lock still held after a failure")
                    else:
                        probe.execute(
                            "SELECT pg_advisory_unlock(hashtextextended('thoth_memory.workspace:' || %s, 0))",
                            (workspace,),
                        )
                if i % 50 == 0:
                    with (
                        archive.connection() as conn
                    ):  # a bare checkout, outside any memory transaction
                        setting, role, visible = conn.execute(
                            "SELECT current_setting('thoth.workspace', true), current_user,"
                            " (SELECT count(*) FROM thoth_memory.cards)"
                        ).fetchone()
                        conn.rollback()
                        if setting not in (None, "") or role == RUNTIME_ROLE or visible != 0:
                            leaks.append(
                                f"bare checkout {i}: workspace {setting!r}, role {role!r}, sees {visible}"
                            )
        for workspace in names:
            with archive.transaction(workspace) as tx:
                if tx.conn.execute(
                    "SELECT count(*) FROM thoth_memory.cards WHERE title = 'leaked write'"
                ).fetchone()[0]:
                    leaks.append(f"a write of a failed transaction was committed in {workspace}")
    seconds = time.perf_counter() - started
    return {
        "checkouts": checkouts,
        "failed_mid_transaction": failures,
        "leaks": len(leaks),
        "leak_examples": leaks[:5],
        "seconds": round(seconds, 2),
    }


# --- the index engine killed mid-write ---------------------------------------------------


WRITER = """
import sys, time
from tests.factories import card
from tests.fault_battery import Stack, pooled
runtime, index_path, workspace = sys.argv[1:4]
with pooled(runtime) as archive:
    stack = Stack(archive, index_path)
    n = 0
    while True:
        made = stack.memory.create_card(workspace, card(title="churn", content=f"churn card {n} doomed"))
        stack.memory.update_card(workspace, made.card.id, card(title="churn", content=f"churn card {n} doomed again"))
        stack.memory.delete_card(workspace, made.card.id)
        print(made.card.id, flush=True)
        n += 1
"""


def kill_battery(target: Target, rounds: int = 3, lines_before_kill: int = 5) -> dict[str, Any]:
    """A process creates, updates and deletes cards through the Edge index; it is
    SIGKILLed mid-write (after a varying number of deletions), the shard is reopened
    by this process, and no deleted card may come back in recall (nor any point of a
    deleted card survive ``check --repair``)."""
    import random
    import signal

    rng = random.Random(8)
    workspace = "killed"
    index_path = target.home / "kill-index"
    resurrected: list[str] = []
    drift: list[str] = []
    orphan_points_after_kill = 0
    deleted_total = 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
    env["PYTHONPATH"] = str(ROOT)
    with pooled(target.runtime) as archive:
        stack = Stack(archive, index_path)
        stack.workspaces.create(workspace, "en")
        keep = [
            stack.memory.create_card(
                workspace, card(title=f"keep {i}", content=f"kept card {i} doomed")
            ).card
            for i in range(5)
        ]
        stack.release()
        for _ in range(rounds):
            proc = subprocess.Popen(
                [sys.executable, "-c", WRITER, target.runtime, str(index_path), workspace],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=ROOT,
            )
            deleted = [
                proc.stdout.readline().strip()
                for _ in range(lines_before_kill + rng.randint(0, 10))
            ]
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            deleted += [line.strip() for line in proc.stdout.read().splitlines() if line.strip()]
            deleted_total += len(deleted)
            # reopened by this process: the engine recovers its write-ahead log
            cards = {i: r for i, r in _revisions(archive, workspace).items()}
            orphan_points_after_kill += len(
                [p for p in stack.index.scroll_ids(workspace) if f"mem-{p.id}" not in cards]
            )
            for question in ["churn card doomed", "churn card doomed again", "doomed"]:
                for card_id, revision in stack.recall(workspace, question, top=100):
                    if card_id not in cards or cards[card_id] != revision:
                        resurrected.append(card_id)
            stack.projector.check(workspace, repair=True)
            try:
                report = stack.projector.check(workspace)
            except IndexDrift as drifted:
                report = drifted.details
            if report["orphan"] or report["missing"] or report["stale"]:
                drift.append(f"drift after repair: {report}")
            stack.release()
        kept_found = all(
            c.id in {i for i, _ in stack.recall(workspace, c.content, top=100)} for c in keep
        )
        stack.release()
    return {
        "rounds": rounds,
        "deleted_before_kill": deleted_total,
        "resurrected": len(resurrected),
        "resurrected_examples": resurrected[:5],
        "orphan_points_after_kill": orphan_points_after_kill,
        "drift_after_repair": len(drift),
        "drift_examples": drift[:3],
        "kept_cards_found": kept_found,
    }


def _revisions(archive: PostgresArchive, workspace: str) -> dict[str, int]:
    with archive.transaction(workspace) as tx:
        return {f"mem-{k}": v for k, v in tx.card_revisions().items()}


# --- the recall state machine ------------------------------------------------------------


VOCABULARY = [
    "ledger",
    "invoice",
    "carrier",
    "fiscal",
    "quota",
    "region",
    "refund",
    "tariff",
    "voucher",
    "margin",
    "rebate",
    "payroll",
]


def recall_machine(archive: PostgresArchive, index_path: Path):
    """A hypothesis state machine over create / update / delete / link / retry / recall
    in two workspaces, each mutation either propagated or left pending (index work not
    done). Invariant, at every recall: the results are exactly the current cards of
    this workspace without pending work, at their current revision; and the raw index
    search, before verification, never returns a point of the other workspace."""
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

    from tht.errors import NotFound
    from tht.memory.recall_filters import REUSABLE_FAMILIES, RecallFilters

    stack = Stack(archive, index_path)
    steps: Counter = Counter()  # rules run, by name: the figures report them
    words = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=4).map(" ".join)

    class RecallMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            tag = uuid.uuid4().hex[:10]
            self.spaces = [f"sm-{tag}-a", f"sm-{tag}-b"]
            for workspace in self.spaces:
                stack.workspaces.create(workspace, "en")
            self.cards: dict[str, dict[str, int]] = {w: {} for w in self.spaces}  # id -> revision
            self.ever: dict[str, dict[str, None]] = {w: {} for w in self.spaces}
            self.pending: dict[str, dict[str, None]] = {
                w: {} for w in self.spaces
            }  # ordered: replayable
            self.links: dict[str, list[str]] = {}

        def _service(self, offline: bool) -> MemoryService:
            return stack.offline if offline else stack.memory

        def _saved(self, workspace: str, card_id: str, revision: int, offline: bool) -> None:
            self.cards[workspace][card_id] = revision
            self.ever[workspace][card_id] = None
            self._pending(workspace, card_id, offline)

        def _pending(self, workspace: str, card_id: str, offline: bool) -> None:
            if offline:
                self.pending[workspace][card_id] = None
            else:
                self.pending[workspace].pop(card_id, None)

        def _pick(self, data, workspace: str) -> str:
            return data.draw(
                st.sampled_from(list(self.cards[workspace]))
            )  # creation order: replayable

        @rule(side=st.integers(0, 1), text=words, offline=st.booleans())
        def create(self, side: int, text: str, offline: bool) -> None:
            steps["create"] += 1
            workspace = self.spaces[side]
            made = (
                self._service(offline)
                .create_card(workspace, card(title=text[:50], content=text))
                .card
            )
            self._saved(workspace, made.id, made.revision, offline)
            self.links[made.id] = []

        @precondition(lambda self: any(self.cards.values()))
        @rule(data=st.data(), text=words, offline=st.booleans())
        def update(self, data, text: str, offline: bool) -> None:
            steps["update"] += 1
            workspace = data.draw(st.sampled_from([w for w in self.spaces if self.cards[w]]))
            card_id = self._pick(data, workspace)
            links = [
                {"target": t, "meaning": "refines"}
                for t in self.links[card_id]
                if t in self.cards[workspace]
            ]
            saved = (
                self._service(offline)
                .update_card(
                    workspace,
                    card_id,
                    card(
                        title=text[:50],
                        content=text,
                        links=links,
                        revision=self.cards[workspace][card_id],
                    ),
                )
                .card
            )
            assert saved.revision == self.cards[workspace][card_id] + 1
            self._saved(workspace, card_id, saved.revision, offline)

        @precondition(lambda self: any(len(c) >= 2 for c in self.cards.values()))
        @rule(data=st.data(), offline=st.booleans())
        def link(self, data, offline: bool) -> None:
            steps["link"] += 1
            workspace = data.draw(
                st.sampled_from([w for w in self.spaces if len(self.cards[w]) >= 2])
            )
            source = self._pick(data, workspace)
            target = data.draw(st.sampled_from([c for c in self.cards[workspace] if c != source]))
            current = stack.memory.get_card(workspace, source)
            other = self.spaces[1 - self.spaces.index(workspace)]
            for stranger in list(self.ever[other])[:1]:  # a link across workspaces is refused
                try:
                    stack.offline.update_card(
                        workspace,
                        source,
                        card(
                            title=current.title,
                            content=current.content,
                            links=[{"target": stranger, "meaning": "uses"}],
                        ),
                    )
                    raise AssertionError("a link to another workspace's card was accepted")
                except NotFound:
                    pass
            targets = [t for t in self.links[source] if t in self.cards[workspace]] + [target]
            saved = (
                self._service(offline)
                .update_card(
                    workspace,
                    source,
                    card(
                        title=current.title,
                        content=current.content,
                        revision=current.revision,
                        links=[{"target": t, "meaning": "refines"} for t in dict.fromkeys(targets)],
                    ),
                )
                .card
            )
            self.links[source] = list(dict.fromkeys(targets))
            self._saved(workspace, source, saved.revision, offline)

        @precondition(lambda self: any(self.cards.values()))
        @rule(data=st.data(), offline=st.booleans())
        def delete(self, data, offline: bool) -> None:
            steps["delete"] += 1
            workspace = data.draw(st.sampled_from([w for w in self.spaces if self.cards[w]]))
            card_id = self._pick(data, workspace)
            self._service(offline).delete_card(workspace, card_id, self.cards[workspace][card_id])
            del self.cards[workspace][card_id]
            self._pending(workspace, card_id, offline)

        @precondition(lambda self: any(self.pending.values()))
        @rule(data=st.data())
        def retry(self, data) -> None:
            steps["retry"] += 1
            workspace = data.draw(st.sampled_from([w for w in self.spaces if self.pending[w]]))
            card_id = data.draw(st.sampled_from(list(self.pending[workspace])))
            outcome = stack.projector.retry(workspace, card_id)
            assert outcome.status == "current", outcome
            self.pending[workspace].pop(card_id, None)

        @rule(side=st.integers(0, 1), question=words)
        def recall(self, side: int, question: str) -> None:
            steps["recall"] += 1
            workspace = self.spaces[side]
            if not stack.index.collection_exists():
                return
            results = stack.recall(workspace, question, top=100)
            current = {
                i: r for i, r in self.cards[workspace].items() if i not in self.pending[workspace]
            }
            assert len(results) == len(set(results)), f"a card returned twice: {results}"
            assert dict(results) == current, (
                f"recall in {workspace} returned {sorted(results)}, current cards are {sorted(current.items())}"
            )
            dense = stack.embedder.embed_query(question)
            sparse = stack.projector.format.encoder("en").encode_query(question)
            raw = stack.index.hybrid_search(
                dense,
                sparse,
                RecallFilters(workspace=workspace, families=REUSABLE_FAMILIES),
                limit=200,
            )
            foreign = [f"mem-{h.id}" for h in raw if f"mem-{h.id}" not in self.ever[workspace]]
            assert foreign == [], f"the index returned points of another workspace: {foreign}"

    RecallMachine.steps = steps
    return RecallMachine, stack
