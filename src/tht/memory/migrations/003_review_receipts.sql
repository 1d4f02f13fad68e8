-- 003: durable receipts (the specification names this migration).
--
-- Two independent sections: the workflow's review receipts (review-apply) and the
-- physical-cleanup receipts with their vector tombstones (Catalog sync). Both make a
-- repeated delivery return the first result instead of applying twice, across restarts.

-- == Review receipts (tht memory review-apply) =========================================

-- One receipt per reviewed session: the review key is (workspace, session). It is
-- written in the same transaction as the cards the review saved, so a receipt exists
-- exactly when the review's Memory effect is committed. A repeated delivery with the
-- same digest reads the stored result back; another digest under the same key is
-- refused. ledger_appended_at records that `memory_summary_reviewed` reached the
-- session ledger (the step after the commit that a crash can interrupt).
CREATE TABLE thoth_memory.review_receipts (
    workspace_id       text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    session_id         text        NOT NULL CHECK (session_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
    request_digest     text        NOT NULL CHECK (request_digest ~ '^[0-9a-f]{64}$'),
    proposals_digest   text        NOT NULL CHECK (proposals_digest ~ '^[0-9a-f]{64}$'),
    outcome            text        NOT NULL CHECK (outcome IN ('applied', 'declined')),
    reviewer           text        NOT NULL CHECK (length(reviewer) BETWEEN 1 AND 64),
    result             jsonb       NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    ledger_appended_at timestamptz,
    PRIMARY KEY (workspace_id, session_id)
);

ALTER TABLE thoth_memory.review_receipts ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.review_receipts FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON thoth_memory.review_receipts TO thoth_memory_runtime
    USING (workspace_id = current_setting('thoth.workspace', true))
    WITH CHECK (workspace_id = current_setting('thoth.workspace', true));
CREATE POLICY owner_maintenance ON thoth_memory.review_receipts TO CURRENT_USER
    USING (true) WITH CHECK (true);

-- Receipts are durable: the runtime inserts them and marks the ledger step, never deletes.
GRANT SELECT, INSERT, UPDATE ON thoth_memory.review_receipts TO thoth_memory_runtime;



-- == Physical cleanup receipts and vector tombstones (tht catalog sync / retry) ========

-- One receipt per Catalog run: the removals it was given (and their digest, so the same
-- run id with other removals is refused) and the cards it deleted, with their titles
-- for the run's report. Written in the transaction that deletes the cards, so a
-- repeated delivery finds it and deletes nothing more. No foreign key to the Catalog.
CREATE TABLE thoth_memory.cleanup_receipts (
    workspace_id   text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    run_id         uuid        NOT NULL,
    database_name  text        NOT NULL,
    schema_name    text        NOT NULL,
    removals       jsonb       NOT NULL CHECK (jsonb_typeof(removals) = 'object'),
    removals_digest text       NOT NULL CHECK (removals_digest ~ '^[0-9a-f]{64}$'),
    deleted_cards  jsonb       NOT NULL CHECK (jsonb_typeof(deleted_cards) = 'array'),
    links_removed  integer     NOT NULL CHECK (links_removed >= 0),
    -- 'index_pending' until every tombstone of the run is out of the search index
    status         text        NOT NULL CHECK (status IN ('index_pending', 'completed')),
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    completed_at   timestamptz,
    PRIMARY KEY (workspace_id, run_id),
    CHECK ((status = 'completed') = (completed_at IS NOT NULL))
);

-- One tombstone per card deleted by a cleanup: its point must leave the search index.
-- It outlives the projection outbox row: removed_at records when the index confirmed
-- the delete, so a restart (or a drained outbox) still knows what to remove.
CREATE TABLE thoth_memory.vector_tombstones (
    workspace_id text        NOT NULL,
    card_id      uuid        NOT NULL PRIMARY KEY,
    run_id       uuid        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    removed_at   timestamptz,
    FOREIGN KEY (workspace_id, run_id) REFERENCES thoth_memory.cleanup_receipts (workspace_id, run_id)
);

CREATE INDEX vector_tombstones_run ON thoth_memory.vector_tombstones (workspace_id, run_id)
    WHERE removed_at IS NULL;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['cleanup_receipts', 'vector_tombstones']
    LOOP
        EXECUTE format('ALTER TABLE thoth_memory.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE thoth_memory.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY workspace_isolation ON thoth_memory.%I TO thoth_memory_runtime '
            'USING (workspace_id = current_setting(''thoth.workspace'', true)) '
            'WITH CHECK (workspace_id = current_setting(''thoth.workspace'', true))', t);
        EXECUTE format('CREATE POLICY owner_maintenance ON thoth_memory.%I TO CURRENT_USER '
                       'USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;

GRANT SELECT, INSERT, UPDATE ON thoth_memory.cleanup_receipts, thoth_memory.vector_tombstones
    TO thoth_memory_runtime;
