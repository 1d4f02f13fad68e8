-- Queries of bulk import and export, loaded by name ("-- name: <name>"). Like the
-- archive's, every query names the workspace explicitly (row-level security is the
-- backstop).

-- name: import_cards_insert
-- A batch of new cards in one statement (arrays, one element per card). A card as an
-- export wrote it keeps its origin, source references, revision and timestamps (NULL:
-- a new card's defaults), so export -> import -> export is lossless. Concepts and
-- source decisions travel as JSON arrays (text[] cannot hold lists of lists).
INSERT INTO thoth_memory.cards
       (workspace_id, id, family, language, title, content, scope, rationale, question, sql,
        context, error_signature, concepts, origin, source_session, source_decisions,
        revision, created_at, updated_at)
SELECT %(workspace)s, c.id, c.family, %(language)s, c.title, c.content, c.scope, c.rationale,
       c.question, c.sql, c.context, c.error_signature,
       ARRAY(SELECT jsonb_array_elements_text(c.concepts::jsonb)),
       c.origin, c.source_session,
       CASE WHEN c.source_decisions IS NULL THEN NULL
            ELSE ARRAY(SELECT jsonb_array_elements_text(c.source_decisions::jsonb)) END,
       coalesce(c.revision, 1),
       coalesce(c.created_at, now()),
       coalesce(c.updated_at, c.created_at, now())
  FROM unnest(%(ids)s::uuid[], %(families)s::text[], %(titles)s::text[], %(contents)s::text[],
              %(scopes)s::text[], %(rationales)s::text[], %(questions)s::text[], %(sqls)s::text[],
              %(contexts)s::text[], %(error_signatures)s::text[], %(concepts)s::text[],
              %(origins)s::text[], %(source_sessions)s::text[], %(source_decisions)s::text[],
              %(revisions)s::bigint[], %(created_ats)s::timestamptz[], %(updated_ats)s::timestamptz[])
       AS c(id, family, title, content, scope, rationale, question, sql, context, error_signature,
            concepts, origin, source_session, source_decisions, revision, created_at, updated_at);

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
