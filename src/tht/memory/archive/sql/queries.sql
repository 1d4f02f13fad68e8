-- Queries of the PostgreSQL archive, loaded by name ("-- name: <name>").
-- Every query also names the workspace explicitly: row-level security is the
-- backstop, not the only filter.

-- name: set_context
SELECT set_config('thoth.workspace', %(workspace)s, true),
       set_config('thoth.directory', %(directory)s, true);

-- name: lock_workspace
-- 64-bit transaction-scoped lock: serializes one workspace's mutations (and the
-- index propagation that follows them) without blocking other workspaces.
SELECT pg_advisory_xact_lock(hashtextextended('thoth_memory.workspace:' || %(workspace)s, 0));

-- name: workspace_get
SELECT id, name, language, created_at
  FROM thoth_memory.workspaces
 WHERE id = %(workspace)s;

-- name: workspace_insert
INSERT INTO thoth_memory.workspaces (id, name, language)
VALUES (%(workspace)s, %(name)s, %(language)s)
ON CONFLICT (id) DO NOTHING
RETURNING id, name, language, created_at;

-- name: workspace_list
SELECT id, name, language, created_at
  FROM thoth_memory.workspaces
 ORDER BY id;

-- name: workspace_card_counts
SELECT family, count(*) AS cards
  FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s
 GROUP BY family;

-- name: workspace_pending_count
SELECT count(*) FROM thoth_memory.projection_ops WHERE workspace_id = %(workspace)s;

-- name: card_get
SELECT id, workspace_id, family, title, content, scope, rationale, question, sql, context,
       concepts, origin, source_session, source_decisions, revision, created_at, updated_at
  FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND id = %(id)s;

-- name: card_lock
SELECT revision
  FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND id = %(id)s
   FOR UPDATE;

-- name: card_dependencies
SELECT database_name, schema_name, table_name, column_name
  FROM thoth_memory.card_dependencies
 WHERE workspace_id = %(workspace)s AND card_id = %(id)s
 ORDER BY position;

-- name: card_links_out
SELECT l.target_id, l.meaning, t.title
  FROM thoth_memory.card_links l
  JOIN thoth_memory.cards t ON t.id = l.target_id
 WHERE l.workspace_id = %(workspace)s AND l.source_id = %(id)s
 ORDER BY l.target_id;

-- name: card_links_in
SELECT l.source_id, l.meaning, s.title
  FROM thoth_memory.card_links l
  JOIN thoth_memory.cards s ON s.id = l.source_id
 WHERE l.workspace_id = %(workspace)s AND l.target_id = %(id)s
 ORDER BY l.source_id;

-- name: cards_existing
SELECT id FROM thoth_memory.cards WHERE workspace_id = %(workspace)s AND id = ANY(%(ids)s);

-- name: card_insert
INSERT INTO thoth_memory.cards
       (workspace_id, id, family, language, title, content, scope, rationale, question, sql,
        context, concepts, origin, source_session, source_decisions)
VALUES (%(workspace)s, %(id)s, %(family)s, %(language)s, %(title)s, %(content)s, %(scope)s,
        %(rationale)s, %(question)s, %(sql)s, %(context)s, %(concepts)s, %(origin)s,
        %(source_session)s, %(source_decisions)s)
RETURNING revision;

-- name: card_update
-- Origin and source references are never touched by an edit.
UPDATE thoth_memory.cards
   SET family = %(family)s, title = %(title)s, content = %(content)s, scope = %(scope)s,
       rationale = %(rationale)s, question = %(question)s, sql = %(sql)s, context = %(context)s,
       concepts = %(concepts)s, revision = revision + 1, updated_at = now()
 WHERE workspace_id = %(workspace)s AND id = %(id)s
RETURNING revision;

-- name: card_delete
DELETE FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND id = %(id)s
RETURNING revision;

-- name: card_incident_link_count
SELECT count(*)
  FROM thoth_memory.card_links
 WHERE workspace_id = %(workspace)s AND (source_id = %(id)s OR target_id = %(id)s);

-- name: dependencies_clear
DELETE FROM thoth_memory.card_dependencies WHERE workspace_id = %(workspace)s AND card_id = %(id)s;

-- name: dependency_insert
INSERT INTO thoth_memory.card_dependencies
       (workspace_id, card_id, position, database_name, schema_name, table_name, column_name)
VALUES (%(workspace)s, %(id)s, %(position)s, %(database)s, %(schema)s, %(table)s, %(column)s);

-- name: links_clear_outgoing
DELETE FROM thoth_memory.card_links WHERE workspace_id = %(workspace)s AND source_id = %(id)s;

-- name: link_insert
INSERT INTO thoth_memory.card_links (workspace_id, source_id, target_id, meaning)
VALUES (%(workspace)s, %(id)s, %(target)s, %(meaning)s);

-- name: operation_enqueue
-- One row per card: newer work replaces older work for the same card.
INSERT INTO thoth_memory.projection_ops (workspace_id, card_id, operation, revision)
VALUES (%(workspace)s, %(id)s, %(operation)s, %(revision)s)
ON CONFLICT (card_id) DO UPDATE
   SET operation = EXCLUDED.operation, revision = EXCLUDED.revision,
       attempts = 0, last_error = NULL, updated_at = now();

-- name: operations_list
SELECT o.card_id, o.operation, o.revision, o.attempts, o.last_error, c.title,
       o.created_at, o.updated_at
  FROM thoth_memory.projection_ops o
  LEFT JOIN thoth_memory.cards c ON c.id = o.card_id
 WHERE o.workspace_id = %(workspace)s
 ORDER BY o.created_at, o.card_id;

-- name: matching_card_ids
-- Text and concept filters use the GIN indexes through this function (see 001).
SELECT coalesce(array_agg(id), '{}')
  FROM thoth_memory.matching_card_ids(to_tsquery(%(ts_config)s::regconfig, %(tsquery)s), %(concepts)s::text[]) AS id;

-- name: list_filters
-- The admin list's filters, shared by list_page and list_count. All of them run over
-- the whole workspace before LIMIT/OFFSET; a NULL parameter disables its filter.
c.workspace_id = %(workspace)s
   -- the candidates of the text and concept filters (query matching_card_ids)
   AND (%(candidates)s::uuid[] IS NULL OR c.id = ANY(%(candidates)s))
   AND (%(id_prefix)s::text IS NULL OR c.id::text LIKE %(id_prefix)s || '%%')
   AND (%(families)s::text[] IS NULL OR c.family = ANY(%(families)s))
   AND (%(origin)s::text IS NULL OR c.origin = %(origin)s)
   AND (%(updated_from)s::timestamptz IS NULL OR c.updated_at >= %(updated_from)s)
   AND (%(updated_before)s::timestamptz IS NULL OR c.updated_at < %(updated_before)s)
   AND (NOT %(by_dependency)s OR EXISTS (
            SELECT 1 FROM thoth_memory.card_dependencies d
             WHERE d.workspace_id = c.workspace_id AND d.card_id = c.id
               AND (%(database)s::text IS NULL OR d.database_name = %(database)s)
               AND (%(schema)s::text IS NULL OR d.schema_name = %(schema)s)
               AND (%(table)s::text IS NULL OR d.table_name = %(table)s)
               AND (%(column)s::text IS NULL OR d.column_name = %(column)s)))

-- name: list_count
SELECT count(*) FROM thoth_memory.cards c WHERE {filters};

-- name: list_page
-- {order_by} comes from a fixed whitelist; the card id is always the tie-breaker.
SELECT c.id, c.family, c.title, c.scope, c.concepts, c.origin, c.revision,
       c.created_at, c.updated_at, o.operation AS pending
  FROM thoth_memory.cards c
  LEFT JOIN thoth_memory.projection_ops o ON o.card_id = c.id
 WHERE {filters}
 ORDER BY {order_by}
 LIMIT %(limit)s OFFSET %(offset)s;
