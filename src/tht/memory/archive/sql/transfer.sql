-- Queries of bulk import and export, loaded by name ("-- name: <name>"). Like the
-- archive's, every query names the workspace explicitly (row-level security is the
-- backstop). {texts: PATTERN} stands for a card's text columns (the model's TEXT_FIELDS,
-- in order): PATTERN once per column, $ its name, joined by commas (tht.sqlfiles).

-- name: import_cards_insert
-- A batch of new cards in one statement (arrays, one element per card). A card as an
-- export wrote it keeps its origin, source references, revision and timestamps (NULL:
-- a new card's defaults), so export -> import -> export is lossless. Concepts and
-- source decisions travel as JSON arrays (text[] cannot hold lists of lists).
INSERT INTO thoth_memory.cards
       (workspace_id, id, family, language, title, {texts: $}, error_signature, concepts,
        origin, source_session, source_decisions,
        revision, created_at, updated_at, import_id, import_revision, import_action)
SELECT %(workspace)s, c.id, c.family, %(language)s, c.title, {texts: c.$}, c.error_signature,
       ARRAY(SELECT jsonb_array_elements_text(c.concepts::jsonb)),
       c.origin, c.source_session,
       CASE WHEN c.source_decisions IS NULL THEN NULL
            ELSE ARRAY(SELECT jsonb_array_elements_text(c.source_decisions::jsonb)) END,
       coalesce(c.revision, 1),
       coalesce(c.created_at, now()),
       coalesce(c.updated_at, c.created_at, now()),
       %(import_id)s, coalesce(c.revision, 1), 'create'
  FROM unnest(%(ids)s::uuid[], %(families)s::text[], %(titles)s::text[],
              {texts: %($s)s::text[]}, %(error_signatures)s::text[], %(concepts)s::text[],
              %(origins)s::text[], %(source_sessions)s::text[], %(source_decisions)s::text[],
              %(revisions)s::bigint[], %(created_ats)s::timestamptz[], %(updated_ats)s::timestamptz[])
       AS c(id, family, title, {texts: $}, error_signature, concepts, origin, source_session,
            source_decisions, revision, created_at, updated_at);

-- name: import_dependencies_add
-- The dependencies of new cards, in order of position per card.
INSERT INTO thoth_memory.card_dependencies
       (workspace_id, card_id, position, database_name, schema_name, table_name, column_name)
SELECT %(workspace)s, d.card_id, d.position, d.database_name, d.schema_name, d.table_name, d.column_name
  FROM unnest(%(ids)s::uuid[], %(positions)s::smallint[], %(databases)s::text[], %(schemas)s::text[],
              %(tables)s::text[], %(columns)s::text[])
       AS d(card_id, position, database_name, schema_name, table_name, column_name);

-- name: import_links_add
-- Links of new cards, and links whose target the import wrote in a later batch than
-- their source (the source's other links stay).
INSERT INTO thoth_memory.card_links (workspace_id, source_id, target_id, meaning)
SELECT %(workspace)s, l.source_id, l.target_id, l.meaning
  FROM unnest(%(sources)s::uuid[], %(targets)s::uuid[], %(meanings)s::text[])
       AS l(source_id, target_id, meaning)
ON CONFLICT (source_id, target_id) DO NOTHING;

-- name: import_operations_enqueue
-- The projection operations of a batch (as operation_enqueue, for many cards).
INSERT INTO thoth_memory.projection_ops (workspace_id, card_id, operation, revision)
SELECT %(workspace)s, o.card_id, 'upsert', o.revision
  FROM unnest(%(ids)s::uuid[], %(revisions)s::bigint[]) AS o(card_id, revision)
ON CONFLICT (card_id) DO UPDATE
   SET operation = EXCLUDED.operation, revision = EXCLUDED.revision,
       attempts = 0, last_error = NULL, updated_at = now();

-- name: import_cards_replaced
-- Cards an import replaced (--on-conflict update), at the revision it wrote.
UPDATE thoth_memory.cards
   SET import_id = %(import_id)s, import_revision = revision, import_action = 'update'
 WHERE workspace_id = %(workspace)s AND id = ANY(%(ids)s);

-- name: import_insert
INSERT INTO thoth_memory.imports (workspace_id, id, file_name, format, principal)
VALUES (%(workspace)s, %(id)s, %(file_name)s, %(format)s, %(principal)s);

-- name: import_finish
UPDATE thoth_memory.imports
   SET status = %(status)s, finished_at = now(), summary = %(summary)s
 WHERE workspace_id = %(workspace)s AND id = %(id)s;

-- name: import_list
SELECT i.id, i.file_name, i.format, i.principal, i.status, i.started_at, i.finished_at,
       i.summary, i.undone_at, i.undone_by, i.undo,
       (SELECT count(*) FROM thoth_memory.cards c
         WHERE c.workspace_id = i.workspace_id AND c.import_id = i.id) AS cards
  FROM thoth_memory.imports i
 WHERE i.workspace_id = %(workspace)s AND (%(id)s::uuid IS NULL OR i.id = %(id)s)
 ORDER BY i.started_at DESC, i.id
 LIMIT %(limit)s;

-- name: import_lock
SELECT id, status, undone_at FROM thoth_memory.imports
 WHERE workspace_id = %(workspace)s AND id = %(id)s
   FOR UPDATE;

-- name: import_cards_after
-- The cards that name an import, a batch at a time in id order (an undo's pass).
SELECT id, revision, import_revision, import_action
  FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND import_id = %(import_id)s AND id > %(after)s
 ORDER BY id
 LIMIT %(limit)s;

-- name: import_cards_delete
-- The cards an import created and nobody changed since; their dependencies and
-- links cascade. Returns each with its last revision and the links it had.
WITH doomed AS (
    SELECT c.id, c.revision
      FROM thoth_memory.cards c
     WHERE c.workspace_id = %(workspace)s AND c.id = ANY(%(ids)s)
       AND c.import_id = %(import_id)s AND c.import_action = 'create'
       AND c.revision = c.import_revision
       FOR UPDATE
), links AS (
    SELECT count(*) AS n
      FROM thoth_memory.card_links l
     WHERE l.workspace_id = %(workspace)s
       AND (l.source_id IN (SELECT id FROM doomed) OR l.target_id IN (SELECT id FROM doomed))
), deleted AS (
    DELETE FROM thoth_memory.cards c
     USING doomed d
     WHERE c.workspace_id = %(workspace)s AND c.id = d.id
    RETURNING c.id, c.revision
)
SELECT (SELECT n FROM links) AS links, coalesce(array_agg(id), '{}') AS ids,
       coalesce(array_agg(revision), '{}') AS revisions
  FROM deleted;

-- name: import_deletions_enqueue
-- The deletions' projection operations (one past each card's last revision).
INSERT INTO thoth_memory.projection_ops (workspace_id, card_id, operation, revision)
SELECT %(workspace)s, o.card_id, 'delete', o.revision + 1
  FROM unnest(%(ids)s::uuid[], %(revisions)s::bigint[]) AS o(card_id, revision)
ON CONFLICT (card_id) DO UPDATE
   SET operation = EXCLUDED.operation, revision = EXCLUDED.revision,
       attempts = 0, last_error = NULL, updated_at = now();

-- name: import_undone
UPDATE thoth_memory.imports
   SET undone_at = now(), undone_by = %(principal)s, undo = %(undo)s
 WHERE workspace_id = %(workspace)s AND id = %(id)s;

-- name: export_count
SELECT count(*) AS cards FROM thoth_memory.cards WHERE workspace_id = %(workspace)s;

-- name: refresh_statistics
-- While a bulk import grows the tables: the planner's statistics (014).
SELECT thoth_memory.refresh_statistics();

-- name: analyzed_cards
-- The cards' table's size as the planner knows it (-1 until first analyzed).
SELECT greatest(reltuples, 0)::bigint AS cards
  FROM pg_catalog.pg_class
 WHERE oid = 'thoth_memory.cards'::regclass;
