-- The service's retry of pending index work (tht.service.recovery). A session-level
-- advisory lock per workspace: one drain of a workspace at a time across every
-- service instance. Its key space ('drain:') differs from the mutation lock's.

-- name: drain_try_lock
SELECT pg_try_advisory_lock(hashtextextended('thoth_memory.drain:' || %(workspace)s, 0));

-- name: drain_unlock
SELECT pg_advisory_unlock(hashtextextended('thoth_memory.drain:' || %(workspace)s, 0));
