-- 014: fresh planner statistics after a bulk import.
--
-- Measured: after importing 50 000 cards into a workspace of 30, reading 30 cards and
-- their projection states took 196 ms instead of 3 ms on the service's pooled
-- connections, until autovacuum analyzed the tables (a minute later at best): the
-- plans they had cached for a small workspace (sequential scans) were still in use. An
-- import that wrote many cards ends with ANALYZE of the tables it grew, as after any
-- bulk load; it also invalidates those cached plans on every connection. Only a
-- table's owner may ANALYZE it, and the runtime role owns nothing: this function, run
-- as the owner, analyzes these tables and nothing else. ANALYZE reads a sample of each
-- table and takes no lock that blocks readers or writers.

CREATE FUNCTION thoth_memory.refresh_statistics() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    ANALYZE thoth_memory.cards, thoth_memory.card_dependencies, thoth_memory.card_links,
            thoth_memory.projections, thoth_memory.projection_ops;
END
$$;
REVOKE ALL ON FUNCTION thoth_memory.refresh_statistics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION thoth_memory.refresh_statistics() TO thoth_memory_runtime;
