"""Fault batteries, full mode: the short mode runs in CI as
tests/integration/test_fault_batteries.py. Real embedded PostgreSQL, real Qdrant Edge,
the `tht` command as separate processes. Prints one JSON document, then tables.

    .venv/bin/python bench/fault_bench.py                       # everything, full size
    .venv/bin/python bench/fault_bench.py --repetitions 5 --only crash --rows index
    .venv/bin/python bench/fault_bench.py --launcher exec       # `python -m tht` per command (slow)

What lost, doubled, stale and leaked mean: tests/fault_battery.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from tests.conftest import Cluster, build_template, drop_database, new_database  # noqa: E402
from tests.fault_battery import (  # noqa: E402
    ROWS,
    Target,
    crash_battery,
    kill_battery,
    pool_leak_battery,
    pooled,
    recall_machine,
    summarize,
    writers_battery,
)

from tht.db.embedded import EmbeddedPostgres  # noqa: E402

BATTERIES = ("crash", "writers", "pool", "kill", "machine")


def start_cluster(home: Path) -> tuple[EmbeddedPostgres, Cluster]:
    embedded = EmbeddedPostgres(home)
    embedded.ensure_roles_and_database(database=None)
    cluster = Cluster(embedded.superuser_conninfo(), {})
    build_template(cluster)
    return embedded, cluster


def run_machine(target: Target, examples: int, steps: int) -> dict:
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    started = time.perf_counter()
    with pooled(target.runtime) as archive:
        machine, stack = recall_machine(archive, target.home / "machine-index")
        failure = None
        try:
            run_state_machine_as_test(
                machine,
                settings=settings(
                    max_examples=examples,
                    stateful_step_count=steps,
                    deadline=None,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        except AssertionError as exc:
            failure = str(exc)[:2000]
        finally:
            stack.release()
    return {
        "examples": examples,
        "max_steps": steps,
        "rules_run": dict(machine.steps),
        "violations": 0 if failure is None else 1,
        "failure": failure,
        "seconds": round(time.perf_counter() - started, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", default=",".join(BATTERIES), help=f"comma-separated subset of {BATTERIES}"
    )
    parser.add_argument("--repetitions", type=int, default=50, help="crash battery: trials per row")
    parser.add_argument(
        "--rows", default="", help="crash battery: only rows whose operation or point contains this"
    )
    parser.add_argument(
        "--launcher",
        choices=("fork", "exec"),
        default="fork",
        help="fork: a process per command forked from a pre-imported parent; exec: python -m tht",
    )
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--mutations", type=int, default=500, help="per writer")
    parser.add_argument("--checkouts", type=int, default=10_000)
    parser.add_argument("--kill-rounds", type=int, default=50)
    parser.add_argument("--machine-examples", type=int, default=100)
    parser.add_argument("--machine-steps", type=int, default=50)
    args = parser.parse_args()
    only = set(args.only.split(","))
    # a stopped run still stops its embedded PostgreSQL and fork server
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    home = Path(tempfile.mkdtemp(prefix="tht-fault-bench-"))
    embedded, cluster = start_cluster(home / "pg")
    figures: dict = {}
    failed = False
    try:

        def fresh_target(name: str) -> Target:
            database = new_database(cluster)
            databases.append(database)
            (home / name).mkdir()
            return Target(database.runtime, database.migrator, database.superuser, home / name)

        databases: list = []
        if "crash" in only:
            rows = [r for r in ROWS if args.rows in r.operation or args.rows in r.point]
            started = time.perf_counter()

            def progress(result) -> None:
                if not (result.crashed and result.recovered and result.audit.clean()):
                    print(
                        f"FAILED {result.row} #{result.repetition}: {result.audit.counts()} {result.audit.notes}",
                        file=sys.stderr,
                        flush=True,
                    )
                elif result.repetition == args.repetitions - 1:
                    print(
                        f"done {result.row.operation} x {result.row.point}",
                        file=sys.stderr,
                        flush=True,
                    )

            results = crash_battery(
                fresh_target("crash"),
                rows,
                args.repetitions,
                args.launcher,
                progress,
                shard_per_row=True,
            )
            table = summarize(results)
            totals = {
                k: sum(line[k] for line in table)
                for k in ("trials", "crashed", "recovered", "lost", "doubled", "stale", "leaked")
            }
            figures["crash"] = {
                "launcher": args.launcher,
                "repetitions": args.repetitions,
                "rows": len(table),
                "seconds": round(time.perf_counter() - started, 1),
                "totals": totals,
                "table": table,
            }
            failed |= (
                totals["crashed"] != totals["trials"]
                or totals["recovered"] != totals["trials"]
                or any(totals[k] for k in ("lost", "doubled", "stale", "leaked"))
            )
        if "writers" in only:
            figures["writers"] = w = writers_battery(
                fresh_target("writers"), args.writers, args.mutations
            )
            failed |= bool(
                w["errors"]
                or w["lost_updates"]
                or w["index_differences"]
                or w["projection_differences"]
                or w["recalled_deleted"]
            )
        if "pool" in only:
            figures["pool"] = p = pool_leak_battery(fresh_target("pool"), args.checkouts)
            failed |= p["leaks"] != 0
        if "kill" in only:
            figures["kill"] = k = kill_battery(fresh_target("kill"), args.kill_rounds)
            failed |= (
                k["resurrected"] != 0 or k["drift_after_repair"] != 0 or not k["kept_cards_found"]
            )
        if "machine" in only:
            figures["machine"] = m = run_machine(
                fresh_target("machine"), args.machine_examples, args.machine_steps
            )
            failed |= m["violations"] != 0
        for database in databases:
            drop_database(database)
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    print_tables(figures)
    return 1 if failed else 0


def print_tables(figures: dict) -> None:
    out = sys.stdout
    if "crash" in figures:
        crash = figures["crash"]
        out.write(
            f"\ncrash battery: {crash['rows']} rows x {crash['repetitions']} trials, "
            f"launcher {crash['launcher']}, {crash['seconds']} s\n"
        )
        out.write(
            "| operation | crash point | recovery | trials | crashed | recovered | lost | doubled | stale | leaked |\n"
        )
        out.write("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
        for line in crash["table"]:
            out.write(
                "| {operation} | `{crash_point}` | {recovery} | {trials} | {crashed} | {recovered} | {lost} | "
                "{doubled} | {stale} | {leaked} |\n".format(**line)
            )
    if "writers" in figures:
        w = figures["writers"]
        out.write(
            f"\nwriters: {w['writers']} x {w['mutations_per_writer']} mutations in {w['seconds']} s "
            f"({w['mutations_per_second']}/s), {w['conflicts']} conflicts, lost updates "
            f"{len(w['lost_updates'])}, index differences {len(w['index_differences'])}\n"
        )
    if "pool" in figures:
        p = figures["pool"]
        out.write(
            f"pool: {p['checkouts']} checkouts, {p['failed_mid_transaction']} failed mid-transaction, "
            f"{p['leaks']} leaks, {p['seconds']} s\n"
        )
    if "kill" in figures:
        k = figures["kill"]
        out.write(
            f"kill: {k['rounds']} SIGKILLs mid-write, {k['deleted_before_kill']} deleted cards, "
            f"{k['resurrected']} back in recall, {k['orphan_points_after_kill']} orphan points after reopening\n"
        )
    if "machine" in figures:
        m = figures["machine"]
        out.write(
            f"state machine: {m['examples']} examples x up to {m['max_steps']} steps "
            f"({sum(m['rules_run'].values())} rules run: {m['rules_run']}), "
            f"{m['violations']} violations, {m['seconds']} s\n"
        )


if __name__ == "__main__":
    raise SystemExit(main())
