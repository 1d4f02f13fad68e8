-- The BM25 branch: score = sum over the query's terms of idf(term) * tf-part, where
-- the tf-part is the stored term-frequency value (qdrant_edge.Bm25) and the query
-- vectors carry idf(term), computed from this workspace's document frequencies: the
-- inner product of the two, summed over the three sparsevec ranges (<#> is the
-- NEGATIVE inner product). Only points sharing a term are candidates, as in Qdrant's
-- sparse index (found through the GIN index by bm25_candidates). The filters
-- (conditions on the point p) run first, on the narrow point rows: only the candidates
-- that pass them have their BM25 vectors read and scored (a family filter keeps about
-- one in four; reading every candidate's vectors first cost twice the buffers). Only
-- the serving generation (the generation parameter) is searched: a rebuild's new
-- generation waits for its switch.
WITH matching AS MATERIALIZED (
    SELECT p.id, p.revision, p.fingerprint
      FROM thoth_memory_pgvector.points p
     WHERE p.collection = %(collection)s
       AND p.workspace_id = %(workspace)s
       AND p.generation = %(generation)s
       AND p.id = ANY (ARRAY(SELECT thoth_memory_pgvector.bm25_candidates(%(collection)s, %(terms)s::integer[],
                                                                          %(generation)s)))
       AND {filter}
)
SELECT m.id, m.revision, m.fingerprint,
       -((b.bm25_0 <#> %(weights_0)s::sparsevec)
         + (b.bm25_1 <#> %(weights_1)s::sparsevec)
         + (b.bm25_2 <#> %(weights_2)s::sparsevec)) AS score
  FROM matching m
  JOIN thoth_memory_pgvector.bm25_vectors b
    ON b.collection = %(collection)s AND b.workspace_id = %(workspace)s AND b.generation = %(generation)s
   AND b.point_id = m.id
 ORDER BY score DESC, m.id
 LIMIT %(limit)s;
