-- 001: the minimal physical Catalog: DWH bindings, physical snapshots and sync runs.
--
-- Workspace ids are plain text: there is deliberately no foreign key into thoth_memory.
-- Like the archive, every table has FORCED row-level security keyed by the
-- transaction-local setting thoth.workspace, and the (archive's) runtime role gets
-- DML only.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'thoth_memory_runtime') THEN
        RAISE EXCEPTION 'the role thoth_memory_runtime does not exist: apply the memory migration pack first'
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;

-- One DWH binding per workspace: the logical database and the schema that cards'
-- dependencies name, and the NAME of the environment variable holding the SQLAlchemy
-- URL (the URL itself, a credential, is never stored).
CREATE TABLE thoth_catalog.bindings (
    workspace_id  text        PRIMARY KEY CHECK (workspace_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    database_name text        NOT NULL CHECK (length(database_name) BETWEEN 1 AND 128),
    schema_name   text        NOT NULL CHECK (length(schema_name) BETWEEN 1 AND 128),
    url_env       text        NOT NULL CHECK (url_env ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- A run: a synchronization (scan, diff, memory cleanup) or a manual Catalog cleanup
-- (forget). A sync whose scan failed is 'failed' and changed nothing. A sync that found
-- removals is committed with its removals, its snapshot and phase 'memory_cleanup'
-- ('pending') in one transaction; it becomes 'completed' only when Memory confirms
-- the cleanup (receipt), so a crash or an index failure leaves it pending for retry.
CREATE TABLE thoth_catalog.runs (
    workspace_id    text        NOT NULL,
    id              uuid        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('sync', 'forget')),
    database_name   text        NOT NULL,
    schema_name     text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('failed', 'pending', 'completed')),
    phase           text        NOT NULL CHECK (phase IN ('scan', 'memory_cleanup', 'done')),
    -- the exact removals, kept as found: retry uses these, never a new diff
    removed_tables  text[]      NOT NULL DEFAULT '{}',
    removed_columns jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(removed_columns) = 'array'),
    -- forget: what was dropped from the Catalog only
    forgotten       jsonb,
    tables_scanned  integer,
    -- Memory's receipt: the deleted cards ({id, title, family}) and links
    deleted_cards   jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(deleted_cards) = 'array'),
    links_removed   integer     NOT NULL DEFAULT 0,
    errors          jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(errors) = 'array'),
    attempts        integer     NOT NULL DEFAULT 0,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    PRIMARY KEY (id),
    UNIQUE (workspace_id, id),
    CHECK ((status = 'pending') = (phase = 'memory_cleanup')),
    CHECK (status <> 'failed' OR phase = 'scan')
);

CREATE INDEX runs_workspace_started ON thoth_catalog.runs (workspace_id, started_at DESC, id);
-- At most one pending cleanup per workspace: a new sync waits for it.
CREATE UNIQUE INDEX runs_one_pending ON thoth_catalog.runs (workspace_id) WHERE status = 'pending';

-- The last successful physical snapshot of each scope (workspace, database, schema):
-- every table (and view) with its columns, {"table": ["column", ...]}.
CREATE TABLE thoth_catalog.snapshots (
    workspace_id  text        NOT NULL,
    database_name text        NOT NULL,
    schema_name   text        NOT NULL,
    run_id        uuid        NOT NULL,
    tables        jsonb       NOT NULL CHECK (jsonb_typeof(tables) = 'object'),
    taken_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, database_name, schema_name),
    FOREIGN KEY (workspace_id, run_id) REFERENCES thoth_catalog.runs (workspace_id, id)
);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['bindings', 'runs', 'snapshots']
    LOOP
        EXECUTE format('ALTER TABLE thoth_catalog.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE thoth_catalog.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY workspace_isolation ON thoth_catalog.%I TO thoth_memory_runtime '
            'USING (workspace_id = current_setting(''thoth.workspace'', true)) '
            'WITH CHECK (workspace_id = current_setting(''thoth.workspace'', true))', t);
        EXECUTE format('CREATE POLICY owner_maintenance ON thoth_catalog.%I TO CURRENT_USER '
                       'USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;

ALTER TABLE thoth_catalog.schema_migrations ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_catalog.schema_migrations FORCE ROW LEVEL SECURITY;
CREATE POLICY migration_status ON thoth_catalog.schema_migrations FOR SELECT TO thoth_memory_runtime
    USING (true);
CREATE POLICY owner_maintenance ON thoth_catalog.schema_migrations TO CURRENT_USER
    USING (true) WITH CHECK (true);

GRANT USAGE ON SCHEMA thoth_catalog TO thoth_memory_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON thoth_catalog.bindings, thoth_catalog.runs, thoth_catalog.snapshots
    TO thoth_memory_runtime;
GRANT SELECT ON thoth_catalog.schema_migrations TO thoth_memory_runtime;
