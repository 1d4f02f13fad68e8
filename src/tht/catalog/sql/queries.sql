-- Queries of the Catalog (schema thoth_catalog), loaded by name ("-- name: <name>").
-- Every query names the workspace explicitly: row-level security is the backstop.

-- name: set_context
-- Runtime role and workspace, transaction-local; 'exclusive' serializes the Catalog
-- changes of one workspace (a sync's commit, a retry, a forget).
SELECT set_config('role', %(role)s, true),
       set_config('thoth.workspace', %(workspace)s, true),
       (SELECT 1 FROM (SELECT CASE WHEN %(lock)s THEN (SELECT 1 FROM pg_advisory_xact_lock(
            hashtextextended('thoth_catalog.workspace:' || %(workspace)s, 0))) END) AS locked);

-- name: binding_get
SELECT workspace_id, database_name, schema_name, connection, updated_at
  FROM thoth_catalog.bindings
 WHERE workspace_id = %(workspace)s;

-- name: binding_upsert
INSERT INTO thoth_catalog.bindings (workspace_id, database_name, schema_name, connection)
VALUES (%(workspace)s, %(database)s, %(schema)s, %(connection)s)
ON CONFLICT (workspace_id) DO UPDATE
   SET database_name = EXCLUDED.database_name, schema_name = EXCLUDED.schema_name,
       connection = EXCLUDED.connection, updated_at = now()
 WHERE (thoth_catalog.bindings.database_name, thoth_catalog.bindings.schema_name, thoth_catalog.bindings.connection)
       IS DISTINCT FROM (EXCLUDED.database_name, EXCLUDED.schema_name, EXCLUDED.connection);

-- name: pending_run
SELECT id FROM thoth_catalog.runs WHERE workspace_id = %(workspace)s AND status = 'pending';

-- name: snapshot_get
SELECT tables, run_id, taken_at
  FROM thoth_catalog.snapshots
 WHERE workspace_id = %(workspace)s AND database_name = %(database)s AND schema_name = %(schema)s;

-- name: snapshot_put
INSERT INTO thoth_catalog.snapshots (workspace_id, database_name, schema_name, run_id, tables)
VALUES (%(workspace)s, %(database)s, %(schema)s, %(run_id)s, %(tables)s)
ON CONFLICT (workspace_id, database_name, schema_name) DO UPDATE
   SET run_id = EXCLUDED.run_id, tables = EXCLUDED.tables, taken_at = now();

-- name: snapshot_delete
DELETE FROM thoth_catalog.snapshots
 WHERE workspace_id = %(workspace)s AND database_name = %(database)s AND schema_name = %(schema)s
RETURNING tables;

-- name: run_insert
INSERT INTO thoth_catalog.runs
       (workspace_id, id, kind, database_name, schema_name, status, phase, removed_tables,
        removed_columns, forgotten, tables_scanned, errors, finished_at)
VALUES (%(workspace)s, %(id)s, %(kind)s, %(database)s, %(schema)s, %(status)s, %(phase)s, %(tables)s,
        %(columns)s, %(forgotten)s, %(tables_scanned)s, %(errors)s,
        CASE WHEN %(status)s = 'pending' THEN NULL ELSE now() END);

-- name: run_get
SELECT id, kind, database_name, schema_name, status, phase, removed_tables, removed_columns, forgotten,
       tables_scanned, deleted_cards, links_removed, errors, attempts, started_at, finished_at
  FROM thoth_catalog.runs
 WHERE workspace_id = %(workspace)s AND id = %(id)s;

-- name: run_lock
SELECT status FROM thoth_catalog.runs WHERE workspace_id = %(workspace)s AND id = %(id)s FOR UPDATE;

-- name: runs_list
SELECT id, kind, database_name, schema_name, status, phase, removed_tables, removed_columns, forgotten,
       tables_scanned, deleted_cards, links_removed, errors, attempts, started_at, finished_at
  FROM thoth_catalog.runs
 WHERE workspace_id = %(workspace)s
 ORDER BY started_at DESC, id
 LIMIT %(limit)s;

-- name: run_completed
UPDATE thoth_catalog.runs
   SET status = 'completed', phase = 'done', deleted_cards = %(deleted)s, links_removed = %(links_removed)s,
       attempts = attempts + 1, finished_at = now()
 WHERE workspace_id = %(workspace)s AND id = %(id)s AND status = 'pending';

-- name: run_cleanup_failed
-- The run keeps its removals and stays pending; the error is appended to its history.
UPDATE thoth_catalog.runs
   SET attempts = attempts + 1,
       deleted_cards = coalesce(%(deleted)s, deleted_cards),
       links_removed = coalesce(%(links_removed)s, links_removed),
       errors = errors || jsonb_build_array(jsonb_build_object(
           'at', now(), 'phase', 'memory_cleanup', 'code', %(code)s::text, 'message', %(message)s::text))
 WHERE workspace_id = %(workspace)s AND id = %(id)s AND status = 'pending';
