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
