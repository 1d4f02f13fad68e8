"""Spec conformance: `updated_to` keeps the day it names, a card's family is immutable,
`memory retry` with the index down fails with one status on every face, and browsing
and `memory pending` need no embedder."""

from __future__ import annotations

import json
from datetime import date, timedelta

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.embedding_server import EmbeddingServer
from tests.factories import card_document, installation_of, write_installation
from tht.bootstrap import build_services
from tht.memory.model import parse_list_query
from tht.memory.projection_format import KnownFormat, fingerprint
from tht.web.app import create_app

BASE = "/api/workspaces/ws-a/memory"


def test_a_date_only_bound_is_a_day_not_its_midnight():
    query = parse_list_query({"updated_from": "2026-11-30", "updated_to": "2026-12-01"})
    assert type(query.updated_to) is date and query.updated_to == date(2026, 12, 1)
    instant = parse_list_query({"updated_to": "2026-12-01T10:00:00Z"}).updated_to
    assert instant.hour == 10  # an instant stays an instant


def test_updated_to_includes_the_whole_day_it_names_on_the_cli(cli, runtime_file, tmp_path):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme")
    data = tmp_path / "card.json"
    data.write_text(json.dumps(card_document()))
    created = cli("memory", "create", "-c", config, "--data", str(data)).document["card"]
    day = date.fromisoformat(created["updated_at"][:10])  # the card's UTC day
    yesterday, tomorrow = day - timedelta(days=1), day + timedelta(days=1)

    def total(**filters: str) -> int:
        result = cli("memory", "list", "-c", config, "--filters", json.dumps(filters))
        assert result.code == 0, result.document
        return result.document["total"]

    assert total(updated_to=day.isoformat()) == 1
    assert total(updated_from=yesterday.isoformat(), updated_to=day.isoformat()) == 1
    assert total(updated_from=day.isoformat(), updated_to=day.isoformat()) == 1
    assert total(updated_to=yesterday.isoformat()) == 0
    assert total(updated_from=tomorrow.isoformat()) == 0


def test_updated_to_includes_the_whole_day_over_http(world):
    headers = world.bearer("admin_a")
    items = world.client.get(BASE, headers=headers).json()["items"]
    day = date.fromisoformat(max(item["updated_at"] for item in items)[:10])
    listed = world.client.get(BASE, params={"updated_to": day.isoformat()}, headers=headers)
    assert listed.status_code == 200 and listed.json()["total"] == len(items) == 3
    ranged = world.client.get(
        BASE,
        params={"updated_from": (day - timedelta(days=1)).isoformat(), "updated_to": str(day)},
        headers=headers,
    )
    assert ranged.json()["total"] == 3
    # the CLI over HTTP (POST /api/cli runs `tht memory list --filters` the same way)
    earlier = world.client.get(
        BASE, params={"updated_to": (day - timedelta(days=1)).isoformat()}, headers=headers
    )
    assert earlier.json()["total"] == 0


def test_put_cannot_change_a_cards_family(world):
    headers = world.bearer("admin_a")
    card_id = world.cards["ws-a"][0]
    before = world.client.get(f"{BASE}/{card_id}", headers=headers).json()
    rule = card_document("sql_rule", title="Now a rule")
    refused = world.client.put(f"{BASE}/{card_id}", json=rule, headers=headers)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "family_immutable"
    assert error["details"] == {
        "id": card_id,
        "field": "family",
        "current": "domain_clarification",
        "requested": "sql_rule",
    }
    after = world.client.get(f"{BASE}/{card_id}", headers=headers).json()
    assert after["family"] == "domain_clarification" and after["revision"] == before["revision"]
    same = card_document(title="Same family, new title")
    assert world.client.put(f"{BASE}/{card_id}", json=same, headers=headers).status_code == 200


def test_cli_update_cannot_change_a_cards_family(cli, runtime_file, tmp_path):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme")
    data = tmp_path / "card.json"
    data.write_text(json.dumps(card_document()))
    card_id = cli("memory", "create", "-c", config, "--data", str(data)).document["card"]["id"]
    data.write_text(json.dumps(card_document("sql_rule")))
    refused = cli("memory", "update", card_id, "-c", config, "--data", str(data))
    assert refused.code == 4
    assert refused.document["error"]["code"] == "family_immutable"
    assert refused.document["error"]["details"]["field"] == "family"
    assert cli("memory", "show", card_id, "-c", config).document["family"] == (
        "domain_clarification"
    )


def test_memory_retry_with_the_index_down_exits_8(cli, runtime_file, tmp_path, monkeypatch):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme")
    data = tmp_path / "card.json"
    data.write_text(json.dumps(card_document()))
    outage = tmp_path / "outage"
    outage.write_text("index\n")
    monkeypatch.setenv("THT_OUTAGE_FILE", str(outage))
    saved = cli("memory", "create", "-c", config, "--data", str(data))
    assert saved.code == 0 and saved.document["status"] == "saved_index_incomplete"
    card_id = saved.document["card"]["id"]
    retried = cli("memory", "retry", card_id, "-c", config)
    assert retried.code == 8
    assert retried.document["error"]["code"] == "index_unavailable"
    assert retried.document["error"]["details"]["index"]["status"] == "pending"
    outage.write_text("")
    done = cli("memory", "retry", card_id, "-c", config)
    assert done.code == 0 and done.document["index"]["status"] == "current"


def test_memory_retry_with_the_index_down_is_one_error_on_every_face(
    world, cli, runtime_file, tmp_path, monkeypatch
):
    """HTTP answers what the CLI exits with: 503 index_unavailable, the same details."""
    outage = tmp_path / "outage"
    outage.write_text("index\n")
    monkeypatch.setenv("THT_OUTAGE_FILE", str(outage))
    headers = world.bearer("admin_a")
    saved = world.client.post(BASE, json=card_document(title="During the outage"), headers=headers)
    assert saved.status_code == 201 and saved.json()["status"] == "saved_index_incomplete"
    card_id = saved.json()["card"]["id"]
    over_http = world.client.post(f"{BASE}/{card_id}/retry", headers=headers)
    on_the_cli = cli("memory", "retry", card_id, "-c", runtime_file("ws-a"))
    assert on_the_cli.code == 8
    assert over_http.status_code == 503, over_http.text
    assert over_http.json() == on_the_cli.document
    error = over_http.json()["error"]
    assert error["code"] == "index_unavailable"
    assert error["details"]["id"] == card_id and error["details"]["index"]["status"] == "pending"
    outage.write_text("")
    done = world.client.post(f"{BASE}/{card_id}/retry", headers=headers)
    assert done.status_code == 200 and done.json()["index"]["status"] == "current"


@pytest.fixture
def embedder():
    """An OpenAI-compatible embedder of this machine, configured without its dimension
    (it is learned from the first answer); ``mode = "error"`` takes it down."""
    server = EmbeddingServer()
    server.start()
    yield server
    server.stop()


def test_browsing_and_pending_never_ask_the_embedder(cli, database, tmp_path, embedder):
    """The spec: browsing and pending need no embedder or index. A command that starts
    while the embedder is down lists, shows and reports pending work without asking it,
    and tells the cards indexed before (current) from those that wait."""
    remote = {"provider": "openai", "url": embedder.url, "model": "m"}
    write_installation(tmp_path / "home", embedders={"default": remote})
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = tmp_path / "runtime.yaml"
    config.write_text("workspace: acme\ndatabase: dwh\nschema: sales\n")
    data = tmp_path / "card.json"
    data.write_text(json.dumps(card_document(title="Indexed while the embedder was up")))
    indexed = cli("memory", "create", "-c", str(config), "--data", str(data)).document
    assert indexed["index"]["status"] == "current", indexed
    embedder.mode = "error"
    data.write_text(json.dumps(card_document(title="Saved while the embedder was down")))
    waiting = cli("memory", "create", "-c", str(config), "--data", str(data)).document
    assert waiting["status"] == "saved_index_incomplete", waiting
    embedder.requests.clear()

    pending = cli("memory", "pending", "-c", str(config))
    assert pending.code == 0, pending.document
    assert [p["card_id"] for p in pending.document["items"]] == [waiting["card"]["id"]]
    listed = cli("memory", "list", "-c", str(config))
    assert (listed.code, listed.document["total"]) == (0, 2)
    shown = {
        c["id"]: cli("memory", "show", c["id"], "-c", str(config)).document
        for c in (indexed["card"], waiting["card"])
    }
    assert shown[indexed["card"]["id"]]["index"]["current"] is True
    assert shown[waiting["card"]["id"]]["index"]["current"] is False
    # the HTTP routes of a server started while the embedder is down
    token = cli("user", "create", "boss", "--role", "admin", "--workspace", "acme").document
    services = build_services(
        env=database.env(),
        installation=installation_of(index=tmp_path / "server-index", embedder=remote),
    )
    try:
        client = TestClient(create_app(services))
        headers = {"Authorization": f"Bearer {token['token']}"}
        over_http = client.get("/api/workspaces/acme/memory/pending", headers=headers)
        assert over_http.status_code == 200, over_http.text
        assert [p["card_id"] for p in over_http.json()["items"]] == [waiting["card"]["id"]]
        card = client.get(f"/api/workspaces/acme/memory/{indexed['card']['id']}", headers=headers)
        assert card.status_code == 200 and card.json()["index"]["current"] is True
        assert client.get("/api/workspaces/acme/memory", headers=headers).json()["total"] == 2
    finally:
        services.close()
    assert embedder.requests == []  # not one call: browsing never waits for the embedder


@pytest.mark.parametrize(
    "model", ["m", "openai-http:intfloat/e5-small (v2)", "a|b.c*d+e?[f]{g}^$\\h"]
)
def test_the_known_format_reads_alike_in_python_and_postgresql(database, model):
    sparse = "bm25-en-v1"
    recorded = fingerprint(model, 384, sparse)
    others = [fingerprint(model + "x", 384, sparse), fingerprint(model, 384, sparse + "x"), ""]
    cases = [
        (KnownFormat.of(model, 384, sparse), [recorded], [fingerprint(model, 256, sparse)]),
        (KnownFormat.of(model, None, sparse), [recorded, fingerprint(model, 256, sparse)], []),
    ]
    with psycopg.connect(database.superuser) as conn:
        for running, matching, different in cases:
            for text in matching + different + others:
                expected = text in matching
                assert running.matches(text) is expected, (running, text)
                in_sql = conn.execute("SELECT %s ~ %s", (text, running.pattern)).fetchone()[0]
                assert in_sql is expected, (running, text)
