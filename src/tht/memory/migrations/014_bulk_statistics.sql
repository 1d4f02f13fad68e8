-- 014: fresh planner statistics while a bulk import grows the tables.
--
-- Measured: PostgreSQL keeps a plan made while a table was small. psycopg prepares a
-- statement after five uses, and on every pooled connection the plans made for a small
-- workspace (sequential scans) stayed in use as an import made the tables 100 times
-- larger: an import's links lookup grew from 18 to 295 ms a batch within one 10 000-card
-- import (quadratic), and reading 30 cards and their projection states took 196 ms
-- instead of 3 ms after importing 50 000 cards, until autovacuum analyzed the tables, a
-- minute later at best. ANALYZE gives the planner the new sizes and invalidates those
-- plans on every connection: an import runs it each time it has doubled the cards'
-- table (tht.memory.transfer.service._Statistics). Only a table's owner may ANALYZE
-- it, and the runtime role owns nothing: this function, run as the owner, analyzes
-- these tables and nothing else. ANALYZE reads a sample of each table and takes no lock
-- that blocks readers or writers.

CREATE FUNCTION thoth_memory.refresh_statistics() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    ANALYZE thoth_memory.cards, thoth_memory.card_dependencies, thoth_memory.card_links,
            thoth_memory.projections, thoth_memory.projection_ops;
END
$$;
REVOKE ALL ON FUNCTION thoth_memory.refresh_statistics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION thoth_memory.refresh_statistics() TO thoth_memory_runtime;
