-- 003: which points have a symptom vector, indexed by family, so that the symptom
-- branch of a search whose filter no such point passes costs one index probe.
--
-- Only explained errors have a symptom projection. Without this, a search filtered to
-- other families walked the whole symptom HNSW index through its iterative scan
-- (every symptom vector's point was read and refused by the filter) before returning
-- nothing: measured at 10 000 cards, 16 ms of the server's CPU in every such recall,
-- growing with the workspace until hnsw.max_scan_tuples stops it.
ALTER TABLE thoth_memory_pgvector.points ADD COLUMN symptom boolean NOT NULL DEFAULT false;

UPDATE thoth_memory_pgvector.points p
   SET symptom = true
 WHERE EXISTS (SELECT 1 FROM thoth_memory_pgvector.vectors v
                WHERE v.collection = p.collection AND v.workspace_id = p.workspace_id
                  AND v.generation = p.generation AND v.point_id = p.id AND v.kind = 'symptom');

CREATE INDEX points_with_symptom ON thoth_memory_pgvector.points (collection, workspace_id, generation, family)
    WHERE symptom;

-- The planner must know that the flag and the family go together (only explained
-- errors have a symptom): assuming them independent, it expected a quarter of any
-- family's points to be flagged and chose a sequential scan that would stop at the
-- first one, and read all 100 000 points (39 ms) to find none. With these statistics
-- (gathered by ANALYZE, which every rebuild's switch runs) it estimates one row and
-- probes the index (0.1-0.3 ms).
CREATE STATISTICS thoth_memory_pgvector.points_symptom_family (mcv) ON symptom, family
    FROM thoth_memory_pgvector.points;
