-- 012: the accounts' lifecycle: token expiry, and the audit log (010 and 011 belong to
-- other changes).
--
-- Tokens: each user's API token has an expiry (NULL: a token that never expires, which
-- only an explicit `--expires-in never` gives). Tokens issued before this migration had
-- none: they get 90 days from now, the default for new tokens, so that an installation
-- notices them within a quarter instead of keeping them forever.
--
-- The audit log is append-only for the runtime role (SELECT and INSERT, no UPDATE or
-- DELETE) and reachable only in the accounts mode, like the users (004). Card
-- mutations are recorded by a trigger on the cards, the one place every path goes
-- through (the administration's edits, the reviewer's decisions, the physical cleanup):
-- the actor is the transaction's `thoth.actor` setting, which the archive sets from
-- the principal of the invocation. Failed logins are recorded here too, beside the
-- short-lived login_attempts rows (009) that only count them for the backoff and are
-- forgotten after its window.

ALTER TABLE thoth_memory.users
    ADD COLUMN token_expires_at timestamptz,
    ADD COLUMN token_issued_at  timestamptz;
UPDATE thoth_memory.users
   SET token_expires_at = now() + interval '90 days', token_issued_at = created_at
 WHERE token_hash IS NOT NULL;

CREATE TABLE thoth_memory.audit_log (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- a user name, 'operator' (THT_HOME or the database credentials, no token), or
    -- NULL where nobody was named (a maintenance script)
    actor        text        CHECK (length(actor) BETWEEN 1 AND 64),
    action       text        NOT NULL CHECK (action ~ '^[a-z_]+\.[a-z_]+$'),
    -- the user acted upon (account events), kept as text: the history outlives the user
    target_user  text        CHECK (length(target_user) BETWEEN 1 AND 64),
    workspace_id text,
    client       text        CHECK (length(client) BETWEEN 1 AND 128),
    details      jsonb       NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_log_at ON thoth_memory.audit_log (at);
CREATE INDEX audit_log_actor ON thoth_memory.audit_log (actor, at);
CREATE INDEX audit_log_target ON thoth_memory.audit_log (target_user, at);

ALTER TABLE thoth_memory.audit_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.audit_log FORCE ROW LEVEL SECURITY;
CREATE POLICY accounts_mode ON thoth_memory.audit_log TO thoth_memory_runtime
    USING (current_setting('thoth.accounts', true) = 'on')
    WITH CHECK (current_setting('thoth.accounts', true) = 'on');
CREATE POLICY owner_maintenance ON thoth_memory.audit_log TO CURRENT_USER USING (true) WITH CHECK (true);

GRANT SELECT, INSERT ON thoth_memory.audit_log TO thoth_memory_runtime;
GRANT USAGE ON SEQUENCE thoth_memory.audit_log_id_seq TO thoth_memory_runtime;

-- Runs as the migrator (the table's owner), so that a memory transaction, which cannot
-- reach the accounts' tables, still leaves its row; the runtime role cannot call it
-- except through the trigger.
CREATE FUNCTION thoth_memory.audit_card_mutation() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    card thoth_memory.cards;
BEGIN
    card := CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    INSERT INTO thoth_memory.audit_log (actor, action, workspace_id, details)
    VALUES (
        nullif(current_setting('thoth.actor', true), ''),
        'card.' || CASE TG_OP WHEN 'INSERT' THEN 'create' WHEN 'UPDATE' THEN 'update' ELSE 'delete' END,
        card.workspace_id,
        jsonb_build_object(
            'card', 'mem-' || card.id::text,
            'family', card.family,
            'revision', card.revision,
            'origin', card.origin,
            'source_session', card.source_session,
            -- set by the reviewer's gate: the mutation carries out a review decision
            'via', nullif(current_setting('thoth.via', true), '')
        )
    );
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION thoth_memory.audit_card_mutation() FROM PUBLIC;

CREATE TRIGGER cards_audit
    AFTER INSERT OR DELETE ON thoth_memory.cards
    FOR EACH ROW EXECUTE FUNCTION thoth_memory.audit_card_mutation();
-- an update is a new revision; other writes to the row (none today) are not edits
CREATE TRIGGER cards_audit_update
    AFTER UPDATE ON thoth_memory.cards
    FOR EACH ROW WHEN (OLD.revision IS DISTINCT FROM NEW.revision)
    EXECUTE FUNCTION thoth_memory.audit_card_mutation();

-- A new workspace, whoever creates it (`tht workspace create`, the administration API).
CREATE FUNCTION thoth_memory.audit_workspace_creation() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO thoth_memory.audit_log (actor, action, workspace_id, details)
    VALUES (nullif(current_setting('thoth.actor', true), ''), 'workspace.create', NEW.id,
            jsonb_build_object('name', NEW.name, 'language', NEW.language));
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION thoth_memory.audit_workspace_creation() FROM PUBLIC;

CREATE TRIGGER workspaces_audit
    AFTER INSERT ON thoth_memory.workspaces
    FOR EACH ROW EXECUTE FUNCTION thoth_memory.audit_workspace_creation();
