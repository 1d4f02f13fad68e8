"""Spec conformance points of issue 16: `updated_to` keeps the day it names (19), a
card's family is immutable and `memory retry` with the index down fails (22)."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pytest

from tests.factories import card_document
from tests.integration.web_support import build_world
from tht.memory.model import parse_list_query

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


@pytest.fixture
def world(database, tmp_path):
    world = build_world(database, tmp_path)
    yield world
    world.close()


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
