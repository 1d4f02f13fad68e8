-- 016: a workspace records the embedder profile its vectors come from.
--
-- Profiles are the installation's (its configuration names each model with its
-- settings); a workspace names one. Recall and indexing use the workspace's profile on
-- every face, so no caller can recall or index a workspace with another model. A
-- workspace created before this migration keeps the installation's default profile.

ALTER TABLE thoth_memory.workspaces
    ADD COLUMN embedder text NOT NULL DEFAULT 'default'
        CHECK (embedder ~ '^[a-z0-9][a-z0-9_-]{0,31}$');
