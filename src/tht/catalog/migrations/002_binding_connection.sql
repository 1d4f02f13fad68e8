-- 002: a binding names one of the installation's DWH connections, not a variable.
--
-- The installation's configuration defines each DWH connection by name (the variable
-- holding its SQLAlchemy URL, its timeout); a workspace is bound to one by name, so no
-- caller can make the service read another variable or open another URL. A binding
-- recorded before keeps its variable's name as its connection's name: the operator
-- defines that connection (`dwh: {NAME: {url_env: NAME}}`) to sync it again.

ALTER TABLE thoth_catalog.bindings RENAME COLUMN url_env TO connection;
ALTER TABLE thoth_catalog.bindings DROP CONSTRAINT bindings_url_env_check;
ALTER TABLE thoth_catalog.bindings
    ADD CONSTRAINT bindings_connection_check CHECK (connection ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$');
