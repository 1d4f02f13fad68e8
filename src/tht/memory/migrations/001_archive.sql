-- 001: the authoritative card archive, its runtime role and row-level security.
--
-- Every table carries workspace_id and is protected by a FORCED row-level policy keyed
-- by the transaction-local setting thoth.workspace; a transaction that has not set it
-- sees and writes nothing. The runtime role owns nothing, has no DDL, is not a
-- superuser and cannot bypass RLS.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'thoth_memory_runtime') THEN
        CREATE ROLE thoth_memory_runtime NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE
            NOINHERIT NOREPLICATION NOBYPASSRLS;
    END IF;
END
$$;

-- array_to_string is only STABLE (it formats any element type); for text[] it is
-- immutable, which a generated column requires.
CREATE FUNCTION thoth_memory.concepts_text(concepts text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN array_to_string(concepts, ' ');

CREATE TABLE thoth_memory.workspaces (
    id         text        PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    name       text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    language   text        NOT NULL CHECK (language IN ('en', 'it')),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE thoth_memory.cards (
    workspace_id     text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    id               uuid        NOT NULL,
    family           text        NOT NULL CHECK (family IN
                        ('domain_clarification', 'sql_rule', 'solved_question', 'explained_error')),
    -- copied from the workspace: the text-search configuration of this card
    language         text        NOT NULL CHECK (language IN ('en', 'it')),
    title            text        NOT NULL,
    content          text,
    scope            text,
    rationale        text,
    question         text,
    sql              text,
    context          text,
    concepts         text[]      NOT NULL DEFAULT '{}',
    origin           text        NOT NULL CHECK (origin IN ('manual', 'workflow')),
    source_session   text,
    source_decisions text[],
    revision         bigint      NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    search_vector    tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector(CASE language WHEN 'it' THEN 'italian'::regconfig
                                            ELSE 'english'::regconfig END,
                              coalesce(title, '')), 'A')
        || setweight(to_tsvector(CASE language WHEN 'it' THEN 'italian'::regconfig
                                               ELSE 'english'::regconfig END,
                                 coalesce(content, '') || ' ' || coalesce(question, '')
                                 || ' ' || thoth_memory.concepts_text(concepts)), 'B')
        || setweight(to_tsvector(CASE language WHEN 'it' THEN 'italian'::regconfig
                                               ELSE 'english'::regconfig END,
                                 coalesce(scope, '') || ' ' || coalesce(rationale, '')
                                 || ' ' || coalesce(context, '') || ' ' || coalesce(sql, '')), 'C')
    ) STORED,
    PRIMARY KEY (id),
    UNIQUE (workspace_id, id),
    -- manual cards never carry invented workflow references
    CHECK (origin = 'workflow' OR (source_session IS NULL AND source_decisions IS NULL))
);

-- Admin sorts (both directions scan these; the card id is the tie-breaker).
CREATE INDEX cards_workspace_updated ON thoth_memory.cards (workspace_id, updated_at, id);
CREATE INDEX cards_workspace_created ON thoth_memory.cards (workspace_id, created_at, id);
CREATE INDEX cards_workspace_title   ON thoth_memory.cards (workspace_id, title, id);
CREATE INDEX cards_workspace_family  ON thoth_memory.cards (workspace_id, family, id);
CREATE INDEX cards_search_vector     ON thoth_memory.cards USING gin (search_vector);
CREATE INDEX cards_concepts          ON thoth_memory.cards USING gin (concepts);

-- Row-level security keeps non-leakproof operators (tsvector @@, array @>) out of
-- index scans, so under the runtime role the GIN indexes above would never be used
-- and every text search would read the whole workspace. This function runs as the
-- owner (whose policy is trivially true), uses the indexes, and returns only card ids
-- of the transaction's workspace; callers still read the rows themselves under RLS,
-- so a wrong id here could never expose a row.
CREATE FUNCTION thoth_memory.matching_card_ids(text_query tsquery, concepts text[])
    RETURNS SETOF uuid
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    ROWS 1000
BEGIN ATOMIC
    SELECT c.id FROM thoth_memory.cards c
     WHERE c.workspace_id = current_setting('thoth.workspace', true)
       AND (text_query IS NULL OR c.search_vector @@ text_query)
       AND (matching_card_ids.concepts IS NULL OR c.concepts @> matching_card_ids.concepts);
END;

-- Structured physical dependencies: each level requires the one above it.
CREATE TABLE thoth_memory.card_dependencies (
    workspace_id  text     NOT NULL,
    card_id       uuid     NOT NULL,
    position      smallint NOT NULL,
    database_name text     NOT NULL,
    schema_name   text,
    table_name    text,
    column_name   text,
    PRIMARY KEY (card_id, position),
    FOREIGN KEY (workspace_id, card_id) REFERENCES thoth_memory.cards (workspace_id, id) ON DELETE CASCADE,
    CHECK (table_name IS NULL OR schema_name IS NOT NULL),
    CHECK (column_name IS NULL OR table_name IS NOT NULL),
    UNIQUE NULLS NOT DISTINCT (card_id, database_name, schema_name, table_name, column_name)
);

CREATE INDEX card_dependencies_object
    ON thoth_memory.card_dependencies (workspace_id, database_name, table_name, column_name);

-- Typed links; the composite foreign keys make a cross-workspace link impossible.
CREATE TABLE thoth_memory.card_links (
    workspace_id text        NOT NULL,
    source_id    uuid        NOT NULL,
    target_id    uuid        NOT NULL,
    meaning      text        NOT NULL CHECK (length(btrim(meaning)) > 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, target_id),
    FOREIGN KEY (workspace_id, source_id) REFERENCES thoth_memory.cards (workspace_id, id) ON DELETE CASCADE,
    FOREIGN KEY (workspace_id, target_id) REFERENCES thoth_memory.cards (workspace_id, id) ON DELETE CASCADE,
    CHECK (source_id <> target_id)
);

CREATE INDEX card_links_target ON thoth_memory.card_links (target_id);

-- The transactional outbox: one row per card with index work outstanding. No foreign
-- key to cards, because a deleted card's point must still be removed from the index.
CREATE TABLE thoth_memory.projection_ops (
    workspace_id text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    card_id      uuid        PRIMARY KEY,
    operation    text        NOT NULL CHECK (operation IN ('upsert', 'delete')),
    revision     bigint      NOT NULL,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX projection_ops_workspace ON thoth_memory.projection_ops (workspace_id, created_at, card_id);

-- What the search index holds for each card (revision and projection fingerprint).
CREATE TABLE thoth_memory.projections (
    workspace_id text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    card_id      uuid        PRIMARY KEY,
    revision     bigint      NOT NULL,
    fingerprint  text        NOT NULL,
    indexed_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX projections_workspace ON thoth_memory.projections (workspace_id);

-- Row-level security: enabled and forced everywhere, one workspace policy per table.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['cards', 'card_dependencies', 'card_links', 'projection_ops', 'projections']
    LOOP
        EXECUTE format('ALTER TABLE thoth_memory.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE thoth_memory.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY workspace_isolation ON thoth_memory.%I TO thoth_memory_runtime '
            'USING (workspace_id = current_setting(''thoth.workspace'', true)) '
            'WITH CHECK (workspace_id = current_setting(''thoth.workspace'', true))', t);
    END LOOP;
END
$$;

ALTER TABLE thoth_memory.workspaces ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.workspaces FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON thoth_memory.workspaces TO thoth_memory_runtime
    USING (id = current_setting('thoth.workspace', true))
    WITH CHECK (id = current_setting('thoth.workspace', true));
-- Listing workspaces (names and languages, never cards) is an explicit, read-only mode.
CREATE POLICY workspace_directory ON thoth_memory.workspaces FOR SELECT TO thoth_memory_runtime
    USING (current_setting('thoth.directory', true) = 'on');

ALTER TABLE thoth_memory.schema_migrations ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.schema_migrations FORCE ROW LEVEL SECURITY;
CREATE POLICY migration_status ON thoth_memory.schema_migrations FOR SELECT TO thoth_memory_runtime
    USING (true);

-- The owner (the migrator) keeps working under forced RLS only through this policy.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['workspaces', 'cards', 'card_dependencies', 'card_links',
                             'projection_ops', 'projections', 'schema_migrations']
    LOOP
        EXECUTE format('CREATE POLICY owner_maintenance ON thoth_memory.%I TO CURRENT_USER '
                       'USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION thoth_memory.matching_card_ids(tsquery, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION thoth_memory.matching_card_ids(tsquery, text[]) TO thoth_memory_runtime;

GRANT USAGE ON SCHEMA thoth_memory TO thoth_memory_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON
    thoth_memory.workspaces, thoth_memory.cards, thoth_memory.card_dependencies,
    thoth_memory.card_links, thoth_memory.projection_ops, thoth_memory.projections
    TO thoth_memory_runtime;
GRANT SELECT ON thoth_memory.schema_migrations TO thoth_memory_runtime;
