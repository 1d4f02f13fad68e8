"""An installation as an agent meets it (tests of the MCP server and the Python client):
a THT_HOME with its service, workspace acme with a clarification and a rule, a workflow
session whose ledger holds a corrected join, and a token per role."""

from __future__ import annotations

import json

import pytest

from tests.factories import card_document
from tests.integration.service_support import installation
from tests.integration.workflow_support import Session, add, decision, join_rule

# what the agent proposes from session s-1: the corrected join as a rule
PROPOSALS = {"version": 1, "proposals": [add("p1", ["d1"], join_rule())]}


@pytest.fixture
def tht(database, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    found = installation(database, home)
    yield found
    found.stop()


@pytest.fixture
def acme(tht, tmp_path):
    """(runtime file of acme, the sessions root, tokens by role: agent, user, admin, and
    stranger, an agent of workspace other)."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    # the installation's sessions root and a DWH connection, before its service starts
    config = tht.runtime(
        "acme", sessions_root=str(sessions), dwh={"acme-dwh": {"url_env": "ACME_DWH_URL"}}
    )
    assert tht.run("workspace", "create", "acme", "--language", "en").code == 0
    assert tht.run("workspace", "create", "other", "--language", "en").code == 0
    # recall through the service's faces is bound to the workspace's recorded binding
    bound = tht.run("catalog", "bind", "-c", config, "--connection", "acme-dwh")
    assert bound.code == 0, bound.document
    for document in (card_document(), card_document("sql_rule")):
        saved = tht.run("memory", "create", "-c", config, "--data", "-", stdin=json.dumps(document))
        assert saved.code == 0, saved.document
    Session(sessions, "acme", "s-1").log(
        decision(
            "d1",
            "sql_corrected",
            explanation="A job code repeats across fiscal years: join on code and year.",
            before="... ON j.job_code = m.job_code",
            after="... AND j.fiscal_year = m.fiscal_year",
        )
    )
    tokens = {}
    for role in ("agent", "user", "admin"):
        made = tht.run("user", "create", f"the-{role}", "--role", role, "--workspace", "acme")
        assert made.code == 0, made.document
        tokens[role] = made.document["token"]
    stranger = tht.run("user", "create", "stranger", "--role", "agent", "--workspace", "other")
    tokens["stranger"] = stranger.document["token"]
    return config, sessions, tokens
