-- Statements of the pgvector projection engine, loaded by name ("-- name: <name>").
-- The dense and BM25 searches are in their own files (one per vector kind).
-- Every statement names the collection and the workspace explicitly: row-level
-- security is the backstop, not the only filter.

-- name: set_context
-- The transaction's context in one round trip, like the archive's: the runtime role
-- and the workspace, transaction-local. Iterative index scans let a filtered HNSW
-- search continue past hnsw.ef_search candidates until the limit is met. Writers
-- also take the workspace's lock: the document frequencies are read-modify-write.
SELECT set_config('role', 'thoth_memory_runtime', true),
       set_config('thoth.workspace', %(workspace)s, true),
       set_config('hnsw.iterative_scan', 'relaxed_order', true),
       (SELECT 1 FROM (SELECT CASE WHEN %(lock)s THEN (SELECT 1 FROM pg_advisory_xact_lock(
            hashtextextended('thoth_memory_pgvector.workspace:' || %(collection)s || ':' || %(workspace)s, 0)))
            END) AS locked);

-- name: collection_get
-- The workspace's generations and the collection's dimension, in one round trip: the
-- serving generation (no row: 0, where every point written before generations existed
-- is), the one a rebuild is building (null: none).
SELECT coalesce(g.serving, 0), g.building, c.dimension
  FROM thoth_memory_pgvector.collections c
  LEFT JOIN thoth_memory_pgvector.generations g
    ON g.collection = c.name AND g.workspace_id = %(workspace)s
 WHERE c.name = %(collection)s;

-- name: generation_begin
-- A new generation after the serving one, unless a rebuild already builds one (an
-- interrupted rebuild's is taken up again). Under the workspace's lock.
INSERT INTO thoth_memory_pgvector.generations AS g (collection, workspace_id, serving, building)
VALUES (%(collection)s, %(workspace)s, 0, 1)
ON CONFLICT (collection, workspace_id) DO UPDATE
   SET building = g.serving + 1
 WHERE g.building IS NULL;

-- name: generation_switch
-- The generation built serves from now on; under the workspace's lock, so that no save
-- is between writing both generations and this.
UPDATE thoth_memory_pgvector.generations g
   SET serving = g.building, building = NULL
 WHERE g.collection = %(collection)s AND g.workspace_id = %(workspace)s AND g.building = %(generation)s;

-- name: generation_prune
-- The rows of every generation of the workspace that neither serves nor is being built:
-- the one a switch replaced (the dense and BM25 vectors cascade from the points), and
-- its document frequencies. Nobody writes such a generation, so no lock is needed.
WITH state AS (
    SELECT coalesce(max(g.serving), 0) AS serving, max(g.building) AS building
      FROM thoth_memory_pgvector.generations g
     WHERE g.collection = %(collection)s AND g.workspace_id = %(workspace)s
), gone AS (
    DELETE FROM thoth_memory_pgvector.points p
     USING state s
     WHERE p.collection = %(collection)s AND p.workspace_id = %(workspace)s
       AND p.generation <> s.serving AND p.generation IS DISTINCT FROM s.building
    RETURNING p.id
), frequencies AS (
    DELETE FROM thoth_memory_pgvector.document_frequencies f
     USING state s
     WHERE f.collection = %(collection)s AND f.workspace_id = %(workspace)s
       AND f.generation <> s.serving AND f.generation IS DISTINCT FROM s.building
)
SELECT count(*) FROM gone;

-- name: collection_create
SELECT thoth_memory_pgvector.create_collection(%(collection)s, %(dimension)s);

-- name: collection_drop
-- The foreign keys cascade to every workspace's points, vectors and frequencies.
DELETE FROM thoth_memory_pgvector.collections WHERE name = %(collection)s;

-- name: analyze
SELECT thoth_memory_pgvector.analyze_projection();

-- name: frequencies_apply
-- Moves the document frequencies of the workspace's generation from the current rows of the given
-- points (replaced or deleted) to their new terms (none for a delete). Every point
-- also counts for term -1: its document frequency is the workspace's point count. It
-- runs before the points are written, under the workspace's lock. Only changed terms
-- are touched, so re-upserting identical points changes no row.
WITH old AS (
    SELECT t.term, -1 AS delta
      FROM thoth_memory_pgvector.bm25_vectors b, unnest(array_append(b.terms, -1)) AS t(term)
     WHERE b.collection = %(collection)s AND b.workspace_id = %(workspace)s
       AND b.generation = %(generation)s AND b.point_id = ANY (%(ids)s::uuid[])
), new AS (
    SELECT t.term, 1 AS delta
      FROM jsonb_to_recordset(%(points)s::jsonb) AS r(terms integer[]), unnest(array_append(r.terms, -1)) AS t(term)
), delta AS (
    SELECT term, sum(delta)::integer AS delta
      FROM (SELECT term, delta FROM old UNION ALL SELECT term, delta FROM new) AS d
     GROUP BY term
    HAVING sum(delta) <> 0
), dropped AS (
    DELETE FROM thoth_memory_pgvector.document_frequencies f
     USING delta d
     WHERE f.collection = %(collection)s AND f.workspace_id = %(workspace)s
       AND f.generation = %(generation)s AND f.term = d.term
       AND f.df + d.delta = 0
    RETURNING f.term
), changed AS (
    UPDATE thoth_memory_pgvector.document_frequencies f
       SET df = f.df + d.delta
      FROM delta d
     WHERE f.collection = %(collection)s AND f.workspace_id = %(workspace)s
       AND f.generation = %(generation)s AND f.term = d.term
       AND f.df + d.delta <> 0
    RETURNING f.term
)
INSERT INTO thoth_memory_pgvector.document_frequencies (collection, workspace_id, generation, term, df)
SELECT %(collection)s, %(workspace)s, %(generation)s, d.term, d.delta
  FROM delta d
 WHERE d.term NOT IN (SELECT term FROM dropped UNION ALL SELECT term FROM changed)
 ORDER BY d.term;

-- name: points_upsert
-- First pass: the projection rows. Idempotent; an identical point is not rewritten
-- (no new row version, no index churn on a rebuild).
-- symptom says whether the point has a symptom vector (written in the same transaction).
INSERT INTO thoth_memory_pgvector.points AS p
       (collection, workspace_id, generation, id, family, scope, concepts, deps, dep_paths, dep_prefixes,
        revision, fingerprint, symptom)
SELECT %(collection)s, %(workspace)s, %(generation)s, r.id, r.family, r.scope, r.concepts, r.deps, r.dep_paths, r.dep_prefixes,
       r.revision, r.fingerprint, r.symptom
  FROM jsonb_to_recordset(%(points)s::jsonb) AS r(
       id uuid, family text, scope text, concepts text[], deps jsonb, dep_paths text[], dep_prefixes text[],
       revision bigint, fingerprint text, symptom boolean)
ON CONFLICT (collection, workspace_id, generation, id) DO UPDATE
   SET family = excluded.family, scope = excluded.scope, concepts = excluded.concepts, deps = excluded.deps,
       dep_paths = excluded.dep_paths, dep_prefixes = excluded.dep_prefixes,
       revision = excluded.revision, fingerprint = excluded.fingerprint, symptom = excluded.symptom,
       indexed_at = now()
 WHERE (p.family, p.scope, p.concepts, p.deps, p.dep_paths, p.dep_prefixes, p.revision, p.fingerprint, p.symptom)
       IS DISTINCT FROM
       (excluded.family, excluded.scope, excluded.concepts, excluded.deps, excluded.dep_paths,
        excluded.dep_prefixes, excluded.revision, excluded.fingerprint, excluded.symptom);

-- name: bm25_upsert
-- Second pass, with the dense vectors: each point's BM25 vector, which references it.
INSERT INTO thoth_memory_pgvector.bm25_vectors AS b
       (collection, workspace_id, generation, point_id, terms, bm25_0, bm25_1, bm25_2)
SELECT %(collection)s, %(workspace)s, %(generation)s, r.id, r.terms, r.bm25_0::sparsevec, r.bm25_1::sparsevec, r.bm25_2::sparsevec
  FROM jsonb_to_recordset(%(points)s::jsonb) AS r(id uuid, terms integer[], bm25_0 text, bm25_1 text, bm25_2 text)
ON CONFLICT (collection, workspace_id, generation, point_id) DO UPDATE
   SET terms = excluded.terms, bm25_0 = excluded.bm25_0, bm25_1 = excluded.bm25_1, bm25_2 = excluded.bm25_2
 WHERE (b.terms, b.bm25_0, b.bm25_1, b.bm25_2)
       IS DISTINCT FROM (excluded.terms, excluded.bm25_0, excluded.bm25_1, excluded.bm25_2);

-- name: symptoms_clear
-- A point that no longer has a symptom projection loses its old one.
DELETE FROM thoth_memory_pgvector.vectors v
 WHERE v.collection = %(collection)s AND v.workspace_id = %(workspace)s AND v.generation = %(generation)s
   AND v.point_id = ANY (%(ids)s::uuid[]) AND v.kind = 'symptom';

-- name: vectors_upsert
-- Second pass: the dense vectors, which reference their point (and the collection's
-- dimension). Idempotent like the points.
INSERT INTO thoth_memory_pgvector.vectors AS v
       (collection, workspace_id, generation, point_id, kind, dimension, embedding)
SELECT %(collection)s, %(workspace)s, %(generation)s, r.point_id, r.kind, %(dimension)s, r.embedding
  FROM jsonb_to_recordset(%(vectors)s::jsonb) AS r(point_id uuid, kind text, embedding vector)
ON CONFLICT (collection, workspace_id, generation, point_id, kind) DO UPDATE
   SET dimension = excluded.dimension, embedding = excluded.embedding
 WHERE (v.dimension, v.embedding) IS DISTINCT FROM (excluded.dimension, excluded.embedding);

-- name: points_delete
-- The dense and BM25 vectors cascade.
DELETE FROM thoth_memory_pgvector.points p
 WHERE p.collection = %(collection)s AND p.workspace_id = %(workspace)s AND p.generation = %(generation)s
   AND p.id = ANY (%(ids)s::uuid[]);

-- name: workspace_clear
-- Every point of one workspace in every generation (its vectors cascade), its
-- document frequencies and its generations (back to 0, as a new workspace).
WITH gone AS (
    DELETE FROM thoth_memory_pgvector.points p
     WHERE p.collection = %(collection)s AND p.workspace_id = %(workspace)s
    RETURNING p.id
), frequencies AS (
    DELETE FROM thoth_memory_pgvector.document_frequencies f
     WHERE f.collection = %(collection)s AND f.workspace_id = %(workspace)s
), generations AS (
    DELETE FROM thoth_memory_pgvector.generations g
     WHERE g.collection = %(collection)s AND g.workspace_id = %(workspace)s
)
SELECT count(*) FROM gone;

-- name: bm25_statistics
-- The IDF inputs for a query's terms: each term's document frequency, and the
-- point count (term -1), in the workspace's serving generation.
SELECT f.term, f.df
  FROM thoth_memory_pgvector.document_frequencies f
 WHERE f.collection = %(collection)s AND f.workspace_id = %(workspace)s AND f.generation = %(generation)s
   AND f.term = ANY (array_append(%(terms)s::integer[], -1));

-- name: points_scroll
-- One generation's points: the serving one (check), or the one a rebuild builds.
SELECT p.id, p.revision, p.fingerprint
  FROM thoth_memory_pgvector.points p
 WHERE p.collection = %(collection)s AND p.workspace_id = %(workspace)s AND p.generation = %(generation)s
 ORDER BY p.id;

-- name: vectors_text
-- The card's text vector of these points, as text (check compares them with fresh embeddings).
SELECT v.point_id, v.embedding::text
  FROM thoth_memory_pgvector.vectors v
 WHERE v.collection = %(collection)s AND v.workspace_id = %(workspace)s AND v.generation = %(generation)s
   AND v.kind = 'text'
   AND v.point_id = ANY (%(ids)s::uuid[]);

-- name: points_count
SELECT count(*) FROM thoth_memory_pgvector.points p
 WHERE p.collection = %(collection)s AND p.workspace_id = %(workspace)s AND p.generation = %(generation)s;
