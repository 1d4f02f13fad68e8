"""The administration API against the real PostgreSQL: authorization (BOLA matrix),
CSRF, content types, sizes, protected requests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.factories import card_document
from tests.integration.web_support import ORIGIN, build_world
from tht.accounts import MANAGE, ROLE_PERMISSIONS, Principal
from tht.cli.main import main
from tht.protected import new_request, sign
from tht.usecases.card_administration import AdminRequest


def routes(world, workspace: str, card_id: str) -> list[tuple[str, str, dict | None, str]]:
    """The administration routes with the capability each needs (tht.accounts)."""
    base = f"/api/workspaces/{workspace}/memory"
    return [
        ("GET", base, None, MANAGE),
        ("POST", base, card_document(title="intruder"), MANAGE),
        ("GET", f"{base}/pending", None, MANAGE),
        ("GET", f"{base}/{card_id}", None, MANAGE),
        ("PUT", f"{base}/{card_id}", card_document(title="changed"), MANAGE),
        ("DELETE", f"{base}/{card_id}", None, MANAGE),
        ("POST", f"{base}/{card_id}/retry", None, MANAGE),
    ]


MEMBERSHIP = {"admin_a": "ws-a", "admin_b": "ws-b", "user_a": "ws-a", "agent_a": "ws-a"}
ROLE = {"admin_a": "admin", "admin_b": "admin", "user_a": "user", "agent_a": "agent"}


def test_bola_matrix_allows_only_the_capability_in_the_members_workspace(world):
    # every administrative route, reads included, is memory.manage's: the workspace's
    # admin only; its user (memory.read, recall) and its agent (recall, propose) neither
    actors = [None, "user_a", "agent_a", "admin_a", "admin_b"]
    objects = [
        ("ws-a", world.cards["ws-a"][0]),
        ("ws-a", world.cards["ws-b"][0]),
        ("ws-b", world.cards["ws-b"][1]),
    ]
    unauthorized_successes, authorized, reads_by_user = [], 0, 0
    for actor in actors:
        for workspace, card_id in objects:
            owner = "ws-a" if card_id in world.cards["ws-a"] else "ws-b"
            for method, path, body, permission in routes(world, workspace, card_id):
                allowed = (
                    actor is not None
                    and MEMBERSHIP[actor] == workspace
                    and permission in ROLE_PERMISSIONS[ROLE[actor]]
                )
                if allowed and card_id in path and owner != workspace:
                    allowed = False  # another workspace's card through an allowed workspace
                if method == "DELETE" and allowed:
                    continue  # deletion is exercised last, below
                before = world.snapshot()
                headers = {
                    **world.bearer(actor),
                    **({"Content-Type": "application/json"} if body else {}),
                }
                response = world.client.request(
                    method,
                    path,
                    headers=headers,
                    content=json.dumps(body) if body is not None else None,
                )
                if allowed:
                    authorized += 1
                    reads_by_user += actor == "user_a"
                    assert response.status_code < 300, (actor, method, path, response.json())
                else:
                    if response.status_code < 300:
                        unauthorized_successes.append((actor, method, path))
                    assert response.status_code in (401, 403, 404), (
                        actor,
                        method,
                        path,
                        response.status_code,
                    )
                    assert set(response.json()["error"]) == {"code", "message", "details"}
                    lacking = actor is not None and (
                        MEMBERSHIP[actor] != workspace
                        or permission not in ROLE_PERMISSIONS[ROLE[actor]]
                    )
                    expected = (
                        (401, "unauthenticated")
                        if actor is None
                        else (403, "forbidden")
                        if lacking
                        else (404, "not_found")
                    )
                    assert (response.status_code, response.json()["error"]["code"]) == expected, (
                        actor,
                        method,
                        path,
                        response.json(),
                    )
                    assert world.snapshot() == before, (actor, method, path)
    assert unauthorized_successes == []
    assert authorized > 0 and reads_by_user == 0
    deleted = world.client.delete(
        f"/api/workspaces/ws-a/memory/{world.cards['ws-a'][2]}", headers=world.bearer("admin_a")
    )
    assert deleted.status_code == 200 and deleted.json()["deleted"] == world.cards["ws-a"][2]


def test_workspace_listing_shows_only_memberships(world):
    listed = world.client.get("/api/workspaces", headers=world.bearer("admin_b")).json()["items"]
    assert [(w["id"], w["manage"]) for w in listed] == [("ws-b", True)]
    listed = world.client.get("/api/workspaces", headers=world.bearer("user_a")).json()["items"]
    assert [(w["id"], w["manage"]) for w in listed] == [("ws-a", False)]


def test_an_admin_is_told_a_workspace_does_not_exist_other_roles_are_not(world):
    for user, path, expected in (
        ("admin_b", "/api/workspaces/nowhere/memory", (404, "not_found")),
        ("admin_b", "/api/workspaces/ws-a/memory", (403, "forbidden")),
        ("user_a", "/api/workspaces/nowhere/memory", (403, "forbidden")),
        ("user_a", "/api/workspaces/ws-b/memory", (403, "forbidden")),
    ):
        refused = world.client.get(path, headers=world.bearer(user)).json()["error"]
        assert (
            world.client.get(path, headers=world.bearer(user)).status_code,
            refused["code"],
        ) == (expected), (user, path, refused)
        if user == "admin_b" and expected[0] == 403:  # how to become a member
            assert "tht user grant admin_b --workspace ws-a" in refused["message"]
        if user == "user_a":  # one answer for both: a token cannot probe which exist
            assert "exists" not in refused["details"]


def test_bad_credentials_and_malformed_requests(world):
    base = "/api/workspaces/ws-a/memory"
    admin = world.bearer("admin_a")
    cases = [
        ("GET", base, {"Authorization": "Bearer nope"}, None, 401),
        ("GET", base, {"Authorization": "Basic abc"}, None, 401),
        ("GET", "/api/workspaces/Not_Valid!/memory", admin, None, 422),
        ("GET", f"{base}/mem-123", admin, None, 422),
        ("GET", f"{base}?page_size=1000", admin, None, 422),
        ("GET", f"{base}?family=recipe", admin, None, 422),
        ("POST", base, {**admin, "Content-Type": "application/json"}, "{not json", 422),
        (
            "POST",
            base,
            {**admin, "Content-Type": "application/json"},
            json.dumps({"family": "sql_rule"}),
            422,
        ),
        (
            "POST",
            base,
            {**admin, "Content-Type": "application/json"},
            json.dumps(card_document(colour="red")),
            422,
        ),
        ("POST", base, {**admin, "Content-Type": "text/plain"}, json.dumps(card_document()), 415),
        (
            "POST",
            base,
            {**admin, "Content-Type": "application/x-www-form-urlencoded"},
            "title=x",
            415,
        ),
        (
            "POST",
            base,
            {**admin, "Content-Type": "application/json"},
            json.dumps(card_document(content="x" * 1_100_000)),
            413,
        ),
        (
            "POST",
            base,
            {**admin, "Content-Type": "application/json"},
            json.dumps(card_document(links=[{"target": world.cards["ws-b"][0], "meaning": "x"}])),
            404,
        ),
        ("GET", "/api/workspaces/ghost/memory", admin, None, 404),  # an admin may know
    ]
    before = world.snapshot()
    for method, path, headers, body, status in cases:
        response = world.client.request(method, path, headers=headers, content=body)
        assert response.status_code == status, (path, body and body[:60], response.text[:300])
        assert set(response.json()["error"]) == {"code", "message", "details"}
    assert world.snapshot() == before


def test_save_reports_index_state(world):
    created = world.client.post(
        "/api/workspaces/ws-a/memory",
        json=card_document(title="Fresh"),
        headers=world.bearer("admin_a"),
    )
    assert created.status_code == 201 and created.json()["status"] == "saved"
    card = created.json()["card"]
    shown = world.client.get(
        f"/api/workspaces/ws-a/memory/{card['id']}", headers=world.bearer("admin_a")
    ).json()
    assert (
        shown["index"]["revision"] == 1
        and shown["index"]["current"]
        and shown["index"]["embedded_chars"] is None
    )
    stale = world.client.put(
        f"/api/workspaces/ws-a/memory/{card['id']}",
        json=card_document(title="Late", revision=7),
        headers=world.bearer("admin_a"),
    )
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_revision"


def login(world, name="admin_a"):
    response = world.client.post(
        "/api/session",
        json={"name": name, "password": "correct horse battery"},
        headers={"Origin": ORIGIN},
    )
    assert response.status_code == 200, response.text
    return response.json()["csrf_token"]


def test_csrf_battery(world, database, tmp_path):
    token = login(world)
    path = "/api/workspaces/ws-a/memory"
    body = json.dumps(card_document(title="via cookie"))
    json_type = {"Content-Type": "application/json"}
    other = build_world_session_token(world)
    attempts = {
        "missing token": {**json_type, "Origin": ORIGIN},
        "another session's token": {**json_type, "Origin": ORIGIN, "X-CSRF-Token": other},
        "cross-site fetch": {
            **json_type,
            "Origin": ORIGIN,
            "Sec-Fetch-Site": "cross-site",
            "X-CSRF-Token": token,
        },
        "foreign origin without fetch metadata": {
            **json_type,
            "Origin": "https://evil.example",
            "X-CSRF-Token": token,
        },
        "no origin at all": {**json_type, "X-CSRF-Token": token},
        "text/plain body": {"Content-Type": "text/plain", "Origin": ORIGIN, "X-CSRF-Token": token},
    }
    before = world.snapshot()
    for name, headers in attempts.items():
        response = world.client.post(path, content=body, headers=headers)
        assert response.status_code in (403, 415), (name, response.status_code)
    # a cookie injected by an attacker (cookie tossing) with a matching header
    world.client.cookies.set("csrf_token", "forged")
    response = world.client.post(
        path, content=body, headers={**json_type, "Origin": ORIGIN, "X-CSRF-Token": "forged"}
    )
    assert response.status_code == 403
    assert world.snapshot() == before
    accepted = world.client.post(
        path,
        content=body,
        headers={
            **json_type,
            "Origin": ORIGIN,
            "Sec-Fetch-Site": "same-origin",
            "X-CSRF-Token": token,
        },
    )
    assert accepted.status_code == 201  # the positive control: the same request, correctly made


def build_world_session_token(world) -> str:
    """The CSRF token of another user's session (user_a), from a separate client."""
    from fastapi.testclient import TestClient

    with TestClient(world.client.app, base_url=ORIGIN) as other:
        response = other.post(
            "/api/session",
            json={"name": "user_a", "password": "correct horse battery"},
            headers={"Origin": ORIGIN},
        )
        return response.json()["csrf_token"]


def test_session_cookie_attributes_and_logout(world):
    response = world.client.post(
        "/api/session", json={"token": world.tokens["admin_a"]}, headers={"Origin": ORIGIN}
    )
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert world.client.get("/api/session").json()["principal"]["user"] == "admin_a"
    token = response.json()["csrf_token"]
    assert (
        world.client.delete(
            "/api/session", headers={"Origin": ORIGIN, "X-CSRF-Token": token}
        ).status_code
        == 204
    )
    assert world.client.get("/api/session").status_code == 401
    assert (
        world.client.post(
            "/api/session",
            json={"name": "admin_a", "password": "wrong password!!"},
            headers={"Origin": ORIGIN},
        ).status_code
        == 401
    )


def test_secure_cookie_over_https(database, tmp_path):
    from fastapi.testclient import TestClient

    from tht.web.app import WebSettings, create_app

    world = build_world(database, tmp_path)
    with TestClient(
        create_app(world.services, WebSettings(secure=True)), base_url="https://testserver"
    ) as client:
        response = client.post(
            "/api/session",
            json={"token": world.tokens["admin_a"]},
            headers={"Origin": "https://testserver"},
        )
        cookie = response.headers["set-cookie"]
        assert (
            cookie.startswith("__Host-tht_session=") and "Secure" in cookie and "Path=/" in cookie
        )
    world.services.close()


def test_one_time_login_link(world):
    link = world.services.accounts.sessions.open_session("admin_a", one_time=True)
    world.client.cookies.set("tht_session", link)
    assert world.client.get("/api/session").status_code == 401  # not a session yet
    world.client.cookies.clear()
    response = world.client.get(f"/login/once/{link}", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/admin/memory"
    assert world.client.get("/api/session").json()["principal"]["user"] == "admin_a"
    world.client.cookies.clear()
    again = world.client.get(f"/login/once/{link}", follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"] == "/login?link=spent"
    assert world.client.get("/api/session").status_code == 401  # spent
    page = world.client.get("/login?link=spent").text  # the login page says why
    assert "This login link was already used or has expired" in page
    assert "This login link" not in world.client.get("/login").text


# --- protected requests -------------------------------------------------------------


@pytest.fixture
def protected(world, tmp_path, monkeypatch, capsys):
    key_file = tmp_path / "protected.key"
    key_file.write_bytes(b"k" * 48)
    monkeypatch.setenv("THT_PROTECTED_REQUEST_KEY_FILE", str(key_file))
    monkeypatch.setenv("THT_HOME", str(tmp_path / "home"))
    for key, value in world_env(world).items():
        monkeypatch.setenv(key, value)
    admin = Principal("admin_a", "admin", frozenset({"ws-a"}))

    def run(document, workspace="ws-a"):
        path = tmp_path / "request.json"
        path.write_text(json.dumps(document))
        capsys.readouterr()
        code = main(["memory", "admin", "--workspace", workspace, "-c", str(path)])
        return code, json.loads(capsys.readouterr().out)

    return run, admin, b"k" * 48


def world_env(world):
    info = world.services.archive._conninfo
    return {"THT_CATALOG_RUNTIME_DATABASE_URL": info}


def test_protected_requests_refused_unless_signed_fresh_single_use_and_authorized(world, protected):
    run, admin, key = protected
    request = new_request(
        admin, AdminRequest("ws-a", "create", body=card_document(title="Via backend"))
    )
    signed = sign(request, key)
    refused = {
        "unsigned": {"request": request, "signature": ""},
        "tampered": {
            "request": {**request, "body": card_document(title="Tampered")},
            "signature": signed["signature"],
        },
        "wrong key": sign(request, b"x" * 48),
        "expired": sign(
            new_request(
                admin, AdminRequest("ws-a", "list"), now=datetime.now(UTC) - timedelta(minutes=10)
            ),
            key,
        ),
        "too long-lived": sign(
            new_request(admin, AdminRequest("ws-a", "list"), lifetime=timedelta(hours=1)), key
        ),
        # a user neither browses nor edits the archive, not even through the backend
        "user reading the archive": sign(
            new_request(
                Principal("user_a", "user", frozenset({"ws-a"})), AdminRequest("ws-a", "list")
            ),
            key,
        ),
        "user without memory.manage": sign(
            new_request(
                Principal("user_a", "user", frozenset({"ws-a"})),
                AdminRequest("ws-a", "create", body=card_document()),
            ),
            key,
        ),
        "agent reading the archive": sign(
            new_request(
                Principal("agent_a", "agent", frozenset({"ws-a"})), AdminRequest("ws-a", "list")
            ),
            key,
        ),
        "admin of another workspace": sign(
            new_request(
                Principal("admin_b", "admin", frozenset({"ws-b"})), AdminRequest("ws-a", "list")
            ),
            key,
        ),
    }
    before = world.snapshot()
    for name, document in refused.items():
        code, answer = run(document)
        assert code == 5 and answer["error"]["code"] in ("permission_denied", "forbidden"), (
            name,
            answer,
        )
    code, answer = run(signed, workspace="ws-b")
    assert code == 5  # for another workspace than the command names
    assert world.snapshot() == before
    code, answer = run(signed)
    assert code == 0 and answer["card"]["title"] == "Via backend"
    code, answer = run(signed)  # replayed
    assert code == 5 and "replay" in answer["error"]["message"]
    with world.services.archive.transaction("ws-a") as tx:
        assert (
            sum(1 for c in tx.cards(list(tx.card_revisions())).values() if c.title == "Via backend")
            == 1
        )


@pytest.mark.parametrize(
    "change",
    [
        {"title": "\u200b"},
        {"title": "\ufeff"},
        {"title": "\u0301"},
        {"title": "Invoice \u202eexe.pdf"},
        {"content": "C1 \u009b control"},
        {"revision": True},
    ],
)
def test_invisible_or_control_text_and_a_boolean_revision_are_refused(world, change):
    base = "/api/workspaces/ws-a/memory"
    created = world.client.post(base, headers=world.bearer("admin_a"), json=card_document(**change))
    assert created.status_code == 422 and created.json()["error"]["code"] == "invalid_input", (
        created.json()
    )
    card_id = world.cards["ws-a"][0]
    updated = world.client.put(
        f"{base}/{card_id}", headers=world.bearer("admin_a"), json=card_document(**change)
    )
    assert updated.status_code == 422, updated.json()


def test_a_backend_retry_signed_again_under_its_idempotency_key_creates_one_card(world, protected):
    run, admin, key = protected
    before = world.snapshot()["ws-a"]

    def signed():  # each delivery has its own nonce (single-use), the same key and body
        return sign(
            new_request(
                admin,
                AdminRequest(
                    "ws-a", "create", body=card_document(title="Once"), idempotency_key="bk-1"
                ),
            ),
            key,
        )

    first_code, first = run(signed())
    again_code, again = run(signed())
    assert first_code == again_code == 0 and again == first
    assert len(world.snapshot()["ws-a"]) == len(before) + 1


def test_the_list_filters_cards_by_the_import_that_wrote_them(world, tmp_path):
    from tht.memory.transfer.service import CardTransfer, ImportOptions

    path = tmp_path / "cards.jsonl"
    path.write_text(
        "\n".join(json.dumps(card_document(title=f"Imported {i}")) for i in range(2)) + "\n"
    )
    imported = CardTransfer(
        world.services.archive, world.services.projector.of("ws-a")
    ).import_file(
        "ws-a",
        lambda: open(path, "rb"),  # each pass opens and closes it
        ImportOptions(fmt="jsonl", file_name="cards.jsonl"),
    )
    base, admin = "/api/workspaces/ws-a/memory", world.bearer("admin_a")
    listed = world.client.get(base, params={"import": imported["import"]}, headers=admin)
    assert listed.status_code == 200, listed.json()
    items = listed.json()["items"]
    assert sorted(i["title"] for i in items) == ["Imported 0", "Imported 1"]
    assert {i["import_id"] for i in items} == {imported["import"]}
    by_origin = world.client.get(base, params={"origin": "imported"}, headers=admin).json()
    assert by_origin["total"] == 2
    manual = world.client.get(base, params={"origin": "manual"}, headers=admin).json()
    assert "Imported 0" not in {i["title"] for i in manual["items"]}
    bad = world.client.get(base, params={"import": "imp-x"}, headers=admin)
    assert bad.status_code == 422


# Operations that are not the administration: the caller's own session and workspaces, an
# agent's recall and proposals (their own capabilities: tests/integration/test_agent_api.py)
# and /api/cli, where each command checks the capability of its own.
NOT_ADMINISTRATIVE_TAGS = {"session", "workspaces", "agent", "service"}


def curation_requests(card_id: str) -> dict[tuple[str, str], tuple[str, dict | None]]:
    """The Recall quality routes: the benchmark, the gaps and the recall log (every
    agent's questions) are an administrator's."""
    bench, at = "/api/workspaces/{workspaceId}/benchmark", "/api/workspaces/ws-a/benchmark"
    case = "case-00000000-0000-4000-8000-000000000000"
    run = "bench-00000000-0000-4000-8000-000000000000"
    return {
        ("GET", bench + "/cases"): (at + "/cases", None),
        ("POST", bench + "/cases"): (at + "/cases", {"question": "q", "expected": [card_id]}),
        ("POST", bench + "/cases/import"): (
            at + "/cases/import",
            {"cases": [{"question": "q", "expected": [card_id]}]},
        ),
        ("DELETE", bench + "/cases/{caseId}"): (f"{at}/cases/{case}", None),
        ("POST", bench + "/runs"): (at + "/runs", None),
        ("GET", bench + "/runs"): (at + "/runs", None),
        ("GET", bench + "/runs/{runId}"): (f"{at}/runs/{run}", None),
        ("POST", bench + "/try"): (at + "/try", {"question": "q"}),
        ("GET", "/api/workspaces/{workspaceId}/gaps"): ("/api/workspaces/ws-a/gaps", None),
        ("GET", "/api/workspaces/{workspaceId}/recalls"): ("/api/workspaces/ws-a/recalls", None),
    }


def administrative_requests(world) -> dict[tuple[str, str], tuple[str, dict | None]]:
    """One request for each administrative operation of the OpenAPI document."""
    memory = "/api/workspaces/{workspaceId}/memory"
    catalog = "/api/workspaces/{workspaceId}/catalog"
    review = "/api/workspaces/{workspaceId}/review/sessions"
    card_id = world.cards["ws-a"][0]
    run = "run-00000000-0000-4000-8000-000000000000"
    return {
        ("GET", memory): ("/api/workspaces/ws-a/memory", None),
        ("POST", memory): ("/api/workspaces/ws-a/memory", card_document(title="intruder")),
        ("GET", memory + "/pending"): ("/api/workspaces/ws-a/memory/pending", None),
        ("GET", memory + "/{cardId}"): (f"/api/workspaces/ws-a/memory/{card_id}", None),
        ("PUT", memory + "/{cardId}"): (
            f"/api/workspaces/ws-a/memory/{card_id}",
            card_document(title="changed"),
        ),
        ("DELETE", memory + "/{cardId}"): (f"/api/workspaces/ws-a/memory/{card_id}", None),
        ("POST", memory + "/{cardId}/retry"): (
            f"/api/workspaces/ws-a/memory/{card_id}/retry",
            None,
        ),
        ("GET", catalog): ("/api/workspaces/ws-a/catalog", None),
        ("POST", catalog + "/sync"): ("/api/workspaces/ws-a/catalog/sync", None),
        ("GET", catalog + "/runs/{runId}"): (f"/api/workspaces/ws-a/catalog/runs/{run}", None),
        ("POST", catalog + "/runs/{runId}/retry"): (
            f"/api/workspaces/ws-a/catalog/runs/{run}/retry",
            None,
        ),
        **curation_requests(card_id),
        ("GET", review): ("/api/workspaces/ws-a/review/sessions", None),
        ("GET", review + "/{sessionId}"): ("/api/workspaces/ws-a/review/sessions/s-1", None),
        ("POST", review + "/{sessionId}/apply"): (
            "/api/workspaces/ws-a/review/sessions/s-1/apply",
            {"decline_all": True},
        ),
        ("GET", "/api/admin/workspaces"): ("/api/admin/workspaces", None),
        ("POST", "/api/admin/workspaces"): (
            "/api/admin/workspaces",
            {"id": "ws-new", "language": "en"},
        ),
        ("GET", "/api/admin/users"): ("/api/admin/users", None),
        ("POST", "/api/admin/users"): (
            "/api/admin/users",
            {"name": "new", "role": "admin", "workspaces": ["ws-a"]},
        ),
        ("PUT", "/api/admin/users/{name}/role"): (
            "/api/admin/users/user_a/role",
            {"role": "admin"},
        ),
        ("PUT", "/api/admin/users/{name}/workspaces/{workspace}"): (
            "/api/admin/users/user_a/workspaces/ws-a",
            None,
        ),
        ("DELETE", "/api/admin/users/{name}/workspaces/{workspace}"): (
            "/api/admin/users/user_a/workspaces/ws-a",
            None,
        ),
        ("POST", "/api/admin/users/{name}/token"): ("/api/admin/users/admin_a/token", None),
        ("DELETE", "/api/admin/users/{name}"): ("/api/admin/users/admin_a", None),
        ("GET", "/api/admin/audit"): ("/api/admin/audit", None),
    }


def test_every_administrative_route_needs_memory_manage_reads_included(world):
    """The administrative HTTP surface requires memory.manage: a user (memory.read) and an
    agent get 403 on every route of it, reading the archive's list, cards and pending
    operations included, with the token and with a web session."""
    requests = administrative_requests(world)
    documented = {
        (method.upper(), path)
        for path, operations in world.client.app.openapi()["paths"].items()
        for method, operation in operations.items()
        if not set(operation["tags"]) & NOT_ADMINISTRATIVE_TAGS
    }
    assert documented == set(requests)  # a new administrative route joins the table above
    before, users = world.snapshot(), world.services.accounts.users.users()
    csrf = login(world, "user_a")  # the client now carries user_a's session cookie
    cookie_headers = {"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin", "X-CSRF-Token": csrf}
    attempts = [(actor, world.bearer(actor)) for actor in ("user_a", "agent_a")]
    attempts.append(("user_a's session", cookie_headers))
    for actor, headers in attempts:
        for (method, _), (path, body) in requests.items():
            response = world.client.request(method, path, json=body, headers=headers)
            assert response.status_code == 403, (actor, method, path, response.text)
            error = response.json()["error"]
            assert (error["code"], error["details"]["permission"]) == ("forbidden", MANAGE)
    assert world.snapshot() == before and world.services.accounts.users.users() == users
    # what a user reads instead: recall, through the agent-facing routes
    recalled = world.client.post(
        "/api/workspaces/ws-a/memory/search",
        json={"question": "ws-a card"},
        headers=world.bearer("user_a"),
    )
    assert recalled.status_code == 200, recalled.text
