-- Queries of bulk import and export, loaded by name ("-- name: <name>"). Like the
-- archive's, every query names the workspace explicitly (row-level security is the
-- backstop).

-- name: import_card_insert
-- A card as an export wrote it keeps its origin, source references, revision and
-- timestamps (NULL: a new card's defaults), so export -> import -> export is lossless.
INSERT INTO thoth_memory.cards
       (workspace_id, id, family, language, title, content, scope, rationale, question, sql,
        context, error_signature, concepts, origin, source_session, source_decisions,
        revision, created_at, updated_at)
VALUES (%(workspace)s, %(id)s, %(family)s, %(language)s, %(title)s, %(content)s, %(scope)s,
        %(rationale)s, %(question)s, %(sql)s, %(context)s, %(error_signature)s, %(concepts)s,
        %(origin)s, %(source_session)s, %(source_decisions)s,
        coalesce(%(revision)s::bigint, 1),
        coalesce(%(created_at)s::timestamptz, now()),
        coalesce(%(updated_at)s::timestamptz, %(created_at)s::timestamptz, now()));

-- name: import_link_add
-- A link whose target the import wrote in a later batch than its source; the source's
-- other links stay.
INSERT INTO thoth_memory.card_links (workspace_id, source_id, target_id, meaning)
VALUES (%(workspace)s, %(id)s, %(target)s, %(meaning)s)
ON CONFLICT (source_id, target_id) DO NOTHING;

-- name: export_count
SELECT count(*) AS cards FROM thoth_memory.cards WHERE workspace_id = %(workspace)s;
