-- 006: the BM25 terms of each projection's indexed text.
--
-- Recall orders its seeds partly by how much of each card's indexed text the question
-- covers (tht.memory.recall.coverage), which needs the terms of the card's BM25
-- vector. They are fixed by the projection (revision and fingerprint), so the
-- projector records them here and recall reads them with the seeds' facts, instead of
-- rebuilding and tokenizing every seed's indexed text on every query. NULL on
-- projections recorded before this migration: recall then derives them from the
-- card's fields, as before, until the card is indexed again.

ALTER TABLE thoth_memory.projections ADD COLUMN terms bigint[];
