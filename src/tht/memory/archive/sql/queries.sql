-- Queries of the PostgreSQL archive, loaded by name ("-- name: <name>").
-- Every query also names the workspace explicitly: row-level security is the
-- backstop, not the only filter. {texts: PATTERN} stands for a card's text columns (the
-- model's TEXT_FIELDS, in order): PATTERN once per column, $ its name, joined by commas
-- (tht.sqlfiles).

-- name: set_context
-- The transaction's context in one round trip. set_config('role', ..., true) is SET
-- LOCAL ROLE. The workspace lock is a 64-bit transaction-scoped advisory lock:
-- 'exclusive' serializes one workspace's mutations (and the index propagation that
-- follows them) without blocking other workspaces; 'shared' is for readers that must
-- not interleave with a mutation (recall verification).
SELECT set_config('role', %(role)s, true),
       set_config('thoth.workspace', %(workspace)s, true),
       set_config('thoth.directory', %(directory)s, true),
       set_config('thoth.accounts', %(accounts)s, true),
       -- who acts, and through which workflow: the cards' audit trigger reads them (012)
       set_config('thoth.actor', %(actor)s, true),
       set_config('thoth.via', %(via)s, true),
       (SELECT 1 FROM (SELECT CASE %(lock)s
            WHEN 'exclusive' THEN (SELECT 1 FROM pg_advisory_xact_lock(
                hashtextextended('thoth_memory.workspace:' || %(workspace)s, 0)))
            WHEN 'shared' THEN (SELECT 1 FROM pg_advisory_xact_lock_shared(
                hashtextextended('thoth_memory.workspace:' || %(workspace)s, 0)))
            END) AS locked);

-- name: held_try_lock
-- A session-level advisory lock on a name (``PostgresArchive.held``): one holder at a
-- time across every process on this database, released with its connection. Its key
-- space ('held:') differs from the workspace lock's and the drain's.
SELECT pg_try_advisory_lock(hashtextextended('thoth_memory.held:' || %(name)s, 0));

-- name: held_unlock
SELECT pg_advisory_unlock(hashtextextended('thoth_memory.held:' || %(name)s, 0));

-- name: snapshot
-- A read-only snapshot (an export): every query of the transaction sees the archive as
-- of its first query, and none may write. It must precede set_context, whose SELECT is
-- that first query. A REPEATABLE READ reader takes no lock that blocks a writer; it
-- only keeps the rows it may still read from being vacuumed while it is open.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: workspace_get
SELECT id, name, language, embedder, created_at
  FROM thoth_memory.workspaces
 WHERE id = %(workspace)s;

-- name: workspace_insert
INSERT INTO thoth_memory.workspaces (id, name, language, embedder)
VALUES (%(workspace)s, %(name)s, %(language)s, %(embedder)s)
ON CONFLICT (id) DO NOTHING
RETURNING id, name, language, embedder, created_at;

-- name: workspace_set_embedder
UPDATE thoth_memory.workspaces
   SET embedder = %(embedder)s
 WHERE id = %(workspace)s
RETURNING id, name, language, embedder, created_at;

-- name: workspace_list
SELECT id, name, language, embedder, created_at
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
-- With the import that wrote the card, if one did (015).
SELECT c.id, c.workspace_id, c.family, c.title, {texts: c.$}, c.error_signature,
       c.concepts, c.origin, c.source_session,
       c.source_decisions, c.revision, c.created_at, c.updated_at, c.import_id,
       c.import_action, i.file_name AS import_file, i.format AS import_format,
       i.started_at AS import_at, i.principal AS import_by
  FROM thoth_memory.cards c
  LEFT JOIN thoth_memory.imports i ON i.workspace_id = c.workspace_id AND i.id = c.import_id
 WHERE c.workspace_id = %(workspace)s AND c.id = %(id)s;

-- name: card_lock
SELECT revision, family
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
       (workspace_id, id, family, language, title, {texts: $},
        error_signature, concepts, origin, source_session, source_decisions)
VALUES (%(workspace)s, %(id)s, %(family)s, %(language)s, %(title)s, {texts: %($)s},
        %(error_signature)s, %(concepts)s, %(origin)s, %(source_session)s, %(source_decisions)s)
RETURNING revision;

-- name: card_update
-- Origin and source references are never touched by an edit. An edit that does not
-- mention the error signature keeps it (while the card stays an explained error).
UPDATE thoth_memory.cards
   SET family = %(family)s, title = %(title)s, {texts: $ = %($)s},
       error_signature = CASE WHEN %(family)s <> 'explained_error' THEN NULL
                              WHEN %(keep_signature)s THEN error_signature
                              ELSE %(error_signature)s END,
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
   -- manual and workflow: made here (by hand, by a review); imported: by an import,
   -- whatever origin its file recorded (015)
   AND (%(origin)s::text IS NULL
        OR (%(origin)s = 'imported' AND c.import_id IS NOT NULL)
        OR (c.origin = %(origin)s AND c.import_id IS NULL))
   AND (%(import_id)s::uuid IS NULL OR c.import_id = %(import_id)s)
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
       c.created_at, c.updated_at, o.operation AS pending, c.import_id
  FROM thoth_memory.cards c
  LEFT JOIN thoth_memory.projection_ops o ON o.card_id = c.id
 WHERE {filters}
 ORDER BY {order_by}
 LIMIT %(limit)s OFFSET %(offset)s;

-- name: cards_rows
SELECT c.id, c.workspace_id, c.family, c.title, {texts: c.$}, c.error_signature,
       c.concepts, c.origin, c.source_session,
       c.source_decisions, c.revision, c.created_at, c.updated_at, c.import_id,
       c.import_action, i.file_name AS import_file, i.format AS import_format,
       i.started_at AS import_at, i.principal AS import_by
  FROM thoth_memory.cards c
  LEFT JOIN thoth_memory.imports i ON i.workspace_id = c.workspace_id AND i.id = c.import_id
 WHERE c.workspace_id = %(workspace)s AND c.id = ANY(%(ids)s);

-- name: dependencies_of
SELECT card_id, database_name, schema_name, table_name, column_name
  FROM thoth_memory.card_dependencies
 WHERE workspace_id = %(workspace)s AND card_id = ANY(%(ids)s)
 ORDER BY card_id, position;

-- name: links_of
SELECT l.source_id, l.target_id, l.meaning, t.title
  FROM thoth_memory.card_links l
  JOIN thoth_memory.cards t ON t.id = l.target_id
 WHERE l.workspace_id = %(workspace)s AND l.source_id = ANY(%(ids)s)
 ORDER BY l.source_id, l.target_id;

-- name: projection_states
-- What verification needs for each card: its revision, the recorded projection and
-- whether work is outstanding. Cards that do not exist return no row.
SELECT c.id, c.revision, p.revision AS projected_revision, p.fingerprint, o.operation
  FROM thoth_memory.cards c
  LEFT JOIN thoth_memory.projections p ON p.card_id = c.id
  LEFT JOIN thoth_memory.projection_ops o ON o.card_id = c.id
 WHERE c.workspace_id = %(workspace)s AND c.id = ANY(%(ids)s);

-- name: recall_facts
-- Everything verification and the recall filters need about a card, in one query:
-- its projection state and its filterable fields, dependencies included; and the
-- BM25 terms recorded with its projection (recall's coverage signal) and its title
-- (recall lifts the seeds whose title the question names).
SELECT c.id, c.revision, p.revision AS projected_revision, p.fingerprint, o.operation, p.terms,
       c.title, c.family, c.scope, c.concepts,
       coalesce((SELECT json_agg(json_build_array(d.database_name, d.schema_name, d.table_name, d.column_name)
                                 ORDER BY d.position)
                   FROM thoth_memory.card_dependencies d
                  WHERE d.workspace_id = c.workspace_id AND d.card_id = c.id), '[]') AS deps
  FROM thoth_memory.cards c
  LEFT JOIN thoth_memory.projections p ON p.card_id = c.id
  LEFT JOIN thoth_memory.projection_ops o ON o.card_id = c.id
 WHERE c.workspace_id = %(workspace)s AND c.id = ANY(%(ids)s);

-- name: links_with_facts
-- Outgoing links of cards, each with the recall facts of its target (see recall_facts).
SELECT l.source_id, l.target_id, l.meaning,
       c.revision, p.revision AS projected_revision, p.fingerprint, o.operation,
       c.family, c.scope, c.concepts,
       coalesce((SELECT json_agg(json_build_array(d.database_name, d.schema_name, d.table_name, d.column_name)
                                 ORDER BY d.position)
                   FROM thoth_memory.card_dependencies d
                  WHERE d.workspace_id = c.workspace_id AND d.card_id = c.id), '[]') AS deps
  FROM thoth_memory.card_links l
  JOIN thoth_memory.cards c ON c.id = l.target_id AND c.workspace_id = l.workspace_id
  LEFT JOIN thoth_memory.projections p ON p.card_id = c.id
  LEFT JOIN thoth_memory.projection_ops o ON o.card_id = c.id
 WHERE l.workspace_id = %(workspace)s AND l.source_id = ANY(%(ids)s)
 ORDER BY l.source_id, l.target_id;

-- name: operations_for
SELECT card_id, operation, revision
  FROM thoth_memory.projection_ops
 WHERE workspace_id = %(workspace)s AND card_id = ANY(%(ids)s);

-- name: projections_exist
-- Whether the index should hold any point of the workspace (recall's lost-index check;
-- one index probe, only when a search found nothing).
SELECT EXISTS (SELECT 1 FROM thoth_memory.projections WHERE workspace_id = %(workspace)s) AS present;

-- name: operation_ids
-- Those left untouched for at least %(settled)s seconds (0: all of them).
SELECT card_id FROM thoth_memory.projection_ops
 WHERE workspace_id = %(workspace)s
   AND updated_at <= now() - make_interval(secs => %(settled)s)
 ORDER BY created_at, card_id
 LIMIT %(limit)s;

-- name: operation_clear
-- Only the work this propagation did: a newer revision keeps its own operation.
DELETE FROM thoth_memory.projection_ops
 WHERE workspace_id = %(workspace)s AND card_id = %(id)s AND revision <= %(revision)s;

-- name: operation_failed
UPDATE thoth_memory.projection_ops
   SET attempts = attempts + 1, last_error = %(error)s, updated_at = now()
 WHERE workspace_id = %(workspace)s AND card_id = ANY(%(ids)s);

-- name: projections_record
-- What the index holds for many cards, in one statement: parallel arrays, the BM25
-- terms of each as the text of an array (they differ in length).
INSERT INTO thoth_memory.projections (workspace_id, card_id, revision, fingerprint, terms, indexed_chars,
                                      embedded_chars)
SELECT %(workspace)s, u.card_id, u.revision, %(fingerprint)s, u.terms::bigint[], u.indexed_chars, u.embedded_chars
  FROM unnest(%(ids)s::uuid[], %(revisions)s::integer[], %(terms)s::text[], %(indexed_chars)s::integer[],
              %(embedded_chars)s::integer[]) AS u(card_id, revision, terms, indexed_chars, embedded_chars)
ON CONFLICT (card_id) DO UPDATE
   SET revision = EXCLUDED.revision, fingerprint = EXCLUDED.fingerprint, terms = EXCLUDED.terms,
       indexed_chars = EXCLUDED.indexed_chars, embedded_chars = EXCLUDED.embedded_chars, indexed_at = now();

-- name: operations_clear
-- operation_clear for many cards: each card's work up to the revision projected.
DELETE FROM thoth_memory.projection_ops o
 USING unnest(%(ids)s::uuid[], %(revisions)s::integer[]) AS u(card_id, revision)
 WHERE o.workspace_id = %(workspace)s AND o.card_id = u.card_id AND o.revision <= u.revision;

-- name: revisions_of
SELECT id, revision FROM thoth_memory.cards WHERE workspace_id = %(workspace)s AND id = ANY(%(ids)s);

-- name: projection_detail
-- What `show` says of a card's projection: the projected revision and format, the
-- outstanding operation, and how much of the indexed text the dense vector covers.
SELECT c.revision, p.revision AS projected_revision, p.fingerprint, o.operation, p.indexed_chars,
       p.embedded_chars
  FROM thoth_memory.cards c
  LEFT JOIN thoth_memory.projections p ON p.card_id = c.id
  LEFT JOIN thoth_memory.projection_ops o ON o.card_id = c.id
 WHERE c.workspace_id = %(workspace)s AND c.id = %(id)s;

-- name: projection_forget
DELETE FROM thoth_memory.projections WHERE workspace_id = %(workspace)s AND card_id = ANY(%(ids)s);

-- name: projection_ids
SELECT card_id, revision, fingerprint FROM thoth_memory.projections WHERE workspace_id = %(workspace)s;

-- name: card_ids_after
SELECT id FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND id > %(after)s
 ORDER BY id
 LIMIT %(limit)s;

-- name: stale_projection_ids
-- Cards with no outstanding operation whose projection is missing, behind, or of
-- another format: excluded from recall until retried or rebuilt. %(format)s is the
-- running format as a regular expression (tht.memory.projection_format.KnownFormat).
SELECT c.id, c.title, c.revision, p.fingerprint
  FROM thoth_memory.cards c
  LEFT JOIN thoth_memory.projections p ON p.card_id = c.id
  LEFT JOIN thoth_memory.projection_ops o ON o.card_id = c.id
 WHERE c.workspace_id = %(workspace)s AND o.card_id IS NULL
   AND (p.card_id IS NULL OR p.revision <> c.revision OR p.fingerprint !~ %(format)s)
 ORDER BY c.id;

-- name: card_revisions
SELECT id, revision FROM thoth_memory.cards WHERE workspace_id = %(workspace)s;

-- The nonces of protected requests (only in the accounts mode; see migration 004) -----

-- name: nonce_use
-- A nonce counts once; expired nonces are forgotten as new ones arrive.
WITH forgotten AS (DELETE FROM thoth_memory.protected_request_nonces WHERE expires_at < now() - interval '1 day')
INSERT INTO thoth_memory.protected_request_nonces (nonce, expires_at)
VALUES (%(nonce)s, %(expires_at)s)
ON CONFLICT (nonce) DO NOTHING
RETURNING nonce;

-- name: indexed_fields
-- The fields a card's indexed text is built from, besides its dependencies (which
-- recall_facts carries): recall derives the coverage signal's terms from them for a
-- projection recorded without its terms (before migration 006).
SELECT id, revision, family, title, {texts: $}, concepts
  FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND id = ANY(%(ids)s);
