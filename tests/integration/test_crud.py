"""Admin operations against the real PostgreSQL archive."""

from __future__ import annotations

import psycopg
import pytest

from tests.factories import BASE, card
from tht.errors import Conflict, InvalidInput, NotFound, StaleRevision
from tht.memory.model import CardIndex, Source, card_id_to_uuid


@pytest.fixture
def acme(workspaces):
    workspaces.create("acme", "en", "ACME")
    workspaces.create("other", "it", "Other")
    return "acme"


@pytest.mark.parametrize("family", sorted(BASE))
def test_round_trip_for_every_family(memory, acme, family):
    deps = [
        {"database": "dwh", "schema": "sales", "table": "orders", "column": "id"},
        {"database": "dwh"},
    ]
    created = memory.create_card(
        acme, card(family, concepts=["order", "order", "customer"], dependencies=deps)
    )
    assert created.card.id.startswith("mem-") and created.card.revision == 1
    assert created.card.origin == "manual" and created.card.source is None
    shown = memory.get_card(acme, created.card.id)
    # `show` adds what the index holds: nothing here (this service has no index)
    assert shown.index == CardIndex(
        revision=None, current=False, indexed_chars=None, embedded_chars=None
    )
    assert shown.model_copy(update={"index": None}) == created.card
    for field, value in BASE[family].items():
        assert getattr(shown, field) == value
    assert shown.concepts == ["order", "customer"]
    assert [d.as_json() for d in shown.dependencies] == [
        {"database": "dwh", "schema": "sales", "table": "orders", "column": "id"},
        {"database": "dwh", "schema": None, "table": None, "column": None},
    ]

    updated = memory.update_card(acme, created.card.id, card(family, title="Renamed", revision=1))
    assert updated.card.revision == 2 and updated.card.title == "Renamed"
    assert updated.card.dependencies == [] and updated.card.created_at == created.card.created_at
    assert updated.card.updated_at >= created.card.updated_at

    deleted = memory.delete_card(acme, created.card.id)
    assert deleted.deleted == created.card.id
    with pytest.raises(NotFound):
        memory.get_card(acme, created.card.id)


def test_outbox_records_each_mutation_in_the_same_transaction(memory, acme):
    first = memory.create_card(acme, card())
    assert first.status == "saved_index_incomplete" and first.index.status == "pending"
    ops = {op.card_id: op for op in memory.pending(acme)}
    assert (ops[first.card.id].operation, ops[first.card.id].revision) == ("upsert", 1)
    memory.update_card(acme, first.card.id, card(title="v2"))
    ops = {op.card_id: op for op in memory.pending(acme)}
    assert (ops[first.card.id].operation, ops[first.card.id].revision) == ("upsert", 2)
    memory.delete_card(acme, first.card.id)
    ops = {op.card_id: op for op in memory.pending(acme)}
    assert (
        ops[first.card.id].operation,
        ops[first.card.id].revision,
        ops[first.card.id].title,
    ) == ("delete", 3, None)


def test_links_in_and_out_and_deletion_keeps_other_cards(memory, acme):
    a = memory.create_card(acme, card(title="A")).card
    b = memory.create_card(
        acme, card(title="B", links=[{"target": a.id, "meaning": "refines"}])
    ).card
    c = memory.create_card(
        acme,
        card(
            "sql_rule",
            title="C",
            links=[{"target": b.id, "meaning": "applies"}, {"target": a.id, "meaning": "uses"}],
        ),
    ).card
    assert [(link.target, link.meaning, link.target_title) for link in b.links] == [
        (a.id, "refines", "A")
    ]
    shown_a = memory.get_card(acme, a.id)
    assert sorted((i.source, i.meaning) for i in shown_a.incoming_links) == sorted(
        [(b.id, "refines"), (c.id, "uses")]
    )

    result = memory.delete_card(acme, b.id)
    assert result.links_removed == 2  # b -> a and c -> b
    assert [link.target for link in memory.get_card(acme, c.id).links] == [a.id]
    assert [i.source for i in memory.get_card(acme, a.id).incoming_links] == [c.id]
    assert memory.get_card(acme, a.id).revision == 1  # other cards are untouched


def test_update_replaces_dependencies_and_outgoing_links_together(memory, acme):
    a = memory.create_card(acme, card(title="A")).card
    b = memory.create_card(acme, card(title="B")).card
    x = memory.create_card(
        acme,
        card(
            title="X",
            links=[{"target": a.id, "meaning": "m1"}],
            dependencies=[{"database": "dwh", "schema": "s", "table": "t"}],
        ),
    ).card
    updated = memory.update_card(
        acme,
        x.id,
        card(
            title="X",
            links=[{"target": b.id, "meaning": "m2"}],
            dependencies=[{"database": "dwh", "schema": "s", "table": "u"}],
        ),
    )
    assert [(link.target, link.meaning) for link in updated.card.links] == [(b.id, "m2")]
    assert [d.table for d in updated.card.dependencies] == ["u"]


def test_a_failed_update_changes_nothing(memory, acme, database):
    a = memory.create_card(acme, card(title="A", dependencies=[{"database": "dwh"}])).card
    ghost = "mem-00000000-0000-4000-8000-000000000000"
    with pytest.raises(NotFound, match="does not exist"):
        memory.update_card(
            acme,
            a.id,
            card(title="changed", dependencies=[], links=[{"target": ghost, "meaning": "x"}]),
        )
    after = memory.get_card(acme, a.id)
    assert after.model_copy(update={"index": None}) == a
    assert [op.revision for op in memory.pending(acme)] == [1]


def test_links_are_confined_to_the_workspace(memory, acme):
    foreign = memory.create_card("other", card()).card
    with pytest.raises(NotFound, match="does not exist in workspace 'acme'"):
        memory.create_card(acme, card(links=[{"target": foreign.id, "meaning": "x"}]))
    a = memory.create_card(acme, card()).card
    with pytest.raises(Conflict, match="itself"):
        memory.update_card(acme, a.id, card(links=[{"target": a.id, "meaning": "x"}]))
    with pytest.raises(NotFound):
        memory.get_card(acme, foreign.id)


def test_database_rejects_a_cross_workspace_link_even_without_the_service(memory, acme, database):
    mine = memory.create_card(acme, card()).card
    foreign = memory.create_card("other", card()).card
    with (
        psycopg.connect(database.migrator) as conn,
        pytest.raises(psycopg.errors.ForeignKeyViolation),
    ):
        conn.execute(
            "INSERT INTO thoth_memory.card_links (workspace_id, source_id, target_id, meaning)"
            " VALUES ('acme', %s, %s, 'x')",
            (card_id_to_uuid(mine.id), card_id_to_uuid(foreign.id)),
        )


def test_stale_revision_is_a_conflict(memory, acme):
    a = memory.create_card(acme, card()).card
    memory.update_card(acme, a.id, card(title="v2", revision=1))
    with pytest.raises(StaleRevision) as raised:
        memory.update_card(acme, a.id, card(title="v3", revision=1))
    assert raised.value.details == {"id": a.id, "expected": 1, "current": 2}
    with pytest.raises(StaleRevision):
        memory.delete_card(acme, a.id, expected_revision=1)
    assert memory.get_card(acme, a.id).title == "v2"


def test_workflow_source_survives_admin_edits(memory, acme):
    source = Source(session="s-42", decisions=["d-1", "d-2"])
    wf = memory.create_card(acme, card("sql_rule"), origin="workflow", source=source).card
    edited = memory.update_card(acme, wf.id, card("sql_rule", content="Edited by the admin.")).card
    assert edited.origin == "workflow" and edited.source == source
    with pytest.raises(InvalidInput):
        memory.create_card(acme, card(), origin="manual", source=source)


def test_unknown_workspace_and_card(memory, acme):
    with pytest.raises(NotFound, match="workspace 'nope'"):
        memory.create_card("nope", card())
    with pytest.raises(NotFound):
        memory.get_card(acme, "mem-00000000-0000-4000-8000-000000000000")
    with pytest.raises(NotFound):
        memory.delete_card(acme, "mem-00000000-0000-4000-8000-000000000000")


def test_workspace_directory_and_details(memory, workspaces, acme):
    memory.create_card(acme, card())
    memory.create_card(acme, card("sql_rule"))
    assert [w.id for w in workspaces.list()] == ["acme", "other"]
    detail = workspaces.show(acme)
    assert detail.cards == {"domain_clarification": 1, "sql_rule": 1} and detail.pending == 2
    assert workspaces.show("other").workspace.language == "it"


@pytest.mark.parametrize(
    "lock, mode", [(True, "ExclusiveLock"), ("shared", "ShareLock"), (False, None)]
)
def test_transactions_hold_the_workspace_advisory_lock(archive, acme, lock, mode):
    with archive.transaction(acme, lock=lock) as tx:
        held = tx.conn.execute(
            "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        ).fetchall()
    assert held == ([(mode,)] if mode else [])
