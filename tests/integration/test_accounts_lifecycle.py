"""The accounts' lifecycle: memberships granted and revoked, roles
changed, tokens rotated and expiring, users deleted, and the audit log of it all, on
every face (HTTP, the CLI in its own process, the service's socket and /api/cli), on
the real PostgreSQL."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.factories import card, card_document, installation_of
from tests.integration.service_support import installation
from tests.integration.web_support import ORIGIN
from tht.cli.main import main

PASSWORD = "correct horse battery"
MEMORY = "/api/workspaces/ws-a/memory"
RECALL = "/api/workspaces/{}/memory/search"


@pytest.fixture
def run(cli, capsys):
    """`tht` in its own process (the `cli` fixture's environment), as ``token``'s
    principal (None: the operator)."""

    def run_as(token: str | None, *args: str) -> tuple[int, dict]:
        capsys.readouterr()
        code = main(list(args), token=token)
        lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
        assert len(lines) == 1, lines
        return code, json.loads(lines[0])

    return run_as


def expire(database, name: str) -> None:
    with psycopg.connect(database.superuser, autocommit=True) as conn:
        conn.execute(
            "UPDATE thoth_memory.users SET token_expires_at = now() - interval '1 second'"
            " WHERE name = %s",
            (name,),
        )


def session_client(world, name: str) -> tuple[TestClient, dict[str, str]]:
    """A browser of its own, logged in with the password: its cookie and the headers a
    page sends with a write (CSRF token, origin)."""
    client = TestClient(world.client.app, base_url=ORIGIN)
    response = client.post(
        "/api/session", json={"name": name, "password": PASSWORD}, headers={"Origin": ORIGIN}
    )
    assert response.status_code == 200, response.text
    headers = {
        "Origin": ORIGIN,
        "Sec-Fetch-Site": "same-origin",
        "X-CSRF-Token": response.json()["csrf_token"],
    }
    return client, headers


def error_code(response) -> str:
    return response.json()["error"]["code"]


def recall(client: TestClient, headers: dict[str, str], workspace: str = "ws-a"):
    """A user's recall in ``workspace`` (the administrative routes are an admin's)."""
    return client.post(RECALL.format(workspace), json={"question": "card"}, headers=headers)


# --- memberships ---------------------------------------------------------------------


def test_a_revoked_membership_is_forbidden_at_once_for_the_token_and_the_session(world):
    reader, headers = session_client(world, "user_a")
    assert recall(world.client, world.bearer("user_a")).status_code == 200
    assert recall(reader, headers).status_code == 200
    revoked = world.client.delete(
        "/api/admin/users/user_a/workspaces/ws-a", headers=world.bearer("admin_a")
    )
    assert revoked.status_code == 200, revoked.text
    assert revoked.json() == {
        "user": "user_a",
        "workspace": "ws-a",
        "member": False,
        "changed": True,
    }
    token_answer = recall(world.client, world.bearer("user_a"))
    assert (token_answer.status_code, error_code(token_answer)) == (403, "forbidden")
    assert recall(reader, headers).status_code == 403  # the open session too, without a new login
    granted = world.client.put(
        "/api/admin/users/user_a/workspaces/ws-a", headers=world.bearer("admin_a")
    )
    assert granted.status_code == 200 and granted.json()["changed"] is True
    assert recall(world.client, world.bearer("user_a")).status_code == 200
    reader.close()


def test_the_cli_grants_and_revokes_and_an_admin_only_in_its_own_workspaces(world, run):
    code, document = run(None, "user", "grant", "user_a", "--workspace", "ws-b")
    assert code == 0 and document["changed"] is True
    assert recall(world.client, world.bearer("user_a"), "ws-b").status_code == 200
    code, document = run(world.tokens["admin_a"], "user", "revoke", "user_a", "--workspace", "ws-b")
    assert (code, document["error"]["code"]) == (5, "forbidden")  # admin_a is not ws-b's
    code, document = run(world.tokens["admin_b"], "user", "revoke", "user_a", "--workspace", "ws-b")
    assert code == 0 and document["member"] is False
    assert recall(world.client, world.bearer("user_a"), "ws-b").status_code == 403
    code, document = run(None, "user", "grant", "user_a", "--workspace", "nowhere")
    assert (code, document["error"]["code"]) == (3, "not_found")
    code, document = run(None, "user", "grant", "nobody", "--workspace", "ws-a")
    assert (code, document["error"]["code"]) == (3, "not_found")


# --- tokens --------------------------------------------------------------------------


def test_a_rotated_token_replaces_the_old_one_at_once_and_closes_its_sessions(world):
    old = world.tokens["user_a"]
    via_token = TestClient(world.client.app, base_url=ORIGIN)
    assert (
        via_token.post("/api/session", json={"token": old}, headers={"Origin": ORIGIN}).status_code
        == 200
    )
    assert via_token.get("/api/session").status_code == 200
    rotated = world.client.post(
        "/api/admin/users/user_a/token", json={"expires_in": "30d"}, headers=world.bearer("admin_a")
    )
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["token"]
    assert new != old and new.startswith("tht_")
    expires = datetime.fromisoformat(rotated.json()["token_expires_at"])
    assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=5)
    refused = world.client.get(MEMORY, headers={"Authorization": f"Bearer {old}"})
    assert (refused.status_code, error_code(refused)) == (401, "unauthenticated")
    assert via_token.get("/api/session").status_code == 401  # the session the old token opened
    assert recall(world.client, {"Authorization": f"Bearer {new}"}).status_code == 200
    via_token.close()


def test_token_lifetimes_default_per_token_never_and_the_configured_default(
    world, run, monkeypatch
):
    code, made = run(None, "user", "create", "svc", "--role", "agent", "--workspace", "ws-a")
    assert code == 0
    lives = datetime.fromisoformat(made["token_expires_at"]) - datetime.now(UTC)
    assert timedelta(days=89) < lives <= timedelta(days=90)
    code, never = run(None, "user", "token", "rotate", "svc", "--expires-in", "never")
    assert code == 0 and never["token_expires_at"] is None
    assert {u["user"]: u for u in world.services.accounts.users.users()}["svc"][
        "token_expires_at"
    ] is None
    monkeypatch.setenv("THT_TOKEN_EXPIRES_IN", "12h")
    code, short = run(None, "user", "token", "rotate", "svc")
    lives = datetime.fromisoformat(short["token_expires_at"]) - datetime.now(UTC)
    assert code == 0 and timedelta(hours=11) < lives <= timedelta(hours=12)
    for bad in ("0d", "30 days", "forever", "99999w"):
        code, refused = run(None, "user", "token", "rotate", "svc", "--expires-in", bad)
        assert (code, refused["error"]["code"]) == (2, "invalid_input"), bad
    assert run(None, "user", "token", "rotate", "ghost")[0] == 3
    bad_body = world.client.post(
        "/api/admin/users/svc/token",
        json={"expires_in": "forever"},
        headers=world.bearer("admin_a"),
    )
    assert (bad_body.status_code, error_code(bad_body)) == (422, "invalid_input")


def test_an_expired_token_is_401_token_expired_over_http_and_in_the_cli(world, database, run):
    expire(database, "user_a")
    for response in (
        world.client.get(MEMORY, headers=world.bearer("user_a")),
        world.client.get("/api/workspaces", headers=world.bearer("user_a")),
        world.client.post(
            "/api/session", json={"token": world.tokens["user_a"]}, headers={"Origin": ORIGIN}
        ),
    ):
        assert (response.status_code, error_code(response)) == (401, "token_expired")
        assert "tht user token rotate user_a" in response.json()["error"]["message"]
    code, document = run(world.tokens["user_a"], "workspace", "list")
    assert (code, document["error"]["code"]) == (5, "token_expired")
    assert world.client.get(MEMORY, headers=world.bearer("admin_a")).status_code == 200
    code, rotated = run(None, "user", "token", "rotate", "user_a")
    assert code == 0
    assert run(rotated["token"], "workspace", "list")[0] == 0


def test_an_expired_token_is_refused_on_the_socket_and_over_api_cli(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    tht = installation(database, home)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert tht.run("workspace", "create", "acme", "--language", "en", THT_SERVICE="off").code == 0
    made = tht.run(
        "user", "create", "late", "--role", "user", "--workspace", "acme", THT_SERVICE="off"
    )
    token = made.document["token"]
    (home / "server.yaml").write_text(
        f"embedders: {{default: {{provider: hashing}}}}\nindex: {{path: {home / 'index'}}}\n"
    )
    server = tht.start("serve", "--port", str(port), "-c", str(home / "server.yaml"))
    try:
        json.loads(server.stdout.readline())  # ready
        assert tht.run("workspace", "list", token=token).code == 0  # through the socket
        expire(database, "late")
        socket_answer = tht.run("workspace", "list", token=token)
        assert (socket_answer.code, socket_answer.document["error"]["code"]) == (5, "token_expired")
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/cli",
            data=json.dumps({"args": ["workspace", "list"]}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401
        assert json.loads(refused.value.read())["error"]["code"] == "token_expired"
    finally:
        server.terminate()
        server.wait(30)
        tht.stop()


# --- roles and deletion --------------------------------------------------------------


def test_a_demoted_admin_loses_its_rights_at_once_even_in_an_open_session(world):
    page, headers = session_client(world, "admin_a")
    made = page.post(MEMORY, json=card_document(title="before"), headers=headers)
    assert made.status_code == 201
    demoted = world.client.put(
        "/api/admin/users/admin_a/role", json={"role": "user"}, headers=world.bearer("admin_b")
    )
    assert (demoted.status_code, error_code(demoted)) == (403, "forbidden")  # not admin_b's user
    world.services.accounts.users.set_role("admin_a", "user")  # the operator
    refused = page.post(MEMORY, json=card_document(title="after"), headers=headers)
    assert (refused.status_code, error_code(refused)) == (403, "forbidden")
    assert page.get(MEMORY).status_code == 403  # nor browse: that is the administration
    assert recall(page, headers).status_code == 200  # a user recalls
    page.close()


def test_a_deleted_user_cannot_log_in_nor_use_its_token_or_session(world, run):
    page, _ = session_client(world, "user_a")
    deleted = world.client.delete("/api/admin/users/user_a", headers=world.bearer("admin_a"))
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"deleted": "user_a", "role": "user", "workspaces": ["ws-a"]}
    login = world.client.post(
        "/api/session", json={"name": "user_a", "password": PASSWORD}, headers={"Origin": ORIGIN}
    )
    assert (login.status_code, error_code(login)) == (401, "unauthenticated")
    assert world.client.get(MEMORY, headers=world.bearer("user_a")).status_code == 401
    assert page.get(MEMORY).status_code == 401
    assert (
        world.client.delete("/api/admin/users/user_a", headers=world.bearer("admin_a")).status_code
        == 404
    )
    code, document = run(None, "user", "delete", "agent_a")
    assert code == 0 and document["deleted"] == "agent_a"
    assert "agent_a" not in {u["user"] for u in world.services.accounts.users.users()}
    page.close()


def test_the_last_admin_can_be_neither_deleted_nor_demoted(world, run):
    code, _ = run(None, "user", "role", "admin_b", "user")
    assert code == 0  # admin_a is now the only admin
    for response in (
        world.client.delete("/api/admin/users/admin_a", headers=world.bearer("admin_a")),
        world.client.put(
            "/api/admin/users/admin_a/role", json={"role": "agent"}, headers=world.bearer("admin_a")
        ),
    ):
        assert (response.status_code, error_code(response)) == (409, "last_admin")
        assert "last admin" in response.json()["error"]["message"]
    for args in (("user", "delete", "admin_a"), ("user", "role", "admin_a", "user")):
        code, document = run(None, *args)
        assert (code, document["error"]["code"]) == (4, "last_admin")
    assert {u["user"]: u["role"] for u in world.services.accounts.users.users()}[
        "admin_a"
    ] == "admin"
    assert run(None, "user", "role", "admin_a", "admin")[0] == 0  # already admin: a no-op
    assert run(None, "user", "role", "admin_a", "owner")[0] == 2
    # with a second admin, the first may go
    assert run(None, "user", "role", "admin_b", "admin")[0] == 0
    assert (
        world.client.delete("/api/admin/users/admin_a", headers=world.bearer("admin_a")).status_code
        == 200
    )


# --- the admin routes and commands refuse everyone else ------------------------------


def admin_routes() -> list[tuple[str, str, dict | None]]:
    return [
        ("GET", "/api/admin/workspaces", None),
        ("POST", "/api/admin/workspaces", {"id": "ws-new", "language": "en"}),
        ("GET", "/api/admin/users", None),
        ("POST", "/api/admin/users", {"name": "new", "role": "admin", "workspaces": ["ws-a"]}),
        ("PUT", "/api/admin/users/user_a/role", {"role": "admin"}),
        ("PUT", "/api/admin/users/user_a/workspaces/ws-b", None),
        ("DELETE", "/api/admin/users/user_a/workspaces/ws-a", None),
        ("POST", "/api/admin/users/admin_a/token", None),
        ("DELETE", "/api/admin/users/admin_a", None),
        ("GET", "/api/admin/audit", None),
    ]


def test_a_user_or_an_agent_gets_403_on_every_admin_route_and_nothing_changes(world):
    before = world.services.accounts.users.users()
    for actor in ("user_a", "agent_a"):
        for method, path, body in admin_routes():
            response = world.client.request(method, path, json=body, headers=world.bearer(actor))
            assert (response.status_code, error_code(response)) == (403, "forbidden"), (
                actor,
                method,
                path,
            )
    page, headers = session_client(world, "user_a")  # a cookie session, with its CSRF token
    for method, path, body in admin_routes():
        assert page.request(method, path, json=body, headers=headers).status_code == 403
    assert world.services.accounts.users.users() == before
    assert world.client.get("/api/admin/users").status_code == 401
    page.close()


def test_admin_routes_need_the_csrf_token_with_a_cookie_session(world):
    page, headers = session_client(world, "admin_a")
    path = "/api/admin/users/user_a/workspaces/ws-a"
    without = page.delete(path, headers={"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin"})
    assert (without.status_code, without.json()["error"]["details"]["reason"]) == (403, "csrf")
    assert page.delete(path, headers=headers).status_code == 200
    page.close()


NEW_COMMANDS = [
    ("user", "grant", "user_a", "--workspace", "ws-a"),
    ("user", "revoke", "user_a", "--workspace", "ws-a"),
    ("user", "role", "user_a", "admin"),
    ("user", "token", "rotate", "admin_a"),
    ("user", "delete", "admin_a"),
    ("audit",),
    ("audit", "--since", "1d", "--user", "admin_a", "--limit", "5"),
]


@pytest.mark.parametrize("actor", ["user_a", "agent_a"])
def test_a_user_or_an_agent_gets_exit_5_from_every_new_command(world, run, actor):
    before = world.services.accounts.users.users()
    for command in NEW_COMMANDS:
        code, document = run(world.tokens[actor], *command)
        assert (code, document["error"]["code"]) == (5, "forbidden"), command
    assert world.services.accounts.users.users() == before


def test_an_admin_of_another_workspace_cannot_touch_the_users_of_this_one(world, run):
    token = world.tokens["admin_b"]
    for command in NEW_COMMANDS[:5]:
        code, document = run(token, *command)
        assert (code, document["error"]["code"]) == (5, "forbidden"), command
    response = world.client.post("/api/admin/users/user_a/token", headers=world.bearer("admin_b"))
    assert response.status_code == 403


# --- the audit log -------------------------------------------------------------------


def test_every_account_event_and_card_mutation_is_audited_with_its_actor(world, run):
    client = world.client
    assert (
        client.post(
            "/api/session",
            json={"name": "user_a", "password": "wrong password!"},
            headers={"Origin": ORIGIN},
        ).status_code
        == 401
    )
    page, headers = session_client(world, "admin_a")  # login.success
    made = page.post(MEMORY, json=card_document(title="Audited"), headers=headers)
    assert made.status_code == 201
    card = made.json()["card"]
    edited = page.put(
        f"{MEMORY}/{card['id']}",
        json={**card_document(title="Audited, edited"), "revision": card["revision"]},
        headers=headers,
    )
    assert edited.status_code == 200, edited.text
    assert page.delete(f"{MEMORY}/{card['id']}", headers=headers).status_code == 200
    created = page.post(
        "/api/admin/users",
        json={"name": "newbie", "role": "user", "workspaces": ["ws-a"], "expires_in": "8w"},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    assert (
        page.put(
            "/api/admin/users/newbie/role", json={"role": "agent"}, headers=headers
        ).status_code
        == 200
    )
    assert page.post("/api/admin/users/newbie/token", headers=headers).status_code == 200
    assert (
        page.delete("/api/admin/users/newbie/workspaces/ws-a", headers=headers).status_code == 200
    )
    assert page.put("/api/admin/users/newbie/workspaces/ws-a", headers=headers).status_code == 200
    assert page.delete("/api/admin/users/newbie", headers=headers).status_code == 200
    assert (
        page.post(
            "/api/admin/workspaces", json={"id": "ws-c", "language": "it"}, headers=headers
        ).status_code
        == 201
    )
    code, granted = run(world.tokens["admin_a"], "user", "grant", "user_a", "--workspace", "ws-c")
    assert code == 0 and granted["changed"] is True
    code, _ = run(None, "user", "revoke", "user_a", "--workspace", "ws-c")
    assert code == 0

    events = client.get("/api/admin/audit?limit=100", headers=world.bearer("admin_a")).json()[
        "items"
    ]
    seen = [(e["actor"], e["action"], e["user"], e["workspace"]) for e in events]
    expected = [
        (None, "login.failure", "user_a", None),
        ("admin_a", "login.success", "admin_a", None),
        ("admin_a", "card.create", None, "ws-a"),
        ("admin_a", "card.update", None, "ws-a"),
        ("admin_a", "card.delete", None, "ws-a"),
        ("admin_a", "user.create", "newbie", None),
        ("admin_a", "user.role", "newbie", None),
        ("admin_a", "token.rotate", "newbie", None),
        ("admin_a", "membership.revoke", "newbie", "ws-a"),
        ("admin_a", "membership.grant", "newbie", "ws-a"),
        ("admin_a", "user.delete", "newbie", None),
        ("admin_a", "workspace.create", None, "ws-c"),
        ("admin_a", "membership.grant", "admin_a", "ws-c"),
        ("admin_a", "membership.grant", "user_a", "ws-c"),
        ("operator", "membership.revoke", "user_a", "ws-c"),
    ]
    assert [event for event in reversed(seen) if event in expected] == expected
    by_action = {e["action"]: e for e in events}
    assert by_action["card.delete"]["details"]["card"] == card["id"]
    assert by_action["user.role"]["details"] == {
        "from": "user",
        "to": "agent",
        "workspaces": ["ws-a"],  # newbie's, when its role changed
        "other_workspaces": 0,
    }
    assert by_action["login.failure"]["client"] == "testclient"
    assert "token" not in json.dumps(by_action["token.rotate"]["details"]).replace(
        "token_expires_at", ""
    )  # never the secret

    # the CLI reads the same log; --user narrows it, --since bounds it
    code, listed = run(None, "audit", "--user", "newbie", "--limit", "3")
    assert code == 0 and [e["action"] for e in listed["items"]] == [
        "user.delete",
        "membership.grant",
        "membership.revoke",
    ]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert run(None, "audit", "--since", future)[1] == {"items": []}
    assert run(None, "audit", "--since", "yesterday")[0] == 2
    # admin_b reads ws-b's events, none of ws-a's (its users' events included)
    theirs = client.get("/api/admin/audit", headers=world.bearer("admin_b")).json()["items"]
    assert theirs and not [e for e in theirs if e["workspace"] == "ws-a"]
    assert not [e for e in theirs if e["user"] in ("user_a", "newbie", "admin_a")]
    page.close()


def test_the_audit_log_is_append_only_and_hidden_from_memory_transactions(world):
    world.services.accounts.users.set_role("user_a", "agent")  # one account event
    with world.services.archive.transaction("ws-a") as tx:  # a memory transaction
        assert tx.conn.execute("SELECT count(*) FROM thoth_memory.audit_log").fetchone()[0] == 0
    for statement in (
        "UPDATE thoth_memory.audit_log SET actor = 'someone-else'",
        "DELETE FROM thoth_memory.audit_log",
    ):
        with (
            pytest.raises(Exception, match="permission denied"),
            world.services.archive.transaction(None, accounts=True) as tx,
        ):
            tx.conn.execute(statement)
    with world.services.archive.transaction(None, accounts=True) as tx:
        assert tx.conn.execute("SELECT count(*) FROM thoth_memory.audit_log").fetchone()[0] > 0


def test_a_command_does_not_lend_its_actor_to_what_runs_after_it(world, run):
    assert run(world.tokens["admin_a"], "user", "list")[0] == 0
    world.services.memory.create_card("ws-a", card(title="After the command"))
    latest = world.services.accounts.audit.audit_log(limit=1)[0]
    assert (latest["action"], latest["actor"]) == ("card.create", None)


def test_the_accounts_page_shows_its_panels_to_admins_only(world):
    admin_page, _ = session_client(world, "admin_a")
    page = admin_page.get("/admin/accounts")
    assert page.status_code == 200
    assert 'data-testid="user-table"' in page.text and 'href="/admin/accounts"' in page.text
    reader, _ = session_client(world, "user_a")
    page = reader.get("/admin/accounts")
    assert page.status_code == 200 and 'data-testid="accounts-forbidden"' in page.text
    assert 'data-testid="user-table"' not in page.text and 'href="/admin/accounts"' not in page.text
    admin_page.close()
    reader.close()


def test_a_one_time_login_link_is_audited(world):
    link = world.services.accounts.sessions.open_session("user_a", one_time=True)
    assert world.client.get(f"/login/once/{link}", follow_redirects=False).status_code == 303
    latest = world.services.accounts.audit.audit_log(limit=1)[0]
    assert (latest["actor"], latest["action"], latest["details"]) == (
        "user_a",
        "login.success",
        {"method": "one_time_link", "workspaces": ["ws-a"]},
    )


def test_a_review_decision_is_audited_as_the_reviewers_via_review(database, tmp_path):
    from tests.integration.workflow_support import Session, add, decision, join_rule
    from tht.bootstrap import build_services
    from tht.web.app import WebSettings, create_app

    root = tmp_path / "sessions"
    services = build_services(
        env=database.env(),
        installation=installation_of(index=str(tmp_path / "index"), sessions_root=root),
    )
    try:
        services.workspaces.create("ws-a", "en")
        token = services.accounts.users.create_user("reviewer", "admin", ["ws-a"])["token"]
        Session(root, "ws-a", "s-1").log(
            decision("d1", "sql_corrected", explanation="code repeats")
        )
        services.proposals.propose("ws-a", "s-1", {"proposals": [add("p1", ["d1"], join_rule())]})
        with TestClient(
            create_app(services, WebSettings(public_origins=(ORIGIN,))), base_url=ORIGIN
        ) as client:
            bearer = {"Authorization": f"Bearer {token}"}
            base = "/api/workspaces/ws-a/review/sessions/s-1"
            summary = client.get(base, headers=bearer).json()
            applied = client.post(
                base + "/apply",
                json={
                    "decision": "apply",
                    "proposals_digest": summary["proposals_digest"],
                    "selected": [{"proposal": "p1"}],
                },
                headers=bearer,
            )
            assert applied.status_code == 200, applied.text
        latest = services.accounts.audit.audit_log(limit=1)[0]
        assert (latest["actor"], latest["action"], latest["workspace"]) == (
            "reviewer",
            "card.create",
            "ws-a",
        )
        assert latest["details"]["via"] == "review"
        assert latest["details"]["origin"] == "workflow"
        assert latest["details"]["source_session"] == "s-1"
    finally:
        services.close()


def test_an_admin_lists_the_users_of_its_workspaces_only(world, run):
    def listed(actor):
        answer = world.client.get("/api/admin/users", headers=world.bearer(actor))
        assert answer.status_code == 200
        return {u["user"]: (u["workspaces"], u["other_workspaces"]) for u in answer.json()["items"]}

    assert listed("admin_b") == {"admin_b": (["ws-b"], 0)}
    assert run(None, "user", "grant", "user_a", "--workspace", "ws-b")[0] == 0
    assert listed("admin_b")["user_a"] == (["ws-b"], 1)  # ws-a is not admin_b's to see
    assert listed("admin_a")["user_a"] == (["ws-a"], 1)
    assert run(None, "user", "revoke", "agent_a", "--workspace", "ws-a")[0] == 0
    assert listed("admin_b")["agent_a"] == ([], 0)  # a user of no workspace, to clean up
    code, everyone = run(None, "user", "list")  # the operator sees every membership
    assert code == 0
    assert {u["user"]: u["workspaces"] for u in everyone["items"]}["user_a"] == ["ws-a", "ws-b"]


def test_an_admin_reads_the_events_of_the_users_and_workspaces_it_administers_only(world, run):
    """An event belongs to the workspaces it concerns: a card's or a membership's
    workspace, or the workspaces the user acted upon belonged to at the time. An admin of
    ws-b reads none of ws-a's user, login and token events; the operator reads them all."""
    assert (
        world.client.post(
            "/api/session",
            json={"name": "user_a", "password": "wrong password!"},
            headers={"Origin": ORIGIN},
        ).status_code
        == 401
    )
    reader, _ = session_client(world, "user_a")  # login.success of user_a
    reader.close()
    assert world.client.post(
        "/api/admin/users/user_a/token", headers=world.bearer("admin_a")
    ).json()["token"]
    assert run(world.tokens["admin_a"], "user", "role", "agent_a", "user")[0] == 0
    code, _ = run(None, "user", "create", "both", "--role", "user", "--workspace", "ws-a")
    assert code == 0
    assert run(None, "user", "grant", "both", "--workspace", "ws-b")[0] == 0
    assert run(None, "user", "token", "rotate", "both")[0] == 0  # ws-a's and ws-b's

    ws_a_users = {"admin_a", "user_a", "agent_a"}
    http = world.client.get("/api/admin/audit?limit=1000", headers=world.bearer("admin_b"))
    assert http.status_code == 200, http.text
    code, cli = run(world.tokens["admin_b"], "audit", "--limit", "1000")
    assert code == 0
    for events in (http.json()["items"], cli["items"]):
        seen = {(e["action"], e["user"]) for e in events}
        assert not [e for e in events if e["user"] in ws_a_users], "ws-a's users leaked"
        assert not [e for e in events if e["workspace"] == "ws-a"]
        assert ("user.create", "admin_b") in seen  # ws-b's own user
        assert ("membership.grant", "both") in seen  # into ws-b
        assert ("token.rotate", "both") in seen  # a user of ws-b (and of ws-a)
        assert ("user.create", "both") not in seen  # it was ws-a's only then
        rotated = next(e for e in events if e["action"] == "token.rotate")
        assert rotated["details"]["workspaces"] == ["ws-b"]  # not which others it has
        assert rotated["details"]["other_workspaces"] == 1
    # ws-a's admin reads ws-a's events, the operator everything
    code, mine = run(world.tokens["admin_a"], "audit", "--user", "user_a")
    assert code == 0 and {e["action"] for e in mine["items"]} >= {
        "login.failure",
        "login.success",
        "token.rotate",
        "user.create",
    }
    code, everything = run(None, "audit", "--limit", "1000")
    assert code == 0 and {e["user"] for e in everything["items"]} >= ws_a_users | {"admin_b"}
    # a failed login of a name nobody has belongs to no workspace: the operator's alone
    world.client.post(
        "/api/session",
        json={"name": "ghost", "password": "wrong password!"},
        headers={"Origin": ORIGIN},
    )
    for admin in ("admin_a", "admin_b"):
        code, theirs = run(world.tokens[admin], "audit", "--user", "ghost")
        assert code == 0 and theirs["items"] == []
    assert run(None, "audit", "--user", "ghost")[1]["items"][0]["action"] == "login.failure"
