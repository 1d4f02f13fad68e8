-- 017: workspace benchmarks: a curator's cases (a question and the cards it should
-- find) and the stored runs of them, so that recall quality is measured on the
-- workspace's own questions and followed from one edit to the next.
--
-- A case names its expected cards by id (a uuid array: no foreign key, so the cards
-- are checked to be the workspace's when the case is written) with the revision each
-- had then: a run reports an expected card changed or deleted since, instead of
-- dropping it. One case per command, question and filters: adding the same question
-- again adds its cards to the case.
--
-- A run keeps its figures (overall and per command), each case's ranks, its misses
-- (each missing card with recall's reason), the expected cards it found changed or
-- deleted, how the index served it (a rebuild running: the serving generation) and
-- how it compares with the run before it on the cases both measured.

CREATE TABLE thoth_memory.benchmark_cases (
    workspace_id       text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    id                 uuid        NOT NULL,
    name               text        CHECK (length(name) BETWEEN 1 AND 200),
    question           text        NOT NULL CHECK (length(question) BETWEEN 1 AND 2000),
    command            text        NOT NULL CHECK (command IN ('search', 'rules', 'solved')),
    filters            jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(filters) = 'object'),
    expected           uuid[]      NOT NULL CHECK (cardinality(expected) BETWEEN 1 AND 100),
    expected_revisions bigint[]    NOT NULL
                                   CHECK (cardinality(expected_revisions) = cardinality(expected)),
    origin             text        NOT NULL CHECK (origin IN ('manual', 'miss', 'gap', 'import')),
    created_by         text        CHECK (length(created_by) BETWEEN 1 AND 100),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id),
    UNIQUE (workspace_id, id)
);

-- md5: a question may be longer than a btree entry holds
CREATE UNIQUE INDEX benchmark_cases_question ON thoth_memory.benchmark_cases
    (workspace_id, command, md5(question), md5(filters::text));
CREATE INDEX benchmark_cases_workspace_created ON thoth_memory.benchmark_cases
    (workspace_id, created_at, id);

CREATE TABLE thoth_memory.benchmark_runs (
    workspace_id     text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    id               uuid        NOT NULL,
    principal        text        CHECK (length(principal) BETWEEN 1 AND 100),
    started_at       timestamptz NOT NULL,
    finished_at      timestamptz NOT NULL DEFAULT now(),
    seconds          real        NOT NULL CHECK (seconds >= 0),
    cases            integer     NOT NULL CHECK (cases >= 0),
    metrics          jsonb       NOT NULL,
    by_command       jsonb       NOT NULL,
    ranks            jsonb       NOT NULL,  -- case id -> each expected card's rank (null: not in the first 10)
    misses           jsonb       NOT NULL,
    expected_changes jsonb       NOT NULL,
    index_state      jsonb       NOT NULL,
    comparison       jsonb,  -- with the run before (none: the first run)
    PRIMARY KEY (id),
    UNIQUE (workspace_id, id)
);

CREATE INDEX benchmark_runs_workspace_started ON thoth_memory.benchmark_runs
    (workspace_id, started_at, id);

ALTER TABLE thoth_memory.benchmark_cases ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.benchmark_cases FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON thoth_memory.benchmark_cases TO thoth_memory_runtime
    USING (workspace_id = current_setting('thoth.workspace', true))
    WITH CHECK (workspace_id = current_setting('thoth.workspace', true));
CREATE POLICY owner_maintenance ON thoth_memory.benchmark_cases TO CURRENT_USER
    USING (true) WITH CHECK (true);

ALTER TABLE thoth_memory.benchmark_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.benchmark_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON thoth_memory.benchmark_runs TO thoth_memory_runtime
    USING (workspace_id = current_setting('thoth.workspace', true))
    WITH CHECK (workspace_id = current_setting('thoth.workspace', true));
CREATE POLICY owner_maintenance ON thoth_memory.benchmark_runs TO CURRENT_USER
    USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, UPDATE, DELETE ON thoth_memory.benchmark_cases TO thoth_memory_runtime;
-- runs are written once; the oldest beyond the kept number are deleted
GRANT SELECT, INSERT, DELETE ON thoth_memory.benchmark_runs TO thoth_memory_runtime;
