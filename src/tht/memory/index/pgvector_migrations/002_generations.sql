-- 002: generations of a workspace's projection, so that a rebuild (`tht memory index`)
-- writes a new generation beside the one serving recall, switches to it in one
-- transaction, and an interrupted rebuild resumes where it stopped.
--
-- Every projection row gets the generation it belongs to, part of its key: during a
-- rebuild a card has a point in the serving generation and one in the generation being
-- built. The per-workspace row of `generations` names the serving generation (no row:
-- generation 0, which every row written before this migration belongs to) and the one
-- being built, if any. Reads name the serving generation; saves write both; the switch
-- is one UPDATE of that row under the workspace's lock; the replaced generation's rows
-- are deleted after it.
--
-- Why columns and not a shadow table per rebuild: the tables are shared by every
-- workspace (one table, like one Qdrant collection), a shadow table would need DDL the
-- runtime must not run, its own HNSW indexes built from scratch, and row-level security
-- set up again; a column needs none of that and the existing indexes serve both
-- generations.

CREATE TABLE thoth_memory_pgvector.generations (
    collection   text   NOT NULL REFERENCES thoth_memory_pgvector.collections (name) ON DELETE CASCADE,
    workspace_id text   NOT NULL,
    serving      bigint NOT NULL CHECK (serving >= 0),
    -- the generation a rebuild writes (null: no rebuild under way or interrupted)
    building     bigint CHECK (building > serving),
    PRIMARY KEY (collection, workspace_id)
);

ALTER TABLE thoth_memory_pgvector.points ADD COLUMN generation bigint NOT NULL DEFAULT 0;
ALTER TABLE thoth_memory_pgvector.bm25_vectors ADD COLUMN generation bigint NOT NULL DEFAULT 0;
ALTER TABLE thoth_memory_pgvector.vectors ADD COLUMN generation bigint NOT NULL DEFAULT 0;
ALTER TABLE thoth_memory_pgvector.document_frequencies ADD COLUMN generation bigint NOT NULL DEFAULT 0;
-- the default only placed the existing rows in generation 0: every write names its own
ALTER TABLE thoth_memory_pgvector.points ALTER COLUMN generation DROP DEFAULT;
ALTER TABLE thoth_memory_pgvector.bm25_vectors ALTER COLUMN generation DROP DEFAULT;
ALTER TABLE thoth_memory_pgvector.vectors ALTER COLUMN generation DROP DEFAULT;
ALTER TABLE thoth_memory_pgvector.document_frequencies ALTER COLUMN generation DROP DEFAULT;

-- The keys and the references to the point gain the generation (before the id: a
-- generation's points are read, scrolled and deleted together).
ALTER TABLE thoth_memory_pgvector.bm25_vectors
    DROP CONSTRAINT bm25_vectors_collection_workspace_id_point_id_fkey;
ALTER TABLE thoth_memory_pgvector.vectors
    DROP CONSTRAINT vectors_collection_workspace_id_point_id_fkey;
ALTER TABLE thoth_memory_pgvector.points
    DROP CONSTRAINT points_pkey,
    ADD PRIMARY KEY (collection, workspace_id, generation, id);
ALTER TABLE thoth_memory_pgvector.bm25_vectors
    DROP CONSTRAINT bm25_vectors_pkey,
    ADD PRIMARY KEY (collection, workspace_id, generation, point_id),
    ADD FOREIGN KEY (collection, workspace_id, generation, point_id)
        REFERENCES thoth_memory_pgvector.points (collection, workspace_id, generation, id) ON DELETE CASCADE;
ALTER TABLE thoth_memory_pgvector.vectors
    DROP CONSTRAINT vectors_pkey,
    ADD PRIMARY KEY (collection, workspace_id, generation, point_id, kind),
    ADD FOREIGN KEY (collection, workspace_id, generation, point_id)
        REFERENCES thoth_memory_pgvector.points (collection, workspace_id, generation, id) ON DELETE CASCADE;
ALTER TABLE thoth_memory_pgvector.document_frequencies
    DROP CONSTRAINT document_frequencies_pkey,
    ADD PRIMARY KEY (collection, workspace_id, generation, term);

-- The BM25 candidates of one generation (the serving one): the GIN index finds the
-- points of every generation sharing a term, the generation is checked on those rows.
DROP FUNCTION thoth_memory_pgvector.bm25_candidates(text, integer[]);
CREATE FUNCTION thoth_memory_pgvector.bm25_candidates(collection_name text, query_terms integer[],
                                                      candidate_generation bigint)
    RETURNS SETOF uuid
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    ROWS 1000
BEGIN ATOMIC
    SELECT b.point_id FROM thoth_memory_pgvector.bm25_vectors b
     WHERE b.workspace_id = current_setting('thoth.workspace', true)
       AND b.collection = collection_name
       AND b.generation = candidate_generation
       AND b.terms && query_terms;
END;
REVOKE ALL ON FUNCTION thoth_memory_pgvector.bm25_candidates(text, integer[], bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION thoth_memory_pgvector.bm25_candidates(text, integer[], bigint) TO thoth_memory_runtime;

ALTER TABLE thoth_memory_pgvector.generations ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory_pgvector.generations FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON thoth_memory_pgvector.generations TO thoth_memory_runtime
    USING (workspace_id = current_setting('thoth.workspace', true))
    WITH CHECK (workspace_id = current_setting('thoth.workspace', true));
CREATE POLICY owner_maintenance ON thoth_memory_pgvector.generations TO CURRENT_USER
    USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON thoth_memory_pgvector.generations TO thoth_memory_runtime;
