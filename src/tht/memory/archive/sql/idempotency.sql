-- Idempotency keys (migration 013): always under the workspace's exclusive lock.

-- name: idempotency_prune
DELETE FROM thoth_memory.idempotency_keys
 WHERE workspace_id = %(workspace)s AND created_at < now() - %(retention)s::interval;

-- name: idempotency_get
SELECT request_digest, response
  FROM thoth_memory.idempotency_keys
 WHERE workspace_id = %(workspace)s AND principal = %(principal)s AND key = %(key)s;

-- name: idempotency_record
INSERT INTO thoth_memory.idempotency_keys (workspace_id, principal, key, request_digest, response)
VALUES (%(workspace)s, %(principal)s, %(key)s, %(digest)s, %(response)s);

-- name: idempotency_answer
UPDATE thoth_memory.idempotency_keys
   SET response = %(response)s
 WHERE workspace_id = %(workspace)s AND principal = %(principal)s AND key = %(key)s
   AND request_digest = %(digest)s;
