"""The reviewer's API and page routes: principal, workspace membership and CSRF on every
route; the web app applies a review once (receipt) like the gate's CLI."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.factories import installation_of
from tests.integration.workflow_support import Session, add, decision, join_rule
from tht.bootstrap import build_services
from tht.web.app import WebSettings, create_app

ORIGIN = "http://testserver"


@pytest.fixture
def review_world(database, tmp_path):
    root = tmp_path / "sessions"
    services = build_services(
        env=database.env(),
        installation=installation_of(index=str(tmp_path / "index"), sessions_root=root),
    )
    services.workspaces.create("ws-a", "en")
    services.workspaces.create("ws-b", "en")
    tokens = {
        "admin_a": services.accounts.users.create_user(
            "admin_a", "admin", ["ws-a"], password="correct horse battery"
        )["token"],
        "admin_b": services.accounts.users.create_user("admin_b", "admin", ["ws-b"])["token"],
        "user_a": services.accounts.users.create_user("user_a", "user", ["ws-a"])["token"],
    }
    Session(root, "ws-a", "s-1").log(
        decision("d1", "sql_corrected", explanation="code repeats across years")
    )
    services.proposals.propose("ws-a", "s-1", {"proposals": [add("p1", ["d1"], join_rule())]})
    client = TestClient(
        create_app(services, WebSettings(public_origins=(ORIGIN,))), base_url=ORIGIN
    )
    yield services, client, tokens, root
    services.close()


def bearer(tokens, actor):
    return {"Authorization": f"Bearer {tokens[actor]}"} if actor else {}


def test_every_review_route_checks_principal_and_workspace(review_world):
    services, client, tokens, _ = review_world
    base = "/api/workspaces/ws-a/review/sessions"
    for actor, status in ((None, 401), ("user_a", 403), ("admin_b", 403)):
        headers = bearer(tokens, actor)
        assert client.get(base, headers=headers).status_code == status
        assert client.get(base + "/s-1", headers=headers).status_code == status
        digest = "0" * 64
        response = client.post(
            base + "/s-1/apply",
            headers=headers,
            json={"decision": "decline_all", "proposals_digest": digest},
        )
        assert response.status_code == status, response.json()
    assert services.summaries.summary("ws-a", "s-1")["reviewed"] is None
    listed = client.get(base, headers=bearer(tokens, "admin_a")).json()
    assert [(i["session"], i["reviewed"]) for i in listed["items"]] == [("s-1", None)]
    # another workspace's admin sees none of ws-a's sessions in ws-b
    assert client.get(
        "/api/workspaces/ws-b/review/sessions", headers=bearer(tokens, "admin_b")
    ).json() == {"items": []}
    assert client.get(base + "/..%2Fx", headers=bearer(tokens, "admin_a")).status_code in (404, 422)
    assert client.get(base + "/nope", headers=bearer(tokens, "admin_a")).status_code == 404


def test_the_page_applies_once_with_cookie_and_csrf(review_world):
    services, client, _tokens, root = review_world
    login = client.post(
        "/api/session", json={"name": "admin_a", "password": "correct horse battery"}
    )
    csrf = login.json()["csrf_token"]
    page = client.get("/admin/review")
    assert page.status_code == 200 and 'data-page="review"' in page.text and "ws-a" in page.text
    summary = client.get("/api/workspaces/ws-a/review/sessions/s-1").json()
    assert [a["proposal"] for a in summary["additions"]] == ["p1"]
    review = {
        "decision": "apply",
        "proposals_digest": summary["proposals_digest"],
        "selected": [{"proposal": "p1"}],
    }
    url = "/api/workspaces/ws-a/review/sessions/s-1/apply"
    refused = client.post(url, json=review, headers={"Origin": ORIGIN})
    assert refused.status_code == 403 and refused.json()["error"]["details"]["reason"] == "csrf"
    headers = {"Origin": ORIGIN, "X-CSRF-Token": csrf}
    first = client.post(url, json=review, headers=headers)
    assert first.status_code == 200, first.json()
    assert first.json()["status"] == "applied" and first.json()["replayed"] is False
    again = client.post(url, json=review, headers=headers)
    assert again.json()["replayed"] is True and again.json()["cards"] == first.json()["cards"]
    assert services.workspaces.show("ws-a").cards == {"sql_rule": 1}
    assert len(Session(root, "ws-a", "s-1").reviewed_events()) == 1
    other = client.post(
        url, json={**review, "decision": "decline_all", "selected": []}, headers=headers
    )
    assert other.status_code == 409 and other.json()["error"]["code"] == "receipt_conflict"
    client.cookies.clear()
    assert client.get("/admin/review", follow_redirects=False).status_code == 303


def test_the_reviewers_routes_see_only_their_workspaces_sessions(review_world):
    """ws-b's sessions, one with the id of ws-a's: each admin lists, reads and applies
    its own workspace's sessions only."""
    services, client, tokens, root = review_world
    for session in ("s-1", "s-2"):
        Session(root, "ws-b", session).log(decision("d1", "sql_corrected", explanation="b's own"))
        services.proposals.propose(
            "ws-b", session, {"proposals": [add("p1", ["d1"], join_rule(title=f"b {session}"))]}
        )
    mine, theirs = bearer(tokens, "admin_a"), bearer(tokens, "admin_b")
    base, other = "/api/workspaces/ws-a/review/sessions", "/api/workspaces/ws-b/review/sessions"

    def titles(url, headers):
        return [a["card"]["title"] for a in client.get(url, headers=headers).json()["additions"]]

    assert [i["session"] for i in client.get(base, headers=mine).json()["items"]] == ["s-1"]
    assert sorted(i["session"] for i in client.get(other, headers=theirs).json()["items"]) == [
        "s-1",
        "s-2",
    ]
    assert titles(base + "/s-1", mine) == [join_rule()["title"]]
    assert titles(other + "/s-1", theirs) == ["b s-1"]
    assert client.get(base + "/s-2", headers=mine).status_code == 404
    digest = client.get(other + "/s-2", headers=theirs).json()["proposals_digest"]
    review = {"decision": "apply", "proposals_digest": digest, "selected": [{"proposal": "p1"}]}
    assert client.post(base + "/s-2/apply", json=review, headers=mine).status_code == 404
    assert services.workspaces.show("ws-a").cards == {}
    # applying ws-a's s-1 touches neither ws-b's s-1 nor its receipt
    digest = client.get(base + "/s-1", headers=mine).json()["proposals_digest"]
    review = {"decision": "apply", "proposals_digest": digest, "selected": [{"proposal": "p1"}]}
    assert client.post(base + "/s-1/apply", json=review, headers=mine).status_code == 200
    assert len(Session(root, "ws-a", "s-1").reviewed_events()) == 1
    assert Session(root, "ws-b", "s-1").reviewed_events() == []
    assert client.get(other + "/s-1", headers=theirs).json()["reviewed"] is None
    assert services.workspaces.show("ws-b").cards == {}
