-- The dense branch over the 'symptom' vectors (an explained error's error text): nearest first
-- by cosine distance, <=>, the operator of the vector_cosine_ops indexes (any other
-- operator silently falls back to a scan).
--
-- kind = 'symptom' is a LITERAL on purpose, never a parameter, and the dimension is
-- inlined as a literal too (composed with sql.Literal): the HNSW indexes
-- are partial (WHERE kind = 'symptom' AND dimension = N), and the planner uses a partial
-- index only when the query's own predicate proves it. With a parameter a generic
-- plan cannot, and scans every vector of both kinds.
--
-- The filters (conditions on the point p) run inside the index scan; with
-- hnsw.iterative_scan the index keeps producing candidates until the limit is met,
-- so a filtered search returns a full list. relaxed_order may return them slightly
-- out of order, hence the outer sort. Only the serving generation (the generation
-- parameter) is searched: a rebuild's new generation waits for its switch.
--
-- Only some points have a symptom vector (explained errors), and a filter that none of
-- them passes would make the iterative scan walk the whole index for nothing: the gate,
-- an uncorrelated EXISTS the planner runs once before the scan (an InitPlan), looks for
-- one such point through the points_with_symptom index and skips the scan without one.
WITH nearest AS MATERIALIZED (
    SELECT v.point_id, p.revision, p.fingerprint,
           v.embedding::vector({dimension}) <=> %(query)s::vector({dimension}) AS distance
      FROM thoth_memory_pgvector.vectors v
      JOIN thoth_memory_pgvector.points p
        ON p.collection = v.collection AND p.workspace_id = v.workspace_id AND p.generation = v.generation
       AND p.id = v.point_id
     WHERE v.kind = 'symptom'
       AND v.dimension = {dimension}
       AND v.collection = %(collection)s
       AND v.workspace_id = %(workspace)s
       AND v.generation = %(generation)s
       AND {filter}
       AND EXISTS (SELECT 1
                     FROM thoth_memory_pgvector.points p
                    WHERE p.collection = %(collection)s
                      AND p.workspace_id = %(workspace)s
                      AND p.generation = %(generation)s
                      AND p.symptom
                      AND {filter})
     ORDER BY v.embedding::vector({dimension}) <=> %(query)s::vector({dimension})
     LIMIT %(limit)s
)
SELECT point_id, distance, revision, fingerprint
  FROM nearest
 ORDER BY distance, point_id;
