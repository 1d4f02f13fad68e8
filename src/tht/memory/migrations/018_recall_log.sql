-- 018: the recall log: what agents asked each workspace and what recall answered, so
-- that curators see the questions no card answers (the gaps).
--
-- One row per recall (`memory search|rules|solved-search` on every face): who asked,
-- which command, the question (or the database error of `rules --error`), the session,
-- the cards returned with their scores, and two figures the service computes off the
-- request's path: the question's BM25 terms (the workspace's analyzer: what groups
-- similar questions) and the share of them the first card's indexed terms hold.
-- `proposed_at` is set when the recall's session later proposes a new card.
--
-- Administrators read it (memory.manage), never agents: the application checks that;
-- row-level security keeps each workspace's rows to itself. The installation bounds
-- it (entries per workspace, days kept); what is removed to keep the bound, what
-- expired and what could not be written are counted in recall_log_state.

CREATE TABLE thoth_memory.recall_log (
    workspace_id text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    id           bigint      GENERATED ALWAYS AS IDENTITY,
    at           timestamptz NOT NULL,
    principal    text        CHECK (length(principal) BETWEEN 1 AND 100),
    command      text        NOT NULL CHECK (command IN ('search', 'rules', 'solved')),
    question     text        CHECK (length(question) BETWEEN 1 AND 2000),
    error        text        CHECK (length(error) BETWEEN 1 AND 2000),
    session      text        CHECK (length(session) BETWEEN 1 AND 200),
    returned     uuid[]      NOT NULL,
    scores       real[]      NOT NULL CHECK (cardinality(scores) = cardinality(returned)),
    terms        bigint[]    NOT NULL,
    coverage     real        CHECK (coverage BETWEEN 0 AND 1),
    proposed_at  timestamptz,
    PRIMARY KEY (id),
    CHECK (question IS NOT NULL OR error IS NOT NULL)
);

CREATE INDEX recall_log_workspace_id ON thoth_memory.recall_log (workspace_id, id);
CREATE INDEX recall_log_workspace_at ON thoth_memory.recall_log (workspace_id, at);
CREATE INDEX recall_log_session ON thoth_memory.recall_log (workspace_id, session)
    WHERE session IS NOT NULL;

CREATE TABLE thoth_memory.recall_log_state (
    workspace_id text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    dropped      bigint      NOT NULL DEFAULT 0 CHECK (dropped >= 0),  -- oldest, over the bound
    expired      bigint      NOT NULL DEFAULT 0 CHECK (expired >= 0),  -- older than the retention
    lost         bigint      NOT NULL DEFAULT 0 CHECK (lost >= 0),     -- never written
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id)
);

ALTER TABLE thoth_memory.recall_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.recall_log FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON thoth_memory.recall_log TO thoth_memory_runtime
    USING (workspace_id = current_setting('thoth.workspace', true))
    WITH CHECK (workspace_id = current_setting('thoth.workspace', true));
CREATE POLICY owner_maintenance ON thoth_memory.recall_log TO CURRENT_USER
    USING (true) WITH CHECK (true);

ALTER TABLE thoth_memory.recall_log_state ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.recall_log_state FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON thoth_memory.recall_log_state TO thoth_memory_runtime
    USING (workspace_id = current_setting('thoth.workspace', true))
    WITH CHECK (workspace_id = current_setting('thoth.workspace', true));
CREATE POLICY owner_maintenance ON thoth_memory.recall_log_state TO CURRENT_USER
    USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, UPDATE, DELETE ON thoth_memory.recall_log TO thoth_memory_runtime;
GRANT USAGE ON SEQUENCE thoth_memory.recall_log_id_seq TO thoth_memory_runtime;
GRANT SELECT, INSERT, UPDATE ON thoth_memory.recall_log_state TO thoth_memory_runtime;
