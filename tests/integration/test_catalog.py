"""Physical schema changes against real DWHs (a PostgreSQL database with two schemas
and a view, and a SQLite file): a successful sync deletes exactly the cards whose
dependencies name a removed table or column, from the archive and from every recall
command; failed scans and manual Catalog cleanup delete nothing; crashes between the
Catalog commit and the Memory cleanup, and between the archive and the index delete,
are completed by retry with the same removals; a pending cleanup blocks new syncs."""

from __future__ import annotations

import psycopg
import pytest

from tests.integration.catalog_support import (
    DWH_ENV,
    create_postgres_dwh,
    create_sqlite_dwh,
    dep,
    drop_postgres_dwh,
    every_recall,
    existing,
    make_card,
    process_env,
    recall_ids,
    sqlite_execute,
    tht_process,
)


@pytest.fixture
def pg_dwh(cluster):
    dwh = create_postgres_dwh(cluster)
    yield dwh
    drop_postgres_dwh(cluster, dwh)


@pytest.fixture
def acme(cli, runtime_file, pg_dwh, monkeypatch):
    """Workspace acme bound to dwh.sales of the PostgreSQL DWH, and workspace beta."""
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    assert cli("workspace", "create", "beta", "--language", "en").code == 0
    monkeypatch.setenv(DWH_ENV, pg_dwh.url)
    config = runtime_file("acme", dwh={"acme-dwh": {"url_env": DWH_ENV}})
    assert cli("catalog", "bind", "-c", config, "--connection", "acme-dwh").code == 0
    return config


def sync(cli, config):
    return cli("catalog", "sync", "-c", config)


@pytest.fixture
def column_world(cli, acme, runtime_file, tmp_path):
    """Cards around sales.orders.amount: the ones that depend on it (one per family,
    one through a second dependency) and the ones that must survive its removal."""
    config = acme
    c = lambda *a, **k: make_card(cli, config, tmp_path, *a, **k)  # noqa: E731
    doomed = {
        "rule": c("sql_rule", "Amount is net of tax", [dep("orders", "amount")]),
        "clarification": c(
            "domain_clarification", "Amount means order value", [dep("orders", "amount")]
        ),
        "solved": c(
            "solved_question", "Revenue per order", [dep("orders", "id"), dep("orders", "amount")]
        ),
        "error": c("explained_error", "Amount summed twice", [dep("orders", "amount")]),
    }
    survivors = {
        "table": c(
            "sql_rule",
            "Orders are final after a day",
            [dep("orders")],
            links=[{"target": doomed["rule"], "meaning": "refines"}],
        ),
        "global": c("domain_clarification", "A customer is a buyer", []),
        "other_column": c("sql_rule", "Order ids are unique", [dep("orders", "id")]),
        "other_schema": c(
            "sql_rule", "Other orders amount is gross", [dep("orders", "amount", schema="other")]
        ),
        "other_database": c(
            "sql_rule", "Archive amount", [dep("orders", "amount", database="archive")]
        ),
        "database_level": c(
            "domain_clarification", "The DWH is loaded nightly", [dep(schema=None)]
        ),
        "schema_level": c("domain_clarification", "Sales schema is curated", [dep()]),
        "view": c("solved_question", "Orders by status", [dep("order_status", "status")]),
        "status": c("explained_error", "Status is lower case", [dep("orders", "status")]),
    }
    # an outgoing link of a doomed card, to a survivor
    edited = cli("memory", "show", doomed["rule"], "-c", config).document
    path = tmp_path / "edit.json"
    import json

    path.write_text(
        json.dumps(
            {
                k: edited[k]
                for k in ("family", "title", "content", "scope", "rationale", "dependencies")
            }
            | {"links": [{"target": survivors["other_column"], "meaning": "uses"}]}
        )
    )
    assert cli("memory", "update", doomed["rule"], "-c", config, "--data", str(path)).code == 0
    beta = runtime_file("beta")
    beta_card = make_card(cli, beta, tmp_path, "sql_rule", "Beta amount", [dep("orders", "amount")])
    return config, doomed, survivors, beta, beta_card


def test_drop_column_deletes_exactly_the_dependent_cards(cli, column_world, pg_dwh):
    config, doomed, survivors, beta, beta_card = column_world
    baseline = sync(cli, config)
    assert baseline.code == 0, baseline.document
    assert baseline.document["status"] == "completed" and baseline.document["removed"] == {
        "tables": [],
        "columns": [],
    }
    assert (
        baseline.document["tables_scanned"] == 3
    )  # orders, customers and the view; not other.orders
    before = every_recall(cli, config)
    assert (
        set(doomed.values()) <= before
    )  # each doomed card was recallable (so its absence below means something)
    assert recall_ids(cli, config, "solved-search") >= {doomed["solved"]}
    assert recall_ids(cli, config, "rules") >= {doomed["rule"], doomed["error"]}

    pg_dwh.execute("ALTER TABLE sales.orders DROP COLUMN amount")
    pg_dwh.execute("ALTER TABLE other.orders DROP COLUMN amount")  # outside the bound schema
    run = sync(cli, config)

    assert run.code == 0, run.document
    document = run.document
    assert document["status"] == "completed" and document["phase"] == "done"
    assert document["removed"] == {
        "tables": [],
        "columns": [{"table": "orders", "column": "amount"}],
    }
    assert {c["id"] for c in document["deleted_cards"]} == set(doomed.values())
    assert document["links_removed"] == 2 and document["errors"] == []
    assert existing(cli, config, doomed.values()) == set()
    assert existing(cli, config, survivors.values()) == set(survivors.values())
    assert existing(cli, beta, [beta_card]) == {beta_card}
    # gone from every recall command; the survivors of the bound scope are still found
    after = every_recall(cli, config)
    assert not after & set(doomed.values())
    in_scope = {k: v for k, v in survivors.items() if k not in ("other_schema", "other_database")}
    assert set(in_scope.values()) <= after
    assert recall_ids(cli, config, "solved-search") == {survivors["view"]}
    # incident links went with the card; archive and index agree
    table_card = cli("memory", "show", survivors["table"], "-c", config).document
    assert table_card["links"] == []
    assert (
        cli("memory", "show", survivors["other_column"], "-c", config).document["incoming_links"]
        == []
    )
    check = cli("memory", "check", "-c", config).document
    assert (check["orphan"], check["missing"], check["stale"], check["pending"]) == ([], [], [], 0)
    assert cli("memory", "pending", "-c", config).document == {"items": []}
    listed = cli("catalog", "runs", "-c", config).document["items"]
    assert [r["run_id"] for r in listed] == [document["run_id"], baseline.document["run_id"]]


def test_drop_table_in_sqlite_deletes_cards_on_the_table_and_its_columns(
    cli, runtime_file, tmp_path, monkeypatch
):
    path = tmp_path / "dwh.sqlite"
    monkeypatch.setenv(DWH_ENV, create_sqlite_dwh(path))
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme", dwh={"acme-dwh": {"url_env": DWH_ENV}}, schema="main")
    assert cli("catalog", "bind", "-c", config, "--connection", "acme-dwh").code == 0
    main = lambda table=None, column=None: dep(table, column, schema="main")  # noqa: E731
    c = lambda *a, **k: make_card(cli, config, tmp_path, *a, **k)  # noqa: E731
    doomed = {
        c("sql_rule", "Customers table is deduplicated", [main("customers")]),
        c("domain_clarification", "Customer name is legal name", [main("customers", "name")]),
        c("solved_question", "Customers per region", [main("customers", "region")]),
    }
    survivors = {
        c("sql_rule", "Orders status values", [main("orders", "status")]),
        c("domain_clarification", "Orders table", [main("orders")]),
        c("domain_clarification", "Whole DWH", [dep(schema=None)]),
        c("sql_rule", "Global rule on customers", []),
    }
    assert sync(cli, config).code == 0
    assert doomed <= every_recall(cli, config)

    sqlite_execute(path, "DROP TABLE customers;")
    run = sync(cli, config)

    assert run.code == 0, run.document
    assert run.document["removed"] == {"tables": ["customers"], "columns": []}
    assert {c["id"] for c in run.document["deleted_cards"]} == doomed
    assert existing(cli, config, doomed | survivors) == survivors
    assert not every_recall(cli, config) & doomed
    assert survivors <= every_recall(cli, config)
    check = cli("memory", "check", "-c", config).document
    assert (check["orphan"], check["missing"], check["pending"]) == ([], [], 0)


def test_unreachable_dwh_fails_the_run_and_deletes_nothing(cli, column_world, pg_dwh, monkeypatch):
    config, doomed, _survivors, *_ = column_world
    baseline = sync(cli, config)
    assert baseline.code == 0
    pg_dwh.execute("ALTER TABLE sales.orders DROP COLUMN amount")

    monkeypatch.setenv(
        DWH_ENV, "postgresql+psycopg://nobody@127.0.0.1:1/nothing"
    )  # nothing listens there
    failed = sync(cli, config)

    assert failed.code == 9 and failed.document["error"]["code"] == "dwh_unavailable", (
        failed.document
    )
    run_id = failed.document["error"]["details"]["run_id"]
    run = cli("catalog", "show", run_id, "-c", config).document
    assert (run["status"], run["phase"], run["removed"], run["deleted_cards"]) == (
        "failed",
        "scan",
        {"tables": [], "columns": []},
        [],
    )
    assert run["errors"][0]["code"] == "dwh_unavailable"
    assert existing(cli, config, doomed.values()) == set(doomed.values())
    # the failed scan did not replace the snapshot: the next successful sync sees the removal
    status = cli("catalog", "status", "-c", config).document
    assert (
        status["snapshot"]["run_id"] == baseline.document["run_id"]
        and status["pending_run"] is None
    )
    assert cli("catalog", "retry", run_id, "-c", config).code == 2  # nothing to retry

    monkeypatch.setenv(DWH_ENV, pg_dwh.url)
    recovered = sync(cli, config)
    assert recovered.code == 0 and {c["id"] for c in recovered.document["deleted_cards"]} == set(
        doomed.values()
    )


def test_missing_schema_or_permission_is_a_failed_scan_not_a_removal(
    cli, column_world, pg_dwh, monkeypatch, cluster
):
    config, doomed, _survivors, *_ = column_world
    assert sync(cli, config).code == 0
    pg_dwh.execute(
        "ALTER TABLE sales.orders DROP COLUMN amount; ALTER SCHEMA sales RENAME TO sales_old"
    )
    missing = sync(cli, config)
    assert missing.code == 9 and "does not exist" in missing.document["error"]["message"], (
        missing.document
    )

    pg_dwh.execute("ALTER SCHEMA sales_old RENAME TO sales")
    password = "reader-secret-1"
    pg_dwh.execute(f"DROP ROLE IF EXISTS dwh_reader_{pg_dwh.name}")
    role = f"dwh_reader_{pg_dwh.name}"
    pg_dwh.execute(
        f"CREATE ROLE {role} LOGIN PASSWORD '{password}'; REVOKE ALL ON SCHEMA sales FROM PUBLIC"
    )
    from sqlalchemy.engine import make_url

    reader = make_url(pg_dwh.url).set(username=role, password=password)
    monkeypatch.setenv(DWH_ENV, reader.render_as_string(hide_password=False))
    try:
        denied = sync(cli, config)
        assert denied.code == 9 and "permission denied" in denied.document["error"]["message"], (
            denied.document
        )
        assert existing(cli, config, doomed.values()) == set(doomed.values())
        runs = cli("catalog", "runs", "-c", config).document["items"]
        assert [r["status"] for r in runs] == ["failed", "failed", "completed"]
    finally:
        pg_dwh.execute(f"DROP OWNED BY {role}; DROP ROLE {role}")


def test_a_missing_variable_an_unknown_connection_or_a_dwh_in_the_runtime_file_is_refused(
    cli, acme, monkeypatch, tmp_path
):
    monkeypatch.delenv(DWH_ENV)
    result = sync(cli, acme)  # the installation's variable is missing: a failed scan
    assert result.code == 9 and DWH_ENV in result.document["error"]["message"]
    unknown = cli("catalog", "bind", "-c", acme, "--connection", "hr")
    assert unknown.code == 2 and unknown.document["error"]["details"] == {
        "connection": "hr",
        "defined": ["acme-dwh"],
    }
    # a runtime file names no DWH: the URL, or the variable holding it, is the operator's
    for section in ("{url: 'sqlite:///x.db'}", "{url_env: HOME}"):
        config = tmp_path / "dwh-in-runtime.yaml"
        config.write_text(f"workspace: acme\ndatabase: dwh\nschema: sales\ndwh: {section}\n")
        refused = sync(cli, str(config))
        assert refused.code == 2
        assert refused.document["error"]["code"] == "setting_not_allowed", refused.document
    runs = cli("catalog", "runs", "-c", acme).document["items"]
    assert [(r["status"], r["phase"]) for r in runs] == [("failed", "scan")]


def test_manual_forget_deletes_no_memory(cli, column_world, pg_dwh):
    config, doomed, survivors, *_ = column_world
    assert sync(cli, config).code == 0
    everything = set(doomed.values()) | set(survivors.values())

    column = cli(
        "catalog", "forget", "-c", config, "--table", "orders", "--column", "amount", "--yes"
    )
    table = cli("catalog", "forget", "-c", config, "--table", "customers", "--yes")
    whole = cli("catalog", "forget", "-c", config, "--all", "--yes")

    for result in (column, table, whole):
        assert result.code == 0, result.document
        assert (result.document["kind"], result.document["deleted_cards"]) == ("forget", [])
    assert column.document["forgotten"] == {"table": "orders", "column": "amount"}
    assert existing(cli, config, everything) == everything
    assert cli("catalog", "status", "-c", config).document["snapshot"] is None
    assert cli("catalog", "forget", "-c", config, "--all").code == 2  # --yes is required
    # after forgetting everything, the next sync is a new baseline: still nothing deleted
    pg_dwh.execute("ALTER TABLE sales.orders DROP COLUMN amount")
    baseline = sync(cli, config)
    assert baseline.code == 0 and baseline.document["removed"] == {"tables": [], "columns": []}
    assert existing(cli, config, everything) == everything


def _receipts(database) -> list[tuple]:
    with psycopg.connect(database.superuser) as conn:
        return conn.execute(
            "SELECT run_id, status, jsonb_array_length(deleted_cards) FROM"
            " thoth_memory.cleanup_receipts ORDER BY created_at"
        ).fetchall()


def _open_tombstones(database) -> int:
    with psycopg.connect(database.superuser) as conn:
        return conn.execute(
            "SELECT count(*) FROM thoth_memory.vector_tombstones WHERE removed_at IS NULL"
        ).fetchone()[0]


@pytest.mark.parametrize(
    "crash_at", ["catalog.after_catalog_commit", "cleanup.after_archive_delete"]
)
def test_crash_during_sync_is_completed_by_retry(
    cli, column_world, pg_dwh, database, tmp_path, crash_at
):
    config, doomed, survivors, *_ = column_world
    assert sync(cli, config).code == 0
    pg_dwh.execute("ALTER TABLE sales.orders DROP COLUMN amount")
    env = process_env(database, tmp_path / "home", pg_dwh.url)

    code, out, _ = tht_process(["catalog", "sync", "-c", config], env, crash_at=crash_at)

    assert (code, out) == (70, None)  # killed at the crash point
    runs = cli("catalog", "runs", "-c", config).document["items"]
    pending = runs[0]
    assert (pending["status"], pending["phase"]) == ("pending", "memory_cleanup")
    removals = {"tables": [], "columns": [{"table": "orders", "column": "amount"}]}
    assert pending["removed"] == removals
    if crash_at == "catalog.after_catalog_commit":
        assert existing(cli, config, doomed.values()) == set(
            doomed.values()
        )  # Memory not reached yet
        assert _receipts(database) == []
    else:
        assert existing(cli, config, doomed.values()) == set()  # archive done, index not
        drifted = cli("memory", "check", "-c", config)
        assert drifted.code == 8 and drifted.document["error"]["code"] == "index_drift"
        check = drifted.document["error"]["details"]
        assert set(check["orphan"]) == set(doomed.values())
        assert {
            p["card_id"] for p in cli("memory", "pending", "-c", config).document["items"]
        } == set(doomed.values())
        assert _open_tombstones(database) == 4
        assert not every_recall(cli, config) & set(
            doomed.values()
        )  # verified recall never returns them

    # a new sync is refused, naming the run
    code, refused, _ = tht_process(["catalog", "sync", "-c", config], env)
    assert code == 4 and refused["error"]["code"] == "cleanup_pending"
    assert pending["run_id"] in refused["error"]["message"]

    code, retried, _ = tht_process(["catalog", "retry", pending["run_id"], "-c", config], env)

    assert code == 0, retried
    assert (retried["status"], retried["removed"]) == ("completed", removals)
    assert {c["id"] for c in retried["deleted_cards"]} == set(doomed.values())
    assert existing(cli, config, doomed.values()) == set()
    assert existing(cli, config, survivors.values()) == set(survivors.values())
    check = cli("memory", "check", "-c", config).document
    assert (check["orphan"], check["missing"], check["stale"], check["pending"]) == ([], [], [], 0)
    assert _open_tombstones(database) == 0
    assert not every_recall(cli, config) & set(doomed.values())

    # a second retry is a no-op: a new card on the removed column is not touched
    late = make_card(
        cli, config, tmp_path, "sql_rule", "Written after the cleanup", [dep("orders", "amount")]
    )
    again = cli("catalog", "retry", pending["run_id"], "-c", config)
    assert again.code == 0 and again.document == retried
    assert existing(cli, config, [late]) == {late}
    assert [r[1:] for r in _receipts(database)] == [("completed", 4)]
    assert sync(cli, config).code == 0  # no longer blocked


def test_index_failure_keeps_the_run_pending_until_retry(
    cli, column_world, pg_dwh, database, tmp_path, monkeypatch
):
    from types import SimpleNamespace

    from tests.browser.conftest import OUTAGE_FILE, IndexBlocker

    monkeypatch.setenv("THT_OUTAGE_FILE", str(tmp_path / "home" / OUTAGE_FILE))

    config, doomed, survivors, *_ = column_world
    assert sync(cli, config).code == 0
    pg_dwh.execute("ALTER TABLE sales.orders DROP COLUMN amount")
    from tests.factories import write_installation

    blocked = config  # while the installation waits half a second for a held index
    write_installation(tmp_path / "home", index={"engine": "edge", "open_timeout": 0.5})

    with IndexBlocker(SimpleNamespace(home=tmp_path / "home")):
        failed = sync(cli, blocked)
        assert failed.code == 8, failed.document
        run_id = failed.document["error"]["details"]["run_id"]
        run = cli("catalog", "show", run_id, "-c", config).document
        assert (run["status"], run["phase"]) == ("pending", "memory_cleanup")
        assert {c["id"] for c in run["deleted_cards"]} == set(doomed.values())
        assert run["errors"] and run["errors"][-1]["code"] == "cleanup_incomplete"
        refused = sync(cli, blocked)
        assert refused.code == 4 and run_id in refused.document["error"]["message"]
        still = cli("catalog", "retry", run_id, "-c", blocked)
        assert still.code == 8
        assert len(cli("catalog", "show", run_id, "-c", config).document["errors"]) == 2

    write_installation(tmp_path / "home", index={"engine": "edge"})
    done = cli("catalog", "retry", run_id, "-c", config)
    assert done.code == 0 and done.document["status"] == "completed", done.document
    assert done.document["removed"]["columns"] == [{"table": "orders", "column": "amount"}]
    check = cli("memory", "check", "-c", config).document
    assert (check["orphan"], check["pending"]) == ([], 0)
    assert existing(cli, config, survivors.values()) == set(survivors.values())


def test_cleanup_receipt_is_idempotent_and_refuses_other_removals(database, tmp_path):
    import uuid

    from tests.factories import card, installation_of
    from tht.bootstrap import build_services
    from tht.errors import Conflict
    from tht.memory.cleanup import PhysicalRemovals

    env = {**database.env(), "THT_HOME": str(tmp_path / "home")}
    services = build_services(env=env, installation=installation_of())
    try:
        services.workspaces.create("acme", "en")
        doomed = services.memory.create_card(
            "acme", card(dependencies=[dep("orders", "amount")])
        ).card.id
        run = PhysicalRemovals(uuid.uuid4(), "dwh", "sales", columns=(("orders", "amount"),))
        first = services.cleanup.apply("acme", run)
        late = services.memory.create_card(
            "acme", card(dependencies=[dep("orders", "amount")])
        ).card.id
        second = services.cleanup.apply("acme", run)
        assert (
            first.completed
            and [c["id"] for c in first.deleted_cards] == [doomed]
            and not first.repeated
        )
        assert second.completed and second.deleted_cards == first.deleted_cards and second.repeated
        assert services.memory.get_card("acme", late).id == late
        with pytest.raises(Conflict):
            services.cleanup.apply(
                "acme", PhysicalRemovals(run.run_id, "dwh", "sales", tables=("orders",))
            )
        assert services.memory.get_card("acme", late).id == late
    finally:
        services.close()


def test_catalog_tables_are_isolated_and_reference_nothing_in_memory(database):
    with psycopg.connect(database.superuser) as conn:
        rows = conn.execute("""SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c
                                 JOIN pg_namespace n ON n.oid = c.relnamespace
                                WHERE n.nspname = 'thoth_catalog' AND c.relkind = 'r' ORDER BY 1""").fetchall()
        foreign = conn.execute("""SELECT count(*) FROM pg_constraint k
                                    JOIN pg_class s ON s.oid = k.conrelid JOIN pg_namespace sn ON sn.oid = s.relnamespace
                                    JOIN pg_class t ON t.oid = k.confrelid JOIN pg_namespace tn ON tn.oid = t.relnamespace
                                   WHERE k.contype = 'f' AND sn.nspname <> tn.nspname
                                     AND 'thoth_catalog' IN (sn.nspname, tn.nspname)""").fetchone()[
            0
        ]
    assert rows == [
        ("bindings", True, True),
        ("runs", True, True),
        ("schema_migrations", True, True),
        ("snapshots", True, True),
    ]
    assert foreign == 0
    with psycopg.connect(database.runtime) as conn:
        conn.execute("SET ROLE thoth_memory_runtime")
        conn.execute("SELECT set_config('thoth.workspace', 'acme', false)")
        conn.execute(
            "INSERT INTO thoth_catalog.bindings (workspace_id, database_name, schema_name, connection)"
            " VALUES ('acme', 'dwh', 'sales', 'X')"
        )
        conn.execute("SELECT set_config('thoth.workspace', 'beta', false)")
        assert conn.execute("SELECT count(*) FROM thoth_catalog.bindings").fetchone()[0] == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO thoth_catalog.bindings (workspace_id, database_name, schema_name, connection)"
                " VALUES ('acme', 'dwh', 'sales', 'Y')"
            )


def test_a_binding_without_connection_binds_recall_and_refuses_a_sync(cli, runtime_file, tmp_path):
    assert cli("workspace", "create", "acme", "--language", "en").code == 0
    config = runtime_file("acme")
    bound = cli("catalog", "bind", "-c", config)
    assert bound.code == 0 and bound.document["connection"] is None, bound.document
    status = cli("catalog", "status", "-c", config).document
    assert (status["binding"]["database"], status["binding"]["connection"]) == ("dwh", None)
    refused = sync(cli, config)
    assert refused.code == 2, refused.document
    assert refused.document["error"]["details"] == {"workspace": "acme", "reason": "no_connection"}
    assert cli("catalog", "runs", "-c", config).document["items"] == []  # nothing recorded
    # recall is bound by it: another database is refused, naming the recorded one
    other = tmp_path / "other.yaml"
    other.write_text("workspace: acme\ndatabase: archive\nschema: old\n")
    unknown = cli("memory", "search", "order totals", "-c", str(other))
    assert unknown.document["error"]["code"] == "binding_unknown", unknown.document
    assert cli("memory", "search", "order totals", "-c", config).code == 0
