"""A workspace's embedder is a fact of the workspace: recorded in the archive, one of the
installation's profiles, used by every face, changed only by a switch that projects
every card with the new profile before the workspace leaves the old one."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from tests.factories import card, installation_of
from tests.integration.service_support import wait_for
from tht.bootstrap import build_services
from tht.catalog.model import Binding
from tht.errors import NotFound
from tht.web.app import WebSettings, create_app

ORIGIN = "http://testserver"
SMALL = {"provider": "hashing", "dimension": 32}


@pytest.fixture
def services(database, tmp_path):
    built = build_services(
        env={**database.env(), "THT_HOME": str(tmp_path / "home")},
        installation=installation_of(
            index=tmp_path / "index",
            embedders={"small": SMALL},
            dwh={"acme": {"url_env": "ACME_DWH_URL"}},
        ),
    )
    yield built
    built.close()


def dependency() -> dict:
    return {"database": "dwh", "schema": "sales", "table": "orders", "column": "status"}


def test_a_workspace_records_its_profile_and_an_unknown_one_is_refused(services):
    created = services.workspaces.create("ws-small", "en", embedder="small")
    assert created.embedder == "small"
    assert services.workspaces.create("ws-default", "en").embedder == "default"
    with pytest.raises(NotFound, match="defined: default, small") as refused:
        services.workspaces.create("ws-typo", "en", embedder="smal")
    assert refused.value.details["embedder"] == "smal"
    with pytest.raises(NotFound, match="not defined"):
        services.projector.switch("ws-small", "large")


def test_every_face_recalls_a_workspace_with_its_own_embedder(services):
    """The workspace's vectors are 32-dimensional, the installation's default 64: the
    CLI's recall and the HTTP route both use the workspace's profile (the HTTP route
    used the server's and failed with a dimension error)."""
    from tht.memory.recall_service import RecallQuery
    from tht.usecases.recall_and_proposals import DwhBinding, recall_binding, recall_command

    services.workspaces.create("ws-small", "en", embedder="small")
    services.workspaces.create("ws-default", "en")
    for workspace in ("ws-small", "ws-default"):
        services.catalog.bind(Binding(workspace, "dwh", "sales", "acme"))
        saved = services.memory.create_card(
            workspace, card(title="Order status", dependencies=[dependency()])
        )
        assert saved.status == "saved"
    small_index = services.projector.of("ws-small").index
    assert small_index is not services.projector.of("ws-default").index
    assert services.projector.of("ws-small").embedder.dimension == 32

    token = services.accounts.users.create_user("agent_s", "agent", ["ws-small"])["token"]
    client = TestClient(
        create_app(services, WebSettings(public_origins=(ORIGIN,))), base_url=ORIGIN
    )
    try:
        answer = client.post(
            "/api/workspaces/ws-small/memory/search",
            json={"question": "what is an order status?"},
            headers={"Authorization": f"Bearer {token}"},
        )
    finally:
        client.close()
    assert answer.status_code == 200, answer.text
    cli_answer = recall_command(
        services,
        "ws-small",
        "search",
        "what is an order status?",
        RecallQuery(),
        binding=recall_binding(services, "ws-small", DwhBinding("dwh", "sales")),
    )
    assert [r["id"] for r in answer.json()["results"]] == [r["id"] for r in cli_answer["results"]]
    assert len(cli_answer["results"]) == 1


def test_recall_is_always_bound_and_a_typo_names_the_known_binding(services):
    from tht.errors import BindingRequired, BindingUnknown
    from tht.usecases.recall_and_proposals import DwhBinding, recall_binding

    services.workspaces.create("acme", "en")
    with pytest.raises(BindingRequired):  # the service's faces: no recorded binding
        recall_binding(services, "acme")
    with pytest.raises(BindingRequired):  # a runtime file without database and schema
        recall_binding(services, "acme", DwhBinding(None, None))
    # without a recorded binding, the runtime file's is taken as it is
    assert recall_binding(services, "acme", DwhBinding("dwh", "sales")) == DwhBinding(
        "dwh", "sales"
    )
    services.catalog.bind(Binding("acme", "dwh", "sales", "acme"))
    assert recall_binding(services, "acme") == DwhBinding("dwh", "sales")
    with pytest.raises(BindingUnknown) as refused:
        recall_binding(services, "acme", DwhBinding("dwh", "saels"))
    assert refused.value.details["known"] == {"database": "dwh", "schema": "sales"}


def test_switching_the_embedder_keeps_recall_until_the_new_projection_is_complete(
    services, tmp_path, monkeypatch
):
    services.workspaces.create("acme", "en")
    ids = [
        services.memory.create_card("acme", card(title=f"Order status {i}")).card.id
        for i in range(5)
    ]
    old = services.projector.of("acme")
    old_fingerprint = old.format.fingerprint("en")
    recall = services.recall.of("acme")

    def found() -> set[str]:
        results = services.recall.of("acme").recall(
            "acme", "order status", "search", database="dwh", schema="sales"
        )
        return {r.card.id for r in results}

    assert found() == set(ids)
    marker = tmp_path / "paused"
    monkeypatch.setenv("THT_PAUSE_AT", "index.after_batch")
    monkeypatch.setenv("THT_PAUSE_FILE", str(marker))
    outcome: list = []
    switching = threading.Thread(
        target=lambda: outcome.append(services.projector.switch("acme", "small"))
    )
    switching.start()
    try:
        assert wait_for(marker.exists, 30)
        # half-way: the workspace still recalls with its recorded profile, every card
        assert services.recall.of("acme") is recall and found() == set(ids)
        # a save meanwhile goes through the old profile, and reaches the new one later
        late = services.memory.create_card("acme", card(title="Order status late"))
        assert late.status == "saved"
        edited = services.memory.get_card("acme", ids[0])
        # a second switch or a rebuild is refused while this one runs
        from tht.errors import Conflict

        with pytest.raises(Conflict):
            services.projector.rebuild("acme")
    finally:
        monkeypatch.delenv("THT_PAUSE_AT")
        marker.unlink(missing_ok=True)
        switching.join(60)
    assert outcome and outcome[0]["status"] == "switched", outcome
    assert outcome[0]["previous"] == "default" and outcome[0]["embedder"] == "small"
    with services.archive.transaction("acme") as tx:
        assert tx.require_workspace().embedder == "small"
    new = services.projector.of("acme")
    assert new is not old and new.embedder.dimension == 32
    assert services.memory.pending("acme") == []
    assert found() == {*ids, late.card.id}
    shown = services.memory.get_card("acme", edited.id).index
    assert shown is not None and shown.current  # current in the new profile's format
    assert new.format.fingerprint("en") != old_fingerprint
    # the points left the collection of the profile the workspace left
    with old.index.session():
        assert old.index.count("acme") == 0


def test_every_face_answers_the_same_on_a_workspace_with_its_own_embedder(database, tmp_path):
    """A workspace indexed with a profile that is not the installation's default: the
    CLI through the service, the HTTP route, the MCP tool over HTTP and the Python client
    give the same answer (each recalls with the workspace's recorded profile)."""
    import json
    import socket

    from tests.integration.service_support import installation
    from tests.integration.test_mcp import document, http_session, in_a_thread
    from tht.memory_client import Memory
    from tht.service.commands import CommandRunner

    home = tmp_path / "home"
    home.mkdir()
    tht = installation(database, home)
    config = tht.runtime(
        "acme", embedders={"small": SMALL}, dwh={"acme-dwh": {"url_env": "ACME_DWH_URL"}}
    )
    try:
        created = tht.run("workspace", "create", "acme", "--language", "en", "--embedder", "small")
        assert created.code == 0 and created.document["embedder"] == "small", created.document
        assert tht.run("catalog", "bind", "-c", config, "--connection", "acme-dwh").code == 0
        for title in ("Order status", "Shipped order", "Carrier codes"):
            saved = tht.run(
                "memory",
                "create",
                "-c",
                config,
                "--data",
                "-",
                stdin=json.dumps(
                    {
                        "family": "domain_clarification",
                        "title": title,
                        "content": f"{title}: what it means for an order.",
                        "scope": "Sales",
                    }
                ),
            )
            assert saved.document["status"] == "saved", saved.document
        token = tht.run("user", "create", "agent-1", "--role", "agent", "--workspace", "acme")
        token = token.document["token"]
        question = "what is the status of an order"
        cli = tht.run("memory", "search", question, "-c", config, token=token)
        assert cli.code == 0, cli.document
        expected = [r["id"] for r in cli.document["results"]]
        assert len(expected) == 3

        tht.stop()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = tht.start("serve", "--port", str(port))
        try:
            assert "error" not in json.loads(server.stdout.readline())
            url = f"http://127.0.0.1:{port}"
            import httpx

            http = httpx.post(
                f"{url}/api/workspaces/acme/memory/search",
                json={"question": question},
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            assert http.status_code == 200, http.text
            assert [r["id"] for r in http.json()["results"]] == expected

            async def mcp() -> dict:
                async with http_session(f"{url}/mcp/acme", token) as session:
                    return document(
                        await session.call_tool("memory_search", {"question": question})
                    )

            assert [r["id"] for r in in_a_thread(mcp)["results"]] == expected
            runner = CommandRunner(token=token, env=tht.env)  # the installation's socket
            with Memory(config, runner) as client:
                assert [hit.card.id for hit in client.search(question)] == expected
        finally:
            server.terminate()
            server.wait(30)
    finally:
        tht.stop()


def test_a_replica_that_has_not_seen_a_switch_projects_its_saves_with_the_new_profile(
    database, tmp_path, monkeypatch
):
    """Two service replicas on one database (pgvector): A switches the workspace's
    embedder while B still trusts the profile it read (kept ``PROFILE_SECONDS``, made long
    here). B's save is projected with the workspace's new profile, never recorded with
    the one it left (that card would be missing from recall until a rebuild); B's
    rebuild or check reads the profile again."""
    import tht.bootstrap
    from tht.installation import IndexConfig

    monkeypatch.setattr(tht.bootstrap, "PROFILE_SECONDS", 3600.0)
    installation = installation_of(embedders={"small": SMALL}).model_copy(
        update={"index": IndexConfig(engine="pgvector")}
    )
    env = {**database.env(), "THT_HOME": str(tmp_path / "home")}
    a, b = (
        build_services(env, installation=installation),
        build_services(env, installation=installation),
    )
    try:
        a.workspaces.create("acme", "en")
        first = a.memory.create_card("acme", card(title="Order status first")).card.id
        assert b.projector.of("acme").embedder.dimension == 64  # B reads the profile now
        assert a.projector.switch("acme", "small")["status"] == "switched"
        assert b.projector.of("acme").embedder.dimension == 64  # and keeps it
        saved = b.memory.create_card("acme", card(title="Order status on b"))
        assert saved.status == "saved", saved.as_json()
        assert a.memory.pending("acme") == []
        shown = a.memory.get_card("acme", saved.card.id).index
        assert shown is not None and shown.current
        found = a.recall.of("acme").recall(
            "acme", "order status", "search", database="dwh", schema="sales"
        )
        assert {r.card.id for r in found} == {first, saved.card.id}
        report = b.projector.check("acme")  # drift raises IndexDrift (exit 8)
        assert report["cards"] == report["points"] == 2
        assert b.projector.rebuild("acme")["cards"] == 2
    finally:
        a.close()
        b.close()
