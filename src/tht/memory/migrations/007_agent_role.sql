-- 007: the agent role.
--
-- One warm service owns the engines and enforces capabilities (DESIGN.md §3a). An
-- agent's sandbox gets only an agent token: it may recall (search, rules,
-- solved-search) and propose (propose, summary, solved-index), never browse or edit
-- the archive. The capabilities of each role live in tht.accounts; the database only
-- knows which role names exist.

ALTER TABLE thoth_memory.users DROP CONSTRAINT users_role_check;
ALTER TABLE thoth_memory.users ADD CONSTRAINT users_role_check CHECK (role IN ('admin', 'user', 'agent'));
