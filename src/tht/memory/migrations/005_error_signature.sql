-- 005: an optional normalized error signature on explained errors.
--
-- `tht memory rules --error "<database error text>"` normalizes the text the same way
-- (tht.workflow.signature) and answers first from an exact match here, with no vector
-- involved, then from hybrid recall. Only explained errors carry a signature.

ALTER TABLE thoth_memory.cards
    ADD COLUMN error_signature text
        CONSTRAINT cards_error_signature_check CHECK (error_signature IS NULL OR (family = 'explained_error' AND length(error_signature) BETWEEN 1 AND 2000));

CREATE INDEX cards_error_signature ON thoth_memory.cards (workspace_id, error_signature)
    WHERE error_signature IS NOT NULL;
