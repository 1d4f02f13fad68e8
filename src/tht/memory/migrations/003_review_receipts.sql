-- 003: durable receipts (the specification names this migration).
--
-- Two independent sections: the workflow's review receipts (review-apply) and the
-- physical-cleanup receipts with their vector tombstones (Catalog sync). Both make a
-- repeated delivery return the first result instead of applying twice, across restarts.

-- == Review receipts (tht memory review-apply) =========================================

SELECT 1;  -- placeholder until the review receipts land



-- == Physical cleanup receipts and vector tombstones (tht catalog sync / retry) ========

SELECT 1;  -- placeholder until the cleanup receipts land
