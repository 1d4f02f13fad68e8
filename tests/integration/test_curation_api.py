"""The Recall quality API on the real engines: every route is a workspace
administrator's (an agent, a user or another workspace's admin gets 403 and reads
nothing, the recall log above all), and a curator's flow over HTTP: try a question,
add the card it missed as a case, run, edit the card, run again."""

from __future__ import annotations

import pytest

from tests.factories import card
from tests.integration.web_support import build_world

CASE = "case-00000000-0000-4000-8000-000000000000"
RUN = "bench-00000000-0000-4000-8000-000000000000"


@pytest.fixture
def world(database, tmp_path):
    world = build_world(database, tmp_path, bound=("ws-a",))
    yield world
    world.close()


def _routes(card_id: str) -> list[tuple[str, str, dict | None]]:
    base = "/api/workspaces/ws-a"
    return [
        ("GET", f"{base}/benchmark/cases", None),
        ("POST", f"{base}/benchmark/cases", {"question": "q", "expected": [card_id]}),
        (
            "POST",
            f"{base}/benchmark/cases/import",
            {"cases": [{"question": "q", "expected": [card_id]}]},
        ),
        ("DELETE", f"{base}/benchmark/cases/{CASE}", None),
        ("POST", f"{base}/benchmark/runs", None),
        ("GET", f"{base}/benchmark/runs", None),
        ("GET", f"{base}/benchmark/runs/{RUN}", None),
        ("POST", f"{base}/benchmark/try", {"question": "q"}),
        ("GET", f"{base}/gaps", None),
        ("GET", f"{base}/recalls", None),
    ]


def test_only_the_workspace_admin_reaches_the_benchmark_and_the_recall_log(world):
    asked = world.client.post(
        "/api/workspaces/ws-a/memory/search",
        json={"question": "ws-a card 1"},
        headers=world.bearer("agent_a"),
    )
    assert asked.status_code == 200, asked.json()
    world.services.recall_log.flush()
    for actor, status in ((None, 401), ("agent_a", 403), ("user_a", 403), ("admin_b", 403)):
        for method, path, body in _routes(world.cards["ws-a"][0]):
            response = world.client.request(method, path, json=body, headers=world.bearer(actor))
            assert response.status_code == status, (actor, method, path, response.json())
            assert "ws-a card 1" not in response.text  # nothing of the log leaks
    # nothing was written by the refused requests
    assert (
        world.client.get(
            "/api/workspaces/ws-a/benchmark/cases", headers=world.bearer("admin_a")
        ).json()["total"]
        == 0
    )
    # the admin reads the agent's question, who asked it and what came back
    log = world.client.get("/api/workspaces/ws-a/recalls", headers=world.bearer("admin_a")).json()
    [entry] = log["entries"]
    assert (entry["question"], entry["principal"], entry["command"]) == (
        "ws-a card 1",
        "agent_a",
        "search",
    )
    assert [r["id"] for r in entry["returned"]] == [
        r["card"]["id"] if "card" in r else r["id"] for r in asked.json()["results"]
    ]
    # the page, with a session cookie: the workspaces its user manages, ws-a
    login = world.client.post(
        "/api/session", json={"name": "admin_a", "password": "correct horse battery"}
    )
    assert login.status_code == 200, login.json()
    page = world.client.get("/admin/curation")
    assert page.status_code == 200 and 'data-page="curation"' in page.text
    assert 'value="ws-a"' in page.text and 'value="ws-b"' not in page.text
    world.client.cookies.clear()


def test_a_curator_adds_a_miss_runs_edits_the_card_and_sees_the_run_change(world):
    services, admin = world.services, world.bearer("admin_a")
    base = "/api/workspaces/ws-a/benchmark"
    target = services.memory.create_card(
        "ws-a", card(title="Carrier codes", content="Carriers have three letter codes.")
    ).card.id
    question = "three letter carrier codes"
    tried = world.client.post(
        f"{base}/try", json={"question": question, "explain": [target]}, headers=admin
    )
    assert tried.status_code == 200, tried.json()
    assert tried.json()["results"][0]["id"] == target
    assert tried.json()["explain"][0]["card"] == target
    assert tried.json()["explain"][0]["returned"] is True
    added = world.client.post(
        f"{base}/cases",
        json={"question": question, "expected": [target], "origin": "miss"},
        headers=admin,
    )
    assert added.status_code == 201, added.json()
    assert added.json()["cases"][0]["origin"] == "miss"
    foreign = world.client.post(
        f"{base}/cases",
        json={"question": "other", "expected": [world.cards["ws-b"][0]]},
        headers=admin,
    )
    assert foreign.status_code == 404 and foreign.json()["error"]["details"]["cards"] == [
        world.cards["ws-b"][0]
    ]
    first = world.client.post(f"{base}/runs", headers=admin)
    assert first.status_code == 201, first.json()
    assert first.json()["metrics"]["recall@1"] == 1 and first.json()["misses"] == []
    # the edit moves the card out of the bound database: the next run is worse, and says so
    elsewhere = [{"database": "legacy", "schema": "ops", "table": "carriers"}]
    services.memory.update_card(
        "ws-a",
        target,
        card(
            title="Carrier codes",
            content="Carriers have three letter codes.",
            dependencies=elsewhere,
        ),
    )
    second = world.client.post(f"{base}/runs", headers=admin).json()
    assert second["comparison"]["worse"] is True
    assert second["metrics"]["recall@10"] == 0
    assert second["misses"][0]["reasons"][target]["reason"] == "binding"
    assert [c["state"] for c in second["expected_changes"]] == ["changed"]
    history = world.client.get(f"{base}/runs", headers=admin).json()
    assert [r["run"] for r in history["runs"]] == [second["run"], first.json()["run"]]
    assert history["runs"][0]["worse"] and history["runs"][0]["edits_before"]["count"] == 1
    shown = world.client.get(f"{base}/runs/{second['run']}", headers=admin).json()
    assert shown["metrics"] == second["metrics"]
    # an import is all or nothing: a card of another workspace on its second case
    imported = world.client.post(
        f"{base}/cases/import",
        json={
            "cases": [
                {"question": "carrier codes", "expected": [target], "name": "carriers"},
                {"question": "q", "command": "rules", "expected": [world.cards["ws-b"][0]]},
            ]
        },
        headers=admin,
    )
    assert imported.status_code == 404 and imported.json()["error"]["details"]["line"] == 2
    wrong = world.client.post(
        f"{base}/cases/import",
        json={"cases": [{"question": "q", "expected": [target], "weight": 2}]},
        headers=admin,
    )
    assert wrong.status_code == 422
    assert world.client.get(f"{base}/cases", headers=admin).json()["total"] == 1
