-- 013: idempotency keys of mutations (010-012 belong to other changes).
--
-- Measured: a save acknowledged by PostgreSQL was answered 503 when the connection
-- dropped mid-request; the client cannot know whether to send it again. With an
-- `Idempotency-Key` (HTTP header, or the CLI's --idempotency-key) the first answer is
-- recorded here IN THE SAME TRANSACTION as the mutation, under the workspace lock: a
-- retry finds it and gets that answer back instead of a second card; the same key with
-- another request is refused. Keys belong to one principal in one workspace and are
-- kept 24 hours (tht.memory.idempotency.RETENTION), pruned as new keys arrive.

CREATE TABLE thoth_memory.idempotency_keys (
    workspace_id   text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    principal      text        NOT NULL CHECK (length(principal) BETWEEN 1 AND 100),
    key            text        NOT NULL CHECK (key ~ '^[!-~]{1,255}$'),
    request_digest text        NOT NULL CHECK (request_digest ~ '^[0-9a-f]{64}$'),
    response       jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, principal, key)
);

CREATE INDEX idempotency_keys_expiry ON thoth_memory.idempotency_keys (workspace_id, created_at);

ALTER TABLE thoth_memory.idempotency_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.idempotency_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON thoth_memory.idempotency_keys TO thoth_memory_runtime
    USING (workspace_id = current_setting('thoth.workspace', true))
    WITH CHECK (workspace_id = current_setting('thoth.workspace', true));
CREATE POLICY owner_maintenance ON thoth_memory.idempotency_keys TO CURRENT_USER
    USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, UPDATE, DELETE ON thoth_memory.idempotency_keys TO thoth_memory_runtime;
