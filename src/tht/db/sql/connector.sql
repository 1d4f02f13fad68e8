-- SQL of tht.db.connector: what every store checks of its runtime login.

-- name: login_is_privileged
-- A superuser or a BYPASSRLS login would make row-level security moot.
SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user;
