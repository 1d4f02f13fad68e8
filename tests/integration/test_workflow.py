"""Workflow integration through the `tht` command: proposals, the editable summary,
the atomic review-apply with its durable receipt, and the scenario table of the plan
("Scenari per verificare il design") that concerns Memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml

from tests.factories import card_document
from tests.integration.workflow_support import (
    APPROVED_SQL,
    Session,
    add,
    decision,
    gate_document,
    join_rule,
    new_key,
    solved,
    tree,
    update,
)
from tht.accounts import Principal


@pytest.fixture
def flow(cli, runtime_file, tmp_path, monkeypatch, database):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    root = tmp_path / "sessions"
    root.mkdir()
    config = runtime_file("acme", sessions_root=str(root))
    key_path, key = new_key(tmp_path)
    monkeypatch.setenv("THT_PROTECTED_REQUEST_KEY_FILE", str(key_path))
    return Flow(cli, config, root, key, tmp_path, database)


# an index engine nobody answers for: a Qdrant server on a closed local port
INDEX_DOWN = {"engine": "qdrant", "url": "http://127.0.0.1:9", "timeout": 1}


class Flow:
    def __init__(self, cli, config, root, key, tmp_path, database) -> None:
        self.cli, self.config, self.root, self.key, self.tmp, self.database = (
            cli,
            config,
            root,
            key,
            tmp_path,
            database,
        )
        self._files = 0

    def session(self, id: str = "s-001", *events: dict) -> Session:
        session = Session(self.root, "acme", id)
        session.path.mkdir(parents=True, exist_ok=True)
        session.ledger.touch()
        return session.log(*events) if events else session

    def file(self, document) -> str:
        self._files += 1
        path = self.tmp / f"doc-{self._files}.json"
        path.write_text(json.dumps(document))
        return str(path)

    def create(self, document: dict) -> dict:
        result = self.cli("memory", "create", "-c", self.config, "--data", self.file(document))
        assert result.code == 0, result.document
        return result.document["card"]

    def propose(self, session: Session, proposals: list[dict]):
        return self.cli(
            "memory",
            "propose",
            "--session",
            session.id,
            "--data",
            self.file({"version": 1, "proposals": proposals}),
            "-c",
            self.config,
        )

    def summary(self, session: Session) -> dict:
        result = self.cli("memory", "summary", "--session", session.id, "--json", "-c", self.config)
        assert result.code == 0, result.document
        return result.document

    def review(
        self,
        session: Session,
        selected: list[dict] | None = None,
        decision: str = "apply",
        digest: str | None = None,
    ) -> dict:
        return {
            "decision": decision,
            "proposals_digest": digest or self.summary(session)["proposals_digest"],
            "selected": selected or [],
        }

    def request_file(self, session: Session, review: dict, **kwargs) -> str:
        return self.file(gate_document(self.key, session.id, review, **kwargs))

    def apply(self, session: Session, review: dict, **kwargs):
        return self.cli(
            "memory",
            "review-apply",
            "-c",
            self.config,
            "--request",
            self.request_file(session, review, **kwargs),
        )

    def cards(self, **filters) -> list[dict]:
        result = self.cli(
            "memory",
            "list",
            "-c",
            self.config,
            "--filters",
            json.dumps({"page_size": 100, **filters}),
        )
        assert result.code == 0, result.document
        return result.document["items"]

    @contextmanager
    def installation(self, **sections: Any) -> Iterator[str]:
        """Commands of the block run with these sections of the installation's
        configuration (None: without the section); yields the runtime file."""
        path = self.tmp / "home" / "config.yaml"
        saved = path.read_text()
        document = yaml.safe_load(saved)
        for key, value in sections.items():
            if value is None:
                document.pop(key, None)
            else:
                document[key] = value
        path.write_text(yaml.safe_dump(document))
        try:
            yield self.config
        finally:
            path.write_text(saved)

    def show(self, card_id: str):
        return self.cli("memory", "show", card_id, "-c", self.config)

    def subprocess_cli(
        self, *args: str, crash_at: str | None = None
    ) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("THT_")}
        env.update(self.database.env())
        env["THT_HOME"] = str(self.tmp / "home")
        env["THT_PROTECTED_REQUEST_KEY_FILE"] = os.environ["THT_PROTECTED_REQUEST_KEY_FILE"]
        if crash_at:
            env["THT_CRASH_AT"] = crash_at
        return subprocess.run(
            [sys.executable, "-m", "tht", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )


def selected(proposal: str, **extra) -> dict:
    return {"proposal": proposal, **extra}


# --- the scenario table -------------------------------------------------------------------


def test_scenario_join_corrected_with_both_keys_becomes_rule_scoped_to_the_tables(flow):
    session = flow.session(
        "s-join",
        decision(
            "d1",
            "sql_corrected",
            explanation="A job code repeats across fiscal years: join on code and year.",
            before="... ON j.job_code = m.job_code",
            after="... AND j.fiscal_year = m.fiscal_year",
        ),
    )
    proposed = flow.propose(session, [add("p1", ["d1"], join_rule())])
    assert proposed.code == 0, proposed.document
    assert proposed.document["proposals"] == [
        {"id": "p1", "action": "add", "family": "sql_rule", "card_id": None}
    ]
    summary = flow.summary(session)
    assert [a["proposal"] for a in summary["additions"]] == ["p1"]
    assert summary["additions"][0]["card"]["content"] == join_rule()["content"]

    applied = flow.apply(session, flow.review(session, [selected("p1")]))
    assert applied.code == 0, applied.document
    assert applied.document["status"] == "applied"
    card = flow.show(applied.document["cards"][0]["card"]).document
    assert card["family"] == "sql_rule" and card["origin"] == "workflow"
    assert card["source"] == {"session": "s-join", "decisions": ["d1"]}
    assert "job_code and fiscal_year" in card["content"]
    assert {(d["table"], d["column"]) for d in card["dependencies"]} == {
        ("movements", "job_code"),
        ("jobs", "job_code"),
    }
    assert [e["outcome"] for e in session.reviewed_events()] == ["applied"]


def test_scenario_only_this_time_2024_gives_no_rule_and_keeps_the_period_in_the_exemplar(flow):
    session = flow.session(
        "s-2024",
        decision("d1", "question_restricted", restriction="only 2024, for this question"),
        decision(
            "d2", "sql_approved", question="Total of the 2024 orders per customer", sql=APPROVED_SQL
        ),
    )
    rule = {
        "family": "sql_rule",
        "title": "Always 2024",
        "content": "Filter orders on order_year = 2024.",
        "scope": "Sales",
        "rationale": "The reviewer asked for 2024.",
    }
    refused = flow.propose(session, [add("p1", ["d1"], rule)])
    assert refused.code == 2 and refused.document["error"]["code"] == "proposal_refused"
    assert refused.document["error"]["details"]["problems"][0]["reason"] == "inadmissible_type"

    assert flow.propose(session, [add("q", ["d2", "d1"], solved())]).code == 0
    summary = flow.summary(session)
    assert summary["additions"] == [] and summary["solved_question"]["sql_read_only"] is True
    assert summary["solved_question"]["sql"] == APPROVED_SQL
    applied = flow.apply(session, flow.review(session, [selected("q")]))
    assert applied.code == 0, applied.document
    assert [c["family"] for c in flow.cards()] == ["solved_question"]
    exemplar = flow.show(applied.document["cards"][0]["card"]).document
    assert "2024" in exemplar["context"] and exemplar["sql"] == APPROVED_SQL
    assert flow.cards(family="sql_rule") == []


def test_scenario_double_counting_explained_gives_a_granularity_card(flow):
    session = flow.session(
        "s-double",
        decision(
            "d1",
            "sql_corrected",
            explanation="Joining order lines repeats the order header once per line.",
        ),
    )
    granularity = {
        "family": "explained_error",
        "title": "Order totals counted once per line",
        "context": "sum(orders.total) after joining order_lines counts an order once per line",
        "content": "Aggregate at order granularity: sum orders.total before joining order_lines.",
        "rationale": "orders has one row per order; order_lines one row per line: the join duplicates.",
        "dependencies": [
            {"database": "dwh", "schema": "sales", "table": "orders"},
            {"database": "dwh", "schema": "sales", "table": "order_lines"},
        ],
    }
    assert flow.propose(session, [add("p1", ["d1"], granularity)]).code == 0
    applied = flow.apply(session, flow.review(session, [selected("p1")]))
    assert applied.code == 0, applied.document
    card = flow.show(applied.document["cards"][0]["card"]).document
    assert card["family"] == "explained_error" and "granularity" in card["content"]
    assert "duplicates" in card["rationale"]


def test_scenario_timeout_rejection_table_choice_and_unselected_memory_produce_nothing(flow):
    existing = flow.create(card_document("domain_clarification"))
    session = flow.session(
        "s-nothing",
        decision("t1", "query_failed", reason="canceling statement due to statement timeout"),
        decision("t2", "sql_corrected"),  # rejected without an explanation
        decision(
            "t3", "sql_corrected", status="rejected", explanation="an option the reviewer rejected"
        ),
        decision("t4", "tables_selected", tables=["orders"]),
        {"event": "memory_decided", "card": existing["id"], "status": "rejected", "gate": "F2"},
    )
    rule = join_rule()
    for source, reason in (
        ("t1", "inadmissible_type"),
        ("t2", "unexplained"),
        ("t3", "not_approved"),
        ("t4", "inadmissible_type"),
        ("nope", "unknown_decision"),
    ):
        refused = flow.propose(session, [add("p1", [source], rule)])
        assert refused.code == 2, refused.document
        assert [p["reason"] for p in refused.document["error"]["details"]["problems"]] == [reason]
    # nothing was recorded: the summary is empty, and nothing derives from the events
    summary = flow.summary(session)
    assert summary["additions"] == summary["updates"] == summary["reused"] == []
    assert summary["solved_question"] is None
    assert [c["id"] for c in flow.cards()] == [existing["id"]]
    assert not (session.path / "memory_proposals.json").exists()


def test_scenario_exact_duplicate_is_reused_not_duplicated(flow):
    existing = flow.create(
        join_rule(
            title="A differently worded title",
            content="  join movements and jobs on job_code  and fiscal_year. ",
        )
    )
    session = flow.session(
        "s-dup", decision("d1", "sql_corrected", explanation="code repeats across years")
    )
    proposed = flow.propose(session, [add("p1", ["d1"], join_rule())])
    assert proposed.code == 0, proposed.document
    assert proposed.document["proposals"][0] == {
        "id": "p1",
        "action": "reuse",
        "family": "sql_rule",
        "card_id": existing["id"],
    }
    summary = flow.summary(session)
    assert summary["additions"] == [] and summary["reused"][0]["card_id"] == existing["id"]
    applied = flow.apply(session, flow.review(session, [selected("p1")]))
    assert applied.code == 0, applied.document
    assert applied.document["status"] == "declined"  # nothing new to write
    assert applied.document["cards"] == [
        {
            "proposal": "p1",
            "card": existing["id"],
            "action": "reuse",
            "family": "sql_rule",
            "exists": True,
        }
    ]
    assert [c["id"] for c in flow.cards()] == [existing["id"]]


def test_scenario_correction_of_the_same_rule_is_a_visible_replacement_keeping_only_current_content(
    flow,
):
    manual = flow.create(join_rule(content="Join movements and jobs on job_code."))
    assert manual["origin"] == "manual" and manual["revision"] == 1
    session = flow.session(
        "s-fix", decision("d1", "sql_corrected", explanation="code repeats across years")
    )
    corrected = join_rule()
    assert (
        flow.propose(
            session,
            [
                update(
                    "p1", ["d1"], manual["id"], 1, corrected, change="add fiscal_year to the join"
                )
            ],
        ).code
        == 0
    )
    summary = flow.summary(session)
    (shown,) = summary["updates"]
    assert shown["card_id"] == manual["id"] and shown["stale"] is False
    assert {
        "field": "content",
        "before": "Join movements and jobs on job_code.",
        "after": corrected["content"],
    } in shown["changes"]
    assert shown["current"]["content"] == "Join movements and jobs on job_code."

    applied = flow.apply(session, flow.review(session, [selected("p1")]))
    assert applied.code == 0, applied.document
    card = flow.show(manual["id"]).document
    assert card["id"] == manual["id"] and card["origin"] == "manual" and card["source"] is None
    assert card["revision"] == 2 and card["content"] == corrected["content"]
    assert len(flow.cards()) == 1
    assert "Join movements and jobs on job_code." not in json.dumps(card)


def test_scenario_two_rules_for_different_tables_are_both_kept_with_explicit_scopes(flow):
    orders = flow.create(
        {
            "family": "sql_rule",
            "title": "Exclude cancelled orders",
            "content": "Exclude rows whose status is cancelled.",
            "scope": "Sales orders",
            "rationale": "Cancelled rows are not revenue.",
            "dependencies": [{"database": "dwh", "schema": "sales", "table": "orders"}],
        }
    )
    session = flow.session(
        "s-two", decision("d1", "rule_stated", text="invoices: exclude credit notes")
    )
    invoices = {
        "family": "sql_rule",
        "title": "Exclude credit notes from invoices",
        "content": "Exclude rows whose document type is credit note.",
        "scope": "Billing invoices",
        "rationale": "Credit notes are not sales.",
        "dependencies": [{"database": "dwh", "schema": "billing", "table": "invoices"}],
    }
    proposed = flow.propose(session, [add("p1", ["d1"], invoices)])
    assert (
        proposed.document["proposals"][0]["action"] == "add"
    )  # similar is not the same: no replacement
    applied = flow.apply(session, flow.review(session, [selected("p1")]))
    assert applied.code == 0, applied.document
    kept = {c["id"]: c["scope"] for c in flow.cards()}
    assert kept == {
        orders["id"]: "Sales orders",
        applied.document["cards"][0]["card"]: "Billing invoices",
    }
    new = flow.show(applied.document["cards"][0]["card"]).document
    assert new["dependencies"] == [
        {"database": "dwh", "schema": "billing", "table": "invoices", "column": None}
    ]
    assert flow.show(orders["id"]).document["revision"] == 1


# --- the review: edits, links, atomicity -------------------------------------------------


def test_reviewer_edits_content_scope_dependencies_and_links_between_new_cards(flow):
    session = flow.session(
        "s-edit",
        decision("d1", "sql_corrected", explanation="code repeats across years"),
        decision("d2", "concept_clarified", text="a job is a commessa"),
        decision("d3", "sql_approved", sql=APPROVED_SQL),
    )
    clarification = {
        "family": "domain_clarification",
        "title": "Job",
        "content": "A job is a commessa.",
        "scope": "Accounting",
    }
    assert (
        flow.propose(
            session,
            [
                add(
                    "rule",
                    ["d1"],
                    join_rule(),
                    links=[{"proposal": "job", "meaning": "uses the term"}],
                ),
                add("job", ["d2"], clarification),
                add("q", ["d3"], solved()),
            ],
        ).code
        == 0
    )
    edited = join_rule(
        content="Join on job_code AND fiscal_year, always both.",
        scope="Accounting (jobs)",
        dependencies=[{"database": "dwh", "schema": "acc", "table": "jobs"}],
    )
    # changing the approved SQL is refused: it goes back to SQL review
    refused = flow.apply(
        session, flow.review(session, [selected("q", card=solved(sql="SELECT 1"))])
    )
    assert refused.code == 2 and refused.document["error"]["code"] == "approved_sql_read_only"
    assert flow.cards() == []

    applied = flow.apply(
        session,
        flow.review(
            session,
            [
                selected("rule", card=edited),
                selected("job"),
                selected("q", card=solved(context="2024 only, edited")),
            ],
        ),
    )
    assert applied.code == 0, applied.document
    ids = {c["proposal"]: c["card"] for c in applied.document["cards"]}
    rule = flow.show(ids["rule"]).document
    assert rule["content"] == edited["content"] and rule["scope"] == "Accounting (jobs)"
    assert rule["dependencies"] == [
        {"database": "dwh", "schema": "acc", "table": "jobs", "column": None}
    ]
    assert rule["links"] == [
        {"target": ids["job"], "meaning": "uses the term", "target_title": "Job"}
    ]
    assert flow.show(ids["q"]).document["context"] == "2024 only, edited"
    assert applied.document["index"]["status"] == "current"


@pytest.mark.parametrize(
    "breakage",
    [
        "stale_update",
        "link_to_unselected_proposal",
        "link_to_deleted_card",
        "update_of_deleted_card",
    ],
)
def test_a_stale_update_or_an_invalid_link_saves_nothing(flow, breakage):
    target = flow.create(card_document("domain_clarification", title="Link target"))
    existing = flow.create(join_rule(content="Join movements and jobs on job_code."))
    session = flow.session(
        "s-atomic",
        decision("d1", "sql_corrected", explanation="code repeats"),
        decision("d2", "concept_clarified", text="x"),
    )
    clarification = {
        "family": "domain_clarification",
        "title": "Fiscal year",
        "content": "Year of the books.",
        "scope": "Accounting",
    }
    assert (
        flow.propose(
            session,
            [
                add(
                    "new", ["d2"], clarification, links=[{"target": target["id"], "meaning": "see"}]
                ),
                update("upd", ["d1"], existing["id"], 1, join_rule()),
                add(
                    "other",
                    ["d2"],
                    {**clarification, "title": "Other", "content": "Something else."},
                ),
            ],
        ).code
        == 0
    )
    review = flow.review(session, [selected("new"), selected("upd")])
    if breakage == "stale_update":
        assert (
            flow.cli(
                "memory",
                "update",
                existing["id"],
                "-c",
                flow.config,
                "--data",
                flow.file(join_rule(title="Admin edit", content="Admin content.")),
            ).code
            == 0
        )
        expected = (4, "stale_revision")
    elif breakage == "link_to_unselected_proposal":
        review["selected"][0]["links"] = [{"proposal": "other", "meaning": "see"}]
        expected = (2, "invalid_input")
    elif breakage == "link_to_deleted_card":
        assert flow.cli("memory", "delete", target["id"], "--yes", "-c", flow.config).code == 0
        expected = (3, "not_found")
    else:
        assert flow.cli("memory", "delete", existing["id"], "--yes", "-c", flow.config).code == 0
        expected = (3, "not_found")
    before = {c["id"]: c["revision"] for c in flow.cards()}
    result = flow.apply(session, review)
    assert (result.code, result.document["error"]["code"]) == expected, result.document
    assert {c["id"]: c["revision"] for c in flow.cards()} == before
    assert flow.summary(session)["reviewed"] is None
    assert session.reviewed_events() == []
    if breakage == "update_of_deleted_card":
        assert flow.show(existing["id"]).code == 3  # never recreated


def test_decline_all_writes_no_memory_and_records_the_review(flow):
    session = flow.session("s-decline", decision("d1", "sql_corrected", explanation="code repeats"))
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    result = flow.apply(session, flow.review(session, decision="decline_all"))
    assert result.code == 0, result.document
    assert result.document["status"] == "declined" and result.document["declined"] == ["p1"]
    assert flow.cards() == []
    (event,) = session.reviewed_events()
    assert (
        event["outcome"] == "declined" and event["cards"] == [] and event["reviewer"] == "reviewer"
    )
    assert flow.summary(session)["reviewed"]["outcome"] == "declined"
    # a reviewed session's proposals are closed
    again = flow.propose(session, [add("p1", ["d1"], join_rule())])
    assert again.code == 4 and again.document["error"]["code"] == "conflict"


# --- receipts: replay, conflicts, crashes, deletions ---------------------------------------


def test_the_same_review_delivered_twice_across_a_process_restart_has_one_effect(flow):
    session = flow.session("s-replay", decision("d1", "sql_corrected", explanation="code repeats"))
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    review = flow.review(session, [selected("p1")])
    request = flow.request_file(session, review)
    first = flow.subprocess_cli("memory", "review-apply", "-c", flow.config, "--request", request)
    assert first.returncode == 0, first.stdout + first.stderr
    second = flow.subprocess_cli("memory", "review-apply", "-c", flow.config, "--request", request)
    assert second.returncode == 0, second.stdout + second.stderr
    # a new delivery of the same choice (new signature, new nonce) in a third process
    third = flow.subprocess_cli(
        "memory", "review-apply", "-c", flow.config, "--request", flow.request_file(session, review)
    )
    documents = [json.loads(p.stdout) for p in (first, second, third)]
    assert [d["replayed"] for d in documents] == [False, True, True]
    assert documents[0]["cards"] == documents[1]["cards"] == documents[2]["cards"]
    assert (
        len({(d["receipt"]["request_digest"], d["receipt"]["created_at"]) for d in documents}) == 1
    )
    assert len(flow.cards()) == 1
    assert len(session.reviewed_events()) == 1


def test_the_same_key_with_different_content_is_refused(flow):
    session = flow.session(
        "s-key",
        decision("d1", "sql_corrected", explanation="code repeats"),
        decision("d2", "concept_clarified", text="x"),
    )
    assert (
        flow.propose(
            session,
            [
                add("p1", ["d1"], join_rule()),
                add("p2", ["d2"], card_document("domain_clarification")),
            ],
        ).code
        == 0
    )
    assert flow.apply(session, flow.review(session, [selected("p1")])).code == 0
    other = flow.apply(session, flow.review(session, [selected("p1"), selected("p2")]))
    assert other.code == 4 and other.document["error"]["code"] == "receipt_conflict"
    assert len(flow.cards()) == 1 and len(session.reviewed_events()) == 1


def test_a_crash_between_the_memory_commit_and_the_ledger_append_is_recovered_once(flow):
    session = flow.session("s-crash", decision("d1", "sql_corrected", explanation="code repeats"))
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    request = flow.request_file(session, flow.review(session, [selected("p1")]))
    crashed = flow.subprocess_cli(
        "memory",
        "review-apply",
        "-c",
        flow.config,
        "--request",
        request,
        crash_at="review_apply.after_memory_commit",
    )
    assert crashed.returncode == 70 and crashed.stdout == ""
    assert len(flow.cards()) == 1  # Memory is committed ...
    assert session.reviewed_events() == []  # ... the ledger does not know yet
    assert flow.summary(session)["reviewed"]["ledger_appended_at"] is None

    retried = flow.subprocess_cli("memory", "review-apply", "-c", flow.config, "--request", request)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    document = json.loads(retried.stdout)
    assert document["replayed"] is True and document["ledger"]["appended_now"] is True
    assert len(flow.cards()) == 1
    assert len(session.reviewed_events()) == 1
    assert flow.summary(session)["reviewed"]["ledger_appended_at"] is not None
    # the crashed run never indexed: the retry did, from the current archive
    assert document["index"]["status"] == "current"


def test_a_crash_after_the_ledger_append_does_not_append_twice(flow):
    session = flow.session("s-crash2", decision("d1", "sql_corrected", explanation="code repeats"))
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    request = flow.request_file(session, flow.review(session, [selected("p1")]))
    crashed = flow.subprocess_cli(
        "memory",
        "review-apply",
        "-c",
        flow.config,
        "--request",
        request,
        crash_at="review_apply.after_ledger_append",
    )
    assert crashed.returncode == 70
    assert len(session.reviewed_events()) == 1
    retried = flow.cli("memory", "review-apply", "-c", flow.config, "--request", request)
    assert retried.code == 0 and retried.document["ledger"]["appended_now"] is False
    assert len(session.reviewed_events()) == 1 and len(flow.cards()) == 1


def test_a_deleted_card_is_never_recreated_by_a_replay(flow):
    session = flow.session("s-del", decision("d1", "sql_corrected", explanation="code repeats"))
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    request = flow.request_file(session, flow.review(session, [selected("p1")]))
    first = flow.cli("memory", "review-apply", "-c", flow.config, "--request", request)
    card_id = first.document["cards"][0]["card"]
    assert flow.cli("memory", "delete", card_id, "--yes", "-c", flow.config).code == 0
    replay = flow.cli("memory", "review-apply", "-c", flow.config, "--request", request)
    assert replay.code == 0 and replay.document["replayed"] is True
    assert replay.document["cards"][0]["exists"] is False
    assert flow.cards() == [] and flow.show(card_id).code == 3
    solved_index = flow.cli("memory", "solved-index", "s-del", "-c", flow.config)
    assert solved_index.code == 3  # the review saved no solved question
    assert flow.cards() == []


# --- the gate owns review-apply ------------------------------------------------------------


def test_review_apply_requires_a_valid_signed_gate_request(flow, monkeypatch, tmp_path):
    session = flow.session("s-gate", decision("d1", "sql_corrected", explanation="code repeats"))
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    review = flow.review(session, [selected("p1")])
    signed = gate_document(flow.key, session.id, review)
    tampered = json.loads(json.dumps(signed))
    tampered["request"]["review"]["decision"] = "decline_all"
    tampered["request"]["review"]["selected"] = []
    wrong_key = gate_document(b"k" * 40, session.id, review)
    unsigned = {"request": signed["request"]}
    not_manager = gate_document(
        flow.key, session.id, review, principal=Principal("u", "user", frozenset({"acme"}))
    )
    other_member = gate_document(
        flow.key, session.id, review, principal=Principal("x", "admin", frozenset({"other"}))
    )
    for document, code in (
        (tampered, 5),
        (wrong_key, 5),
        (unsigned, 5),
        (not_manager, 5),
        (other_member, 5),
    ):
        result = flow.cli(
            "memory", "review-apply", "-c", flow.config, "--request", flow.file(document)
        )
        assert result.code == code, result.document
    expired = json.loads(json.dumps(signed["request"]))
    expired["issued_at"], expired["expires_at"] = (
        "2020-01-01T00:00:00+00:00",
        "2020-01-01T00:01:00+00:00",
    )
    from tht.protected import sign

    result = flow.cli(
        "memory", "review-apply", "-c", flow.config, "--request", flow.file(sign(expired, flow.key))
    )
    assert result.code == 5
    other_workspace = gate_document(flow.key, session.id, review, workspace="beta")
    assert (
        flow.cli(
            "memory", "review-apply", "-c", flow.config, "--request", flow.file(other_workspace)
        ).code
        == 5
    )
    monkeypatch.delenv("THT_PROTECTED_REQUEST_KEY_FILE")
    no_key = flow.cli("memory", "review-apply", "-c", flow.config, "--request", flow.file(signed))
    assert no_key.code == 2 and no_key.document["error"]["code"] == "invalid_configuration"
    assert flow.cards() == [] and session.reviewed_events() == []


def test_the_proposals_a_review_names_must_be_those_recorded(flow):
    session = flow.session("s-digest", decision("d1", "sql_corrected", explanation="code repeats"))
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    old = flow.review(session, [selected("p1")])
    assert (
        flow.propose(session, [add("p1", ["d1"], join_rule(scope="Accounting, all years"))]).code
        == 0
    )
    stale = flow.apply(session, old)
    assert stale.code == 4 and "changed since the summary" in stale.document["error"]["message"]
    unknown = flow.apply(session, flow.review(session, [selected("zz")]))
    assert unknown.code == 2
    (session.path / "memory_proposals.json").write_text(
        (session.path / "memory_proposals.json").read_text().replace("all years", "some years")
    )
    tampered = flow.cli("memory", "summary", "--session", session.id, "-c", flow.config)
    assert tampered.code == 4
    assert flow.cards() == []


# --- propose: validation ------------------------------------------------------------------


def test_propose_validates_sessions_sources_updates_and_links(flow, runtime_file):
    card = flow.create(join_rule(content="Join movements and jobs on job_code."))
    session = flow.session(
        "s-valid",
        decision("d1", "sql_corrected", explanation="code repeats"),
        decision("d2", "sql_approved", sql=APPROVED_SQL),
        decision("d3", "sql_corrected", explanation="first version"),
        decision("d4", "sql_corrected", explanation="second version", supersedes=["d3"]),
    )

    def problems(proposals):
        result = flow.propose(session, proposals)
        assert result.code in (2, 3, 4), result.document
        return [p["reason"] for p in result.document["error"]["details"]["problems"]]

    assert problems([update("u", ["d1"], card["id"], 7, join_rule())]) == ["stale_revision"]
    assert problems(
        [update("u", ["d1"], "mem-00000000-0000-4000-8000-000000000000", 1, join_rule())]
    ) == ["missing_card"]
    assert problems(
        [add("a", ["d1"], join_rule(), links=[{"proposal": "zz", "meaning": "m"}])]
    ) == ["missing_link_target"]
    assert problems(
        [
            add(
                "a",
                ["d1"],
                join_rule(),
                links=[{"target": "mem-00000000-0000-4000-8000-000000000000", "meaning": "m"}],
            )
        ]
    ) == ["missing_link_target"]
    assert problems([add("a", ["d3"], join_rule())]) == ["not_approved"]  # superseded
    assert problems([add("q", ["d2"], solved(sql="SELECT 2"))]) == ["sql_not_approved"]
    assert problems([add("q", ["d2"], solved()), add("r", ["d2"], solved(title="again"))]) == [
        "second_solved_question"
    ]
    assert problems([add("a", ["d1"], {**join_rule(), "links": []})]) == ["invalid_card"]
    assert problems([add("a", ["d1"], join_rule()), add("a", ["d1"], join_rule())]) == [
        "duplicate_id"
    ]
    accepted = flow.propose(session, [add("a", ["d4"], join_rule())])
    assert accepted.code == 0
    # where it was written, under sessions_root: never the service's absolute path
    assert accepted.document["recorded"] == f"acme/{session.id}/memory_proposals.json"

    bad_ids = ("../etc", "a/b", ".hidden", "x" * 200)
    for bad in bad_ids:
        result = flow.cli(
            "memory",
            "propose",
            "--session",
            bad,
            "--data",
            flow.file({"proposals": []}),
            "-c",
            flow.config,
        )
        assert result.code == 2 and result.document["error"]["code"] == "invalid_input", bad
    missing = flow.cli("memory", "summary", "--session", "s-missing", "-c", flow.config)
    assert missing.code == 3
    malformed = flow.cli(
        "memory",
        "propose",
        "--session",
        "s-valid",
        "--data",
        flow.file({"proposals": [{"id": "a", "action": "update", "sources": ["d1"], "card": {}}]}),
        "-c",
        flow.config,
    )
    assert malformed.code == 2 and "card_id" in malformed.document["error"]["message"]
    other = flow.cli(
        "memory",
        "propose",
        "--session",
        "s-valid",
        "--data",
        flow.file({"session": "s-other", "proposals": []}),
        "-c",
        flow.config,
    )
    assert other.code == 2
    with flow.installation(sessions_root=None) as no_root:
        unconfigured = flow.cli("memory", "summary", "--session", "s-valid", "-c", no_root)
    assert unconfigured.code == 3 and "sessions_root" in unconfigured.document["error"]["message"]


def test_a_malformed_ledger_is_a_clear_error_and_a_torn_last_line_is_ignored(flow):
    session = flow.session("s-ledger", decision("d1", "sql_corrected", explanation="code repeats"))
    with open(session.ledger, "a") as handle:
        handle.write('{"event": "decision", "id": "d9", "ty')  # a writer died mid-line
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    assert flow.apply(session, flow.review(session, [selected("p1")])).code == 0
    lines = session.ledger.read_text().splitlines()
    assert json.loads(lines[-1])["event"] == "memory_summary_reviewed"
    bad = flow.session("s-bad")
    bad.ledger.write_text('{"event": "decision", "id": "d1"}\n')
    result = flow.propose(bad, [add("p1", ["d1"], join_rule())])
    assert result.code == 2 and "line 1 of the ledger" in result.document["error"]["message"]


# --- consumption in the gates --------------------------------------------------------------


def test_search_and_rules_with_a_session_leave_out_memory_decided_in_it(flow):
    used = flow.create(
        {
            "family": "domain_clarification",
            "title": "Shipped order",
            "content": "An order is shipped when all its lines are shipped.",
            "scope": "Sales",
        }
    )
    other = flow.create(
        {
            "family": "domain_clarification",
            "title": "Open order shipped lines",
            "content": "An open order has shipped lines and lines still to ship.",
            "scope": "Sales",
        }
    )
    rule = flow.create(
        {
            "family": "sql_rule",
            "title": "Shipped orders filter",
            "content": "Filter shipped orders on shipped_at is not null.",
            "scope": "Sales",
            "rationale": "shipped_at is set when the last line ships.",
        }
    )
    session = flow.session(
        "s-use",
        {"event": "memory_decided", "card": used["id"], "status": "approved", "gate": "F2"},
        {"event": "memory_decided", "card": rule["id"], "status": "rejected", "gate": "F6"},
    )
    plain = flow.cli("memory", "search", "shipped order", "-c", flow.config, "--json")
    assert plain.code == 0 and {used["id"], other["id"]} <= {
        r["id"] for r in plain.document["results"]
    }
    scoped = flow.cli(
        "memory", "search", "shipped order", "--session", session.id, "-c", flow.config, "--json"
    )
    ids = [r["id"] for r in scoped.document["results"]]
    assert other["id"] in ids and used["id"] not in ids and rule["id"] not in ids
    # --explain names the session's decision as the reason
    explained = flow.cli(
        "memory",
        "search",
        "shipped order",
        "--session",
        session.id,
        "--explain",
        used["id"],
        "-c",
        flow.config,
    )
    assert explained.code == 0, explained.document
    assert explained.document["explain"] == {
        "card": used["id"],
        "returned": False,
        "reason": "decided",
        "details": {},
    }
    rules = flow.cli("memory", "rules", "shipped orders", "-c", flow.config)
    assert rule["id"] in [r["id"] for r in rules.document["results"]]
    rules_scoped = flow.cli(
        "memory", "rules", "shipped orders", "--session", session.id, "-c", flow.config
    )
    assert rules_scoped.code == 0 and rule["id"] not in [
        r["id"] for r in rules_scoped.document["results"]
    ]
    bad = flow.cli("memory", "search", "x", "--session", "../x", "-c", flow.config)
    assert bad.code == 2


def test_solved_index_only_retries_the_receipt_of_a_reviewed_session(flow, runtime_file):
    session = flow.session("s-solved", decision("d1", "sql_approved", sql=APPROVED_SQL))
    assert (
        flow.cli("memory", "solved-index", "s-solved", "-c", flow.config, "--json").code == 3
    )  # no receipt
    assert flow.propose(session, [add("q", ["d1"], solved())]).code == 0
    # the index is down while the reviewer applies: saved, index update pending
    review = flow.review(session, [selected("q")])
    with flow.installation(index=INDEX_DOWN) as down:
        applied = flow.cli(
            "memory", "review-apply", "-c", down, "--request", flow.request_file(session, review)
        )
    assert applied.code == 0, applied.document
    card_id = applied.document["cards"][0]["card"]
    assert applied.document["index"]["status"] == "pending" and applied.document["index"][
        "pending"
    ] == [card_id]
    assert [
        p["card_id"] for p in flow.cli("memory", "pending", "-c", flow.config).document["items"]
    ] == [card_id]
    before = flow.cli(
        "memory", "solved-search", "2024 orders per customer", "-c", flow.config
    ).document
    assert card_id not in [
        r["id"] for r in before.get("results", [])
    ]  # pending: not recalled (or no index yet)
    indexed = flow.cli("memory", "solved-index", "s-solved", "-c", flow.config, "--json")
    assert indexed.code == 0 and indexed.document["results"] == [
        {"card": card_id, "index": {"status": "current", "operation": "upsert", "error": None}}
    ]
    found = flow.cli("memory", "solved-search", "2024 orders per customer", "-c", flow.config)
    assert [r["id"] for r in found.document["results"]] == [card_id]
    assert flow.cli("memory", "delete", card_id, "--yes", "-c", flow.config).code == 0
    again = flow.cli("memory", "solved-index", "s-solved", "-c", flow.config)
    assert again.code == 0 and again.document["results"][0]["status"] == "deleted"
    assert flow.cards() == []


def test_rules_for_a_database_error_answer_first_from_the_exact_signature(flow, runtime_file):
    exact = flow.create(
        {
            "family": "explained_error",
            "title": "amount was renamed",
            "context": "column amount does not exist",
            "content": "Use total_amount.",
            "rationale": "The column was renamed in 2023.",
            "error_signature": 'ERROR:  column "amount" does not exist',
        }
    )
    assert exact["error_signature"] == 'column "amount" does not exist'
    similar = flow.create(
        {
            "family": "explained_error",
            "title": "Column amount missing in invoices",
            "context": "column amount does not exist in invoices: use amount_net",
            "content": "Use amount_net in invoices.",
            "rationale": "invoices has net amounts.",
            "error_signature": 'column "amount_net" does not exist',
        }
    )
    text = 'psql:q.sql:3: ERROR:  column "amount" does not exist at character 8\nLINE 1: SELECT amount FROM o\n'
    answer = flow.cli("memory", "rules", "--error", text, "-c", flow.config)
    assert answer.code == 0, answer.document
    assert answer.document["error_signature"] == 'column "amount" does not exist'
    assert answer.document["results"][0]["id"] == exact["id"]
    assert answer.document["results"][0]["retrieval"]["via"] == "error_signature"
    assert similar["id"] in [r["id"] for r in answer.document["results"][1:]]  # then hybrid recall
    # no vector involved: with the index down the exact match still answers
    with flow.installation(index=INDEX_DOWN) as down:
        offline = flow.cli("memory", "rules", "why?", "--error", text, "-c", down)
    assert offline.code == 0 and [r["id"] for r in offline.document["results"]] == [exact["id"]]
    assert offline.document["recall_error"]["code"] == "index_unavailable"
    # an edit that does not mention the signature keeps it; another family cannot have one
    edited = flow.cli(
        "memory",
        "update",
        exact["id"],
        "-c",
        flow.config,
        "--data",
        flow.file(
            {
                "family": "explained_error",
                "title": "amount renamed",
                "context": "column amount does not exist",
                "content": "Use total_amount.",
                "rationale": "Renamed.",
            }
        ),
    )
    assert edited.document["card"]["error_signature"] == 'column "amount" does not exist'
    wrong = flow.cli(
        "memory",
        "create",
        "-c",
        flow.config,
        "--data",
        flow.file({**card_document("sql_rule"), "error_signature": "division by zero"}),
    )
    assert wrong.code == 2
    assert flow.cli("memory", "rules", "--error", "   ", "-c", flow.config).code == 2
    nothing = flow.cli("memory", "rules", "--error", "ERROR: division by zero", "-c", flow.config)
    assert nothing.code == 0 and all(
        r["retrieval"]["via"] != "error_signature" for r in nothing.document["results"]
    )


def test_concurrent_deliveries_of_one_review_apply_it_once(flow):
    from concurrent.futures import ThreadPoolExecutor

    from tht.bootstrap import build_services
    from tht.workflow.contract import Review

    session = flow.session("s-race", decision("d1", "sql_corrected", explanation="code repeats"))
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    review = Review.model_validate(flow.review(session, [selected("p1")]))
    services = build_services()  # the environment the cli fixture set
    reviewer = Principal("reviewer", "admin", frozenset({"acme"}))
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(
                pool.map(
                    lambda _: services.review.review_apply(reviewer, "acme", session.id, review),
                    range(4),
                )
            )
    finally:
        services.close()
    assert sorted(r["replayed"] for r in results) == [False, True, True, True]
    assert len({r["cards"][0]["card"] for r in results}) == 1
    assert len(flow.cards()) == 1 and len(session.reviewed_events()) == 1


def test_review_receipts_are_isolated_by_workspace_and_never_deleted_by_the_runtime(flow):
    from tht.memory.archive.postgres import PostgresArchive

    assert flow.cli("workspace", "create", "beta", "--language", "en").code == 0
    session = flow.session("s-rls", decision("d1", "sql_corrected", explanation="code repeats"))
    assert flow.propose(session, [add("p1", ["d1"], join_rule())]).code == 0
    assert flow.apply(session, flow.review(session, [selected("p1")])).code == 0
    archive = PostgresArchive(flow.database.runtime).open()
    try:
        with archive.transaction("beta") as tx:
            assert (
                tx.conn.execute("SELECT count(*) FROM thoth_memory.review_receipts").fetchone()[0]
                == 0
            )
        with archive.transaction("acme") as tx:
            assert (
                tx.conn.execute("SELECT count(*) FROM thoth_memory.review_receipts").fetchone()[0]
                == 1
            )
        with pytest.raises(Exception) as denied:
            with archive.transaction("acme") as tx:
                tx.conn.execute("DELETE FROM thoth_memory.review_receipts")
        assert "permission denied for table review_receipts" in str(denied.value)
        with archive.transaction("acme") as tx:
            assert (
                tx.conn.execute("SELECT count(*) FROM thoth_memory.review_receipts").fetchone()[0]
                == 1
            )
    finally:
        archive.close()


# --- sessions belong to a workspace --------------------------------------------------------


def test_a_workspace_never_reaches_another_workspaces_session(flow, runtime_file):
    """Workspace beta's session s-shared, named by acme's commands: propose, summary,
    recall with --session, review-apply and solved-index find nothing of beta's, read
    nothing and write nothing; acme's own session of the same id is its own."""
    assert flow.cli("workspace", "create", "beta", "--language", "en").code == 0
    beta = runtime_file("beta", sessions_root=str(flow.root))
    theirs = Session(flow.root, "beta", "s-shared").log(
        decision("d1", "sql_corrected", explanation="code repeats"),
        decision("d2", "sql_approved", question="Total of the 2024 orders", sql=APPROVED_SQL),
    )
    proposals = flow.file({"version": 1, "proposals": [add("p1", ["d1"], join_rule())]})
    recorded = flow.cli(
        "memory", "propose", "--session", "s-shared", "--data", proposals, "-c", beta
    )
    assert recorded.code == 0, recorded.document
    assert recorded.document["recorded"] == "beta/s-shared/memory_proposals.json"
    digest = recorded.document["digest"]
    before = tree(flow.root)

    empty = flow.file({"version": 1, "proposals": []})
    for command in (
        ["propose", "--session", "s-shared", "--data", empty],
        ["propose", "--session", "s-shared", "--data", proposals],
        ["summary", "--session", "s-shared"],
        ["search", "orders per customer", "--session", "s-shared"],
        ["rules", "join jobs", "--session", "s-shared"],
        ["solved-index", "s-shared"],
    ):
        refused = flow.cli("memory", *command, "-c", flow.config)
        assert (refused.code, refused.document["error"]["code"]) == (3, "not_found"), command
        assert "beta" not in json.dumps(refused.document), command
    # acme's admin applying beta's session with beta's own digest
    review = {
        "decision": "apply",
        "proposals_digest": digest,
        "selected": [{"proposal": "p1"}, {"proposal": "approved-sql"}],
    }
    applied = flow.apply(theirs, review)
    assert (applied.code, applied.document["error"]["code"]) == (3, "not_found")
    assert tree(flow.root) == before and flow.cards() == []

    # beta reviews its session; the receipt stays beta's
    beta_reviewer = Principal("reviewer", "admin", frozenset({"beta"}))
    request = flow.request_file(theirs, review, workspace="beta", principal=beta_reviewer)
    assert flow.cli("memory", "review-apply", "-c", beta, "--request", request).code == 0
    assert len(theirs.reviewed_events()) == 1
    assert flow.cli("memory", "solved-index", "s-shared", "-c", beta).code == 0
    assert flow.cli("memory", "solved-index", "s-shared", "-c", flow.config).code == 3
    assert flow.cards() == []

    # acme's own s-shared: its ledger, its proposals, its recall exclusion
    mine = flow.create(card_document(title="acme's shipped order"))
    ours = flow.session(
        "s-shared",
        decision("d1", "sql_corrected", explanation="acme's own correction"),
        {"event": "memory_decided", "card": mine["id"], "status": "approved", "gate": "F2"},
    )
    theirs_before = tree(theirs.path)
    proposed = flow.propose(ours, [add("p1", ["d1"], join_rule(title="acme's join"))])
    assert proposed.code == 0, proposed.document
    assert proposed.document["recorded"] == "acme/s-shared/memory_proposals.json"
    assert [p["id"] for p in proposed.document["proposals"]] == ["p1"]  # no approved SQL here
    summary = flow.summary(ours)
    assert [a["card"]["title"] for a in summary["additions"]] == ["acme's join"]
    assert summary["solved_question"] is None and summary["reviewed"] is None
    scoped = flow.cli(
        "memory", "search", "shipped order", "--session", "s-shared", "-c", flow.config
    )
    assert scoped.code == 0 and mine["id"] not in [r["id"] for r in scoped.document["results"]]
    assert tree(theirs.path) == theirs_before


def test_a_session_directory_that_is_a_symbolic_link_is_refused(flow):
    """A link in acme's sessions to another workspace's session, or out of the root, is
    refused on every command; nothing is read or written through it."""
    theirs = Session(flow.root, "beta", "s-b").log(
        decision("d1", "sql_corrected", explanation="code repeats")
    )
    outside = flow.tmp / "outside"
    outside.mkdir()
    (outside / "ledger.jsonl").write_text(theirs.ledger.read_text())
    (flow.root / "acme").mkdir(exist_ok=True)
    (flow.root / "acme" / "s-b").symlink_to(theirs.path)
    (flow.root / "acme" / "s-out").symlink_to(outside)
    before = tree(flow.root / "beta"), tree(outside)
    data = flow.file({"version": 1, "proposals": [add("p1", ["d1"], join_rule())]})
    for session in ("s-b", "s-out"):
        for command in (
            ["propose", "--session", session, "--data", data],
            ["summary", "--session", session],
            ["search", "orders", "--session", session],
        ):
            refused = flow.cli("memory", *command, "-c", flow.config)
            assert refused.code == 2, (command, refused.document)
            assert refused.document["error"]["details"]["reason"] == "symbolic_link"
            assert str(flow.tmp) not in refused.document["error"]["message"]
    assert (tree(flow.root / "beta"), tree(outside)) == before


@pytest.mark.parametrize(
    "command",
    [
        ["memory", "propose"],
        ["memory", "summary"],
        ["memory", "review-apply"],
        ["memory", "solved-index"],
    ],
    ids=" ".join,
)
def test_every_workflow_command_has_help(command, capsys):
    from tht.cli.main import main

    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage" in out and len(out.splitlines()) > 3


def test_every_workflow_command_fails_with_a_json_error(flow):
    session = flow.session("s-err")
    failures = {
        "propose": flow.cli(
            "memory",
            "propose",
            "--session",
            session.id,
            "--data",
            flow.file([1]),
            "-c",
            flow.config,
        ),
        "summary": flow.cli("memory", "summary", "--session", "nope", "-c", flow.config),
        "review-apply": flow.cli(
            "memory", "review-apply", "--request", flow.file({"x": 1}), "-c", flow.config
        ),
        "solved-index": flow.cli("memory", "solved-index", session.id, "-c", flow.config),
        "rules --error": flow.cli("memory", "rules", "--error", "", "-c", flow.config),
    }
    expected = {
        "propose": 2,
        "summary": 3,
        "review-apply": 5,
        "solved-index": 3,
        "rules --error": 2,
    }
    for name, run in failures.items():
        error = run.document.get("error")
        assert error and set(error) == {"code", "message", "details"}, (name, run.document)
        assert run.code == expected[name], (name, run.code, error)


def test_the_summary_offers_the_approved_solved_question_even_when_pi_proposed_none(flow):
    session = flow.session(
        "s-derived",
        decision("d1", "sql_corrected", explanation="code repeats"),
        decision(
            "d2",
            "sql_approved",
            question="Total of the 2024 orders per customer",
            sql="SELECT 1",
            context="First attempt",
        ),
        decision("d3", "sql_approved", status="superseded", question="old", sql="SELECT 0"),
        decision(
            "d2",
            "sql_approved",
            status="approved",
            question="Total of the 2024 orders per customer",
            sql=APPROVED_SQL,
            context="Only 2024.",
        ),
    )
    proposed = flow.propose(session, [add("p1", ["d1"], join_rule())])
    assert proposed.code == 0, proposed.document
    assert [p["id"] for p in proposed.document["proposals"]] == ["p1", "approved-sql"]
    solved_question = flow.summary(session)["solved_question"]
    assert solved_question["proposal"] == "approved-sql" and solved_question["sql"] == APPROVED_SQL
    assert solved_question["question"] == "Total of the 2024 orders per customer"
    assert solved_question["context"] == "Only 2024." and solved_question["sources"] == ["d2"]
    # nothing is saved unless the reviewer selects it
    applied = flow.apply(session, flow.review(session, [selected("p1")]))
    assert applied.code == 0 and applied.document["declined"] == ["approved-sql"]
    assert flow.cards(family="solved_question") == []


def test_propose_with_an_idempotency_key_answers_the_first_result(flow):
    session = flow.session("s-key", decision("d1", "sql_corrected", explanation="code repeats"))
    data = flow.file({"version": 1, "proposals": [add("a", ["d1"], join_rule())]})

    def propose(path: str, key: str):
        return flow.cli(
            "memory",
            "propose",
            "--session",
            session.id,
            "--data",
            path,
            "-c",
            flow.config,
            "--idempotency-key",
            key,
        )

    first = propose(data, "p-1")
    assert first.code == 0, first.document
    recorded = json.loads((session.path / "memory_proposals.json").read_text())["recorded_at"]
    again = propose(data, "p-1")
    assert again.code == 0 and again.document == first.document
    # the replay wrote nothing: the proposals file is the first one
    assert json.loads((session.path / "memory_proposals.json").read_text())["recorded_at"] == (
        recorded
    )
    other = flow.file({"version": 1, "proposals": [add("a", ["d1"], join_rule(title="Other"))]})
    reused = propose(other, "p-1")
    assert reused.code == 4 and reused.document["error"]["code"] == "idempotency_key_reused"
    assert propose(other, "p-2").code == 0
