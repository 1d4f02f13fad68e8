-- 002: projections of the old dense-only format are incompatible with hybrid recall.
--
-- A projection whose fingerprint is not of the hybrid format gets a pending operation
-- (re-index the card, or remove the point of a card that no longer exists) and its
-- fingerprint is marked incompatible, so verification excludes it until `memory
-- retry` or `memory index` succeeds. Cards themselves are not touched.

INSERT INTO thoth_memory.projection_ops (workspace_id, card_id, operation, revision, last_error)
SELECT p.workspace_id, p.card_id,
       CASE WHEN c.id IS NULL THEN 'delete' ELSE 'upsert' END,
       coalesce(c.revision, 0),
       'projection in the old dense-only format (migration 002): re-index required'
  FROM thoth_memory.projections p
  LEFT JOIN thoth_memory.cards c ON c.id = p.card_id
 WHERE p.fingerprint NOT LIKE 'hybrid-%'
   AND p.fingerprint NOT LIKE 'incompatible:%'
ON CONFLICT (card_id) DO NOTHING;

UPDATE thoth_memory.projections
   SET fingerprint = 'incompatible:' || fingerprint
 WHERE fingerprint NOT LIKE 'hybrid-%'
   AND fingerprint NOT LIKE 'incompatible:%';
