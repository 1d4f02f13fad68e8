-- SQL of tht.db.connector: what every store checks of its runtime login.

-- name: runtime_login
-- A superuser or a BYPASSRLS login would make row-level security moot.
SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user;
