"""The Catalog's pure parts: the diff of two snapshots, removal digests, run ids and
the runtime file's `dwh` section."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tht.catalog.model import Removals, binding_from_runtime, diff, run_id_to_uuid, uuid_to_run_id
from tht.errors import ConfigurationError, InvalidInput
from tht.memory.cleanup import PhysicalRemovals
from tht.settings import RuntimeConfig


def test_diff_reports_removed_tables_and_columns_of_surviving_tables_only():
    previous = {"orders": ["amount", "id", "status"], "customers": ["id", "name"], "old": ["x"]}
    current = {"orders": ["id", "status", "total"], "customers": ["id", "name"], "new": ["y"]}
    assert diff(previous, current) == Removals(["old"], [("orders", "amount")])


def test_without_a_previous_snapshot_nothing_is_removed():
    assert not diff(None, {})
    assert not diff(None, {"orders": ["id"]})


def test_an_emptied_schema_removes_every_table():
    assert diff({"a": ["x"], "b": ["y"]}, {}) == Removals(["a", "b"], [])


names = st.text(alphabet="abcxyz_", min_size=1, max_size=4)
snapshots = st.dictionaries(names, st.lists(names, unique=True, max_size=4), max_size=5)


@given(snapshots, snapshots)
def test_diff_never_reports_what_still_exists(previous, current):
    removals = diff(previous, current)
    assert not set(removals.tables) & set(current)
    assert all(
        t in current and c not in current[t] and c in previous[t] for t, c in removals.columns
    )
    assert set(removals.tables) == set(previous) - set(current)


def test_removal_digest_ignores_order_and_duplicates_but_not_content():
    run = uuid.uuid4()
    a = PhysicalRemovals(run, "dwh", "sales", ("b", "a"), (("t", "c"), ("t", "c")))
    b = PhysicalRemovals(run, "dwh", "sales", ("a", "b"), (("t", "c"),))
    c = PhysicalRemovals(run, "dwh", "sales", ("a",), (("t", "c"),))
    assert a.digest() == b.digest() != c.digest()


def test_run_ids_round_trip_and_garbage_is_invalid_input():
    value = uuid.uuid4()
    assert run_id_to_uuid(uuid_to_run_id(value)) == value
    with pytest.raises(InvalidInput):
        run_id_to_uuid("run-42")


def runtime(**extra) -> RuntimeConfig:
    return RuntimeConfig.model_validate(
        {"workspace": "acme", "database": "dwh", "schema": "sales", **extra}
    )


def test_binding_names_a_connection_of_the_installation_never_a_url():
    binding = binding_from_runtime(runtime(), "sales")
    assert (binding.database, binding.schema, binding.connection) == ("dwh", "sales", "sales")
    assert "url" not in binding.as_json()
    with pytest.raises(ConfigurationError, match="schema"):
        binding_from_runtime(
            RuntimeConfig.model_validate({"workspace": "acme", "database": "dwh"}), "sales"
        )
