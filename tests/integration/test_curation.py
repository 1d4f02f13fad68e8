"""Curation through the CLI and the application services, on the real engines
(embedded PostgreSQL, Qdrant Edge, the tests' hashing embedder): a workspace's
benchmark (cases, runs, their history) and the recall log with the gaps mined from it."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest

from tests.factories import card, card_document, installation_of
from tht.bootstrap import build_services
from tht.memory.recall_log import LoggedRecall, RecallLog, gaps
from tht.memory.recall_service import parse_recall_query
from tht.usecases.recall_and_proposals import DwhBinding, recall_command


@pytest.fixture
def acme(cli, runtime_file, tmp_path):
    """Workspace acme with four cards, and a second workspace with one of its own."""
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    assert cli("workspace", "create", "other", "--language", "en").code == 0
    config = runtime_file("acme")
    documents = {
        "shipped": card_document(
            title="Shipped order", content="An order is shipped when all its lines are shipped."
        ),
        "carrier": card_document(
            title="Carrier codes", content="Carriers are identified by three letter codes."
        ),
        "fiscal": card_document(
            "sql_rule",
            title="Fiscal year join",
            content="Join movements and jobs on job_code and fiscal_year.",
        ),
        "solved": card_document(
            "solved_question", title="Orders per customer", question="How many orders per customer?"
        ),
    }
    ids = {}
    for name, document in documents.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        created = cli("memory", "create", "-c", config, "--data", str(path))
        assert created.code == 0, created.document
        ids[name] = created.document["card"]["id"]
    other = runtime_file("other")
    (tmp_path / "foreign.json").write_text(json.dumps(card_document(title="Foreign card")))
    ids["foreign"] = cli(
        "memory", "create", "-c", other, "--data", str(tmp_path / "foreign.json")
    ).document["card"]["id"]
    return config, ids


def _add(cli, config, question, *expected, **options):
    args = ["memory", "benchmark", "add", question, "-c", config]
    for card_id in expected:
        args += ["--expected", card_id]
    for key, value in options.items():
        args += [f"--{key}"] if value is True else [f"--{key}", value]
    return cli(*args)


def test_cases_merge_by_question_and_name_only_cards_of_their_workspace(cli, acme, tmp_path):
    config, ids = acme
    first = _add(cli, config, "three letter carrier codes", ids["carrier"])
    assert first.code == 0 and (first.document["created"], first.document["updated"]) == (1, 0)
    [case] = first.document["cases"]
    assert case["id"].startswith("case-") and case["origin"] == "manual"
    assert case["expected"] == [
        {
            "id": ids["carrier"],
            "title": "Carrier codes",
            "family": "domain_clarification",
            "revision_then": 1,
            "revision_now": 1,
            "state": "current",
        }
    ]
    # the same question again adds its card to the case; --replace sets them
    again = _add(cli, config, "three letter carrier codes", ids["shipped"])
    assert (again.document["created"], again.document["updated"]) == (0, 1)
    assert [e["id"] for e in again.document["cases"][0]["expected"]] == [
        ids["carrier"],
        ids["shipped"],
    ]
    assert (
        _add(cli, config, "three letter carrier codes", ids["shipped"]).document["unchanged"] == 1
    )
    replaced = _add(cli, config, "three letter carrier codes", ids["carrier"], replace=True)
    assert [e["id"] for e in replaced.document["cases"][0]["expected"]] == [ids["carrier"]]
    # another command, or other filters, is another case
    rules = _add(cli, config, "fiscal year join", ids["fiscal"], command="rules")
    assert rules.document["created"] == 1
    # a card of another workspace is refused, naming it: nothing is written
    refused = _add(cli, config, "a foreign question", ids["foreign"])
    assert refused.code == 3 and refused.document["error"]["code"] == "not_found"
    assert refused.document["error"]["details"]["cards"] == [ids["foreign"]]
    assert "not a card of workspace 'acme'" in refused.document["error"]["message"]
    # a command that does not recall what the filters ask is refused too
    wrong = _add(
        cli, config, "shipped", ids["shipped"], command="rules",
        filters='{"families": ["domain_clarification"]}',
    )  # fmt: skip
    assert wrong.code == 2 and "not recalled by this command" in wrong.document["error"]["message"]
    listed = cli("memory", "benchmark", "list", "-c", config).document
    assert listed["total"] == 2 and [i["question"] for i in listed["items"]] == [
        "three letter carrier codes",
        "fiscal year join",
    ]
    removed = cli("memory", "benchmark", "remove", listed["items"][1]["id"], "-c", config)
    assert removed.code == 0 and removed.document["deleted"] == listed["items"][1]["id"]
    gone = cli("memory", "benchmark", "remove", listed["items"][1]["id"], "-c", config)
    assert gone.code == 3 and gone.document["error"]["code"] == "not_found"
    assert cli("memory", "benchmark", "list", "-c", config).document["total"] == 1


def test_imports_are_all_or_nothing_and_name_the_bad_line(cli, acme, tmp_path):
    config, ids = acme
    path = tmp_path / "cases.jsonl"

    def imported(*lines):
        path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        return cli("memory", "benchmark", "import", str(path), "-c", config)

    good = {"question": "when is an order shipped", "expected": [ids["shipped"]], "id": "ship"}
    foreign = imported(good, {"question": "elsewhere", "expected": [ids["foreign"]]})
    assert foreign.code == 3 and foreign.document["error"]["details"]["line"] == 2
    assert foreign.document["error"]["details"]["cards"] == [ids["foreign"]]
    path.write_text(json.dumps(good) + "\n{not json\n")
    malformed = cli("memory", "benchmark", "import", str(path), "-c", config)
    assert malformed.code == 2 and malformed.document["error"]["message"].startswith(
        "cases line 2:"
    )
    unknown = imported(good, {"question": "q", "expected": [ids["shipped"]], "weight": 2})
    assert unknown.code == 2 and "unknown keys weight" in unknown.document["error"]["message"]
    # nothing of the refused files was written
    assert cli("memory", "benchmark", "list", "-c", config).document["total"] == 0
    done = imported(
        good,
        {"question": "fiscal year join", "expected": [ids["fiscal"]], "command": "rules"},
        {"question": "when is an order shipped", "expected": [ids["carrier"]]},
    )
    assert done.code == 0 and (done.document["created"], done.document["updated"]) == (2, 0)
    listed = cli("memory", "benchmark", "list", "-c", config).document["items"]
    assert {i["origin"] for i in listed} == {"import"}
    ship = next(i for i in listed if i["name"] == "ship")
    assert [e["id"] for e in ship["expected"]] == [ids["shipped"], ids["carrier"]]
    # the same file again changes nothing: cases are keyed by command, question, filters
    again = cli("memory", "benchmark", "import", str(path), "-c", config).document
    assert (again["created"], again["updated"], again["unchanged"]) == (0, 0, 3)


def test_runs_are_stored_compared_and_show_the_card_edits_between_them(cli, acme, tmp_path):
    config, ids = acme
    empty = cli("memory", "benchmark", "run", "-c", config)
    assert empty.code == 4 and empty.document["error"]["code"] == "conflict"
    assert "no benchmark case" in empty.document["error"]["message"]
    _add(cli, config, "three letter carrier codes of shipped orders", ids["carrier"])
    _add(cli, config, "fiscal year join of movements and jobs", ids["fiscal"], command="rules")
    # a solved question is never what `search` recalls: a miss, with its reason
    _add(cli, config, "orders per customer", ids["solved"])
    first = cli("memory", "benchmark", "run", "-c", config)
    assert first.code == 0, first.document
    run = first.document
    assert run["run"].startswith("bench-") and run["cases"] == 3 and run["comparison"] is None
    assert run["index"] == {
        "embedder": "default",
        "binding": {"database": "dwh", "schema": "sales"},
        "rebuilding": False,
        "generation": "serving",
    }
    assert run["by_command"]["rules"]["recall@1"] == 1
    assert run["metrics"]["recall@1"] == pytest.approx(2 / 3, abs=1e-4)
    [miss] = run["misses"]
    assert miss["missing"] == [{"id": ids["solved"], "title": "Orders per customer"}]
    assert miss["reasons"][ids["solved"]]["reason"] == "family"
    assert {c["id"] for c in miss["returned"]} == {ids["shipped"], ids["carrier"]}

    # the curator edits the carrier card away from the question: recall gets worse
    (tmp_path / "carrier.json").write_text(
        json.dumps(card_document(title="Invoice dates", content="An invoice is dated when issued."))
    )
    updated = cli(
        "memory", "update", ids["carrier"], "-c", config, "--data", str(tmp_path / "carrier.json")
    )
    assert updated.code == 0, updated.document
    second = cli("memory", "benchmark", "run", "-c", config).document
    comparison = second["comparison"]
    assert comparison["previous"] == run["run"] and comparison["cases"] == 3
    assert comparison["worse"] is True
    assert comparison["after"]["recall@1"] < comparison["before"]["recall@1"]
    carrier_case = next(c for c, r in second["ranks"].items() if ids["carrier"] in r)
    assert second["ranks"][carrier_case][ids["carrier"]] == 2
    # the expected card changed since its case was written: reported, still counted
    assert second["expected_changes"] == [
        {
            "id": ids["carrier"],
            "title": "Invoice dates",
            "family": "domain_clarification",
            "revision_then": 1,
            "revision_now": 2,
            "state": "changed",
            "case": carrier_case,
        }
    ]
    history = cli("memory", "benchmark", "runs", "-c", config).document
    newest, oldest = history["runs"]
    assert (newest["run"], oldest["run"]) == (second["run"], run["run"])
    assert newest["worse"] is True and oldest["worse"] is False
    assert oldest["edits_before"] is None
    assert newest["edits_before"]["count"] == 1
    [edit] = newest["edits_before"]["latest"]
    assert edit["card"] == ids["carrier"] and edit["action"] == "card.update"
    assert edit["title"] == "Invoice dates" and edit["actor"] == "operator"
    assert history["edits_since_last_run"]["count"] == 0

    # a deleted expected card is reported and counted as a miss, never dropped
    assert cli("memory", "delete", ids["fiscal"], "--yes", "-c", config).code == 0
    third = cli("memory", "benchmark", "run", "-c", config).document
    deleted = next(c for c in third["expected_changes"] if c["state"] == "deleted")
    assert deleted["id"] == ids["fiscal"] and deleted["revision_now"] is None
    fiscal_miss = next(m for m in third["misses"] if m["command"] == "rules")
    assert fiscal_miss["reasons"][ids["fiscal"]]["reason"] == "not_found"
    assert third["by_command"]["rules"]["recall@10"] == 0
    shown = cli("memory", "benchmark", "show", third["run"], "-c", config)
    assert shown.code == 0 and shown.document["misses"] == third["misses"]
    assert shown.document["comparison"]["newly_missed"] == [
        next(c for c, r in third["ranks"].items() if ids["fiscal"] in r)
    ]
    unknown = cli(
        "memory",
        "benchmark",
        "show",
        "bench-" + "0" * 8 + "-0000-4000-8000-" + "0" * 12,
        "-c",
        config,
    )
    assert unknown.code == 3 and unknown.document["error"]["code"] == "not_found"
    malformed = cli("memory", "benchmark", "show", "run-1", "-c", config)
    assert malformed.code == 2 and malformed.document["error"]["details"] == {"id": "run-1"}


def _services(database, tmp_path, **sections):
    return build_services(
        env=database.env(),
        installation=installation_of(index=str(tmp_path / "index"), **sections),
    )


def _recall(services, workspace, question, *, kind="search", session=None, principal=None):
    return recall_command(
        services,
        workspace,
        kind,
        question,
        parse_recall_query({}),
        session=session,
        binding=DwhBinding("dwh", "sales"),
        principal=principal,
    )


def test_a_run_during_a_rebuild_measures_the_serving_generation_and_says_so(database, tmp_path):
    from tht.memory.benchmark import one_case

    services = _services(database, tmp_path)
    try:
        services.workspaces.create("acme", "en")
        made = [
            services.memory.create_card("acme", card(title=f"Shipping rule {i}")).card.id
            for i in range(30)
        ]
        services.benchmarks.add(
            "acme", [one_case({"question": "shipping rule 3", "expected": [made[3]]})]
        )
        calm = services.benchmarks.run("acme", database="dwh", schema="sales")
        assert calm["index"]["rebuilding"] is False and "note" not in calm["index"]
        started, release = threading.Event(), threading.Event()
        outcome: dict = {}

        def blocking(done: int, total: int) -> None:  # the rebuild waits until released
            started.set()
            release.wait(60)

        def rebuild() -> None:
            outcome["report"] = services.projector.rebuild("acme", blocking)

        thread = threading.Thread(target=rebuild)
        thread.start()
        try:
            assert started.wait(60), "the rebuild did not start"
            during = services.benchmarks.run("acme", database="dwh", schema="sales")
        finally:
            release.set()
            thread.join(60)
        assert outcome["report"]["cards"] == 30
        assert (
            during["index"]["rebuilding"] is True
            and "serving generation" in during["index"]["note"]
        )
        # what agents got meanwhile: the serving generation answered as before
        assert during["metrics"] == calm["metrics"] and during["ranks"] == calm["ranks"]
        history = services.benchmarks.runs("acme")["runs"]
        assert history[0]["index"]["rebuilding"] is True
    finally:
        services.close()


def test_recalls_are_logged_with_who_asked_what_and_what_came_back(cli, acme, tmp_path):
    config, ids = acme
    searched = cli("memory", "search", "when is an order shipped", "-c", config).document
    cli("memory", "rules", "fiscal year join", "-c", config)
    cli("memory", "solved-search", "orders per customer", "-c", config)
    # the curator's own measuring is not an agent's asking: never logged
    _add(cli, config, "three letter carrier codes", ids["carrier"])
    cli("memory", "benchmark", "run", "-c", config)
    cli("memory", "eval", "--cases", _cases_file(tmp_path, ids), "-c", config)
    log = cli("memory", "recalls", "-c", config).document
    assert log["log"]["entries"] == 3 and log["log"]["dropped"] == 0
    solved, rules, search = log["entries"]
    assert (search["command"], rules["command"], solved["command"]) == ("search", "rules", "solved")
    assert search["question"] == "when is an order shipped" and search["principal"] == "operator"
    assert [r["id"] for r in search["returned"]] == [r["id"] for r in searched["results"]]
    assert [r["score"] for r in search["returned"]] == pytest.approx(
        [r["score"] for r in searched["results"]], abs=1e-6
    )
    assert search["coverage"] == 1.0  # every term of the question is the first card's
    assert solved["returned"][0]["id"] == ids["solved"]
    # one page at a time, newest first
    page = cli("memory", "recalls", "-c", config, "--limit", "2").document
    assert [e["id"] for e in page["entries"]] == [solved["id"], rules["id"]]
    rest = cli("memory", "recalls", "-c", config, "--before", str(page["next_before"])).document
    assert [e["id"] for e in rest["entries"]] == [search["id"]]
    other = cli("memory", "recalls", "-c", config, "--principal", "nobody").document
    assert other["entries"] == []


def _cases_file(tmp_path, ids) -> str:
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps({"question": "shipped", "expected": [ids["shipped"]]}) + "\n")
    return str(path)


def test_the_log_keeps_its_bound_and_counts_what_it_drops(database, tmp_path, monkeypatch):
    import tht.memory.recall_log

    monkeypatch.setattr(tht.memory.recall_log, "EXPIRY_SECONDS", 0.0)  # at every write
    services = _services(database, tmp_path, recall_log={"max_entries": 100, "retention_days": 30})
    try:
        services.workspaces.create("acme", "en")
        services.memory.create_card("acme", card())
        for n in range(130):
            _recall(services, "acme", f"shipped order number {n}")
        services.recall_log.flush()
        state = services.recall_log.entries("acme", limit=1000)
        assert state["log"]["entries"] == 100 and state["log"]["dropped"] == 30
        # the oldest went first
        assert [e["question"] for e in state["entries"]][-1] == "shipped order number 30"
        # entries older than the retention expire (counted apart)
        old = datetime.now(UTC) - timedelta(days=40)
        services.recall_log.record(
            LoggedRecall("acme", "search", "an old question", None, None, "agent", (), (), at=old)
        )
        services.recall_log.flush()
        log = services.recall_log.entries("acme", limit=1000)["log"]
        # written past the bound (the oldest by order of writing went), then expired
        assert (log["dropped"], log["expired"], log["entries"]) == (31, 1, 99)
    finally:
        services.close()


def test_the_writer_writes_what_recalls_leave_without_being_asked(database, tmp_path):
    """Nobody flushes: the writer wakes for a first recall in an empty queue, each time
    the queue empties (a writer left asleep would keep them until a reader flushed)."""
    from tests.integration.service_support import wait_for

    services = _services(database, tmp_path)

    def written() -> list[str]:
        with services.archive.transaction("acme") as tx:
            return [row["question"] for row in tx.curation.log_entries(10)]

    try:
        services.workspaces.create("acme", "en")
        for question in ("first question", "second question"):
            services.recall_log.record(
                LoggedRecall("acme", "search", question, None, None, "agent", (), ())
            )
            assert wait_for(lambda q=question: q in written(), 20), question
    finally:
        services.close()


def test_the_log_reads_back_an_exact_error_match_without_a_score(database, tmp_path):
    services = _services(database, tmp_path)
    try:
        services.workspaces.create("acme", "en")
        exact_id = "mem-00000000-0000-4000-8000-000000000001"
        ranked_id = "mem-00000000-0000-4000-8000-000000000002"
        services.recall_log.record(
            LoggedRecall(
                "acme", "rules", None, "relation does not exist", None, "agent",
                (exact_id, ranked_id), (None, 0.5), exact=True,
            )
        )  # fmt: skip
        services.recall_log.flush()
        [entry] = services.recall_log.entries("acme", limit=10)["entries"]
        assert entry["returned"] == [
            {"id": exact_id, "score": None},
            {"id": ranked_id, "score": 0.5},
        ]
    finally:
        services.close()


def test_a_command_of_its_own_weighs_the_question_as_a_long_lived_process_does(database, tmp_path):
    """A command in its own process counts only its question's terms among the cards;
    the service keeps the whole term table: the same recall gets the same coverage."""
    services = _services(database, tmp_path)
    whole = RecallLog(services.archive, services.installation.recall_log)
    try:
        services.workspaces.create("acme", "en")
        for title, content in [
            ("Shipped order", "An order is shipped when its lines are shipped."),
            ("Order lines", "An order has lines."),
            ("Carrier codes", "Carriers have three letter codes."),
        ]:
            services.memory.create_card("acme", card(title=title, content=content))
        question = "shipped order carrier refund"
        [first, *_] = _recall(services, "acme", question)["results"]
        assert first["title"] == "Shipped order"
        assert not services.recall_log.whole_frequencies  # built for one command
        whole.record(
            LoggedRecall("acme", "search", question, None, None, None, (first["id"],), (1.0,))
        )
        whole.flush()
        services.recall_log.flush()
        by_mode = [e["coverage"] for e in services.recall_log.entries("acme")["entries"]]
        assert len(by_mode) == 2 and by_mode[0] == by_mode[1]
        # "order" is held by two cards, "shipped" by one, "carrier" by the third; "refund"
        # by none (weighs nothing): (ln 4 + ln 2.5) / (ln 4 + ln 2.5 + ln 4)
        assert by_mode[0] == pytest.approx(0.619, abs=0.01)
    finally:
        whole.close()
        services.close()


def test_the_log_can_be_turned_off(database, tmp_path):
    services = _services(database, tmp_path, recall_log={"enabled": False})
    try:
        services.workspaces.create("acme", "en")
        services.memory.create_card("acme", card())
        _recall(services, "acme", "when is an order shipped")
        found = gaps(services.recall_log, "acme")
        assert found["log"]["enabled"] is False and found["log"]["entries"] == 0
        assert found["gaps"] == []
    finally:
        services.close()


def test_gaps_group_weak_recalls_and_rank_them_by_frequency_and_recency(database, tmp_path):
    from tests.integration.workflow_support import Session, add, decision, join_rule
    from tht.accounts import Principal
    from tht.usecases.recall_and_proposals import propose_command

    root = tmp_path / "sessions"
    root.mkdir()
    services = _services(database, tmp_path, sessions_root=str(root))
    agent = Principal("agent-7", "agent", frozenset({"acme"}))
    try:
        services.workspaces.create("acme", "en")
        services.memory.create_card(
            "acme",
            card(title="Shipped order", content="An order is shipped when its lines are shipped."),
        )
        services.memory.create_card(
            "acme", card(title="Carrier codes", content="Carriers have three letter codes.")
        )
        # answered well: not a gap
        _recall(services, "acme", "when is an order shipped", principal=agent)
        # no card speaks of refunds: weak, asked three times in two forms
        for question in ("refund policy for damaged goods", "refund policy damaged goods"):
            _recall(services, "acme", question, principal=agent)
        _recall(services, "acme", "refund policy for damaged goods", principal=agent)
        # asked once, older in rank: another gap
        _recall(services, "acme", "warehouse opening hours", principal=agent)
        # a session whose recall looked fine but ended in a proposal of a new card
        Session(root, "acme", "s-1").log(
            decision(
                "d1",
                "sql_corrected",
                explanation="A job code repeats across fiscal years.",
                before="... ON j.job_code = m.job_code",
                after="... AND j.fiscal_year = m.fiscal_year",
            )
        )
        _recall(services, "acme", "carrier codes", session="s-1", principal=agent)
        propose_command(
            services,
            "acme",
            "s-1",
            {"version": 1, "proposals": [add("p1", ["d1"], join_rule())]},
            principal=agent,
        )
        found = gaps(services.recall_log, "acme")
        assert found["window"]["recalls"] == 6 and found["rule"]["weak_below"] == 0.5
        by_question = {g["examples"][0]["question"]: g for g in found["gaps"]}
        assert set(by_question) == {
            "refund policy for damaged goods",
            "warehouse opening hours",
            "carrier codes",
        }
        refunds = by_question["refund policy for damaged goods"]
        assert found["gaps"][0] is refunds or found["gaps"][0]["id"] == refunds["id"]
        assert refunds["asks"] == 3 and refunds["questions"] == 2
        assert refunds["examples"] == [
            {"question": "refund policy for damaged goods", "asks": 2},
            {"question": "refund policy damaged goods", "asks": 1},
        ]
        assert refunds["reasons"] == {"low_coverage": 3}
        assert refunds["principals"] == ["agent-7"]
        assert refunds["draft"] == {
            "family": "domain_clarification",
            "title": "refund policy for damaged goods",
            "content": "Agents asked: “refund policy for damaged goods”; “refund policy damaged goods”",
        }
        assert by_question["carrier codes"]["reasons"] == {"proposed": 1}
    finally:
        services.close()
