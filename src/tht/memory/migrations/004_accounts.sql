-- 004: local accounts of the web administration (003 is reserved for the review and
-- cleanup receipts the specification names).
--
-- Users with a role (admin holds memory.manage; user does not) and workspace
-- membership; password (scrypt) and API token (SHA-256 of a 256-bit random token)
-- are stored hashed. Web sessions and the single-use nonces of protected requests
-- live here too. These tables are not per workspace: the runtime role reaches them
-- only in the explicit accounts mode (thoth.accounts = on), never from a memory
-- transaction.

CREATE TABLE thoth_memory.users (
    id            uuid        PRIMARY KEY,
    name          text        NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9._@-]{1,64}$'),
    role          text        NOT NULL CHECK (role IN ('admin', 'user')),
    password_hash text,
    token_hash    text        UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE thoth_memory.user_workspaces (
    user_id      uuid NOT NULL REFERENCES thoth_memory.users (id) ON DELETE CASCADE,
    workspace_id text NOT NULL REFERENCES thoth_memory.workspaces (id),
    PRIMARY KEY (user_id, workspace_id)
);

CREATE TABLE thoth_memory.web_sessions (
    id_hash    text        PRIMARY KEY,
    user_id    uuid        NOT NULL REFERENCES thoth_memory.users (id) ON DELETE CASCADE,
    -- a one-time login link is a session that has not been opened yet
    one_time   boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE INDEX web_sessions_expiry ON thoth_memory.web_sessions (expires_at);

CREATE TABLE thoth_memory.protected_request_nonces (
    nonce      text        PRIMARY KEY CHECK (length(nonce) BETWEEN 16 AND 128),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz NOT NULL DEFAULT now()
);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['users', 'user_workspaces', 'web_sessions', 'protected_request_nonces']
    LOOP
        EXECUTE format('ALTER TABLE thoth_memory.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE thoth_memory.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY accounts_mode ON thoth_memory.%I TO thoth_memory_runtime '
            'USING (current_setting(''thoth.accounts'', true) = ''on'') '
            'WITH CHECK (current_setting(''thoth.accounts'', true) = ''on'')', t);
        EXECUTE format('CREATE POLICY owner_maintenance ON thoth_memory.%I TO CURRENT_USER '
                       'USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;

GRANT SELECT, INSERT, UPDATE, DELETE ON
    thoth_memory.users, thoth_memory.user_workspaces, thoth_memory.web_sessions,
    thoth_memory.protected_request_nonces
    TO thoth_memory_runtime;
