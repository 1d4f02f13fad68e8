"""An agent's HTTP API (tht.web.agent_api) against the real PostgreSQL and the embedded
index: the capability matrix over every memory route, the same answers as the CLI,
the DWH binding from the workspace's configuration, sessions, and the OpenAPI document."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.factories import card, card_document, installation_of
from tests.integration.web_support import ORIGIN, build_world
from tests.integration.workflow_support import (
    APPROVED_SQL,
    Session,
    add,
    decision,
    join_rule,
    solved,
    tree,
)
from tht.accounts import MANAGE, PROPOSE, RECALL, ROLE_PERMISSIONS, Principal
from tht.bootstrap import build_services
from tht.catalog.model import Binding
from tht.memory.embedding import uncached
from tht.memory.recall_service import RecallService, parse_recall_query
from tht.usecases.recall_and_proposals import DwhBinding, recall_binding, recall_command
from tht.web.app import WebSettings, create_app
from tht.workflow.contract import Review

BASE = "/api/workspaces/{workspaceId}/memory"
# `search` widened explicitly to rules (it recalls domain clarifications by default)
WIDENED = ["domain_clarification", "sql_rule", "explained_error"]
MEMBERSHIP = {"admin_a": "ws-a", "admin_b": "ws-b", "user_a": "ws-a", "agent_a": "ws-a"}
ROLE = {"admin_a": "admin", "admin_b": "admin", "user_a": "user", "agent_a": "agent"}


@pytest.fixture
def world(database, tmp_path):
    root = tmp_path / "sessions"
    root.mkdir()
    # recall is always bound: ws-a to dwh.sales (ws-b has no binding)
    world = build_world(database, tmp_path, sessions_root=root, bound=("ws-a",))
    world.root = root
    yield world
    world.close()


def proposals() -> dict:
    return {"version": 1, "proposals": [add("p1", ["d1"], join_rule())]}


def prepare_sessions(world) -> None:
    """s-propose: a corrected join to propose; s-solved: a reviewed solved question
    (its receipt is what solved-index retries)."""
    Session(world.root, "ws-a", "s-propose").log(
        decision(
            "d1",
            "sql_corrected",
            explanation="A job code repeats across fiscal years: join on code and year.",
            before="... ON j.job_code = m.job_code",
            after="... AND j.fiscal_year = m.fiscal_year",
        )
    )
    Session(world.root, "ws-a", "s-solved").log(decision("d1", "sql_approved", sql=APPROVED_SQL))
    services = world.services
    services.proposals.propose(
        "ws-a", "s-solved", {"version": 1, "proposals": [add("q", ["d1"], solved())]}
    )
    digest = services.summaries.summary("ws-a", "s-solved")["proposals_digest"]
    review = Review.model_validate(
        {"decision": "apply", "proposals_digest": digest, "selected": [{"proposal": "q"}]}
    )
    applied = services.review.review_apply(
        Principal("reviewer", "admin", frozenset({"ws-a"})), "ws-a", "s-solved", review
    )
    assert applied["status"] == "applied", applied


def memory_routes(world) -> list[tuple[str, str, str, dict | None, str, int]]:
    """Every memory route of ws-a: (method, OpenAPI path, concrete path, body, the
    capability it needs, the status when allowed)."""
    card_id = world.cards["ws-a"][0]
    return [
        ("GET", BASE, "", None, MANAGE, 200),
        ("POST", BASE, "", card_document(title="by an allowed actor"), MANAGE, 201),
        ("GET", BASE + "/pending", "/pending", None, MANAGE, 200),
        ("GET", BASE + "/{cardId}", f"/{card_id}", None, MANAGE, 200),
        ("PUT", BASE + "/{cardId}", f"/{card_id}", card_document(title="edited"), MANAGE, 200),
        ("DELETE", BASE + "/{cardId}", "/{fresh}", None, MANAGE, 200),
        ("POST", BASE + "/{cardId}/retry", f"/{card_id}/retry", None, MANAGE, 200),
        ("POST", BASE + "/search", "/search", {"question": "shipped order"}, RECALL, 200),
        ("POST", BASE + "/rules", "/rules", {"question": "join jobs on code"}, RECALL, 200),
        (
            "POST",
            BASE + "/solved-search",
            "/solved-search",
            {"question": "orders per customer"},
            RECALL,
            200,
        ),
        (
            "POST",
            BASE + "/propose",
            "/propose",
            {"session": "s-propose", "data": proposals()},
            PROPOSE,
            200,
        ),
        ("POST", BASE + "/summary", "/summary", {"session": "s-propose"}, PROPOSE, 200),
        ("POST", BASE + "/solved-index", "/solved-index", {"session": "s-solved"}, PROPOSE, 200),
    ]


def test_capability_matrix_over_every_memory_route(world):
    prepare_sessions(world)
    world.tokens["bad"] = "tht_not-a-token"
    proposals_file = world.root / "ws-a" / "s-propose" / "memory_proposals.json"
    actors = [None, "bad", "user_a", "agent_a", "admin_a", "admin_b"]
    allowed_by_role: dict[str, set[str]] = {}
    for actor in actors:
        for method, _, suffix, body, permission, status in memory_routes(world):
            if "{fresh}" in suffix:  # a card of its own for each deletion
                suffix = (
                    "/" + world.services.memory.create_card("ws-a", card(title="to delete")).card.id
                )
            path = BASE.format(workspaceId="ws-a") + suffix
            headers = {"Authorization": f"Bearer {world.tokens[actor]}"} if actor else {}
            before = world.snapshot(), proposals_file.exists()
            response = world.client.request(method, path, headers=headers, json=body)
            if actor in (None, "bad"):
                expected = (401, "unauthenticated")
            elif MEMBERSHIP[actor] == "ws-a" and permission in ROLE_PERMISSIONS[ROLE[actor]]:
                expected = (status, None)
                allowed_by_role.setdefault(ROLE[actor], set()).add(
                    f"{method} {suffix.split('/')[-1] or '/'}"
                )
            else:
                expected = (403, "forbidden")
            got = response.json()
            assert (
                response.status_code,
                got.get("error", {}).get("code") if isinstance(got, dict) else None,
            ) == expected, (actor, method, path, got)
            if expected[0] >= 400:
                assert set(got["error"]) == {"code", "message", "details"}
                assert (world.snapshot(), proposals_file.exists()) == before, (actor, method, path)
    # what each role did, as the capability table says (docs/accounts.md)
    assert allowed_by_role["agent"] == {
        "POST search",
        "POST rules",
        "POST solved-search",
        "POST propose",
        "POST summary",
        "POST solved-index",
    }
    # the administrative routes, reads included, are memory.manage's: a user recalls
    assert allowed_by_role["user"] == {
        "POST search",
        "POST rules",
        "POST solved-search",
    }
    assert len({"/".join(r) for r in allowed_by_role["admin"]}) == len(memory_routes(world))
    assert proposals_file.exists()  # written by the allowed proposals only


def test_the_matrix_covers_every_memory_route_of_the_openapi_document(world):
    document = world.client.get("/api/openapi.json").json()
    documented = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        if path.startswith(BASE)
        for method in operations
    }
    assert documented == {(method, path) for method, path, *_ in memory_routes(world)}


def test_openapi_documents_the_agent_routes_with_their_models_and_errors(world):
    document = world.client.get("/api/openapi.json").json()
    components = document["components"]["schemas"]
    expected = {
        "search": "SearchIn",
        "rules": "RulesIn",
        "solved-search": "SolvedSearchIn",
        "propose": "ProposeIn",
        "summary": "SessionIn",
        "solved-index": "SessionIn",
    }
    for route, model in expected.items():
        operation = document["paths"][f"{BASE}/{route}"]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"] == f"#/components/schemas/{model}", route
        assert {"200", "401", "403", "404", "422", "503"} <= set(operation["responses"]), route
        assert operation["responses"]["403"]["content"]["application/json"]["schema"][
            "$ref"
        ].endswith("/ErrorOut")
        assert "$ref" in operation["responses"]["200"]["content"]["application/json"]["schema"], (
            route
        )
    for model in ("SearchIn", "RulesIn", "SolvedSearchIn"):
        assert {"question", "filters", "top"} <= set(components[model]["properties"])
        assert not {"database", "schema"} & set(
            components[model]["properties"]
        )  # the binding is not the caller's
    assert {"session", "error", "explain_card_id", "view"} <= set(
        components["RulesIn"]["properties"]
    )
    # explain and error together are refused (422), and the schema says so
    assert components["RulesIn"]["allOf"][0]["not"]["required"] == ["error", "explain_card_id"]


def _cards_for_recall(world) -> dict[str, str]:
    memory = world.services.memory
    made = {
        "sales_rule": card(
            "sql_rule",
            title="Order totals exclude cancelled orders",
            content="Sum orders.total only where status is not cancelled.",
            scope="Sales",
            dependencies=[{"database": "dwh", "schema": "sales", "table": "orders"}],
        ),
        "other_rule": card(
            "sql_rule",
            title="Order totals in the archive database",
            content="Sum orders.total of the archived orders where status is not cancelled.",
            scope="Sales",
            dependencies=[{"database": "archive", "schema": "old", "table": "orders"}],
        ),
        "error": card(
            "explained_error",
            title="total was renamed",
            context="column total does not exist",
            content="Use total_amount.",
            rationale="Renamed in 2023.",
            error_signature='ERROR:  column "total" does not exist',
            dependencies=[{"database": "dwh", "schema": "sales", "table": "orders"}],
        ),
        "note": card(
            title="Cancelled orders keep their totals",
            content="A cancelled order keeps orders.total; only its status changes.",
            scope="Sales",
            dependencies=[{"database": "dwh", "schema": "sales", "table": "orders"}],
        ),
        "solved": card(
            "solved_question",
            title="Order totals per customer",
            question="Total of the orders per customer",
            sql=APPROVED_SQL,
            context="All years.",
        ),
    }
    return {name: memory.create_card("ws-a", c).card.id for name, c in made.items()}


def _http(world, route: str, body: dict, actor: str = "agent_a"):
    return world.client.post(
        f"/api/workspaces/ws-a/memory/{route}", json=body, headers=world.bearer(actor)
    )


def test_http_recall_answers_what_the_cli_answers(world, cli, runtime_file, tmp_path):
    made = _cards_for_recall(world)
    config = runtime_file("ws-a", index={"engine": "edge", "path": str(tmp_path / "index")})
    cases = [
        (
            "search",
            {"question": "order totals cancelled", "filters": {"families": WIDENED}},
            ["search", "order totals cancelled", "--filters", json.dumps({"families": WIDENED})],
        ),
        (
            "search",
            {
                "question": "order totals",
                "filters": {"scope": "Sales", "table": "orders"},
                "top": 2,
            },
            [
                "search",
                "order totals",
                "--filters",
                json.dumps({"scope": "Sales", "table": "orders", "top": 2}),
            ],
        ),
        ("rules", {"question": "order totals"}, ["rules", "order totals"]),
        (
            "rules",
            {"error": 'ERROR: column "total" does not exist at character 8', "question": "totals"},
            ["rules", "totals", "--error", 'ERROR: column "total" does not exist at character 8'],
        ),
        (
            "solved-search",
            {"question": "orders per customer"},
            ["solved-search", "orders per customer"],
        ),
        (
            "rules",
            {"error": 'column "total" does not exist'},
            ["rules", "--error", 'column "total" does not exist'],
        ),
        (
            "search",
            {
                "question": "order totals",
                "filters": {"families": WIDENED},
                "explain": made["other_rule"],
            },
            [
                "search",
                "order totals",
                "--filters",
                json.dumps({"families": WIDENED}),
                "--explain",
                made["other_rule"],
            ],
        ),
        # every recall command explains: a clarification is not `rules`' family, a solved
        # question is returned by `solved-search`
        (
            "rules",
            {"question": "order totals", "explain": made["note"]},
            ["rules", "order totals", "--explain", made["note"]],
        ),
        (
            "solved-search",
            {"question": "orders per customer", "explain": made["solved"]},
            ["solved-search", "orders per customer", "--explain", made["solved"]],
        ),
    ]
    answers = []
    for route, body, _ in cases:
        response = _http(world, route, body)
        assert response.status_code == 200, (route, response.json())
        answers.append(response.json())
    world.services.projector.of(
        "ws-a"
    ).index.close()  # the CLI's own process would take the embedded index in turn
    for (route, _body, args), answer in zip(cases, answers, strict=True):
        run = cli("memory", *args, "-c", config)
        assert run.code == 0, run.document
        assert answer == run.document, route
        assert answer["results"], route  # a real answer, not two empty ones
    ids = [[r["id"] for r in a["results"]] for a in answers]
    assert made["sales_rule"] in ids[0] and made["other_rule"] not in ids[0]  # bound to dwh.sales
    # search: domain clarifications only (F2)
    assert made["note"] in ids[1]
    assert {r["family"] for r in answers[1]["results"]} == {"domain_clarification"}
    # --explain over HTTP: the same answer as the CLI's, saying the binding left it out
    assert answers[6]["explain"] == {
        "card": made["other_rule"],
        "returned": False,
        "reason": "binding",
        "details": {
            "dependencies": [
                {"database": "archive", "schema": "old", "table": "orders", "column": None}
            ],
            "bound": {"database": "dwh", "schema": "sales"},
        },
    }
    assert answers[7]["explain"]["reason"] == "family"
    assert answers[7]["explain"]["details"]["family"] == "domain_clarification"
    assert answers[8]["explain"]["returned"] is True
    assert answers[8]["explain"]["details"]["rank"] == 1
    assert answers[3]["exact"] == 1 and ids[3][0] == made["error"]
    assert ids[4] == [made["solved"]]
    assert (
        answers[5]["exact"] == 1 and ids[5][0] == made["error"]
    )  # an error alone: no question needed


def test_recall_is_bound_by_the_workspace_configuration_never_the_request(world):
    made = _cards_for_recall(world)
    question = {"question": "order totals cancelled", "filters": {"top": 20, "families": WIDENED}}
    # a workspace without a recorded binding gets an error, never the whole workspace
    unbound = world.client.post(
        "/api/workspaces/ws-b/memory/search", json=question, headers=world.bearer("admin_b")
    )
    assert unbound.status_code == 409 and unbound.json()["error"]["code"] == "binding_required"
    # a binding for recall only (no DWH connection to scan) binds recall all the same
    world.services.catalog.bind(Binding("ws-b", "dwh", "sales", None))
    recall_only = world.client.post(
        "/api/workspaces/ws-b/memory/search", json=question, headers=world.bearer("admin_b")
    )
    assert recall_only.status_code == 200, recall_only.json()
    bound = _http(world, "search", question).json()
    assert made["sales_rule"] in [r["id"] for r in bound["results"]]
    assert made["other_rule"] not in [r["id"] for r in bound["results"]]
    expected = recall_command(
        world.services,
        "ws-a",
        "search",
        question["question"],
        parse_recall_query({"top": 20, "families": WIDENED}),
        binding=DwhBinding("dwh", "sales"),
    )
    assert bound == json.loads(json.dumps(expected))
    refused = [
        {**question, "database": "archive"},
        {**question, "schema": "old"},
        {"question": "order totals", "filters": {"database": "archive"}},
        {"question": "order totals", "filters": {"schema": "old", "table": "orders"}},
    ]
    for route in ("search", "rules", "solved-search"):
        for body in refused:
            response = _http(world, route, body)
            assert response.status_code == 422, (route, body, response.json())
            error = response.json()["error"]
            assert error["code"] == "invalid_input" and "configuration" in error["message"], error


def test_recall_requests_are_validated_like_the_cli(world):
    cases = [
        ("search", {}),  # the question is required
        ("search", {"question": "   "}),
        ("search", {"question": "x", "filters": {"column": "id"}}),  # a column needs its table
        ("search", {"question": "x", "top": 2, "filters": {"top": 3}}),  # top or filters.top
        ("search", {"question": "x", "top": 0}),
        ("search", {"question": "x", "colour": "red"}),
        ("solved-search", {"question": "x", "session": "s-1"}),  # as the CLI: no --session here
        ("rules", {}),  # a question or an error
        ("rules", {"error": "..."}),
        ("search", {"question": "x", "session": "../etc"}),
    ]
    cases += [
        ("search", {"question": "x", "filters": {"families": ["note"]}}),
        ("search", {"question": "x", "filters": {"families": []}}),
        ("search", {"question": "x", "explain": "x" * 101}),
    ]
    for route, body in cases:
        response = _http(world, route, body)
        assert response.status_code == 422, (route, body, response.json())
        assert set(response.json()["error"]) == {"code", "message", "details"}
    assert _http(world, "search", {"question": "x", "top": 2}).status_code == 200
    # a family the command does not serve, a malformed or unknown card to explain:
    # the JSON errors of the CLI (and of `memory show`)
    refused = _http(
        world, "rules", {"question": "x", "filters": {"families": ["domain_clarification"]}}
    )
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_input"
    malformed = _http(world, "search", {"question": "x", "explain": "mem-42"})
    assert malformed.status_code == 422, malformed.json()
    absent = "mem-00000000-0000-4000-8000-000000000000"
    missing = _http(world, "search", {"question": "x", "explain": absent})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    # an error's answer has no recall rank to explain
    both = _http(world, "rules", {"question": "x", "error": "ERROR: x", "explain": absent})
    assert both.status_code == 422 and "without the error" in both.json()["error"]["message"]
    shown = world.client.get(
        f"/api/workspaces/ws-a/memory/{absent}", headers=world.bearer("admin_a")
    )
    assert shown.json() == missing.json()
    assert (
        _http(
            world, "search", {"question": "x", "filters": {"top": 2, "table": "t", "column": "c"}}
        ).status_code
        == 200
    )


def test_the_credentials_are_checked_before_the_body(world):
    """A recall route reads its token with the workspace's binding in one transaction:
    a missing, malformed, unknown or rotated token is a 401 whatever the body, as on
    every other route; a member's token with the same body gets the body's 422."""
    invalid = [{}, {"question": "x", "top": 0}, {"question": 5, "colour": "red"}]
    old = world.tokens["agent_a"]
    world.services.accounts.tokens.rotate_token("agent_a")
    credentials = [
        {},
        {"Authorization": "Bearer tht_not-a-token"},
        {"Authorization": "Basic abc"},
        {"Authorization": f"Bearer {old}"},
    ]
    for route in ("search", "rules", "solved-search", "propose", "summary", "solved-index"):
        path = BASE.format(workspaceId="ws-a") + f"/{route}"
        for body in invalid:
            for headers in credentials:
                refused = world.client.post(path, headers=headers, json=body)
                assert refused.status_code == 401, (route, body, headers, refused.json())
                assert refused.json()["error"]["code"] == "unauthenticated"
            member = world.client.post(path, headers=world.bearer("admin_a"), json=body)
            assert member.status_code == 422, (route, body, member.json())


def test_sessions_come_from_the_service_configuration(world, database, tmp_path):
    prepare_sessions(world)
    Session(world.root, "ws-a", "s-propose").log(  # decided in the session: left out of its recall
        {
            "event": "memory_decided",
            "card": world.cards["ws-a"][0],
            "status": "approved",
            "gate": "F2",
        }
    )
    everything = _http(world, "search", {"question": "ws-a card", "top": 20}).json()["results"]
    in_session = _http(
        world, "search", {"question": "ws-a card", "top": 20, "session": "s-propose"}
    ).json()
    assert world.cards["ws-a"][0] in [r["id"] for r in everything]
    assert world.cards["ws-a"][0] not in [r["id"] for r in in_session["results"]]
    proposed = _http(world, "propose", {"session": "s-propose", "data": proposals()})
    assert proposed.status_code == 200, proposed.json()
    assert proposed.json()["proposals"] == [
        {"id": "p1", "action": "add", "family": "sql_rule", "card_id": None}
    ]
    summary = _http(world, "summary", {"session": "s-propose"}).json()
    assert summary == world.services.summaries.summary("ws-a", "s-propose")
    assert [a["proposal"] for a in summary["additions"]] == ["p1"]
    missing = _http(world, "summary", {"session": "s-nope"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"

    # a service started without sessions_root: a clear 404, never a traceback
    world.services.projector.of("ws-a").index.close()
    bare = build_services(
        env=database.env(),
        installation=installation_of(index=str(tmp_path / "index")),
    )
    try:
        with TestClient(create_app(bare, WebSettings()), base_url=ORIGIN) as client:
            for route, body in [
                ("propose", {"session": "s-propose", "data": proposals()}),
                ("summary", {"session": "s-propose"}),
                ("search", {"question": "x", "session": "s-propose"}),
                ("rules", {"question": "x", "session": "s-propose"}),
            ]:
                response = client.post(
                    f"/api/workspaces/ws-a/memory/{route}",
                    json=body,
                    headers=world.bearer("agent_a"),
                )
                assert response.status_code == 404, (route, response.text)
                error = response.json()["error"]
                assert (
                    error["details"]["reason"] == "no_sessions_root"
                    and "sessions_root" in error["message"]
                )
    finally:
        bare.close()


def test_an_agent_and_an_admin_of_one_workspace_never_reach_another_workspaces_session(world):
    """ws-b's session s-b, named by ws-a's agent on every agent route and by ws-a's
    admin on the reviewer's routes: not found, nothing of ws-b's read or written; ws-b's
    own agent and admin work with it, and its review receipt stays ws-b's."""
    world.tokens["agent_b"] = world.services.accounts.users.create_user(
        "agent_b", "agent", ["ws-b"]
    )["token"]
    theirs = Session(world.root, "ws-b", "s-b").log(
        decision("d1", "sql_corrected", explanation="A job code repeats across fiscal years."),
        decision("d2", "sql_approved", question="Total of the 2024 orders", sql=APPROVED_SQL),
        {"event": "memory_decided", "card": world.cards["ws-b"][0], "status": "approved"},
    )
    own = world.client.post(
        "/api/workspaces/ws-b/memory/propose",
        json={"session": "s-b", "data": proposals()},
        headers=world.bearer("agent_b"),
    )
    assert own.status_code == 200, own.json()
    digest = own.json()["digest"]
    before = tree(world.root), world.snapshot()

    for route, body in [
        ("propose", {"session": "s-b", "data": proposals()}),
        ("propose", {"session": "s-b", "data": {"version": 1, "proposals": []}}),
        ("summary", {"session": "s-b"}),
        ("search", {"question": "ws-a card", "session": "s-b"}),
        ("rules", {"question": "join jobs", "session": "s-b"}),
        ("solved-index", {"session": "s-b"}),
    ]:
        refused = _http(world, route, body)
        assert (refused.status_code, refused.json()["error"]["code"]) == (404, "not_found"), route
        assert "ws-b" not in refused.text, route
    reviewer = "/api/workspaces/ws-a/review/sessions"
    admin = world.bearer("admin_a")
    assert world.client.get(reviewer, headers=admin).json() == {"items": []}
    assert world.client.get(reviewer + "/s-b", headers=admin).status_code == 404
    review = {
        "decision": "apply",
        "proposals_digest": digest,
        "selected": [{"proposal": "p1"}, {"proposal": "approved-sql"}],
    }
    applied = world.client.post(reviewer + "/s-b/apply", json=review, headers=admin)
    assert applied.status_code == 404, applied.json()
    assert (tree(world.root), world.snapshot()) == before

    # ws-b's own admin reviews it; solved-index answers ws-b's agent only
    listed = world.client.get(
        "/api/workspaces/ws-b/review/sessions", headers=world.bearer("admin_b")
    ).json()
    assert [i["session"] for i in listed["items"]] == ["s-b"]
    done = world.client.post(
        "/api/workspaces/ws-b/review/sessions/s-b/apply",
        json=review,
        headers=world.bearer("admin_b"),
    )
    assert done.status_code == 200 and done.json()["status"] == "applied", done.json()
    assert len(theirs.reviewed_events()) == 1
    indexed = world.client.post(
        "/api/workspaces/ws-b/memory/solved-index",
        json={"session": "s-b"},
        headers=world.bearer("agent_b"),
    )
    assert indexed.status_code == 200, indexed.json()
    assert _http(world, "solved-index", {"session": "s-b"}).status_code == 404
    assert world.snapshot()["ws-a"] == before[1]["ws-a"]


def test_the_service_checks_the_principal_again(world):
    from tht.errors import Forbidden

    query = parse_recall_query({})
    user = Principal("user_a", "user", frozenset({"ws-a"}))
    outsider = Principal("agent_b", "agent", frozenset({"ws-b"}))
    with pytest.raises(Forbidden):
        recall_command(world.services, "ws-a", "search", "x", query, principal=outsider)
    from tht.usecases.recall_and_proposals import (
        propose_command,
        solved_index_command,
        summary_command,
    )

    for call in (
        lambda: propose_command(world.services, "ws-a", "s-1", proposals(), principal=user),
        lambda: summary_command(world.services, "ws-a", "s-1", principal=user),
        lambda: solved_index_command(world.services, "ws-a", "s-1", principal=user),
    ):
        with pytest.raises(Forbidden):
            call()


def test_user_create_accepts_the_agent_role(cli):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    created = cli("user", "create", "bot", "--role", "agent", "--workspace", "acme")
    assert created.code == 0, created.document
    assert created.document["role"] == "agent" and created.document["token"].startswith("tht_")
    listed = {u["user"]: u["role"] for u in cli("user", "list").document["items"]}
    assert listed["bot"] == "agent"
    refused = cli("user", "create", "robot", "--role", "robot", "--workspace", "acme")
    assert refused.code == 2 and "admin, user, agent" in refused.document["error"]["message"]


def test_an_agent_token_carries_recall_and_propose_only(world):
    principal = world.services.accounts.tokens.by_token(world.tokens["agent_a"])
    assert principal.permissions == {RECALL, PROPOSE}
    session = world.client.get("/api/session", headers=world.bearer("agent_a")).json()
    assert session["principal"]["permissions"] == sorted([PROPOSE, RECALL])
    listed = world.client.get("/api/workspaces", headers=world.bearer("agent_a")).json()["items"]
    assert [(w["id"], w["manage"]) for w in listed] == [("ws-a", False)]


def test_http_propose_retried_under_its_idempotency_key_answers_the_first_result(world):
    prepare_sessions(world)
    headers = {**world.bearer("agent_a"), "Idempotency-Key": "agent-propose-1"}
    body = {"session": "s-propose", "data": proposals()}
    url = "/api/workspaces/ws-a/memory/propose"
    first = world.client.post(url, json=body, headers=headers)
    assert first.status_code == 200, first.json()
    proposals_file = world.root / "ws-a" / "s-propose" / "memory_proposals.json"
    written = proposals_file.read_text()
    again = world.client.post(url, json=body, headers=headers)
    assert again.status_code == 200 and again.json() == first.json()
    assert proposals_file.read_text() == written  # nothing done twice (recorded_at kept)
    other = {"session": "s-propose", "data": {"version": 1, "proposals": []}}
    reused = world.client.post(url, json=other, headers=headers)
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"


def test_an_agents_three_recalls_of_one_question_embed_it_once(world):
    """`search`, `rules` and `solved-search` of one question: one query embedding (the
    service keeps it), and the answers an embedder without the cache gives."""
    _cards_for_recall(world)
    recall = world.services.recall.of("ws-a")
    model = uncached(recall.embedder)  # the hashing embedder, counting its calls
    bare = RecallService(recall.archive, recall.index, model, recall.projection_format)
    question = "order totals per customer"
    before = model.calls
    answers = {
        route: _http(world, route, {"question": question}).json()["results"]
        for route in ("search", "rules", "solved-search")
    }
    assert model.calls == before + 1
    bound = recall_binding(world.services, "ws-a")
    for route, kind in (("search", "search"), ("rules", "rules"), ("solved-search", "solved")):
        expected = bare.recall("ws-a", question, kind, database=bound.database, schema=bound.schema)
        assert [r["id"] for r in answers[route]] == [r.card.id for r in expected]
        assert [r["score"] for r in answers[route]] == [r.ranked.score for r in expected]
    assert answers["rules"] and answers["solved-search"]
    calls = model.calls
    assert _http(world, "search", {"question": "cancelled orders"}).status_code == 200
    assert model.calls == calls + 1  # another question: embedded
