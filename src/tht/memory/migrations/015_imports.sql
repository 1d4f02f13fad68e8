-- 015: where imported cards came from, so an import can be listed, filtered and undone.
--
-- Each `tht memory import` that writes is one row here: the file's name, its format,
-- who ran it, when, how it ended and its summary. Every card it creates or replaces
-- names it (import_id) with the revision it wrote (import_revision) and whether it
-- created the card or replaced one that was there (import_action). An undo deletes
-- the cards the import created that are still at that revision; a card edited since,
-- or one the import replaced (its earlier content is not kept), stays and is reported.
--
-- This is also what keeps an import from passing for a review: a card's origin and
-- source (manual, or workflow with its session and decisions) are kept as the file
-- recorded them, so that export -> import is lossless, but a card with an import_id
-- was not reviewed in this installation, whatever its recorded origin says.

CREATE TABLE thoth_memory.imports (
    workspace_id text        NOT NULL REFERENCES thoth_memory.workspaces (id),
    id           uuid        NOT NULL,
    file_name    text        NOT NULL CHECK (length(file_name) BETWEEN 1 AND 1000),
    format       text        NOT NULL CHECK (format IN ('jsonl', 'csv', 'vanna', 'wrenai', 'bird')),
    principal    text        CHECK (length(principal) BETWEEN 1 AND 100),
    status       text        NOT NULL DEFAULT 'running'
                             CHECK (status IN ('running', 'completed', 'interrupted', 'failed')),
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    summary      jsonb,
    undone_at    timestamptz,
    undone_by    text        CHECK (length(undone_by) BETWEEN 1 AND 100),
    undo         jsonb,
    PRIMARY KEY (id),
    UNIQUE (workspace_id, id)
);

CREATE INDEX imports_workspace_started ON thoth_memory.imports (workspace_id, started_at, id);

ALTER TABLE thoth_memory.imports ENABLE ROW LEVEL SECURITY;
ALTER TABLE thoth_memory.imports FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON thoth_memory.imports TO thoth_memory_runtime
    USING (workspace_id = current_setting('thoth.workspace', true))
    WITH CHECK (workspace_id = current_setting('thoth.workspace', true));
CREATE POLICY owner_maintenance ON thoth_memory.imports TO CURRENT_USER
    USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, UPDATE ON thoth_memory.imports TO thoth_memory_runtime;

ALTER TABLE thoth_memory.cards
    ADD COLUMN import_id       uuid,
    ADD COLUMN import_revision bigint,
    ADD COLUMN import_action   text CHECK (import_action IN ('create', 'update')),
    ADD CONSTRAINT cards_import_reference CHECK (
        (import_id IS NULL) = (import_revision IS NULL)
        AND (import_id IS NULL) = (import_action IS NULL)),
    ADD CONSTRAINT cards_import_fk FOREIGN KEY (workspace_id, import_id)
        REFERENCES thoth_memory.imports (workspace_id, id);

CREATE INDEX cards_workspace_import ON thoth_memory.cards (workspace_id, import_id, id)
    WHERE import_id IS NOT NULL;
