-- Physical cleanup (tht.memory.cleanup.PhysicalCleanup): receipts, tombstones and the
-- cards whose structured dependencies match removed tables or columns. Loaded by name
-- ("-- name: <name>"); every query names the workspace (RLS is the backstop).

-- name: receipt_get
SELECT run_id, database_name, schema_name, removals, removals_digest, deleted_cards,
       links_removed, status, last_error, created_at, completed_at
  FROM thoth_memory.cleanup_receipts
 WHERE workspace_id = %(workspace)s AND run_id = %(run_id)s;

-- name: matching_cards
-- Cards with a dependency on a removed table (at table or column level) or on a
-- removed column, in the synchronized database and schema only. Database- and
-- schema-level dependencies never match: the scan did not remove those.
SELECT c.id, c.title, c.family, c.revision
  FROM thoth_memory.cards c
 WHERE c.workspace_id = %(workspace)s
   AND EXISTS (
        SELECT 1 FROM thoth_memory.card_dependencies d
         WHERE d.workspace_id = c.workspace_id AND d.card_id = c.id
           AND d.database_name = %(database)s AND d.schema_name = %(schema)s
           AND d.table_name IS NOT NULL
           AND (d.table_name = ANY(%(tables)s::text[])
                OR (d.column_name IS NOT NULL AND EXISTS (
                        SELECT 1 FROM jsonb_to_recordset(%(columns)s::jsonb) AS r("table" text, "column" text)
                         WHERE r."table" = d.table_name AND r."column" = d.column_name))))
 ORDER BY c.id
   FOR UPDATE OF c;

-- name: incident_links
SELECT count(*)
  FROM thoth_memory.card_links
 WHERE workspace_id = %(workspace)s AND (source_id = ANY(%(ids)s) OR target_id = ANY(%(ids)s));

-- name: cards_delete
-- Dependencies and incident links cascade.
DELETE FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND id = ANY(%(ids)s)
RETURNING id, revision;

-- name: receipt_insert
INSERT INTO thoth_memory.cleanup_receipts
       (workspace_id, run_id, database_name, schema_name, removals, removals_digest, deleted_cards,
        links_removed, status)
VALUES (%(workspace)s, %(run_id)s, %(database)s, %(schema)s, %(removals)s, %(digest)s, %(deleted)s,
        %(links_removed)s, 'index_pending');

-- name: tombstones_insert
INSERT INTO thoth_memory.vector_tombstones (workspace_id, card_id, run_id)
SELECT %(workspace)s, id, %(run_id)s FROM unnest(%(ids)s::uuid[]) AS id
ON CONFLICT (card_id) DO NOTHING;

-- name: tombstones_open
SELECT card_id FROM thoth_memory.vector_tombstones
 WHERE workspace_id = %(workspace)s AND run_id = %(run_id)s AND removed_at IS NULL
 ORDER BY card_id;

-- name: tombstones_removed
-- Only tombstones whose card is still absent and whose delete left no outstanding work.
UPDATE thoth_memory.vector_tombstones t
   SET removed_at = now()
 WHERE t.workspace_id = %(workspace)s AND t.run_id = %(run_id)s AND t.removed_at IS NULL
   AND t.card_id = ANY(%(ids)s)
   AND NOT EXISTS (SELECT 1 FROM thoth_memory.projection_ops o
                    WHERE o.workspace_id = t.workspace_id AND o.card_id = t.card_id);

-- name: receipt_completed
UPDATE thoth_memory.cleanup_receipts
   SET status = 'completed', completed_at = now(), last_error = NULL
 WHERE workspace_id = %(workspace)s AND run_id = %(run_id)s
   AND NOT EXISTS (SELECT 1 FROM thoth_memory.vector_tombstones t
                    WHERE t.workspace_id = %(workspace)s AND t.run_id = %(run_id)s AND t.removed_at IS NULL)
RETURNING status;

-- name: receipt_failed
UPDATE thoth_memory.cleanup_receipts
   SET last_error = %(error)s
 WHERE workspace_id = %(workspace)s AND run_id = %(run_id)s;
