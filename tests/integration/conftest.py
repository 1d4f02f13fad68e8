"""Fixtures shared by the integration modules (tests/conftest.py has the database's)."""

from __future__ import annotations

import pytest


@pytest.fixture
def world(database, tmp_path):
    """The web app on the test database with its users and workspaces
    (tests/integration/web_support.py); a module that needs another world overrides it."""
    from tests.integration.web_support import build_world

    world = build_world(database, tmp_path)
    yield world
    world.close()
