-- 003: a binding may name no DWH connection.
--
-- A workspace's binding says which database and schema its agents query, and so which
-- cards recall returns; the connection is what the Catalog scans them through. A DWH
-- the service cannot reach (or one its operator has not configured yet) still needs
-- bound recall: such a binding serves recall, and a sync says it has no connection.

ALTER TABLE thoth_catalog.bindings ALTER COLUMN connection DROP NOT NULL;
