-- Local accounts: users, memberships, web sessions and login failures (only in the
-- accounts mode; see migration 004), and their lifecycle (migration 012): token expiry
-- and rotation, roles, memberships, deletion, and the audit log. Every query runs in
-- the accounts mode; the typed methods are tht.memory.archive.account_records.

-- name: user_insert
-- token_seconds NULL: a token that never expires (012)
INSERT INTO thoth_memory.users (id, name, role, password_hash, token_hash, token_issued_at, token_expires_at)
VALUES (%(id)s, %(name)s, %(role)s, %(password_hash)s, %(token_hash)s, now(),
        now() + make_interval(secs => %(token_seconds)s::bigint))
ON CONFLICT (name) DO NOTHING
RETURNING id, token_expires_at;

-- name: user_workspace_insert
INSERT INTO thoth_memory.user_workspaces (user_id, workspace_id) VALUES (%(user_id)s, %(workspace)s);

-- name: user_workspace_grant
INSERT INTO thoth_memory.user_workspaces (user_id, workspace_id) VALUES (%(user_id)s, %(workspace)s)
ON CONFLICT DO NOTHING;

-- name: user_by_name
SELECT id, name, role, password_hash FROM thoth_memory.users WHERE name = %(name)s;

-- name: user_by_session
SELECT u.id, u.name, u.role, s.one_time
  FROM thoth_memory.web_sessions s JOIN thoth_memory.users u ON u.id = s.user_id
 WHERE s.id_hash = %(id_hash)s AND s.expires_at > now();

-- name: user_workspaces
SELECT workspace_id FROM thoth_memory.user_workspaces WHERE user_id = %(user_id)s ORDER BY workspace_id;

-- name: session_insert
INSERT INTO thoth_memory.web_sessions (id_hash, user_id, one_time, expires_at)
VALUES (%(id_hash)s, %(user_id)s, %(one_time)s, now() + make_interval(secs => %(seconds)s));

-- name: session_delete
DELETE FROM thoth_memory.web_sessions WHERE id_hash = %(id_hash)s RETURNING user_id;

-- name: sessions_expire
DELETE FROM thoth_memory.web_sessions WHERE expires_at <= now();

-- name: login_failures
-- Recent failed logins of this name and of this client, and the seconds since the
-- last of each (NULL when none), measured by the database clock all instances share.
SELECT (SELECT count(*) FROM thoth_memory.login_attempts
         WHERE user_name = %(name)s AND failed_at > now() - make_interval(secs => %(window)s)) AS user_failures,
       (SELECT extract(epoch FROM now() - max(failed_at)) FROM thoth_memory.login_attempts
         WHERE user_name = %(name)s) AS user_idle,
       (SELECT count(*) FROM thoth_memory.login_attempts
         WHERE client = %(client)s AND failed_at > now() - make_interval(secs => %(window)s)) AS client_failures,
       (SELECT extract(epoch FROM now() - max(failed_at)) FROM thoth_memory.login_attempts
         WHERE client = %(client)s) AS client_idle;

-- name: login_failure_record
WITH forgotten AS (DELETE FROM thoth_memory.login_attempts
                    WHERE failed_at < now() - make_interval(secs => %(window)s))
INSERT INTO thoth_memory.login_attempts (user_name, client) VALUES (%(name)s, %(client)s);

-- name: login_failures_clear
-- A successful login forgives the name's failures (not the client's: it may be trying many names).
DELETE FROM thoth_memory.login_attempts WHERE user_name = %(name)s;

-- Lifecycle (migration 012) ---------------------------------------------------------

-- name: token_principal
-- The token's user, whether the token has expired (by the database clock that every
-- service instance shares) and the user's workspaces: one round trip a request.
SELECT u.id, u.name, u.role, u.token_expires_at,
       u.token_expires_at IS NOT NULL AND u.token_expires_at <= now() AS expired,
       ARRAY(SELECT w.workspace_id FROM thoth_memory.user_workspaces w
              WHERE w.user_id = u.id ORDER BY w.workspace_id) AS workspaces
  FROM thoth_memory.users u
 WHERE u.token_hash = %(token_hash)s;

-- name: user_lock
SELECT id, name, role, token_expires_at
  FROM thoth_memory.users WHERE name = %(name)s FOR UPDATE;

-- name: admins_lock
-- Every admin row, locked: two concurrent demotions or deletions cannot both see
-- another admin left and remove the last two.
SELECT name FROM thoth_memory.users WHERE role = 'admin' ORDER BY name FOR UPDATE;

-- name: user_role_set
UPDATE thoth_memory.users SET role = %(role)s WHERE id = %(user_id)s;

-- name: user_token_set
UPDATE thoth_memory.users
   SET token_hash = %(token_hash)s,
       token_issued_at = now(),
       token_expires_at = CASE WHEN %(seconds)s::bigint IS NULL THEN NULL
                               ELSE now() + make_interval(secs => %(seconds)s::bigint) END
 WHERE id = %(user_id)s
RETURNING token_issued_at, token_expires_at;

-- name: user_delete
-- Sessions and memberships cascade (004).
DELETE FROM thoth_memory.users WHERE id = %(user_id)s;

-- name: user_workspace_revoke
DELETE FROM thoth_memory.user_workspaces
 WHERE user_id = %(user_id)s AND workspace_id = %(workspace)s
RETURNING workspace_id;

-- name: user_workspace_add
INSERT INTO thoth_memory.user_workspaces (user_id, workspace_id) VALUES (%(user_id)s, %(workspace)s)
ON CONFLICT DO NOTHING
RETURNING workspace_id;

-- name: user_sessions_close
DELETE FROM thoth_memory.web_sessions WHERE user_id = %(user_id)s;

-- name: users_detail
SELECT u.name, u.role, u.created_at, u.token_issued_at, u.token_expires_at,
       u.password_hash IS NOT NULL AS has_password,
       coalesce(array_agg(w.workspace_id ORDER BY w.workspace_id) FILTER (WHERE w.workspace_id IS NOT NULL), '{}')
           AS workspaces
  FROM thoth_memory.users u LEFT JOIN thoth_memory.user_workspaces w ON w.user_id = u.id
 GROUP BY u.id ORDER BY u.name;

-- name: audit_insert
INSERT INTO thoth_memory.audit_log (actor, action, target_user, workspace_id, client, details)
VALUES (%(actor)s, %(action)s, %(target_user)s, %(workspace)s, %(client)s, %(details)s);

-- name: audit_list
-- Newest first. %(workspaces)s NULL: every row (the operator); otherwise the rows of
-- those workspaces: a row's workspace_id, or for an event about a user (no
-- workspace_id), the workspaces that user belonged to then (details.workspaces). A row
-- with neither belongs to no workspace and is the operator's alone.
SELECT id, at, actor, action, target_user, workspace_id, client, details
  FROM thoth_memory.audit_log
 WHERE (%(since)s::timestamptz IS NULL OR at >= %(since)s::timestamptz)
   AND (%(user)s::text IS NULL OR actor = %(user)s::text OR target_user = %(user)s::text)
   AND (%(workspaces)s::text[] IS NULL
        OR workspace_id = ANY(%(workspaces)s::text[])
        OR (workspace_id IS NULL
            AND jsonb_typeof(details -> 'workspaces') = 'array'
            AND (details -> 'workspaces') ?| %(workspaces)s::text[]))
 ORDER BY at DESC, id DESC
 LIMIT %(limit)s;
