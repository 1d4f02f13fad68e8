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

SELECT 1;  -- placeholder until the cleanup receipts land
