-- 001: the pgvector projection engine: points (one per card), their dense vectors of
-- two kinds and their BM25 vectors, and the per-workspace BM25 document frequencies.
--
-- Like the archive, every table holding workspace data has FORCED row-level security
-- keyed by the transaction-local setting thoth.workspace, and the runtime role gets
-- DML and the few owner-run functions below, no DDL. The projection does not
-- reference the archive's tables: it is a rebuildable copy, verified against the
-- archive on every read.

DO $$
DECLARE
    installed text;
BEGIN
    SELECT extversion INTO installed FROM pg_extension WHERE extname = 'vector';
    IF installed IS NULL THEN
        RAISE EXCEPTION 'the pgvector extension is not installed in database %: '
                        'a superuser (the DBA) must first run "CREATE EXTENSION vector;" in that database',
                        current_database()
            USING ERRCODE = 'undefined_object';
    END IF;
    -- iterative index scans (hnsw.iterative_scan), which filtered searches rely on
    IF string_to_array(split_part(installed, '-', 1), '.')::int[] < ARRAY[0, 8, 0] THEN
        RAISE EXCEPTION 'pgvector % is too old, 0.8.0 or later is needed: '
                        'a superuser must run "ALTER EXTENSION vector UPDATE;"', installed
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'thoth_memory_runtime') THEN
        RAISE EXCEPTION 'the role thoth_memory_runtime does not exist: apply the memory migration pack first'
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;

-- A collection is what a Qdrant collection is: a name and the dense dimension of every
-- vector in it. It holds no workspace data.
CREATE TABLE thoth_memory_pgvector.collections (
    name       text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    -- HNSW indexes vectors of at most 2000 dimensions
    dimension  integer     NOT NULL CHECK (dimension BETWEEN 1 AND 2000),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (name, dimension)
);

-- One point per card and workspace: the filter facts (the same as a Qdrant payload).
-- Kept narrow: a selective filter is answered by scanning these rows exactly.
CREATE TABLE thoth_memory_pgvector.points (
    collection   text        NOT NULL REFERENCES thoth_memory_pgvector.collections (name) ON DELETE CASCADE,
    workspace_id text        NOT NULL,
    id           uuid        NOT NULL,
    family       text        NOT NULL,
    scope        text,
    concepts     text[]      NOT NULL,
    -- every dependency with all four levels (null when absent), for filters with gaps
    deps         jsonb       NOT NULL CHECK (jsonb_typeof(deps) = 'array'),
    -- each dependency's path, and every prefix of it (see port.dependency_path)
    dep_paths    text[]      NOT NULL,
    dep_prefixes text[]      NOT NULL,
    -- null on points written by an older format: they never match a card
    revision     bigint,
    fingerprint  text,
    indexed_at   timestamptz NOT NULL DEFAULT now(),
    -- the workspace is part of the key: a point planted under another workspace is
    -- another row, never a change to the first workspace's point
    PRIMARY KEY (collection, workspace_id, id)
);

-- The BM25 term-frequency vector of each point's indexed text (qdrant_edge.Bm25, IDF
-- not applied: the query carries it). It references its point, so it is written after.
CREATE TABLE thoth_memory_pgvector.bm25_vectors (
    collection   text      NOT NULL,
    workspace_id text      NOT NULL,
    point_id     uuid      NOT NULL,
    -- the term ids: the document frequencies move with them, and they find the
    -- candidates of a query (GIN index below)
    terms        integer[] NOT NULL,
    -- Term ids are 31-bit hashes and a sparsevec has at most 10^9 dimensions, so term
    -- t is stored in bm25_<t / 10^9> at index t mod 10^9: lossless, and the score is
    -- the sum of the three inner products.
    bm25_0       sparsevec NOT NULL,
    bm25_1       sparsevec NOT NULL,
    bm25_2       sparsevec NOT NULL,
    PRIMARY KEY (collection, workspace_id, point_id),
    FOREIGN KEY (collection, workspace_id, point_id)
        REFERENCES thoth_memory_pgvector.points (collection, workspace_id, id) ON DELETE CASCADE
);

-- fastupdate off: with the default pending list, every search reads the unmerged
-- entries linearly until vacuum gets to them (BM25 several times slower after a rebuild)
CREATE INDEX bm25_vectors_terms ON thoth_memory_pgvector.bm25_vectors USING gin (terms)
    WITH (fastupdate = off);

-- Dense vectors: 'text' (the card's indexed text) and 'symptom' (an explained
-- error's error text). They reference their point, so they are written after it.
-- HNSW indexes are partial, one per kind and dimension, created with the collection
-- (create_collection below): queries name the kind as a literal so the planner can
-- prove the partial index applies.
CREATE TABLE thoth_memory_pgvector.vectors (
    collection   text    NOT NULL,
    workspace_id text    NOT NULL,
    point_id     uuid    NOT NULL,
    kind         text    NOT NULL CHECK (kind IN ('text', 'symptom')),
    dimension    integer NOT NULL,
    embedding    vector  NOT NULL CHECK (vector_dims(embedding) = dimension),
    PRIMARY KEY (collection, workspace_id, point_id, kind),
    FOREIGN KEY (collection, workspace_id, point_id)
        REFERENCES thoth_memory_pgvector.points (collection, workspace_id, id) ON DELETE CASCADE,
    -- every vector has its collection's dimension, which the partial indexes rely on
    FOREIGN KEY (collection, dimension) REFERENCES thoth_memory_pgvector.collections (name, dimension)
        ON DELETE CASCADE
);

-- How many points of a workspace contain each term, and (term -1, which every point
-- contains) how many points the workspace has: the inputs of the BM25 IDF, read in
-- one index lookup per query term. Maintained by every upsert and delete, in the same
-- transaction, under the workspace's lock.
CREATE TABLE thoth_memory_pgvector.document_frequencies (
    collection   text    NOT NULL REFERENCES thoth_memory_pgvector.collections (name) ON DELETE CASCADE,
    workspace_id text    NOT NULL,
    term         integer NOT NULL CHECK (term >= -1),
    df           integer NOT NULL CHECK (df > 0),
    PRIMARY KEY (collection, workspace_id, term)
);

-- Creates a collection, or returns the dimension of the existing one, and the HNSW
-- indexes for its dimension. pgvector indexes only vectors of a fixed dimension, and
-- the dimension is the embedder's, known at run time (as for a Qdrant collection):
-- this is the one piece of DDL the runtime can cause, of a fixed shape, through a
-- function the migrator owns.
CREATE FUNCTION thoth_memory_pgvector.create_collection(collection_name text, collection_dimension integer)
    RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    existing   integer;
    ext_schema name;
    vector_kind text;
BEGIN
    -- two creators at once would collide on the index names
    PERFORM pg_advisory_xact_lock(hashtextextended('thoth_memory_pgvector.create_collection', 0));
    SELECT c.dimension INTO existing FROM thoth_memory_pgvector.collections c WHERE c.name = collection_name;
    IF existing IS NOT NULL THEN
        RETURN existing;
    END IF;
    INSERT INTO thoth_memory_pgvector.collections (name, dimension) VALUES (collection_name, collection_dimension);
    SELECT n.nspname INTO ext_schema
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    FOREACH vector_kind IN ARRAY ARRAY['text', 'symptom'] LOOP
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON thoth_memory_pgvector.vectors'
            ' USING hnsw ((embedding::%I.vector(%s)) %I.vector_cosine_ops)'
            ' WHERE kind = %L AND dimension = %s',
            format('vectors_%s_hnsw_%s', vector_kind, collection_dimension),
            ext_schema, collection_dimension, ext_schema, vector_kind, collection_dimension);
    END LOOP;
    RETURN collection_dimension;
END
$$;

-- The workspaces holding some of these points. SearchIndex.delete receives bare ids,
-- and under row-level security a delete must name its workspace; this reveals only
-- which workspaces hold the given (random, unguessable) card ids, never any content.
CREATE FUNCTION thoth_memory_pgvector.point_workspaces(collection_name text, point_ids uuid[])
    RETURNS SETOF text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT DISTINCT p.workspace_id FROM thoth_memory_pgvector.points p
     WHERE p.collection = collection_name AND p.id = ANY (point_ids);
END;

-- Row-level security keeps non-leakproof operators (array &&) out of index scans, so
-- under the runtime role the GIN index above would never be used and every BM25
-- search would read the whole workspace. Like the archive's matching_card_ids, this
-- runs as the owner, uses the index, and returns only ids of the transaction's
-- workspace; callers read the rows themselves under RLS, so a wrong id here could
-- never expose a row.
CREATE FUNCTION thoth_memory_pgvector.bm25_candidates(collection_name text, query_terms integer[])
    RETURNS SETOF uuid
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    ROWS 1000
BEGIN ATOMIC
    SELECT b.point_id FROM thoth_memory_pgvector.bm25_vectors b
     WHERE b.workspace_id = current_setting('thoth.workspace', true)
       AND b.collection = collection_name
       AND b.terms && query_terms;
END;

-- Planner statistics after a rebuild (SearchIndex.optimize), as Qdrant Edge builds its
-- indexes then: without them the planner guesses row counts for the freshly written
-- rows until autovacuum gets to them. ANALYZE needs the owner; this is all of it the
-- runtime gets.
CREATE FUNCTION thoth_memory_pgvector.analyze_projection()
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    ANALYZE thoth_memory_pgvector.points, thoth_memory_pgvector.vectors, thoth_memory_pgvector.bm25_vectors,
            thoth_memory_pgvector.document_frequencies;
END
$$;

-- Row-level security: enabled and forced, one workspace policy per table.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['points', 'vectors', 'bm25_vectors', 'document_frequencies']
    LOOP
        EXECUTE format('ALTER TABLE thoth_memory_pgvector.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE thoth_memory_pgvector.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY workspace_isolation ON thoth_memory_pgvector.%I TO thoth_memory_runtime '
            'USING (workspace_id = current_setting(''thoth.workspace'', true)) '
            'WITH CHECK (workspace_id = current_setting(''thoth.workspace'', true))', t);
    END LOOP;
END
$$;

-- Collections hold no workspace data: the runtime reads them and drops them (which
-- removes every workspace's points, like dropping a Qdrant collection); it creates
-- them only through create_collection.
ALTER TABLE thoth_memory_pgvector.collections ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory_pgvector.collections FORCE ROW LEVEL SECURITY;
CREATE POLICY collection_catalog ON thoth_memory_pgvector.collections FOR SELECT TO thoth_memory_runtime
    USING (true);
CREATE POLICY collection_drop ON thoth_memory_pgvector.collections FOR DELETE TO thoth_memory_runtime
    USING (true);

ALTER TABLE thoth_memory_pgvector.schema_migrations ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory_pgvector.schema_migrations FORCE ROW LEVEL SECURITY;
CREATE POLICY migration_status ON thoth_memory_pgvector.schema_migrations FOR SELECT TO thoth_memory_runtime
    USING (true);

-- The owner (the migrator) keeps working under forced RLS only through this policy;
-- the functions above run as the owner.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['collections', 'points', 'vectors', 'bm25_vectors', 'document_frequencies',
                             'schema_migrations']
    LOOP
        EXECUTE format('CREATE POLICY owner_maintenance ON thoth_memory_pgvector.%I TO CURRENT_USER '
                       'USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION thoth_memory_pgvector.create_collection(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION thoth_memory_pgvector.point_workspaces(text, uuid[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION thoth_memory_pgvector.bm25_candidates(text, integer[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION thoth_memory_pgvector.analyze_projection() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION thoth_memory_pgvector.create_collection(text, integer) TO thoth_memory_runtime;
GRANT EXECUTE ON FUNCTION thoth_memory_pgvector.point_workspaces(text, uuid[]) TO thoth_memory_runtime;
GRANT EXECUTE ON FUNCTION thoth_memory_pgvector.bm25_candidates(text, integer[]) TO thoth_memory_runtime;
GRANT EXECUTE ON FUNCTION thoth_memory_pgvector.analyze_projection() TO thoth_memory_runtime;

GRANT USAGE ON SCHEMA thoth_memory_pgvector TO thoth_memory_runtime;
GRANT SELECT, DELETE ON thoth_memory_pgvector.collections TO thoth_memory_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON
    thoth_memory_pgvector.points, thoth_memory_pgvector.vectors, thoth_memory_pgvector.bm25_vectors,
    thoth_memory_pgvector.document_frequencies
    TO thoth_memory_runtime;
GRANT SELECT ON thoth_memory_pgvector.schema_migrations TO thoth_memory_runtime;
