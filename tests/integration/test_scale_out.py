"""Several replicas of the service over one PostgreSQL server, behind HAProxy: every piece
a real process, brought up by scripts/cluster.py (docs/scale-out.md).

One cluster for the module (PostgreSQL 18 with pgvector over TCP with passwords, two
`tht serve` replicas, HAProxy checking their /healthz); each test works in a workspace of
its own. Replica 1 is "A", replica 2 "B", HAProxy "lb". The tests that need replica A at a
known step restart it with a pause point (tht.faults) through `cluster.py up`, which
starts only what does not run.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import run_cleanup
from tests.integration.cluster_support import (
    Cluster,
    Errors,
    card,
    free_ports,
    running_cluster,
)
from tests.integration.workflow_support import Session, add, decision, join_rule

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

BURST_SECONDS = 12.0  # bench/cluster_bench.py burst runs 30 s; the properties hold over any length
WRITERS_PER_REPLICA = 4
AGENTS = 4
DRAIN_SECONDS = 60.0  # the survivor's retrier looks every cluster_support.RETRY_SECONDS


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # PostgreSQL runs as another user when the tests run as root: a folder it can reach
    root = Path(tempfile.mkdtemp(prefix=run_cleanup.CLUSTER_PREFIX + "scale-out-")) / "cluster"
    root.parent.chmod(0o711)
    run_cleanup.remove_at_the_end(root.parent)  # also when this worker is killed
    try:
        with running_cluster(root) as found:
            yield found
    finally:
        subprocess.run(["rm", "-rf", str(root.parent)], check=False)


def memory(workspace: str, tail: str = "") -> str:
    return f"/api/workspaces/{workspace}/memory{tail}"


def cards_of(cluster: Cluster, workspace: str) -> list[dict[str, Any]]:
    """Every card of the workspace, through the load balancer, page by page."""
    found: list[dict[str, Any]] = []
    for page in itertools.count(1):
        answer = cluster.call("lb", "GET", memory(workspace, f"?page_size=100&page={page}"))
        assert answer.status == 200, answer.document
        found += answer.document["items"]
        if len(found) >= answer.document["total"]:
            return found


def recalled(cluster: Cluster, target: str | int, workspace: str, question: str) -> list[str]:
    answer = cluster.call(target, "POST", memory(workspace, "/rules"), body={"question": question})
    assert answer.status == 200, answer.document
    return [hit["id"] for hit in answer.document["results"]]


def check_index(cluster: Cluster, runtime: str) -> dict[str, Any]:
    code, report = cluster.tht("memory", "check", "-c", runtime)
    assert code == 0, report  # exit 8 (index_drift) when archive and index differ
    return report


class Writers:
    """Threads saving cards with an idempotency key each, sending a failed save again
    with the same key (as a client that lost an answer should) until it is answered;
    what was acknowledged, and the answers' index statuses."""

    def __init__(self, cluster: Cluster, workspace: str, targets: list[str | int]) -> None:
        self.cluster = cluster
        self.workspace = workspace
        self.targets = targets
        self.acknowledged: dict[str, str] = {}  # title -> card id
        self.statuses: dict[str, str] = {}  # title -> index status of the answer
        self.failures = 0  # answers that were not an acknowledgement (sent again)
        self.errors = Errors()
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def run(self, number: int, target: str | int) -> None:
        with self.cluster.client(target, self.cluster.admin_token) as client:
            for n in itertools.count():
                if self.stop.is_set():
                    return
                title = f"writer {number} card {n}"
                key = str(uuid.uuid4())
                for _ in range(20):
                    try:
                        response = client.post(
                            memory(self.workspace),
                            json=card(title),
                            headers={"Idempotency-Key": key},
                        )
                    except httpx.TransportError:
                        response = None
                    if response is not None and response.status_code in (200, 201):
                        document = response.json()
                        with self._lock:
                            self.acknowledged[title] = document["card"]["id"]
                            self.statuses[title] = document["index"]["status"]
                        break
                    with self._lock:
                        self.failures += 1
                    if response is not None and response.status_code not in (502, 503):
                        self.errors.add(f"{title}: {response.status_code} {response.text[:300]}")
                        return
                    time.sleep(0.2)
                else:
                    self.errors.add(f"{title}: never acknowledged")
                    return

    def threads(self) -> list[threading.Thread]:
        return [
            threading.Thread(target=self.run, args=(n, target), daemon=True)
            for n, target in enumerate(self.targets)
        ]


class Agents:
    """Threads recalling through the load balancer; every answer must be a 200."""

    def __init__(self, cluster: Cluster, workspace: str, count: int) -> None:
        self.cluster = cluster
        self.workspace = workspace
        self.count = count
        self.answers = 0
        self.errors = Errors()
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def run(self, number: int) -> None:
        with self.cluster.client("lb", self.cluster.admin_token) as client:
            while not self.stop.is_set():
                try:
                    response = client.post(
                        memory(self.workspace, "/rules"),
                        json={"question": f"join movements to jobs, writer {number}"},
                    )
                except httpx.TransportError as exc:
                    self.errors.add(f"recall: {exc!r}")
                    continue
                if response.status_code != 200:
                    self.errors.add(f"recall: {response.status_code} {response.text[:300]}")
                with self._lock:
                    self.answers += 1

    def threads(self) -> list[threading.Thread]:
        return [
            threading.Thread(target=self.run, args=(n,), daemon=True) for n in range(self.count)
        ]


def assert_each_acknowledged_write_once(
    cluster: Cluster, workspace: str, writers: Writers
) -> list[dict[str, Any]]:
    stored = cards_of(cluster, workspace)
    titles = [item["title"] for item in stored]
    duplicated = {t for t in titles if titles.count(t) > 1}
    assert not duplicated, f"cards saved twice: {sorted(duplicated)[:10]}"
    by_title = {item["title"]: item["id"] for item in stored}
    missing = {t for t in writers.acknowledged if t not in by_title}
    assert not missing, f"acknowledged writes missing: {sorted(missing)[:10]}"
    assert all(by_title[t] == i for t, i in writers.acknowledged.items())
    return stored


# --- the cluster itself ----------------------------------------------------------------


def test_the_cluster_is_up_with_haproxy_checking_both_replicas(cluster: Cluster) -> None:
    status = cluster.script("status")
    assert status["running"] is True
    assert [r["haproxy"] for r in status["replicas"]] == ["UP", "UP"]
    # every replica holds connections of the runtime login, not a superuser, over TCP;
    # the server takes passwords only (scram-sha-256)
    with cluster.superuser() as conn:
        logins = conn.execute(
            "SELECT DISTINCT s.usename, r.rolsuper, s.client_addr IS NOT NULL"
            " FROM pg_stat_activity s JOIN pg_roles r ON r.rolname = s.usename"
            " WHERE s.datname = 'thoth' AND s.usename = 'memory_app'"
        ).fetchall()
        methods = {m for (m,) in conn.execute("SELECT auth_method FROM pg_hba_file_rules")}
    assert logins == [("memory_app", False, True)]
    assert methods == {"scram-sha-256"}
    # HAProxy answers /healthz of a replica and forwards the API
    assert cluster.call("lb", "GET", "/healthz").status == 200
    assert cluster.call("lb", "GET", "/api/workspaces").status == 200


def serve_once(cluster: Cluster, home: Path) -> subprocess.CompletedProcess[str]:
    """`tht serve` as a third replica would start, on the cluster's database; one that
    served would never exit (the run's timeout then fails the test)."""
    home.mkdir(exist_ok=True)
    (port,) = free_ports(1)
    env = {**cluster.operator_env(), "THT_HOME": str(home)}
    for variable in ("THT_CATALOG_MIGRATOR_USER", "THT_CATALOG_MIGRATOR_PASSWORD_FILE"):
        env.pop(variable)  # a replica has the runtime login only
    config = str(cluster.root / "config.yaml")
    return subprocess.run(
        [sys.executable, "-m", "tht", "serve", "--port", str(port), "-c", config],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_replica_refuses_to_start_against_a_schema_it_does_not_know(cluster: Cluster) -> None:
    """Each migration pack the service uses, newer than the code (a migration it does
    not know) or older (one missing): the start stops with the pack's error, naming it."""
    home = cluster.root / "stranger"
    cases = [
        ("thoth_memory", "schema_not_ready", 6),
        ("thoth_catalog", "schema_not_ready", 6),
        ("thoth_memory_pgvector", "index_schema_not_ready", 8),
    ]
    for schema, code, exit_code in cases:
        with cluster.superuser() as conn:  # a migration of a later version of the code
            conn.execute(
                f"INSERT INTO {schema}.schema_migrations (version, name, checksum)"
                " VALUES (999, 'from_a_later_version', 'x')"
            )
        try:
            done = serve_once(cluster, home)
        finally:
            with cluster.superuser() as conn:
                conn.execute(f"DELETE FROM {schema}.schema_migrations WHERE version = 999")
        assert done.returncode == exit_code, (schema, done.stdout, done.stderr)
        error = json.loads(done.stdout)["error"]
        assert error["code"] == code
        assert "999_from_a_later_version is unknown to this version" in error["message"]
    for schema, code, exit_code in cases:
        with cluster.superuser() as conn:  # an older schema: its last migration missing
            row = conn.execute(
                f"DELETE FROM {schema}.schema_migrations WHERE version ="
                f" (SELECT max(version) FROM {schema}.schema_migrations)"
                " RETURNING version, name, checksum"
            ).fetchone()
        try:
            done = serve_once(cluster, home)
        finally:
            with cluster.superuser() as conn:
                conn.execute(
                    f"INSERT INTO {schema}.schema_migrations (version, name, checksum)"
                    " VALUES (%s, %s, %s)",
                    row,
                )
        assert done.returncode == exit_code, (schema, done.stdout, done.stderr)
        error = json.loads(done.stdout)["error"]
        assert error["code"] == code
        assert f"missing: {row[0]:03d}_{row[1]}" in error["message"]
        assert "tht memory migrate" in error["message"]


# --- what one replica does, the other sees -----------------------------------------------


def test_a_card_saved_through_a_is_recalled_through_b_at_once(cluster: Cluster) -> None:
    cluster.workspace("across")
    saved = cluster.call(1, "POST", memory("across"), body=card("Fiscal year join"))
    assert saved.status == 201, saved.document
    assert saved.document["index"]["status"] == "current"
    card_id = saved.document["card"]["id"]
    assert card_id in recalled(cluster, 2, "across", "fiscal year join movements jobs")
    # an edit through B is what A recalls next: verified against the archive
    shown = cluster.call(2, "GET", memory("across", f"/{card_id}")).document
    edited = {
        **card("Fiscal year join"),
        "title": "Calendar year join",
        "revision": shown["revision"],
    }
    assert cluster.call(2, "PUT", memory("across", f"/{card_id}"), body=edited).status == 200
    hits = cluster.call(
        1, "POST", memory("across", "/rules"), body={"question": "calendar year join"}
    )
    titles = {hit["id"]: hit["title"] for hit in hits.document["results"]}
    assert titles[card_id] == "Calendar year join"
    # a card deleted through A is gone from B's recall
    assert cluster.call(1, "DELETE", memory("across", f"/{card_id}")).status == 200
    assert card_id not in recalled(cluster, 2, "across", "calendar year join")


def test_writers_on_both_replicas_and_agents_keep_every_acknowledged_write_once(
    cluster: Cluster,
) -> None:
    runtime = cluster.workspace("burst")
    writers = Writers(cluster, "burst", [1] * WRITERS_PER_REPLICA + [2] * WRITERS_PER_REPLICA)
    agents = Agents(cluster, "burst", AGENTS)
    threads = writers.threads() + agents.threads()
    for thread in threads:
        thread.start()
    time.sleep(BURST_SECONDS)
    writers.stop.set()
    agents.stop.set()
    for thread in threads:
        thread.join(60)
    assert not writers.errors.items and not agents.errors.items, (
        writers.errors.items[:5],
        agents.errors.items[:5],
    )
    assert writers.failures == 0
    assert len(writers.acknowledged) >= 8 and agents.answers >= AGENTS
    stored = assert_each_acknowledged_write_once(cluster, "burst", writers)
    assert len(stored) == len(writers.acknowledged)
    assert set(writers.statuses.values()) == {"current"}
    report = check_index(cluster, runtime)
    assert report["cards"] == report["points"] == len(stored) and report["pending"] == 0


def test_the_same_idempotency_key_sent_to_a_and_b_at_once_makes_one_card(cluster: Cluster) -> None:
    cluster.workspace("keys")
    for round_ in range(6):
        key = str(uuid.uuid4())
        body = card(f"Sent twice {round_}")
        start = threading.Barrier(2)
        answers: dict[int, Any] = {}

        def send(
            target: int,
            key: str = key,
            body: dict = body,
            start: Any = start,
            answers: dict[int, Any] = answers,
        ) -> None:
            with cluster.client(target, cluster.admin_token) as client:
                start.wait()
                answers[target] = client.post(
                    memory("keys"), json=body, headers={"Idempotency-Key": key}
                )

        threads = [threading.Thread(target=send, args=(target,)) for target in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert {a.status_code for a in answers.values()} <= {200, 201}, answers
        assert len({a.json()["card"]["id"] for a in answers.values()}) == 1
    titles = [item["title"] for item in cards_of(cluster, "keys")]
    assert sorted(titles) == sorted(f"Sent twice {n}" for n in range(6))


def test_a_token_revoked_through_a_is_refused_by_b_at_its_next_request(cluster: Cluster) -> None:
    cluster.workspace("tokens")
    code, made = cluster.tht(
        "user", "create", "agent-t", "--role", "agent", "--workspace", "tokens"
    )
    assert code == 0, made
    old = made["token"]
    question = {"question": "join movements"}
    assert (
        cluster.call(2, "POST", memory("tokens", "/search"), token=old, body=question).status == 200
    )
    rotated = cluster.call(1, "POST", "/api/admin/users/agent-t/token")
    assert rotated.status == 200, rotated.document
    refused = cluster.call(2, "POST", memory("tokens", "/search"), token=old, body=question)
    assert refused.status == 401 and refused.document["error"]["code"] == "unauthenticated"
    new = rotated.document["token"]
    assert (
        cluster.call(2, "POST", memory("tokens", "/search"), token=new, body=question).status == 200
    )
    # a membership revoked through A is gone on B at once
    revoked = cluster.call(1, "DELETE", "/api/admin/users/agent-t/workspaces/tokens")
    assert revoked.status == 200, revoked.document
    refused = cluster.call(2, "POST", memory("tokens", "/search"), token=new, body=question)
    assert refused.status == 403 and refused.document["error"]["code"] == "forbidden"


def test_login_backoff_counts_the_failures_made_on_both_replicas(cluster: Cluster) -> None:
    cluster.workspace("logins")
    password = cluster.root / "logins.password"
    password.write_text("the right password, long enough\n")
    code, made = cluster.tht(
        "user", "create", "walker", "--role", "user", "--workspace", "logins",
        "--password-file", str(password),
    )  # fmt: skip
    assert code == 0, made
    # five free failures, three on A and two on B: the next attempt waits, wherever it goes
    for target in (1, 2, 1, 2, 1):
        wrong = cluster.call(
            target, "POST", "/api/session", token="", body={"name": "walker", "password": "wrong"}
        )
        assert wrong.status == 401, wrong.document
    refused = cluster.call(
        2,
        "POST",
        "/api/session",
        token="",
        body={"name": "walker", "password": "the right password, long enough"},
    )
    assert refused.status == 429, refused.document
    assert refused.document["error"]["code"] == "too_many_requests"
    assert int(refused.headers["retry-after"]) >= 1


def test_a_page_session_opened_on_a_writes_through_b(cluster: Cluster) -> None:
    """The CSRF token of a page session is the same on every replica: a page whose
    requests HAProxy sends to another replica (or to one restarted since) keeps working."""
    cluster.workspace("pages")
    with cluster.client(1) as client_a:
        login = client_a.post("/api/session", json={"token": cluster.admin_token})
        assert login.status_code == 200, login.text
        session = client_a.cookies["tht_session"]
        csrf = login.json()["csrf_token"]
    with httpx.Client(base_url=cluster.url(2), cookies={"tht_session": session}) as client_b:
        assert client_b.get("/api/session").json()["csrf_token"] == csrf
        saved = client_b.post(
            memory("pages"),
            json=card("Saved from a page"),
            headers={"X-CSRF-Token": csrf, "Origin": cluster.url("lb")},
        )
    assert saved.status_code == 201, saved.text


def test_a_workflow_session_proposed_through_a_summarized_through_b_applied_through_a(
    cluster: Cluster,
) -> None:
    """The sessions root is storage every replica shares (the cluster's sessions folder)."""
    cluster.workspace("flow")
    code, made = cluster.tht(
        "user", "create", "flow-agent", "--role", "agent", "--workspace", "flow"
    )
    assert code == 0, made
    agent = made["token"]
    sessions = Path(cluster.status["sessions_root"])
    session = Session(sessions, "flow", "s-1").log(
        decision(
            "d1",
            "sql_corrected",
            explanation="A job code repeats across fiscal years: join on code and year.",
        )
    )
    rule = join_rule(dependencies=[{"database": "dwh", "schema": "sales", "table": "movements"}])
    proposals = {"version": 1, "proposals": [add("p1", ["d1"], rule)]}
    proposed = cluster.call(
        1,
        "POST",
        memory("flow", "/propose"),
        token=agent,
        body={"session": "s-1", "data": proposals},
    )
    assert proposed.status == 200, proposed.document
    summary = cluster.call(
        2, "POST", memory("flow", "/summary"), token=agent, body={"session": "s-1"}
    )
    assert summary.status == 200, summary.document
    assert [a["proposal"] for a in summary.document["additions"]] == ["p1"]
    review = {
        "decision": "apply",
        "proposals_digest": summary.document["proposals_digest"],
        "selected": [{"proposal": "p1"}],
    }
    applied = cluster.call(1, "POST", "/api/workspaces/flow/review/sessions/s-1/apply", body=review)
    assert applied.status == 200, applied.document
    saved = [c["card"] for c in applied.document["cards"]]
    assert len(saved) == 1
    assert saved[0] in recalled(cluster, 2, "flow", "join movements and jobs on fiscal year")
    # the ledger event Memory appended, on the shared storage, and a second delivery
    # through B replays the receipt
    assert [e["outcome"] for e in session.reviewed_events()] == ["applied"]
    again = cluster.call(2, "POST", "/api/workspaces/flow/review/sessions/s-1/apply", body=review)
    assert again.status == 200 and again.document.get("replayed") is True, again.document
    assert len(cards_of(cluster, "flow")) == 1


# --- a rebuild and a crash: replica A restarted at a known step ---------------------------


def restart_a(cluster: Cluster, **env: str) -> None:
    cluster.stop_replica(1)
    cluster.up(**env)
    assert cluster.haproxy_view() == {"replica-1": "UP", "replica-2": "UP"}


def generations(cluster: Cluster, workspace: str) -> tuple[int, int | None]:
    with cluster.superuser() as conn:
        row = conn.execute(
            "SELECT serving, building FROM thoth_memory_pgvector.generations"
            " WHERE workspace_id = %s",
            (workspace,),
        ).fetchone()
    return (row[0], row[1]) if row else (0, None)


def test_a_rebuild_on_a_while_b_saves_and_recalls(cluster: Cluster) -> None:
    runtime = cluster.workspace("rebuild")
    # more cards than one rebuild chunk (512), imported by the operator: the rebuild
    # holds at its first chunk
    cards = cluster.root / "rebuild.jsonl"
    cards.write_text("".join(json.dumps(card(f"Before {n}")) + "\n" for n in range(600)))
    code, imported = cluster.tht("memory", "import", str(cards), "-c", runtime)
    assert code == 0 and imported["index"] == {"indexed": 600, "pending": 0}, imported
    before = generations(cluster, "rebuild")
    pause = cluster.root / "rebuild.pause"
    restart_a(cluster, THT_PAUSE_AT="index.after_batch", THT_PAUSE_FILE=str(pause))
    env = cluster.operator_env() | {
        "THT_SERVICE": "auto",
        "THT_SERVICE_URL": cluster.url(1),
        "THT_TOKEN": cluster.admin_token,
    }
    rebuild = subprocess.Popen(
        [sys.executable, "-m", "tht", "memory", "index", "-c", runtime],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not pause.exists():
            assert rebuild.poll() is None, rebuild.communicate()
            assert time.monotonic() < deadline, "the rebuild never reached its first chunk"
            time.sleep(0.05)
        building = generations(cluster, "rebuild")
        assert building[1] is not None and building[1] != before[0]
        # meanwhile B saves and recalls: no index_busy, every save current at once
        during = []
        for n in range(20):
            saved = cluster.call(2, "POST", memory("rebuild"), body=card(f"During {n}"))
            assert saved.status == 201, saved.document
            assert saved.document["index"]["status"] == "current", saved.document
            during.append(saved.document["card"]["id"])
        assert during[0] in recalled(cluster, 2, "rebuild", "During 0 join")
        # a second rebuild, through B, is refused while A's runs
        code, refused = cluster.tht(
            "memory",
            "index",
            "-c",
            runtime,
            THT_SERVICE="auto",
            THT_SERVICE_URL=cluster.url(2),
            THT_TOKEN=cluster.admin_token,
        )
        assert code == 4 and refused["error"]["code"] == "conflict", refused
        assert refused["error"]["details"]["elsewhere"] is True
        while rebuild.poll() is None:  # held again after each chunk: let it go on
            pause.unlink(missing_ok=True)
            time.sleep(0.02)
    finally:
        pause.unlink(missing_ok=True)
        out, err = rebuild.communicate(timeout=120)
    assert rebuild.returncode == 0, (out, err)
    summary = json.loads(out)
    assert summary["generation"] == "new" and summary["cards"] >= 600
    # the switch is seen by both: A and B recall from the new generation, which holds
    # the cards saved during the rebuild
    serving, building = generations(cluster, "rebuild")
    assert building is None and serving != before[0]
    for target in (1, 2):
        assert during[-1] in recalled(cluster, target, "rebuild", "During 19 join")
    report = check_index(cluster, runtime)
    assert report["cards"] == report["points"] == 620 and report["pending"] == 0


def test_kill_9_of_a_replica_during_a_burst_loses_no_acknowledged_write(cluster: Cluster) -> None:
    runtime = cluster.workspace("crash")
    pause = cluster.root / "save.pause"
    # A holds every save it receives between its commit and its index update
    restart_a(cluster, THT_PAUSE_AT="save.after_archive_commit", THT_PAUSE_FILE=str(pause))
    writers = Writers(cluster, "crash", ["lb"] * (2 * WRITERS_PER_REPLICA))
    agents = Agents(cluster, "crash", AGENTS)
    threads = writers.threads() + agents.threads()
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not pause.exists():
        assert time.monotonic() < deadline, "no save reached replica A"
        time.sleep(0.02)
    time.sleep(0.5)  # a few more saves reach A and wait there, committed
    cluster.stop_replica(1, signal.SIGKILL)
    pause.unlink()
    with cluster.superuser() as conn:  # the work A left
        left = conn.execute(
            "SELECT count(*) FROM thoth_memory.projection_ops WHERE workspace_id = 'crash'"
        ).fetchone()[0]
    assert left >= 1
    time.sleep(BURST_SECONDS / 2)
    # HAProxy saw A go and sends everything to B
    assert cluster.haproxy_view()["replica-1"].startswith("DOWN")
    answered = agents.answers
    time.sleep(1)
    assert agents.answers > answered
    writers.stop.set()
    agents.stop.set()
    for thread in threads:
        thread.join(60)
    assert not writers.errors.items, writers.errors.items[:5]
    # a recall in flight on A when it died failed; every later one was answered
    assert len(agents.errors.items) <= AGENTS, agents.errors.items
    assert writers.failures >= 1  # the saves A held were answered again by B...
    assert "pending" in writers.statuses.values()  # ...from the record A committed
    stored = assert_each_acknowledged_write_once(cluster, "crash", writers)
    assert len(stored) >= len(writers.acknowledged)
    # B's retrier drains what A left (it looks every cluster_support.RETRY_SECONDS), then archive and
    # index agree
    deadline = time.monotonic() + DRAIN_SECONDS
    while True:
        code, pending = cluster.tht("memory", "pending", "-c", runtime)
        assert code == 0, pending
        if not pending["items"]:
            break
        assert time.monotonic() < deadline, pending
        time.sleep(1)
    report = check_index(cluster, runtime)
    assert report["cards"] == report["points"] == len(stored)
    assert all(hit for hit in recalled(cluster, "lb", "crash", "writer 0 card 0 join"))
    # A comes back with `cluster.py up`, and HAProxy sends it requests again
    cluster.up()
    assert cluster.haproxy_view() == {"replica-1": "UP", "replica-2": "UP"}
    assert cluster.call(1, "GET", "/api/workspaces").status == 200
