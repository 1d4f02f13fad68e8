"""Fault batteries, short mode: the full mode is bench/fault_bench.py.

See tests/fault_battery.py for the crash battery's rows and the precise meaning of
lost, doubled, stale and leaked.
"""

from __future__ import annotations

import re

import pytest

from tests.fault_battery import (
    OPERATIONS,
    ROOT,
    ROWS,
    CrashBench,
    Target,
    crash_battery,
    kill_battery,
    pool_leak_battery,
    pooled,
    recall_machine,
    writers_battery,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def target(database, tmp_path):
    return Target(database.runtime, database.migrator, database.superuser, tmp_path)


@pytest.fixture(scope="module")
def crash_bench(module_database, tmp_path_factory):
    """One database, fork server and Edge data directory for all the crash rows (each
    row works in a workspace of its own), as the battery in bench/fault_bench.py."""
    db = module_database
    bench = CrashBench(
        Target(db.runtime, db.migrator, db.superuser, tmp_path_factory.mktemp("crash"))
    )
    yield bench
    bench.close()


@pytest.mark.parametrize(
    "number, row", list(enumerate(ROWS)), ids=[f"{r.operation}@{r.point}" for r in ROWS]
)
def test_crash_at_every_step_is_recovered_without_lost_doubled_stale_or_leaked_cards(
    crash_bench, number, row
):
    result = crash_bench.trial(row, number)
    assert result.crashed and result.recovered and result.audit.clean(), (
        result.audit.counts(),
        result.audit.notes,
    )


def test_the_crash_rows_are_distinct():
    assert len({(r.operation, r.point) for r in ROWS}) == len(ROWS)


def test_the_fork_server_stands_for_python_m_tht(target):
    """The battery forks each command from a pre-imported parent for speed; the same
    kind of row through `python -m tht` (a fresh interpreter per command) holds too."""
    row = next(
        r for r in ROWS if (r.operation, r.point) == ("delete", "delete.after_archive_commit")
    )
    (result,) = crash_battery(target, [row], repetitions=1, launcher_name="exec")
    assert result.crashed and result.recovered and result.audit.clean(), result.audit.notes


def test_eight_writers_lose_no_update_and_leave_the_index_equal_to_the_archive(target):
    figures = writers_battery(target, writers=8, mutations=40)
    assert figures["errors"] == [] and figures["lost_updates"] == []
    assert figures["conflicts"] > 0  # the writers really did race
    assert (
        figures["pending_before_drain"] > 0
        and figures["drained"] >= figures["pending_before_drain"]
    )
    assert figures["index_differences"] == [] and figures["projection_differences"] == []
    assert figures["recalled_deleted"] == []


def test_pool_checkouts_never_leak_role_workspace_or_lock(target):
    figures = pool_leak_battery(target, checkouts=1_000)
    assert figures["leaks"] == 0, figures["leak_examples"]
    # the failures really happened: modes 1, 2, 4 and 5 of every six checkouts
    assert figures["failed_mid_transaction"] == sum(
        1 for i in range(1_000) if i % 6 in (1, 2, 4, 5)
    )


def test_index_engine_killed_mid_write_never_brings_a_deleted_card_back(target):
    figures = kill_battery(target, rounds=3)
    assert figures["deleted_before_kill"] > 0
    assert figures["resurrected"] == 0, figures["resurrected_examples"]
    assert figures["drift_after_repair"] == 0, figures["drift_examples"]
    assert figures["kept_cards_found"]


def test_recall_state_machine_in_two_workspaces(target):
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    with pooled(target.runtime) as archive:
        machine, stack = recall_machine(archive, target.home / "machine-index")
        try:
            run_state_machine_as_test(
                machine,
                settings=settings(
                    max_examples=15,
                    stateful_step_count=25,
                    deadline=None,
                    derandomize=True,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        finally:
            stack.release()


def test_every_crash_point_in_the_product_has_a_row():
    """A crash point added to the product without a row in the battery fails here:
    add a Row (and, for a new operation, its setup in OPERATIONS) to tests/fault_battery.py."""
    calls = [
        m.group(1)
        for path in (ROOT / "src" / "tht").rglob("*.py")
        for m in re.finditer(r"crash_point\(([^)]*)\)", path.read_text())
        if path.name != "faults.py"
    ]
    points = {name for call in calls for name in re.findall(r"\"([a-z_]+\.[a-z_.]+)\"", call)}
    assert len(points) >= 12
    # The battery runs on Edge, whose rebuild switch is one rename with no crash point;
    # the server engines' switch point is crashed at by the rebuild tests instead. So is
    # the child process that indexes a large Edge generation (the battery's workspaces
    # are indexed in-process, under IN_PROCESS_OPTIMIZE_BYTES).
    engine_only = {"index.after_switch", "edge.optimizing"}
    rebuild_tests = (ROOT / "tests" / "integration" / "test_rebuild_generations.py").read_text()
    assert all(f'"{point}"' in rebuild_tests for point in engine_only)
    assert points - {row.point for row in ROWS} - engine_only == set()
    assert {row.operation for row in ROWS} <= set(OPERATIONS)
