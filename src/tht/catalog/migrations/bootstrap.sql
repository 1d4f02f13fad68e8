-- Run by the migration runner before any numbered migration of the Catalog pack: the
-- schema and the ledger of applied migrations. Idempotent.
CREATE SCHEMA IF NOT EXISTS thoth_catalog;

CREATE TABLE IF NOT EXISTS thoth_catalog.schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
