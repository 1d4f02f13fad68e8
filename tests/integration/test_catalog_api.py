"""The Catalog page's API: principal and workspace checks on every route,
CSRF for cookie sessions, Sync now, the run report and retry (real SQLite DWH)."""

from __future__ import annotations

import pytest

from tests.integration.catalog_support import DWH_ENV, create_sqlite_dwh, sqlite_execute
from tests.integration.web_support import ORIGIN, build_world
from tht.catalog.model import Binding

RUN = "run-00000000-0000-4000-8000-000000000000"


@pytest.fixture
def world(database, tmp_path):
    world = build_world(database, tmp_path, bound=())  # ws-b stays without a binding
    path = tmp_path / "dwh.sqlite"
    world.services.catalog.env = {DWH_ENV: create_sqlite_dwh(path)}  # the server's environment
    world.services.catalog.bind(Binding("ws-a", "dwh", "main", DWH_ENV))
    world.dwh_path = path
    yield world
    world.close()


def card_on(world, workspace, table, column=None):
    from tests.factories import card

    dependency = {"database": "dwh", "schema": "main", "table": table}
    if column:
        dependency["column"] = column
    return world.services.memory.create_card(workspace, card(dependencies=[dependency])).card.id


ROUTES = [
    ("GET", "/api/workspaces/{ws}/catalog"),
    ("POST", "/api/workspaces/{ws}/catalog/sync"),
    ("GET", "/api/workspaces/{ws}/catalog/runs/" + RUN),
    ("POST", "/api/workspaces/{ws}/catalog/runs/" + RUN + "/retry"),
]


@pytest.mark.parametrize("method, route", ROUTES)
@pytest.mark.parametrize("actor, expected", [(None, 401), ("user_a", 403), ("admin_b", 403)])
def test_every_catalog_route_checks_the_principal_and_the_workspace(
    world, method, route, actor, expected
):
    response = world.client.request(method, route.format(ws="ws-a"), headers=world.bearer(actor))
    assert response.status_code == expected, response.text
    assert response.json()["error"]["code"] == ("unauthenticated" if actor is None else "forbidden")
    runs = world.services.catalog.runs("ws-a")
    assert runs == []  # nothing was synchronized


def test_sync_now_reports_deleted_cards_and_retry_is_a_noop(world):
    headers = world.bearer("admin_a")
    baseline = world.client.post("/api/workspaces/ws-a/catalog/sync", headers=headers)
    assert baseline.status_code == 200 and baseline.json()["status"] == "completed", baseline.text
    doomed = card_on(world, "ws-a", "customers", "name")
    kept = card_on(world, "ws-a", "customers")
    sqlite_execute(world.dwh_path, "ALTER TABLE customers DROP COLUMN name;")

    run = world.client.post("/api/workspaces/ws-a/catalog/sync", headers=headers)

    assert run.status_code == 200, run.text
    body = run.json()
    assert body["removed"] == {"tables": [], "columns": [{"table": "customers", "column": "name"}]}
    assert [c["id"] for c in body["deleted_cards"]] == [doomed] and body["schema"] == "main"
    shown = world.client.get(
        f"/api/workspaces/ws-a/catalog/runs/{body['run_id']}", headers=headers
    ).json()
    assert shown == body
    overview = world.client.get("/api/workspaces/ws-a/catalog", headers=headers).json()
    assert overview["binding"]["connection"] == DWH_ENV and overview["pending_run"] is None
    assert [r["run_id"] for r in overview["runs"]] == [body["run_id"], baseline.json()["run_id"]]
    assert (
        world.client.get(f"/api/workspaces/ws-a/memory/{doomed}", headers=headers).status_code
        == 404
    )
    assert (
        world.client.get(f"/api/workspaces/ws-a/memory/{kept}", headers=headers).status_code == 200
    )
    again = world.client.post(
        f"/api/workspaces/ws-a/catalog/runs/{body['run_id']}/retry", headers=headers
    )
    assert again.status_code == 200 and again.json() == body
    # another workspace's admin cannot see the run, even by id
    foreign = world.client.get(
        f"/api/workspaces/ws-b/catalog/runs/{body['run_id']}", headers=world.bearer("admin_b")
    )
    assert foreign.status_code == 404


def test_a_binding_for_recall_only_is_shown_and_its_sync_refused(world):
    """tht serve --demo binds its workspace so (no DWH to scan): the Catalog page reads
    the overview of such a binding, which answered 500 while the answer's model wanted
    a connection name."""
    world.services.catalog.bind(Binding("ws-b", "dwh", "main", None))
    headers = world.bearer("admin_b")

    overview = world.client.get("/api/workspaces/ws-b/catalog", headers=headers)

    assert overview.status_code == 200, overview.text
    assert overview.json()["binding"] == {
        "workspace": "ws-b",
        "database": "dwh",
        "schema": "main",
        "connection": None,
        "updated_at": overview.json()["binding"]["updated_at"],
    }
    refused = world.client.post("/api/workspaces/ws-b/catalog/sync", headers=headers)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_input"
    assert "recall only" in refused.json()["error"]["message"]
    assert world.services.catalog.runs("ws-b") == []


def test_failed_scan_is_a_502_with_its_run_and_deletes_nothing(world):
    headers = world.bearer("admin_a")
    assert (
        world.client.post("/api/workspaces/ws-a/catalog/sync", headers=headers).status_code == 200
    )
    kept = card_on(world, "ws-a", "orders", "amount")
    world.dwh_path.unlink()
    failed = world.client.post("/api/workspaces/ws-a/catalog/sync", headers=headers)
    assert failed.status_code == 502 and failed.json()["error"]["code"] == "dwh_unavailable"
    run = world.client.get(
        f"/api/workspaces/ws-a/catalog/runs/{failed.json()['error']['details']['run_id']}",
        headers=headers,
    ).json()
    assert (run["status"], run["deleted_cards"]) == ("failed", [])
    assert (
        world.client.get(f"/api/workspaces/ws-a/memory/{kept}", headers=headers).status_code == 200
    )
    # no binding: 404 naming the command
    unbound = world.client.post(
        "/api/workspaces/ws-b/catalog/sync", headers=world.bearer("admin_b")
    )
    assert unbound.status_code == 404 and "binding" in unbound.json()["error"]["message"]


def test_cookie_session_needs_the_csrf_token_for_sync_and_retry(world):
    login = world.client.post(
        "/api/session",
        json={"name": "admin_a", "password": "correct horse battery"},
        headers={"Origin": ORIGIN},
    )
    assert login.status_code == 200
    token = login.json()["csrf_token"]
    for path in (
        "/api/workspaces/ws-a/catalog/sync",
        f"/api/workspaces/ws-a/catalog/runs/{RUN}/retry",
    ):
        refused = world.client.post(path, headers={"Origin": ORIGIN})
        assert refused.status_code == 403 and refused.json()["error"]["details"]["reason"] == "csrf"
        cross = world.client.post(
            path, headers={"Origin": "https://evil.example", "X-CSRF-Token": token}
        )
        assert cross.status_code == 403
    assert world.services.catalog.runs("ws-a") == []
    accepted = world.client.post(
        "/api/workspaces/ws-a/catalog/sync", headers={"Origin": ORIGIN, "X-CSRF-Token": token}
    )
    assert accepted.status_code == 200, accepted.text
    assert (
        world.client.get("/api/workspaces/ws-a/catalog").status_code == 200
    )  # safe method: cookie only
