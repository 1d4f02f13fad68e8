-- The workflow's records in the archive (tht.memory.archive.review_records): review receipts,
-- and the card lookups of proposals and error rules. Loaded by name ("-- name: <name>");
-- they run inside archive transactions (runtime role, workspace set) and every query
-- also names the workspace explicitly.

-- name: receipt_get
SELECT session_id, request_digest, proposals_digest, outcome, reviewer, result, created_at,
       ledger_appended_at
  FROM thoth_memory.review_receipts
 WHERE workspace_id = %(workspace)s AND session_id = %(session)s;

-- name: receipt_insert
INSERT INTO thoth_memory.review_receipts
       (workspace_id, session_id, request_digest, proposals_digest, outcome, reviewer, result)
VALUES (%(workspace)s, %(session)s, %(request_digest)s, %(proposals_digest)s, %(outcome)s, %(reviewer)s,
        %(result)s)
RETURNING session_id, request_digest, proposals_digest, outcome, reviewer, result, created_at,
          ledger_appended_at;

-- name: receipt_ledger_appended
UPDATE thoth_memory.review_receipts
   SET ledger_appended_at = now()
 WHERE workspace_id = %(workspace)s AND session_id = %(session)s AND ledger_appended_at IS NULL;

-- name: exact_duplicates
-- Cards that say exactly what a candidate says: the same family and the same texts
-- (case and white space folded; the title and rationale are wording, not content).
-- Dependencies are compared by the caller.
SELECT id
  FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND family = %(family)s
   AND lower(regexp_replace(btrim(coalesce(content, '')), '\s+', ' ', 'g')) = %(content)s
   AND lower(regexp_replace(btrim(coalesce(scope, '')), '\s+', ' ', 'g')) = %(scope)s
   AND lower(regexp_replace(btrim(coalesce(question, '')), '\s+', ' ', 'g')) = %(question)s
   AND lower(regexp_replace(btrim(coalesce(sql, '')), '\s+', ' ', 'g')) = %(sql)s
   AND lower(regexp_replace(btrim(coalesce(context, '')), '\s+', ' ', 'g')) = %(context)s
 ORDER BY created_at, id;

-- name: error_signature_matches
-- Explained errors whose normalized signature equals the one asked for: an indexed
-- equality, no vector involved.
SELECT id
  FROM thoth_memory.cards
 WHERE workspace_id = %(workspace)s AND family = 'explained_error' AND error_signature = %(signature)s
 ORDER BY id;
