-- 009: failed logins, for the login backoff (007 and 008 belong to other changes).
--
-- Measured: 200 wrong passwords in 5.7 s with no refusal. Each failed password login
-- is recorded here with the name tried (existing or not) and the client address; the
-- service refuses further attempts (429, Retry-After) with a delay that doubles per
-- failure beyond a free allowance, per name and per client. The record lives in
-- PostgreSQL, not in a process, because with external engines several service
-- instances may answer behind one load balancer: they must share the count.
-- Rows older than the counting window are forgotten as new failures arrive.

CREATE TABLE thoth_memory.login_attempts (
    user_name text        NOT NULL CHECK (length(user_name) BETWEEN 1 AND 64),
    client    text        NOT NULL CHECK (length(client) BETWEEN 1 AND 128),
    failed_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX login_attempts_user ON thoth_memory.login_attempts (user_name, failed_at);
CREATE INDEX login_attempts_client ON thoth_memory.login_attempts (client, failed_at);
CREATE INDEX login_attempts_failed_at ON thoth_memory.login_attempts (failed_at);

ALTER TABLE thoth_memory.login_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.login_attempts FORCE ROW LEVEL SECURITY;
-- Like the other account tables (004): reachable only in the accounts mode.
CREATE POLICY accounts_mode ON thoth_memory.login_attempts TO thoth_memory_runtime
    USING (current_setting('thoth.accounts', true) = 'on')
    WITH CHECK (current_setting('thoth.accounts', true) = 'on');
CREATE POLICY owner_maintenance ON thoth_memory.login_attempts TO CURRENT_USER USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, DELETE ON thoth_memory.login_attempts TO thoth_memory_runtime;
